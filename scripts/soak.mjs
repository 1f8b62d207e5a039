#!/usr/bin/env node
// Soak run (not part of `npm test`): for N minutes, verified transfers between this
// process and two target processes over mooncake-tcp, one target restarted every 30 s
// (the engine reconnects), and a steady stream of hostile connections (garbage frames,
// half handshakes, connect-and-close) against the stable target's data port and control
// endpoint. Prints duration, transfers, bytes, failures, and the RSS of this process and of
// the stable target after warm-up and at the end; exits 1 when RSS grew past the tolerance
// (20% + 32 MiB) or a transfer to the stable target failed.
//   npm run build && node scripts/soak.mjs [minutes]
import { fork } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { connect } from 'node:net';
import { fileURLToPath } from 'node:url';

const minutes = Number(process.argv[2] ?? 5);
const SIZE = 16 << 20;

if (process.env.TE_SOAK_TARGET) {
  // Target process: one engine, one registered buffer, RSS on request.
  const { createTransferEngine } = await import('@te/connector');
  const engine = await createTransferEngine({ connector: 'mooncake-tcp', bindAddress: '127.0.0.1' });
  const buffer = new Uint8Array(SIZE);
  const h = await engine.registerMemory(buffer);
  const d = engine.descriptor();
  process.on('message', (m) => {
    if (m === 'rss') process.send({ rss: process.memoryUsage().rss });
  });
  process.send({ segment: engine.segmentName, addr: h.addr.toString(), dataPort: d.transports['mooncake-tcp'].endpoint.port, control: engine.control.endpoint });
} else {
  await main();
}

function spawnTarget() {
  const child = fork(fileURLToPath(import.meta.url), [], { env: { ...process.env, TE_SOAK_TARGET: '1' }, stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  return new Promise((resolve, reject) => {
    child.once('message', (info) => resolve({ child, ...info, addr: BigInt(info.addr) }));
    child.once('exit', (code) => reject(new Error(`target exited with ${code}`)));
  });
}

function rssOf(t) {
  return new Promise((resolve) => {
    t.child.once('message', (m) => resolve(m.rss));
    t.child.send('rss');
  });
}

/** One hostile connection: garbage, a truncated or oversized frame, or connect-and-close. */
function hostile(port) {
  return new Promise((resolve) => {
    const s = connect(port, '127.0.0.1');
    s.on('error', () => resolve());
    s.on('close', () => resolve());
    s.setTimeout(500, () => s.destroy());
    s.on('connect', () => {
      const kind = Math.floor(Math.random() * 4);
      if (kind === 0) s.end(randomBytes(1 + Math.floor(Math.random() * 512)));
      else if (kind === 1) {
        const h = Buffer.alloc(56);
        h.writeUInt32LE(0x43544554, 0);
        h.writeUInt16LE(1, 4);
        h[6] = 16;
        h.writeBigUInt64LE(1n << 40n, 32); // HELLO claiming a 1 TiB body
        s.write(h);
      } else if (kind === 2) s.write(Buffer.from('TETC')); // a partial header, then silence
      else s.end();
    });
  });
}

async function main() {
  const { createTransferEngine } = await import('@te/connector');
  const engine = await createTransferEngine({ connector: 'mooncake-tcp', bindAddress: '127.0.0.1' });
  const src = new Uint8Array(SIZE);
  const back = new Uint8Array(SIZE);
  const hs = await engine.registerMemory(src);
  const hb = await engine.registerMemory(back);
  const stable = await spawnTarget();
  let flapping = await spawnTarget();
  const stats = { transfers: 0, bytes: 0, stableFailures: 0, flappingFailures: 0, restarts: 0, hostile: 0 };
  const started = Date.now();
  const end = started + minutes * 60_000;
  let rssStart;
  let targetRssStart;
  let lastRestart = Date.now();
  let hostileLoop = true;
  const hostileRun = (async () => {
    while (hostileLoop) {
      const controlPort = Number(stable.control.split(':').pop());
      await Promise.all(Array.from({ length: 8 }, (_, i) => hostile(i % 2 ? controlPort : stable.dataPort)));
      stats.hostile += 8;
    }
  })();
  while (Date.now() < end) {
    const len = 1 + Math.floor(Math.random() * SIZE);
    const off = Math.floor(Math.random() * (SIZE - len + 1));
    src.subarray(0, len).set(randomBytes(Math.min(len, 65536)));
    for (const [target, key] of [[stable, 'stableFailures'], [flapping, 'flappingFailures']]) {
      try {
        await engine.write(target.segment, hs.addr, target.addr + BigInt(off), len, { timeoutMs: 5000 });
        await engine.read(target.segment, hb.addr, target.addr + BigInt(off), len, { timeoutMs: 5000 });
        const a = createHash('sha256').update(src.subarray(0, len)).digest('hex');
        const b = createHash('sha256').update(back.subarray(0, len)).digest('hex');
        if (a !== b) throw new Error('read back differs from what was written');
        stats.transfers += 2;
        stats.bytes += 2 * len;
      } catch (e) {
        stats[key]++;
        if (target === stable) console.error(`soak: transfer to the stable target failed: ${e.message}`);
      }
    }
    if (rssStart === undefined && Date.now() - started > 20_000) {
      rssStart = process.memoryUsage().rss;
      targetRssStart = await rssOf(stable);
    }
    if (Date.now() - lastRestart > 30_000) {
      flapping.child.kill('SIGKILL');
      flapping = await spawnTarget();
      stats.restarts++;
      lastRestart = Date.now();
    }
  }
  hostileLoop = false;
  await hostileRun;
  rssStart ??= process.memoryUsage().rss;
  targetRssStart ??= await rssOf(stable);
  const rssEnd = process.memoryUsage().rss;
  const targetRssEnd = await rssOf(stable);
  const mib = (x) => `${(x / 2 ** 20).toFixed(0)} MiB`;
  const within = (a, b) => b <= a * 1.2 + 32 * 2 ** 20;
  const ok = within(rssStart, rssEnd) && within(targetRssStart, targetRssEnd) && stats.stableFailures === 0;
  console.log(`soak: ${((Date.now() - started) / 60_000).toFixed(1)} min, ${stats.transfers} verified transfers, ${(stats.bytes / 2 ** 30).toFixed(1)} GiB`);
  console.log(`soak: failures: stable target ${stats.stableFailures}, restarted target ${stats.flappingFailures} (across ${stats.restarts} restarts); ${stats.hostile} hostile connections`);
  console.log(`soak: RSS this process ${mib(rssStart)} → ${mib(rssEnd)}, stable target ${mib(targetRssStart)} → ${mib(targetRssEnd)} (tolerance +20% + 32 MiB)`);
  console.log(`soak: ${ok ? 'PASS' : 'FAIL'}`);
  flapping.child.kill('SIGKILL');
  stable.child.kill('SIGKILL');
  await engine.close();
  process.exit(ok ? 0 : 1);
}
