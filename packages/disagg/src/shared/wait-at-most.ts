/**
 * Waits for `work` to settle, but no longer than `ms`; never rejects. For closes that wait
 * for writes in flight: a transport that holds one past its deadline must not hold the
 * close forever (what it still holds stays marked in use by the engine).
 */
export async function waitAtMost(work: Promise<unknown>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  try {
    await Promise.race([
      work.then(
        () => undefined,
        () => undefined,
      ),
      new Promise<void>((r) => (timer = setTimeout(r, ms))),
    ]);
  } finally {
    clearTimeout(timer);
  }
}
