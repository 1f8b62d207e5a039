import { TransferError } from '@te/connector';

/** The staging path of heterogeneous TP (see docs/disagg.md, "Heterogeneous TP"). */
export interface StagingOptions {
  /** Gather/scatter head slices through staging memory (default true; TE_PD_STAGING=0 turns it off: the per-token path then). */
  enabled?: boolean;
  /** Prefill: staging memory for gathers, allocated on first use (default 64 MiB; TE_PD_STAGING_BYTES). */
  bytes?: number;
  /** Decode: the staging ring it offers prefill ranks that must interleave slices (default 64 MiB; TE_PD_STAGING_RING_BYTES; 0: none). */
  ringBytes?: number;
  /** Largest piece of staging one write takes (default 8 MiB, at most a quarter of the memory it comes from; TE_PD_STAGING_CHUNK_BYTES). */
  chunkBytes?: number;
  /** Copy threads (default: half the usable CPUs, 1 to 8). */
  threads?: number;
  /**
   * Head slices whose destination is contiguous go as gathered writes when the transport
   * gathers rows itself (`capabilities.gatherWrites`, mooncake-tcp): no copy through staging
   * memory (default true; TE_PD_TRANSPORT_GATHER=0 sends them through the staging copier).
   */
  transportGather?: boolean;
  /**
   * Head slices the decode must interleave (decode TP below prefill TP, NHD pages) go
   * straight into the decode pages' rows when the transport writes into remote rows
   * (`capabilities.scatterWrites`, mooncake-tcp): no staging ring, no scatter copy at the
   * decode (default true; TE_PD_TRANSPORT_SCATTER=0 sends them through the ring).
   */
  transportScatter?: boolean;
}

export interface ResolvedStaging {
  enabled: boolean;
  bytes: number;
  ringBytes: number;
  /** ringBytes was given (option or environment): a ring too small for a page is refused, not grown. */
  ringExplicit: boolean;
  chunkBytes: number;
  threads: number | undefined;
  transportGather: boolean;
  transportScatter: boolean;
}

const MiB = 1 << 20;

function envInt(env: NodeJS.ProcessEnv, name: string): number | undefined {
  const v = env[name];
  if (v === undefined || v === '') return undefined;
  if (!/^\d+$/.test(v)) throw new TransferError('INVALID_CONFIG', `${name} must be a whole number of bytes, got ${JSON.stringify(v)}`);
  return Number(v);
}

function checkBytes(value: number, what: string, min: number): number {
  if (!Number.isSafeInteger(value) || value < min)
    throw new TransferError('INVALID_ARGUMENT', `Expected staging.${what} to be an integer of at least ${min} bytes, got ${value}`);
  return value;
}

export function resolveStaging(options: StagingOptions = {}, env: NodeJS.ProcessEnv = process.env): ResolvedStaging {
  const flag = env.TE_PD_STAGING;
  if (flag !== undefined && flag !== '' && flag !== '0' && flag !== '1')
    throw new TransferError('INVALID_CONFIG', `TE_PD_STAGING must be 0 or 1, got ${JSON.stringify(flag)}`);
  const gather = env.TE_PD_TRANSPORT_GATHER;
  if (gather !== undefined && gather !== '' && gather !== '0' && gather !== '1')
    throw new TransferError('INVALID_CONFIG', `TE_PD_TRANSPORT_GATHER must be 0 or 1, got ${JSON.stringify(gather)}`);
  const scatter = env.TE_PD_TRANSPORT_SCATTER;
  if (scatter !== undefined && scatter !== '' && scatter !== '0' && scatter !== '1')
    throw new TransferError('INVALID_CONFIG', `TE_PD_TRANSPORT_SCATTER must be 0 or 1, got ${JSON.stringify(scatter)}`);
  const given = options.ringBytes ?? envInt(env, 'TE_PD_STAGING_RING_BYTES');
  const ring = given ?? 64 * MiB;
  return {
    enabled: options.enabled ?? flag !== '0',
    bytes: checkBytes(options.bytes ?? envInt(env, 'TE_PD_STAGING_BYTES') ?? 64 * MiB, 'bytes', 4096),
    ringBytes: ring === 0 ? 0 : checkBytes(ring, 'ringBytes', 64),
    ringExplicit: given !== undefined,
    chunkBytes: checkBytes(options.chunkBytes ?? envInt(env, 'TE_PD_STAGING_CHUNK_BYTES') ?? 8 * MiB, 'chunkBytes', 64),
    threads: options.threads,
    transportGather: options.transportGather ?? gather !== '0',
    transportScatter: options.transportScatter ?? scatter !== '0',
  };
}
