import { TransferError, type KVTimeouts } from '@te/connector';

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
  put('bootstrapMs', seconds(env, 'SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT'));
  put('waitingMs', seconds(env, 'SGLANG_DISAGGREGATION_WAITING_TIMEOUT'));
  put('heartbeatMs', seconds(env, 'SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL'));
  put('heartbeatMaxFailures', count(env, 'SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE'));
  const out = { ...DEFAULT_PD_TIMEOUTS, ...fromEnv, ...input };
  for (const [k, v] of Object.entries(out)) {
    if (typeof v !== 'number' || !Number.isFinite(v) || v <= 0)
      throw new TransferError('INVALID_CONFIG', `Expected the \`timeouts.${k}\` option to be a positive number, got ${String(v)}`);
  }
  return out;
}
