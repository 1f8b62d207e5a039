// The check bench/mooncake-interop.mjs runs after every run into a te target: the target's
// addressed range must hold exactly the bytes the initiator sent (asked over te's control
// plane, hashed inside the target process).
import { createHash } from 'node:crypto';

/** Throws when the te target's [0, expected.length) does not hash like `expected`. */
export async function checkTargetHolds(control, expected, what) {
  const want = createHash('sha256').update(expected).digest('hex');
  const got = await control.request('te.bench.digest', { offset: 0n, length: BigInt(expected.length) }, 60_000);
  if (got !== want) throw new Error(`verification failed: ${what}: the te target's range hashes ${got}, the initiator's bytes ${want}`);
}
