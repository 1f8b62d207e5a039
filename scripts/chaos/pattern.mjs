// Deterministic content for the chaos soak: every KV page, aux slot and EC item a room
// sends is a function of where it belongs, so the receiving side can check each byte
// without being told what was sent. Pure functions; shared by the driver, the rank
// processes and the verifier test.

/** A small seeded PRNG (mulberry32): the same seed gives the same schedule of rooms and faults. */
export function prng(seed) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return {
    next,
    /** An integer in [lo, hi]. */
    int: (lo, hi) => lo + Math.floor(next() * (hi - lo + 1)),
    pick: (list) => list[Math.floor(next() * list.length)],
    /** A random u63 as a bigint (a PD room). */
    u63: () => (BigInt(Math.floor(next() * 2 ** 31)) << 32n) | BigInt(Math.floor(next() * 2 ** 32)),
  };
}

/** A 32-bit seed for one page: the room, the buffer (layer, K or V), the page's place in the room and the head shard. */
export function pageSeed(room, buffer, index, shard) {
  let h = Number(room & 0xffffffffn) ^ Math.imul(Number((room >> 32n) & 0xffffffffn), 0x9e3779b1);
  for (const v of [buffer, index, shard]) h = Math.imul(h ^ (v + 0x7f4a7c15), 0x85ebca6b) ^ (h >>> 13);
  return h >>> 0;
}

/** Fills `view` with the bytes of `seed` (xorshift32, so a shifted or swapped byte is caught). */
export function fillSeeded(view, seed) {
  let x = seed || 0x1234567;
  const words = view.length >>> 2;
  const u32 = new Uint32Array(view.buffer, view.byteOffset, words);
  for (let i = 0; i < words; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    u32[i] = x >>> 0;
  }
  for (let i = words * 4; i < view.length; i++) view[i] = (seed + i) & 0xff;
}

/** How many bytes of `view` differ from the bytes of `seed`. */
export function wrongBytes(view, seed) {
  const want = new Uint8Array(view.length);
  fillSeeded(want, seed);
  let bad = 0;
  for (let i = 0; i < view.length; i++) if (view[i] !== want[i]) bad++;
  return bad;
}
