import { MAX_TIMER_MS, TransferError, type KVTimeouts } from '@te/connector';

export interface PDTimeouts extends KVTimeouts {
  /** Consecutive missed heartbeats after which a peer's rooms fail. */
  heartbeatMaxFailures: number;
  /** How long a decode's abort waits for the prefill's acknowledgement. */
  abortMs: number;
  /** Deadline of each write batch. */
  transferMs: number;
}

export const DEFAULT_PD_TIMEOUTS: PDTimeouts = {
  bootstrapMs: 300_000,
  waitingMs: 300_000,
  heartbeatMs: 5_000,
  heartbeatMaxFailures: 2,
  abortMs: 30_000,
  transferMs: 60_000,
};

/**
 * At most what a Node.js timer holds (MAX_TIMER_MS): a longer timer runs after 1 ms, so a
 * larger timeout would fail every room at once instead of never. heartbeatMs gets half: a
 * heartbeat's answer is waited for twice as long.
 */
const LIMIT_MS: Partial<Record<keyof PDTimeouts, number>> = {
  bootstrapMs: MAX_TIMER_MS,
  waitingMs: MAX_TIMER_MS,
  heartbeatMs: Math.floor(MAX_TIMER_MS / 2),
  abortMs: MAX_TIMER_MS,
  transferMs: MAX_TIMER_MS,
};
/** Where an environment variable sets a timeout, its name (an error names what the user set). */
const ENV_OF: Partial<Record<keyof PDTimeouts, string>> = {
  bootstrapMs: 'SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT',
  waitingMs: 'SGLANG_DISAGGREGATION_WAITING_TIMEOUT',
  heartbeatMs: 'SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL',
};

function seconds(env: NodeJS.ProcessEnv, name: string): number | undefined {
  const raw = env[name];
  if (raw === undefined || raw === '') return undefined;
  const v = Number(raw);
  if (!Number.isFinite(v) || v <= 0) throw new TransferError('INVALID_CONFIG', `Expected ${name} to be a positive number of seconds, got "${raw}"`);
  return Math.round(v * 1000);
}

function count(env: NodeJS.ProcessEnv, name: string): number | undefined {
  const raw = env[name];
  if (raw === undefined || raw === '') return undefined;
  const v = Number(raw);
  if (!Number.isInteger(v) || v < 1) throw new TransferError('INVALID_CONFIG', `Expected ${name} to be a positive integer, got "${raw}"`);
  return v;
}

/**
 * Timeouts from defaults, then SGLang's environment names (seconds, as SGLang users set
 * them), then code. Every value is checked: a bad one is INVALID_CONFIG naming it.
 */
export function resolveTimeouts(input: Partial<PDTimeouts> = {}, env: NodeJS.ProcessEnv = process.env): PDTimeouts {
  const fromEnv: Partial<PDTimeouts> = {};
  const put = <K extends keyof PDTimeouts>(k: K, v: number | undefined): void => {
    if (v !== undefined) fromEnv[k] = v;
  };
  for (const [k, name] of Object.entries(ENV_OF) as [keyof PDTimeouts, string][]) put(k, seconds(env, name));
  put('heartbeatMaxFailures', count(env, 'SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE'));
  const out = { ...DEFAULT_PD_TIMEOUTS, ...fromEnv, ...input };
  for (const [k, v] of Object.entries(out) as [keyof PDTimeouts, unknown][]) {
    // Whole numbers: transferMs becomes each write batch's `timeoutMs`, which the engine takes
    // in whole milliseconds only, so a fraction accepted here would fail every transfer.
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 1)
      throw new TransferError(
        'INVALID_CONFIG',
        `Expected the \`timeouts.${k}\` option to be a positive whole number${k === 'heartbeatMaxFailures' ? '' : ' of milliseconds'}, got ${String(v)}`,
      );
    const limit = LIMIT_MS[k];
    if (limit !== undefined && v > limit) {
      const what = input[k] === undefined && fromEnv[k] !== undefined ? `${ENV_OF[k]} (${v / 1000} s)` : `the \`timeouts.${k}\` option (${v} ms)`;
      throw new TransferError(
        'INVALID_CONFIG',
        `Expected ${what} to be at most ${limit} ms (${(limit / 86_400_000).toFixed(1)} days): a longer timer runs at once`,
      );
    }
  }
  return out;
}
