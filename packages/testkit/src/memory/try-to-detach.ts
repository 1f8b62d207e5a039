// Every way Node.js offers an application to detach an ArrayBuffer, for tests that show a
// registered buffer keeps its memory (see keepAttached in @te/connector).
import { MessageChannel } from 'node:worker_threads';

type Detachable = ArrayBuffer & { transfer?: () => ArrayBuffer; transferToFixedLength?: () => ArrayBuffer };

/**
 * Tries a structuredClone transfer list, a postMessage transfer list (unless
 * `transferLists` is false), `transfer()` and `transferToFixedLength()` (where this Node.js
 * has them), each allowed to throw. Returns
 * how many went through: a refusal, or Node.js 20 copying a marked buffer instead of moving
 * it, leaves `buffer` attached either way; the caller checks `byteLength`.
 */
export function tryToDetach(buffer: ArrayBufferLike, options: { transferLists?: boolean } = {}): number {
  const ab = buffer as Detachable;
  let went = 0;
  const attempt = (f: () => unknown): void => {
    try {
      f();
      went++;
    } catch {
      // Refused.
    }
  };
  if (options.transferLists ?? true) {
    attempt(() => structuredClone(ab, { transfer: [ab] }));
    const { port1, port2 } = new MessageChannel();
    attempt(() => port1.postMessage(ab, [ab]));
    port1.close();
    port2.close();
  }
  if (typeof ab.transfer === 'function') attempt(() => ab.transfer!());
  if (typeof ab.transferToFixedLength === 'function') attempt(() => ab.transferToFixedLength!());
  return went;
}
