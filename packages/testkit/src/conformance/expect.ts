// What the conformance cases check with: deterministic payloads, a fast byte comparison,
// typed rejections, and initiator memory from the engine's allocator.
import * as assert from 'uvu/assert';
import { isTransferError, type AllocatedHandle, type TransferEngine, type TransferErrorCode } from '@te/connector';

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
export async function hostMemory(engine: TransferEngine, size: number, init?: Uint8Array | number): Promise<AllocatedHandle & { buffer: Uint8Array }> {
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

export async function rejectsWith(promise: Promise<unknown>, codes: TransferErrorCode[]): Promise<Error> {
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
