// Steady-state cost from two runs of one case: a long run and a shorter one. Start-up,
// registration and verification are paid once by each, so (long − short) ÷ (requests of the
// long − of the short) is what a request costs once the case is running. Used by
// bench/per-request.mjs (CPU), bench/syscalls.mjs (system calls) and bench/allocations.mjs
// (JS heap bytes).

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
 * Runs `once(longSeconds)` and then `once(shortSeconds)`, and returns the pair. A host busy with
 * other work can stall one run long enough that the longer run moves no more than the shorter
 * one (`moved(long, short)` says whether it did); the pair is then run again, up to ATTEMPTS
 * pairs in all (`onRetry(nextAttempt)` is told each time), and the last pair is returned either
 * way. `once` may return its run or a promise of it.
 */
export async function runSteadyPair(once, longSeconds, shortSeconds, moved, onRetry = () => {}) {
  for (let attempt = 1; ; attempt++) {
    const long = await once(longSeconds);
    const short = await once(shortSeconds);
    if (moved(long, short) || attempt === ATTEMPTS) return { long, short };
    onRetry(attempt + 1);
  }
}

/**
 * What a bench tool prints when a pair is run again and when it gives up: `name` is the case
 * (or tool), `what` what the runs count ("requests", "batches").
 */
export function stalledPairMessages(name, what) {
  const stalled = `the longer run moved no more ${what} than the shorter one`;
  return {
    retry: (next) => `${name}: ${stalled}; both run again (${next} of ${ATTEMPTS})`,
    givenUp: (detail) => `${name}: in ${ATTEMPTS} tries ${stalled} (${detail ? `${detail}; ` : ''}a stalled host?)`,
  };
}

/**
 * Runs `once(seconds)` for `duration` and for a third of it, and returns their difference
 * (steadyDifference), the pair run again while the longer run moved no more requests.
 */
export async function measureSteadyState(name, once, duration, onRetry = () => {}) {
  const moved = (long, short) => long.result.requests > short.result.requests;
  const { long, short } = await runSteadyPair(once, duration, duration / 3, moved, onRetry);
  return steadyDifference(name, long, short);
}
