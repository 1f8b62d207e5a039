// Every verifier the benchmarks print "verified" from must be able to say no: each run here
// flips one byte of the timed data after it landed (TE_BENCH_CORRUPT_BYTE, the benchmarks'
// self-test hook) and the run must fail. (The same runs without the flip pass in
// cli-loopback.test.ts and readme-commands.test.ts.)
// Covered: `te bench --verify` (writes and reads), the same-host benchmark (mooncake-shm and
// its memcpy baselines), the EC benchmark (pulled items and the raw baseline) and the
// layerwise benchmark, the narrow-rows memory benchmark and the checksum-copy benchmark. fi_rma_bench's own case is in raw-fabric-baseline.test.ts, the demo's
// in pipeline.test.ts.
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
// @ts-expect-error: a plain .mjs helper of the benchmarks, without types
import { buildCBench } from '../bench/lib/c-bench.mjs';
import { onceTest } from './fixtures/node-lines.js';
import { lastJsonLine, loopbackBenchArgs, root, runNode, te } from './fixtures/te-cli.js';

const test = onceTest("the benchmark verifiers' own checks");

const run = (args: string[], corrupt: boolean) =>
  runNode(args, { env: { TE_BENCH_QUICK: '1', ...(corrupt ? { TE_BENCH_CORRUPT_BYTE: '4097' } : {}) }, timeoutMs: 180_000 });

for (const op of ['write', 'read'] as const) {
  test(`te bench --verify (${op}): one flipped byte of the timed destination fails the run`, () => {
    const bad = run([te, ...loopbackBenchArgs(op, 0.3)], true);
    assert.is(bad.status, 1, bad.stdout + bad.stderr);
    assert.match(bad.stderr, /verification failed after the timed run/);
  });
}

test('same-host (mooncake-shm from allocated and from registered memory, memcpy ×1 and × copy threads): a flipped byte fails every case', () => {
  const args = [join(root, 'bench', 'same-host.mjs'), '--no-tcp', '--json'];
  const bad = run(args, true);
  assert.is(bad.status, 1, bad.stderr);
  const rows = lastJsonLine(bad.stdout).rows as { verified: boolean }[];
  assert.ok(rows.length > 0 && rows.every((r) => r.verified === false), JSON.stringify(rows));
  assert.match(bad.stderr, /mooncake-shm: after the last pass the target's pool does not match/);
  assert.match(bad.stderr, /mooncake-shm \(registered\): after the last pass the target's pool does not match/);
  assert.match(bad.stderr, /memcpy ×\d+: the copy does not match/);
  assert.match(bad.stderr, /memcpy ×\d+ from private memory: the copy does not match/);
});

test('EC benchmark: a flipped byte of a pulled item fails the run', () => {
  const bad = run([join(root, 'bench', 'ec.mjs'), '--json'], true);
  assert.is.not(bad.status, 0, bad.stderr);
  assert.match(bad.stderr, /item s\d+-0 differs/);
});

test("layerwise benchmark: a flipped byte of the decode's KV fails the run", () => {
  const bad = run([join(root, 'bench', 'layerwise.mjs'), '--json'], true);
  assert.is.not(bad.status, 0, bad.stderr);
  assert.match(bad.stderr, /the decode's KV differs from the prefill's/);
});

test('rows_bench (narrow rows against whole ranges): a flipped destination byte, or a flipped byte of what its sends copied, fails the run; the same run without it passes; options it cannot run are refused', () => {
  const binary = buildCBench('memcpy', 'rows_bench') as string;
  const args = ['--mib', '16', '--rounds', '1'];
  const good = spawnSync(binary, args, { encoding: 'utf8' });
  assert.is(good.status, 0, good.stdout + good.stderr);
  assert.match(good.stdout, /verified: yes/);
  const bad = spawnSync(binary, [...args, '--corrupt-one-byte'], { encoding: 'utf8' });
  assert.is(bad.status, 1, bad.stdout + bad.stderr);
  assert.match(bad.stdout, /verified: NO/);
  const badSend = spawnSync(binary, [...args, '--corrupt-sent-byte'], { encoding: 'utf8' });
  assert.is(badSend.status, 1, badSend.stdout + badSend.stderr);
  assert.match(badSend.stdout, /verified: NO/);
  for (const wrong of [
    ['--width', '100'],
    ['--mib', 'abc'],
    ['--rounds', '0'],
    ['--row', '3000'],
    ['--row', '8192', '--width', '64'],
  ]) {
    const refused = spawnSync(binary, wrong, { encoding: 'utf8' });
    assert.is(refused.status, 2, `${wrong.join(' ')}: ${refused.stderr}`);
    assert.match(refused.stderr, /rows_bench: --mib and --rounds must be positive/);
  }
});

test('crc_copy_bench (checksums fused into a transfer or in separate passes): a byte flipped in flight fails the run, by the byte comparison and by the CRCs alone; options it cannot run are refused', () => {
  const binary = buildCBench('checksums', 'crc_copy_bench', 'cmake and a C++ compiler: apt-get install -y cmake g++') as string;
  const args = ['--mib', '16', '--rounds', '1'];
  const good = spawnSync(binary, args, { encoding: 'utf8' });
  assert.is(good.status, 0, good.stdout + good.stderr);
  assert.match(good.stdout, /verified: yes/);
  for (const flags of [['--corrupt-in-flight'], ['--corrupt-in-flight', '--crc-only']]) {
    const bad = spawnSync(binary, [...args, ...flags], { encoding: 'utf8' });
    assert.is(bad.status, 1, `${flags.join(' ')}: ${bad.stdout}${bad.stderr}`);
    assert.match(bad.stdout, /verified: NO/);
  }
  // Without the flip, leaving out the byte comparison still passes: the CRCs agree.
  const crcOnly = spawnSync(binary, [...args, '--crc-only'], { encoding: 'utf8' });
  assert.is(crcOnly.status, 0, crcOnly.stdout + crcOnly.stderr);
  for (const wrong of [
    ['--mib', '0'],
    ['--rounds', '0'],
    ['--mib', 'abc'],
  ]) {
    const refused = spawnSync(binary, wrong, { encoding: 'utf8' });
    assert.is(refused.status, 2, `${wrong.join(' ')}: ${refused.stderr}`);
    assert.match(refused.stderr, /crc_copy_bench: --mib and --rounds must be positive/);
  }
});

test.run();
