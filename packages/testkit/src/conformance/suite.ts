import { suite } from 'uvu';
import * as assert from 'uvu/assert';
import {
  OP_READ,
  OP_WRITE,
  allocateBatch,
  batchOf,
  isTransferError,
  type AllocatedHandle,
  type TransferEngine,
  type TransferErrorCode,
  type TransportCapabilities,
} from '@te/connector';
import { checkPayload, type TargetMemory } from './target.js';

/** Two engines that can reach each other, built by the plugin under test. */
export interface ConformancePair {
  initiator: TransferEngine;
  /** The target's segment name. */
  target: string;
  targetMemory: TargetMemory;
  /** Makes the target stop serving (SIGSTOP, a never-complete fault); needed by the abort/deadline cases. */
  stall?(): Promise<void>;
  resume?(): Promise<void>;
  close(): Promise<void>;
}

export interface ConformanceOptions {
  /** Name shown in the suite title. */
  name: string;
  capabilities: TransportCapabilities;
  createPair(): Promise<ConformancePair>;
  /** Cases this plugin does not run, each with the reason (printed, never silent). */
  exclude?: Record<string, string>;
  /** Run only these cases (while debugging one); the others are registered as skipped. */
  only?: string[];
  /** Largest single write the suite tries (default 1 MiB). */
  maxBytes?: number;
  /** Size of the write sent to a stalled peer in the abort and deadline cases (default 32 MiB). */
  stallBytes?: number;
}

/** Deterministic bytes for a (seed, length), so every landed byte can be checked. */
export function pattern(length: number, seed: number): Uint8Array {
  const out = new Uint8Array(length);
  let x = (seed * 2654435761) >>> 0 || 1;
  for (let i = 0; i < length; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    out[i] = x & 0xff;
  }
  return out;
}

/**
 * Host memory for the initiator, from `engine.allocateMemory` so that pool-model
 * transports (whose peers reach only pool memory) run the suite strict.
 */
async function hostMemory(engine: TransferEngine, size: number, init?: Uint8Array | number): Promise<AllocatedHandle & { buffer: Uint8Array }> {
  const h = await engine.allocateMemory(size);
  if (!h.buffer) throw new Error('allocateMemory returned no host view');
  if (typeof init === 'number') h.buffer.fill(init);
  else if (init) h.buffer.set(init);
  else h.buffer.fill(0);
  return h as AllocatedHandle & { buffer: Uint8Array };
}

/**
 * Byte equality that stays fast on large buffers: a mismatch names the first differing
 * byte and both values instead of diffing the arrays (which takes minutes on megabytes).
 */
export function assertBytes(actual: Uint8Array, expected: Uint8Array, label = 'bytes'): void {
  if (actual.length !== expected.length) {
    throw new assert.Assertion({
      message: `${label}: ${actual.length} bytes, expected ${expected.length}`,
      operator: 'bytes',
      expects: expected.length,
      actual: actual.length,
    });
  }
  const a = Buffer.from(actual.buffer, actual.byteOffset, actual.length);
  const e = Buffer.from(expected.buffer, expected.byteOffset, expected.length);
  if (a.equals(e)) return;
  // Halve the range until the first difference is found (each step a native compare).
  let lo = 0;
  let hi = a.length;
  while (hi - lo > 64) {
    const mid = lo + Math.floor((hi - lo) / 2);
    if (a.subarray(lo, mid).equals(e.subarray(lo, mid))) lo = mid;
    else hi = mid;
  }
  let at = lo;
  while (at < hi && a[at] === e[at]) at++;
  const hex = (x: number | undefined) => `0x${(x ?? 0).toString(16).padStart(2, '0')}`;
  throw new assert.Assertion({
    message: `${label}: first difference at byte ${at} of ${a.length}: got ${hex(a[at])}, expected ${hex(e[at])}`,
    operator: 'bytes',
    expects: hex(e[at]),
    actual: hex(a[at]),
  });
}

async function rejectsWith(promise: Promise<unknown>, codes: TransferErrorCode[]): Promise<Error> {
  try {
    await promise;
  } catch (e) {
    if (!isTransferError(e))
      throw new assert.Assertion({
        message: `expected a TransferError (${codes.join('|')}), got ${String(e)}`,
        operator: 'rejects',
        expects: codes,
        actual: e,
      });
    assert.ok(codes.includes(e.code), `expected ${codes.join(' or ')}, got ${e.code}: ${e.message}`);
    return e;
  }
  throw new assert.Assertion({
    message: `expected rejection with ${codes.join('|')}, but it resolved`,
    operator: 'rejects',
    expects: codes,
    actual: 'resolved',
  });
}

/**
 * The conformance suite every transport plugin runs: register, write, read, batches,
 * bounds, abort, deadline, notifications. Cases a plugin's capabilities exclude are
 * dropped with the reason printed.
 */
export function transportConformance(options: ConformanceOptions) {
  const test = suite<{ pair?: ConformancePair; setupError?: unknown }>(`conformance: ${options.name}`);
  const maxBytes = options.maxBytes ?? 1 << 20;
  // Larger than what loopback socket buffers absorb: a transport whose writes complete once
  // the data left the local buffer (a provider without delivery-complete) must still wait.
  const stallBytes = options.stallBytes ?? 32 << 20;
  const skipped: string[] = [];
  const requires = (caseName: string): string | undefined => {
    if (options.only && !options.only.includes(caseName)) return 'not selected (options.only)';
    if (caseName.startsWith('read') && !options.capabilities.read) return 'capabilities.read is false';
    if (caseName.startsWith('notification') && !options.capabilities.notifications) return 'capabilities.notifications is false';
    return options.exclude?.[caseName];
  };
  const it = (caseName: string, body: (pair: ConformancePair) => Promise<void>): void => {
    const reason = requires(caseName);
    if (reason) {
      skipped.push(`${caseName}: ${reason}`);
      // Registered, so the runner's summary counts it; the reason is in its name.
      test.skip(`${caseName} — skipped: ${reason}`, () => undefined);
      return;
    }
    test(caseName, (ctx) => {
      // uvu 0.5 swallows errors thrown by `before` hooks: re-raise them in every case.
      if (!ctx.pair) throw ctx.setupError ?? new Error('conformance pair was not created');
      return body(ctx.pair);
    });
  };
  const needsStall = (caseName: string, body: (pair: ConformancePair) => Promise<void>): void =>
    it(caseName, async (pair) => {
      if (!pair.stall || !pair.resume)
        throw new Error(`${caseName} needs pair.stall/resume; exclude the case with a reason if the transport cannot provide them`);
      await body(pair);
    });

  test.before(async (ctx) => {
    try {
      ctx.pair = await options.createPair();
    } catch (error) {
      ctx.setupError = error;
    }
  });
  test.after(async (ctx) => {
    await ctx.pair?.close();
    if (skipped.length) console.log(`  ${options.name}: skipped cases:\n${skipped.map((s) => `    - ${s}`).join('\n')}`);
  });

  it('register: published, overlap refused, unregistered', async ({ initiator }) => {
    const h = await hostMemory(initiator, 8192);
    assert.ok(initiator.descriptor().buffers.some((b) => b.addr === h.addr && b.length === 8192n));
    await rejectsWith(initiator.registerMemory({ addr: h.addr + 100n, length: 10n }), ['MEMORY_OVERLAP']);
    await initiator.freeMemory(h);
    assert.not.ok(initiator.descriptor().buffers.some((b) => b.addr === h.addr));
    await rejectsWith(initiator.unregisterMemory(h.addr), ['MEMORY_NOT_REGISTERED']);
  });

  it('write: sizes land byte for byte', async ({ initiator, target, targetMemory }) => {
    const sizes = [1, 7, 4096, 65_537, maxBytes];
    const local = await hostMemory(initiator, maxBytes);
    const src = local.buffer;
    const remote = await targetMemory.alloc(maxBytes + 64, { fill: 0xee });
    try {
      for (const [k, size] of sizes.entries()) {
        src.set(pattern(size, k + 1));
        await initiator.write(target, local.addr, remote + 32n, size);
        const landed = await targetMemory.read(remote, size + 64);
        assertBytes(landed.subarray(32, 32 + size), pattern(size, k + 1), `payload of ${size} bytes`);
        assertBytes(landed.subarray(0, 32), new Uint8Array(32).fill(0xee), 'bytes before the range untouched');
        if (k === 0) assert.is(landed[33], 0xee, 'byte after a 1-byte write untouched');
      }
    } finally {
      await initiator.freeMemory(local);
      await targetMemory.free(remote);
    }
  });

  it('read: remote bytes arrive', async ({ initiator, target, targetMemory }) => {
    const size = Math.min(maxBytes, 256 * 1024);
    const remote = await targetMemory.alloc(size);
    await targetMemory.write(remote, pattern(size, 99));
    const local = await hostMemory(initiator, size);
    const dst = local.buffer;
    try {
      await initiator.read(target, local.addr, remote, size);
      assertBytes(dst, pattern(size, 99));
    } finally {
      await initiator.freeMemory(local);
      await targetMemory.free(remote);
    }
  });

  it('batch: 1000 scattered requests, mixed read and write when supported', async ({ initiator, target, targetMemory }) => {
    const n = 1000;
    const item = 64;
    const src = pattern(n * item, 7);
    const local = await hostMemory(initiator, n * item, src);
    const localRead = await hostMemory(initiator, n * item);
    const readBack = localRead.buffer;
    const remote = await targetMemory.alloc(n * item * 2);
    try {
      const w = allocateBatch(n);
      for (let i = 0; i < n; i++) {
        w.opcodes[i] = OP_WRITE;
        w.localAddrs[i] = local.addr + BigInt(i * item);
        w.remoteAddrs[i] = remote + BigInt((n - 1 - i) * item * 2); // reversed, strided
        w.lengths[i] = BigInt(item);
      }
      const result = await initiator.transfer(target, w);
      assert.is(result.statuses.length, n);
      assert.ok(result.statuses.every((s) => s === 0));
      const landed = await targetMemory.read(remote, n * item * 2);
      for (let i = 0; i < n; i++) {
        const at = (n - 1 - i) * item * 2;
        assertBytes(landed.subarray(at, at + item), src.subarray(i * item, (i + 1) * item), `request ${i}`);
      }
      if (options.capabilities.read) {
        const r = allocateBatch(n);
        for (let i = 0; i < n; i++) {
          r.opcodes[i] = OP_READ;
          r.localAddrs[i] = localRead.addr + BigInt(i * item);
          r.remoteAddrs[i] = w.remoteAddrs[i]!;
          r.lengths[i] = BigInt(item);
        }
        await initiator.transfer(target, r);
        assertBytes(readBack, src);
      }
    } finally {
      await initiator.freeMemory(local);
      await initiator.freeMemory(localRead);
      await targetMemory.free(remote);
    }
  });

  it('concurrent: batches from several callers at once', async ({ initiator, target, targetMemory }) => {
    const callers = 8;
    const size = 32 * 1024;
    const local = await hostMemory(initiator, callers * size);
    const src = local.buffer;
    for (let c = 0; c < callers; c++) src.set(pattern(size, 100 + c), c * size);
    const remote = await targetMemory.alloc(callers * size);
    try {
      await Promise.all(Array.from({ length: callers }, (_, c) => initiator.write(target, local.addr + BigInt(c * size), remote + BigInt(c * size), size)));
      assertBytes(await targetMemory.read(remote, callers * size), src);
    } finally {
      await initiator.freeMemory(local);
      await targetMemory.free(remote);
    }
  });

  it('bounds: a write past the end of the peer region is refused and changes nothing', async ({ initiator, target, targetMemory }) => {
    const local = await hostMemory(initiator, 8192, pattern(8192, 3));
    const remote = await targetMemory.alloc(4096, { fill: 0x11 });
    try {
      const err = await rejectsWith(initiator.write(target, local.addr, remote + 2048n, 4096), ['ADDRESS_OUT_OF_RANGE']);
      // A refused batch rejects with the per-request statuses (TransferError.statuses): present,
      // one per request, and the refused request's is non-zero.
      const { statuses } = err as { statuses?: unknown };
      assert.ok(statuses instanceof Int32Array, `the error carries per-request statuses (got ${String(statuses)})`);
      assert.is(statuses.length, 1, 'one status per request');
      assert.is.not(statuses[0], 0, 'the refused request has a non-zero status');
      assertBytes(await targetMemory.read(remote, 4096), new Uint8Array(4096).fill(0x11), 'target memory unchanged');
      await initiator.write(target, local.addr, remote, 4096);
      assertBytes(await targetMemory.read(remote, 4096), pattern(8192, 3).subarray(0, 4096), 'peer still serves after the refusal');
    } finally {
      await initiator.freeMemory(local);
      await targetMemory.free(remote);
    }
  });

  it('bounds: unregistered or local-only peer memory is refused', async ({ initiator, target, targetMemory }) => {
    const local = await hostMemory(initiator, 4096);
    const gone = await targetMemory.alloc(4096);
    await targetMemory.free(gone);
    const privateRegion = await targetMemory.alloc(4096, { remoteAccess: false, fill: 0x22 });
    try {
      await rejectsWith(initiator.write(target, local.addr, gone, 4096), ['MEMORY_NOT_REGISTERED', 'ADDRESS_OUT_OF_RANGE']);
      await rejectsWith(initiator.write(target, local.addr, privateRegion, 4096), ['MEMORY_NOT_REGISTERED', 'ADDRESS_OUT_OF_RANGE']);
      assertBytes(await targetMemory.read(privateRegion, 4096), new Uint8Array(4096).fill(0x22));
    } finally {
      await initiator.freeMemory(local);
      await targetMemory.free(privateRegion);
    }
  });

  it('bounds: unregistered local memory is refused', async ({ initiator, target, targetMemory }) => {
    const local = await hostMemory(initiator, 4096);
    const remote = await targetMemory.alloc(4096, { fill: 0x33 });
    try {
      await rejectsWith(initiator.write(target, local.addr + 4096n * 64n, remote, 16), ['MEMORY_NOT_REGISTERED', 'ADDRESS_OUT_OF_RANGE']);
      await rejectsWith(initiator.write(target, local.addr + 4000n, remote, 200), ['ADDRESS_OUT_OF_RANGE', 'MEMORY_NOT_REGISTERED']);
      assertBytes(await targetMemory.read(remote, 4096), new Uint8Array(4096).fill(0x33));
    } finally {
      await initiator.freeMemory(local);
      await targetMemory.free(remote);
    }
  });

  it('abort: an aborted signal refuses the batch', async ({ initiator, target, targetMemory }) => {
    const local = await hostMemory(initiator, 4096);
    const remote = await targetMemory.alloc(4096, { fill: 0x44 });
    try {
      const ac = new AbortController();
      ac.abort();
      await rejectsWith(initiator.write(target, local.addr, remote, 4096, { signal: ac.signal }), ['ABORTED']);
      assertBytes(await targetMemory.read(remote, 4096), new Uint8Array(4096).fill(0x44));
    } finally {
      await initiator.freeMemory(local);
      await targetMemory.free(remote);
    }
  });

  needsStall('abort: in flight, against a stalled peer', async (pair) => {
    const { initiator, target, targetMemory } = pair;
    const local = await hostMemory(initiator, stallBytes);
    const remote = await targetMemory.alloc(stallBytes);
    try {
      await pair.stall!();
      const ac = new AbortController();
      const started = Date.now();
      const p = initiator.write(target, local.addr, remote, stallBytes, { signal: ac.signal, timeoutMs: 20_000 });
      setTimeout(() => ac.abort(), 50);
      await rejectsWith(p, ['ABORTED']);
      assert.ok(Date.now() - started < 5_000, `abort took ${Date.now() - started} ms`);
    } finally {
      await pair.resume!();
      await initiator.freeMemory(local);
      await targetMemory.free(remote);
    }
    // The engine still works afterwards.
    const again = await hostMemory(initiator, 64, pattern(64, 5));
    const r2 = await targetMemory.alloc(64);
    await initiator.write(target, again.addr, r2, 64);
    assertBytes(await targetMemory.read(r2, 64), pattern(64, 5));
    await initiator.freeMemory(again);
    await targetMemory.free(r2);
  });

  needsStall('deadline: a stalled peer fails the batch with TIMEOUT in time', async (pair) => {
    const { initiator, target, targetMemory } = pair;
    const local = await hostMemory(initiator, stallBytes);
    const remote = await targetMemory.alloc(stallBytes);
    try {
      await pair.stall!();
      const started = Date.now();
      const err = (await rejectsWith(initiator.write(target, local.addr, remote, stallBytes, { timeoutMs: 300 }), ['TIMEOUT'])) as Error & {
        details?: { settled?: boolean };
      };
      const took = Date.now() - started;
      // The engine releases a caller 2 s past the deadline even when the transport has not
      // answered (settled: false): passing on that would hide a transport that ignores timeoutMs.
      assert.is.not(err.details?.settled, false, `the transport did not end the batch at its deadline: the engine's watchdog did (${err.message})`);
      assert.ok(took >= 250 && took < 2_000, `deadline of 300 ms took ${took} ms`);
    } finally {
      await pair.resume!();
      await initiator.freeMemory(local);
      await targetMemory.free(remote);
    }
  });

  it('notification: arrives after the data of its batch', async ({ initiator, target, targetMemory }) => {
    const size = 64 * 1024;
    const local = await hostMemory(initiator, size, pattern(size, 42));
    const remote = await targetMemory.alloc(size);
    try {
      const before = (await targetMemory.notifications()).length;
      await initiator.transfer(target, batchOf([{ op: 'write', local: local.addr, remote, length: size }]), { notify: checkPayload(remote, size) });
      let got: Awaited<ReturnType<TargetMemory['notifications']>> = [];
      for (let i = 0; i < 200 && got.length <= before; i++) {
        got = await targetMemory.notifications();
        if (got.length <= before) await new Promise((r) => setTimeout(r, 10));
      }
      assert.ok(got.length > before, 'notification delivered');
      const n = got[got.length - 1]!;
      assert.is(n.from, initiator.segmentName);
      assert.ok(n.snapshot, 'target could snapshot the range');
      assertBytes(n.snapshot!, pattern(size, 42), 'data was in place when the notification arrived');
    } finally {
      await initiator.freeMemory(local);
      await targetMemory.free(remote);
    }
  });

  it('batch: malformed batches are refused before any transport sees them', async ({ initiator, target }) => {
    const bad = allocateBatch(2);
    await rejectsWith(initiator.transfer(target, { ...bad, lengths: new BigUint64Array(1) }), ['INVALID_ARGUMENT']);
    bad.opcodes[0] = 9;
    await rejectsWith(initiator.transfer(target, bad), ['INVALID_ARGUMENT']);
    await rejectsWith(initiator.transfer(target, allocateBatch(0), { timeoutMs: -1 }), ['INVALID_ARGUMENT']);
  });

  return test;
}
