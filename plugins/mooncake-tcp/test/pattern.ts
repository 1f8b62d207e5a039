/** A deterministic byte pattern (xorshift32) so both processes can produce and check data. */
export function pattern(seed: number, length: number): Buffer {
  const out = Buffer.alloc(length);
  let x = seed >>> 0 || 1;
  for (let i = 0; i + 4 <= length; i += 4) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    out.writeUInt32LE(x >>> 0, i);
  }
  for (let i = length & ~3; i < length; i++) out[i] = (seed + i) & 0xff;
  return out;
}
