// Filling and hashing a bench buffer of any size the bench accepts (up to 4 GiB). Node's
// crypto takes at most 2^32 - 1 bytes per call: `randomFillSync` of a 4 GiB buffer aborts
// the process (an assertion in Node), and `Hash.update` throws "data is too long". Both
// are done in parts here; the digest is the same as one update over the whole buffer.
import { createHash, randomFillSync } from 'node:crypto';

/** Bytes per call into Node's crypto: well under its 2^32 - 1 limit. */
export const CRYPTO_PART_BYTES = 1 << 30;

/** Fills `bytes` with random data, `part` bytes per call. */
export function fillRandom(bytes: Uint8Array, part = CRYPTO_PART_BYTES): void {
  for (let at = 0; at < bytes.length; at += part) randomFillSync(bytes.subarray(at, Math.min(bytes.length, at + part)));
}

/** SHA-256 of `bytes` (hex), fed `part` bytes per update. */
export function sha256Of(bytes: Uint8Array, part = CRYPTO_PART_BYTES): string {
  const hash = createHash('sha256');
  for (let at = 0; at < bytes.length; at += part) hash.update(bytes.subarray(at, Math.min(bytes.length, at + part)));
  return hash.digest('hex');
}
