import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { freePort } from '../src/index.js';

const [ephemeralLow, ephemeralHigh] = readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/).map(Number) as [number, number];

test('freePort gives distinct ports outside the ephemeral range that can be bound on every interface', async () => {
  const ports: number[] = [];
  for (let i = 0; i < 50; i++) ports.push(await freePort());
  assert.is(new Set(ports).size, ports.length, 'no port given twice');
  for (const p of ports) assert.ok(p < ephemeralLow || p > ephemeralHigh, `${p} is inside the ephemeral range ${ephemeralLow}-${ephemeralHigh}`);
  for (const p of ports.slice(0, 5)) {
    await new Promise<void>((resolve, reject) => {
      const s = createServer();
      s.once('error', reject);
      s.listen(p, '0.0.0.0', () => s.close(() => resolve()));
    });
  }
});

test.run();
