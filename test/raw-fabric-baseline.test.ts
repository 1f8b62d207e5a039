// The raw libfabric baseline (bench/fabric-rma) is what every "× raw" ratio of `npm run
// bench` divides by: it must move and verify real bytes over tcp;ofi_rxm (with te's
// endpoints and grouping too), fail on a corrupted byte, refuse bad arguments, and run its
// optional third thread (--third-thread) without losing bytes.
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
// @ts-expect-error plain ES module without types (the benchmark's own helper)
import { buildRawFabric } from '../bench/lib/raw-fabric.mjs';
import { onceTest } from './fixtures/node-lines.js';

// A C program checked by a Node.js driver: what it does does not depend on the Node.js line.
const test = onceTest('the raw libfabric baseline (a C program) checks');

const provider = 'tcp;ofi_rxm';
const fabricInfo = spawnSync('fi_info', ['-p', provider], { encoding: 'utf8' });
const reason = fabricInfo.error
  ? 'fi_info is not installed (apt-get install -y libfabric-bin libfabric-dev)'
  : fabricInfo.status !== 0
    ? `libfabric has no ${provider} provider here`
    : undefined;

function run(args: string[]) {
  const r = spawnSync(buildRawFabric() as string, args, { encoding: 'utf8', timeout: 60_000 });
  return { status: r.status, json: r.status === 0 ? JSON.parse(r.stdout.trim().split('\n').pop()!) : undefined, stderr: r.stderr };
}

/** Every case needs the provider: without it each one is registered as skipped, with the reason. */
function fabricTest(name: string, body: () => void) {
  if (reason) test.skip(`${name} — skipped: ${reason}`, body);
  else test(name, body);
}

fabricTest('writes and reads move verified bytes, with and without delivery completion', () => {
  for (const args of [
    ['--op', 'write'],
    ['--op', 'write', '--delivery-complete'],
    ['--op', 'read'],
  ]) {
    const r = run([...args, '--size', '65536', '--window', '8', '--seconds', '0.3', '--provider', provider]);
    assert.is(r.status, 0, r.stderr);
    assert.is(r.json.verified, true);
    assert.ok(r.json.ops > 0 && r.json.bytesPerSecond > 0, JSON.stringify(r.json));
    assert.is(r.json.deliveryComplete, args.includes('--delivery-complete'));
    assert.is(r.json.thirdThread, '0:0');
  }
});

// vs-iperf3 runs raw writes with te's completion promise: a batch's worth of operations ends
// with one delivery-complete write (te's write fence), the others complete once sent.
fabricTest('--fence-every N: writes verify, with their fence reported; 0 or junk is refused', () => {
  for (const n of ['1', '4']) {
    const r = run(['--op', 'write', '--size', '65536', '--window', '8', '--iov', '2', '--seconds', '0.3', '--fence-every', n, '--provider', provider]);
    assert.is(r.status, 0, r.stderr);
    assert.is(r.json.verified, true);
    assert.is(r.json.fenceEvery, Number(n));
    assert.is(r.json.deliveryComplete, n === '1');
  }
  for (const bad of ['0', '-3', 'x', '2097152']) {
    const r = run(['--op', 'write', '--size', '4096', '--window', '4', '--seconds', '0.1', '--fence-every', bad, '--provider', provider]);
    assert.is(r.status, 2, `--fence-every ${bad}`);
    assert.match(r.stderr, /--fence-every takes a number of writes/);
  }
});

fabricTest('--third-thread runs beside the transfer and the bytes still verify', () => {
  const r = run(['--op', 'write', '--size', '4096', '--window', '16', '--seconds', '0.3', '--third-thread', '30:90', '--provider', provider]);
  assert.is(r.status, 0, r.stderr);
  assert.is(r.json.verified, true);
  assert.is(r.json.thirdThread, '30:90');
});

fabricTest('thread-matched and grouped: several endpoints and multi-iov operations move verified bytes', () => {
  for (const op of ['write', 'read']) {
    const r = run(['--op', op, '--size', '4096', '--window', '16', '--endpoints', '2', '--iov', '4', '--seconds', '0.3', '--provider', provider]);
    assert.is(r.status, 0, r.stderr);
    assert.is(r.json.verified, true);
    assert.is(r.json.endpoints, 2);
    assert.is(r.json.iov, 4);
    assert.is(r.json.requests, r.json.ops * 4);
  }
});

// The checksum comparison is what makes "verified" mean anything: one flipped byte of the
// timed destination (the target's buffer for writes, the initiator's for reads) fails the run.
fabricTest('a corrupted byte fails the run (exit 1, verified false), writes and reads, 1 and 2 endpoints', () => {
  for (const args of [
    ['--op', 'write'],
    ['--op', 'read'],
    ['--op', 'write', '--endpoints', '2', '--iov', '4'],
    ['--op', 'read', '--endpoints', '2', '--iov', '4'],
  ]) {
    const r = spawnSync(
      buildRawFabric() as string,
      [...args, '--size', '4096', '--window', '8', '--seconds', '0.2', '--provider', provider, '--corrupt-one-byte'],
      { encoding: 'utf8', timeout: 60_000 },
    );
    assert.is(r.status, 1, `${args.join(' ')}: ${r.stderr}`);
    assert.is(JSON.parse(r.stdout.trim().split('\n').pop()!).verified, false);
  }
});

// The working set (--span) is what te's run touches: operations walk it in turn, so a small
// window streams from memory as te does; every position is timed, and every byte checked.
fabricTest('--span: a working set larger than the window is walked whole and verified, writes and reads', () => {
  for (const args of [
    ['--op', 'write'],
    ['--op', 'read'],
    ['--op', 'write', '--endpoints', '2', '--iov', '4'],
  ]) {
    const r = run([...args, '--size', '4096', '--window', '4', '--span', String(4 << 20), '--seconds', '0.2', '--provider', provider]);
    assert.is(r.status, 0, `${args.join(' ')}: ${r.stderr}`);
    assert.is(r.json.verified, true);
    // Every position of the span is timed at least once (the run does not end before).
    const positions = (4 << 20) / (4096 * (args.includes('--iov') ? 4 : 1));
    assert.ok(r.json.ops >= positions, `${r.json.ops} operations for ${positions} positions`);
  }
});

// Before the clock starts every byte to be moved gets a new value, so the check sees timed
// bytes only: a run that never sends one position while timed (yet counts it) must fail.
// Before that re-stamp, the warm-up's copy of the same bytes made this run verify.
fabricTest('a position never moved while timed fails the run, writes and reads, with and without --span', () => {
  for (const args of [
    ['--op', 'write', '--window', '8'],
    ['--op', 'read', '--window', '8'],
    ['--op', 'write', '--window', '4', '--span', String(1 << 20)],
    ['--op', 'read', '--window', '4', '--span', String(1 << 20), '--endpoints', '2', '--iov', '4'],
  ]) {
    const r = spawnSync(buildRawFabric() as string, [...args, '--size', '4096', '--seconds', '0.2', '--provider', provider, '--drop-timed-position'], {
      encoding: 'utf8',
      timeout: 60_000,
    });
    assert.is(r.status, 1, `${args.join(' ')}: ${r.stderr}`);
    assert.is(JSON.parse(r.stdout.trim().split('\n').pop()!).verified, false);
  }
});

fabricTest('bad arguments exit 2 with a message, before any fabric is opened', () => {
  for (const args of [
    ['--third-thread', '0:90'],
    ['--third-thread', 'busy'],
    ['--window', '0'],
    ['--size', '0'],
    ['--endpoints', '0'],
    ['--iov', '9'],
    ['--span', '0'],
    ['--span', '12x'],
    ['--window', '1', '--drop-timed-position'],
    ['--bogus'],
  ]) {
    const r = run(args);
    assert.is(r.status, 2, `${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, /fi_rma_bench|usage/);
  }
});

test.run();
