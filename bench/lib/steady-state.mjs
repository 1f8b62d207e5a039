// Steady-state cost from two runs of one case: a long run and one a third as long. Start-up,
// registration and verification are paid once by each, so (long − short) ÷ (requests of the
// long − of the short) is what a request costs once the case is running.

/** How many times a pair is run before a stalled host is given up on. */
export const ATTEMPTS = 3;

/**
 * The long run less the short one: requests, CPU time per thread and JS self time per layer
 * (each clamped at 0: a thread that used less CPU in the longer run spent nothing per request).
 * `requests` ≤ 0 means the longer run moved no more than the shorter one: no figures.
 */
export function steadyDifference(name, long, short) {
  const requests = long.result.requests - short.result.requests;
  const perThread = {};
  for (const [k, t] of Object.entries(long.perThread)) {
    const s = short.perThread[k] ?? { user: 0, sys: 0 };
    perThread[k] = { user: Math.max(0, t.user - s.user), sys: Math.max(0, t.sys - s.sys) };
  }
  const jsLayers = {};
  for (const [k, t] of Object.entries(long.jsLayers)) jsLayers[k] = Math.max(0, t - (short.jsLayers[k] ?? 0));
  return { plugin: name, result: long.result, requests, perThread, jsLayers };
}

/**
 * Runs `once(seconds)` for `duration` and for a third of it, and returns their difference. A
 * host busy with other work can stall one run long enough that the longer run moves no more
 * requests than the shorter one; the pair is then run again, up to ATTEMPTS pairs in all
 * (`onRetry(nextAttempt)` is told each time), and the last difference is returned either way.
 */
export async function measureSteadyState(name, once, duration, onRetry = () => {}) {
  for (let attempt = 1; ; attempt++) {
    const long = await once(duration);
    const short = await once(duration / 3);
    const m = steadyDifference(name, long, short);
    if (m.requests > 0 || attempt === ATTEMPTS) return m;
    onRetry(attempt + 1);
  }
}
