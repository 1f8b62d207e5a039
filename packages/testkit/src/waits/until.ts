/**
 * Waits until `check()` holds, polling every `everyMs`, for the state a test means rather
 * than a guess at how long it takes. Throws after `timeoutMs`, naming what did not happen
 * (`what` may be a function, read then, to say how far it got).
 */
export async function until(what: string | (() => string), check: () => boolean, timeoutMs = 10_000, everyMs = 5): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > end) throw new Error(`${typeof what === 'function' ? what() : what}: not within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}
