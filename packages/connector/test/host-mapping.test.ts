import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { readFileSync } from 'node:fs';
import { createTransferEngine, isTransferError, type TransferEngine } from '../src/index.js';
import { unusableHostRange } from '../src/engine/host-mapping.js';

/*
 * Raw host memory is registered only where this process has it mapped read-write. Before,
 * any address was accepted, and the first peer read or write of it killed the serving
 * process with SIGSEGV (mooncake-tcp and mooncake-shm at once, mooncake-rdma in its
 * progress thread), far from the call that was wrong.
 */
const MAPS = [
  '00400000-00500000 r--p 00000000 08:01 12 /usr/bin/node',
  '00500000-00600000 rw-p 00000000 00:00 0 [heap]',
  '00600000-00700000 rw-p 00000000 00:00 0',
  '00800000-00900000 rw-p 00000000 00:00 0',
  '00900000-00a00000 ---p 00000000 00:00 0',
  '',
].join('\n');

test('unusableHostRange: read-write mappings pass, across neighbours too; gaps, other permissions and the ends do not', () => {
  const check = (addr: number, length: number) => unusableHostRange(MAPS, BigInt(addr), BigInt(length));
  assert.is(check(0x500000, 0x100000), undefined);
  assert.is(check(0x5fff00, 0x200), undefined, 'two adjacent read-write mappings are one region');
  assert.is(check(0x500000, 0x200000), undefined);
  assert.is(check(0x6fff00, 0x200), '0x700000 to 0x700100 is not mapped in this process');
  assert.is(check(0x700000, 0x10), '0x700000 to 0x700010 is not mapped in this process');
  assert.is(check(0x4fff00, 0x200), '0x4fff00 to 0x500000 is mapped r--p (not readable and writable)');
  assert.is(check(0x8fff00, 0x200), '0x900000 to 0x900100 is mapped ---p (not readable and writable)');
  assert.is(check(0x1000, 0x10), '0x1000 to 0x1010 is not mapped in this process');
  assert.is(check(0xa00000, 0x10), '0xa00000 to 0xa00010 is not mapped in this process');
  assert.is(unusableHostRange('', 0x500000n, 1n), '0x500000 to 0x500001 is not mapped in this process');
});

async function refusal(engine: TransferEngine, addr: bigint, length: bigint): Promise<Error> {
  const e = await engine.registerMemory({ addr, length, device: 'cpu' }).then(
    () => undefined,
    (x: unknown) => x as Error,
  );
  assert.ok(isTransferError(e, 'ADDRESS_OUT_OF_RANGE'), `expected ADDRESS_OUT_OF_RANGE, got ${String(e)}`);
  assert.not.ok(
    engine.registeredMemory().some((m) => m.addr === addr),
    'a refused region is not registered',
  );
  return e;
}

for (const connector of ['mooncake-tcp', 'mooncake-shm']) {
  test(`${connector}: raw host memory that is not mapped, or not writable, is refused; memory this process allocated is taken`, async () => {
    const engine = await createTransferEngine({ connector, bindAddress: '127.0.0.1' }, { env: {} });
    const owner = await createTransferEngine({ connector, bindAddress: '127.0.0.1' }, { env: {} });
    try {
      // Below mmap_min_addr: never mapped in a user process.
      const unmapped = await refusal(engine, 0x1000n, 4096n);
      assert.match(unmapped.message, /Cannot register host memory \[0x1000, 0x2000\): 0x1000 to 0x2000 is not mapped in this process/);
      const readOnly = readFileSync('/proc/self/maps', 'utf8')
        .split('\n')
        .find((line) => / r--p /.test(line))!;
      const [from, to] = readOnly
        .split(' ')[0]!
        .split('-')
        .map((x) => BigInt(`0x${x}`)) as [bigint, bigint];
      assert.match((await refusal(engine, from, to - from)).message, /is mapped r--p \(not readable and writable\)/);

      // Memory another engine of this process allocated is mapped read-write: registered,
      // and a peer's write lands in it.
      const allocated = await owner.allocateMemory(4096);
      const raw = await engine.registerMemory({ addr: allocated.addr, length: 4096n, device: 'cpu' });
      assert.is(raw.addr, allocated.addr);
      const source = await owner.allocateMemory(64);
      source.buffer!.fill(0x5a);
      await owner.write(engine.segmentName, source.addr, allocated.addr, 64n);
      assert.ok(allocated.buffer!.subarray(0, 64).every((b) => b === 0x5a));
    } finally {
      await engine.close();
      await owner.close();
    }
  });
}

test.run();
