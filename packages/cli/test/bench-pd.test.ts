// `te bench pd`: rooms of KV through @te/disagg between two processes, KV checksums off and
// on; every room's landed pages are compared with the prefill's, and a corrupted byte fails the run.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const te = join(dirname(fileURLToPath(import.meta.url)), '..', 'dist', 'te.js');
const run = (args: string[]) => {
  const clean = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^(MC_|TE_)/.test(k)));
  return spawnSync(process.execPath, [te, 'bench', 'pd', ...args], { encoding: 'utf8', env: clean, timeout: 120_000 });
};
const small = ['--tokens', '512', '--layers', '2', '--rooms', '2', '--json'];
const resultOf = (stdout: string) => JSON.parse(stdout.trim().split('\n').pop()!);

test('both modes: every room verified, figures for each mode and their ratio', () => {
  const r = run(small);
  assert.is(r.status, 0, r.stderr);
  const j = resultOf(r.stdout);
  assert.is(j.verified, true);
  // A warm-up room and two timed rooms per mode.
  assert.is(j.rooms, 6);
  assert.is(j.roomsVerified, 6);
  // 512 tokens = 8 pages of 64; K and V of 2 layers; 8 heads × 256 bytes per token.
  assert.is(j.bytesPerRoom, 2 * 2 * 8 * 64 * 8 * 256);
  assert.equal(
    j.modes.map((m: { checksums: string }) => m.checksums),
    ['off', 'on'],
  );
  for (const m of j.modes) {
    assert.ok(m.bytesPerSecond > 0 && m.roomBytesPerSecond.length === 2, JSON.stringify(m));
    assert.ok(m.cpuMsPerRoom > 0);
  }
  assert.ok(j.checksumRatio > 0 && j.checksumRatios.length === 2);
  assert.ok(j.checksumCpuRatio > 0);
  assert.match(r.stdout, /rooms verified: 6 of 6/);
});

test('a byte flipped in a landed page after a room fails the run (exit 1, verified false)', () => {
  const r = run([...small, '--checksums', 'off', '--corrupt']);
  assert.is(r.status, 1);
  const j = resultOf(r.stdout);
  assert.is(j.verified, false);
  assert.is(j.rooms, 3);
  assert.is(j.roomsVerified, 2);
  assert.is(j.failures.length, 1);
  assert.match(j.failures[0], /the decode's pages differ from the prefill's/);
  assert.is(j.checksumRatio, null);
});

test('bad input is a usage error (exit 2) naming the option', () => {
  for (const [flag, value] of [
    ['--rooms', '0'],
    ['--tokens', 'many'],
    ['--layers', '2000'],
  ]) {
    const r = run([flag!, value!]);
    assert.is(r.status, 2, `${flag} ${value}: ${r.stderr}`);
    assert.match(r.stderr, new RegExp(`Expected ${flag}`));
  }
  // Refused by the command-line parser (not one of the choices): exit 2 as well, since f3daadb.
  const c = run(['--checksums', 'sometimes']);
  assert.is(c.status, 2, c.stderr);
  assert.match(c.stderr, /--checksums/);
});

// 1,048,576 tokens × 1024 layers is 2 TiB of KV per process: refused before any process starts
// (before, the prefill process failed allocating it, OUT_OF_MEMORY, after starting).
test('KV more than the machine holds is a usage error before any process starts', () => {
  const r = run(['--tokens', '1048576', '--layers', '1024', '--rooms', '1']);
  assert.is(r.status, 2, r.stderr);
  assert.match(r.stderr, /te bench pd would hold [\d.]+ GiB of KV in its processes .* more than three quarters of this machine's [\d.]+ GiB/);
  assert.not.match(r.stderr, /process failed to start/);
});

test.run();
