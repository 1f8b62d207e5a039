import {
  TransferError,
  type BootstrapInfo,
  type KVBuffers,
  type KVManager,
  type KVReceiver,
  type KVSender,
  type ParallelLayout,
  type TransferEngine,
} from '@te/connector';
import { BootstrapServer } from '../bootstrap/server.js';
import { bootstrapStoreOf, directoryFactory, type BootstrapStore } from '../bootstrap/directory-for.js';
import { engineFor } from '../shared/engine.js';
import { DecodeRank } from './decode-rank.js';
import { checkBuffers, registerBuffers } from './local-buffers.js';
import { LayerwiseBatch, layerwiseEnabled, type BatchEntry, type LayerwiseStats } from './layerwise.js';
import { checksumMode } from './kv-checksum.js';
import { PrefillRank } from './prefill-rank.js';
import { resolveTimeouts, type PDTimeouts } from './timeouts.js';
import { resolveStaging, type StagingOptions } from '../staging/options.js';
import type { StagingStats } from './kv-write.js';
import type { RingService } from '../staging/ring-service.js';
import { fetchBlockedPort } from '../bootstrap/fetch-ports.js';
import { expectObject } from '../shared/expect-object.js';

/** A decode rank's staging ring: capacity, bytes in use now and at most, waits for room, bytes scattered. */
export type RingStats = RingService['stats'];

export interface CreateKVManagerOptions {
  role: 'prefill' | 'decode';
  layout: ParallelLayout;
  buffers: KVBuffers;
  /** Transport plugin name (`mooncake-tcp`, or a third party's with `modulePath`). */
  connector?: string;
  modulePath?: string;
  /**
   * Further engine config, in te's or vLLM's spelling (`kv_connector`, `kv_role`, ...),
   * read through the same `loadConfig` as every other entry point ($TE_CONFIG and the
   * environment included).
   */
  config?: Record<string, unknown>;
  /** An engine to use instead of the process's shared one (tests with several ranks per process). */
  engine?: TransferEngine;
  /** Prefill: this instance's bootstrap server, which every rank registers with. */
  bootstrapHost?: string;
  bootstrapPort?: number;
  /** Prefill: start the bootstrap server in this rank (default: the rank with every index 0; never with the etcd store). */
  serveBootstrap?: boolean;
  /**
   * Where prefill ranks register and decode ranks find them: `http` (default), the prefill
   * instance's bootstrap server; `etcd`, the cluster store of the engine's etcd metadata, so
   * no bootstrap server runs (the instance is still named by bootstrapHost:bootstrapPort,
   * the address decode requests carry). Default: TE_PD_BOOTSTRAP_STORE, else `http`.
   */
  bootstrapStore?: BootstrapStore;
  timeouts?: Partial<PDTimeouts>;
  /**
   * Prefill: send each layer as soon as it is written (`beginBatch`). Default: the
   * TE_LAYERWISE or SGLANG_MOONCAKE_ASYNC_KV environment switch.
   */
  layerwise?: boolean;
  /** Debug lines (layerwise and staging fallbacks); default: stderr when MC_LOG_LEVEL is debug or trace. */
  log?: (message: string) => void;
  /** The staging path of heterogeneous TP: gather/scatter of head slices (see docs/disagg.md). */
  staging?: StagingOptions;
  /**
   * Prefill: end-to-end integrity of the KV, state and aux it writes (DATA_CORRUPTED on a
   * mismatch, on both sides, before Success). `true`: KV through the transport's verified
   * writes (a digest of the bytes as sent and as landed) where the transport to a decode
   * rank offers them and no staging copy is involved, else per-page CRC32C checked by the
   * decode; `'pages'`: per-page CRC32C always. Default: TE_KV_CHECKSUMS (1 or pages).
   */
  checksums?: boolean | 'pages';
}

/** The KV contract's manager, plus what a deployment needs to see. */
export interface DisaggKVManager extends KVManager {
  readonly engine: TransferEngine;
  readonly timeouts: PDTimeouts;
  /** Prefill: the bootstrap server this rank started, if it started one. */
  readonly bootstrapServer: BootstrapServer | undefined;
  createSender(bootstrap: BootstrapInfo): KVSender;
  createReceiver(bootstrap: BootstrapInfo): KVReceiver;
  /** Prefill: starts a forward batch whose requests go layer by layer where they can. */
  beginBatch(entries: BatchEntry[]): LayerwiseBatch;
  /** Layerwise rooms and fallbacks by reason, since creation. */
  readonly layerwiseStats: LayerwiseStats;
  /** Prefill: staged KV writes and per-token fallbacks by reason; decode: its staging ring's use (undefined before a room needed it). */
  stagingStats(): StagingStats | RingStats | undefined;
  readonly layerwise: boolean;
}

function checkLayout(l: ParallelLayout): void {
  const pairs: [keyof ParallelLayout, keyof ParallelLayout][] = [
    ['attnTpRank', 'attnTpSize'],
    ['attnDpRank', 'attnDpSize'],
    ['ppRank', 'ppSize'],
    ['systemDpRank', 'systemDpSize'],
  ];
  for (const [rank, size] of pairs) {
    const r = l[rank];
    const s = l[size];
    if (!Number.isInteger(s) || s < 1) throw new TransferError('INVALID_ARGUMENT', `Expected layout.${size} to be a positive integer, got ${String(s)}`);
    if (!Number.isInteger(r) || r < 0 || r >= s)
      throw new TransferError('INVALID_ARGUMENT', `Expected layout.${rank} to be an integer in [0, ${s}), got ${String(r)}`);
  }
}

class Manager implements DisaggKVManager {
  readonly layerwiseStats: LayerwiseStats = { layerwiseRooms: 0, fallbacks: {} };
  constructor(
    readonly role: 'prefill' | 'decode',
    readonly layout: ParallelLayout,
    readonly engine: TransferEngine,
    readonly timeouts: PDTimeouts,
    private readonly rank: PrefillRank | DecodeRank,
    private readonly registered: bigint[],
    readonly bootstrapServer: BootstrapServer | undefined,
    readonly layerwise: boolean,
    private readonly log: (message: string) => void,
  ) {}

  stagingStats(): StagingStats | RingStats | undefined {
    return this.rank instanceof PrefillRank ? this.rank.staging.stats : this.rank.staging.stats;
  }

  beginBatch(entries: BatchEntry[]): LayerwiseBatch {
    if (!(this.rank instanceof PrefillRank)) throw new TransferError('INVALID_ARGUMENT', 'beginBatch is for prefill KV managers');
    return new LayerwiseBatch(entries, this.layerwise, this.layerwiseStats, this.log);
  }

  createSender(bootstrap: BootstrapInfo): KVSender {
    if (!(this.rank instanceof PrefillRank)) throw new TransferError('INVALID_ARGUMENT', 'createSender is for prefill KV managers; this one is a decode');
    checkBootstrap(bootstrap);
    return this.rank.createSender(bootstrap);
  }

  createReceiver(bootstrap: BootstrapInfo): KVReceiver {
    if (!(this.rank instanceof DecodeRank)) throw new TransferError('INVALID_ARGUMENT', 'createReceiver is for decode KV managers; this one is a prefill');
    checkBootstrap(bootstrap);
    return this.rank.createReceiver(bootstrap);
  }

  async close(): Promise<void> {
    await this.rank.close();
    await this.bootstrapServer?.close();
    for (const addr of this.registered) await this.engine.unregisterMemory(addr).catch(() => undefined);
  }
}

function checkBootstrap(b: BootstrapInfo): void {
  if (!b || typeof b.host !== 'string' || b.host === '') throw new TransferError('INVALID_ARGUMENT', 'Expected bootstrap.host to be a host name');
  if (!Number.isInteger(b.port) || b.port < 1 || b.port > 65535)
    throw new TransferError('INVALID_ARGUMENT', `Expected bootstrap.port to be a port number, got ${String(b.port)}`);
  const blocked = fetchBlockedPort(b.port);
  if (blocked) throw new TransferError('INVALID_ARGUMENT', `bootstrap ${b.host}:${b.port}: ${blocked}`);
  if (typeof b.room !== 'bigint' || b.room < 0n || b.room >= 1n << 63n)
    throw new TransferError('INVALID_ARGUMENT', `Expected bootstrap.room to be a u63 bigint, got ${String(b.room)}`);
}

/**
 * Builds a rank's KV manager on any transport plugin: registers its buffers with the
 * (shared) engine, serves the PD protocol on the engine's control endpoint, and — on a
 * prefill — registers with the instance's bootstrap server (starting it on rank 0).
 */
export async function createKVManager(options: CreateKVManagerOptions): Promise<DisaggKVManager> {
  expectObject(options, "createKVManager's options");
  if (options.role !== 'prefill' && options.role !== 'decode')
    throw new TransferError('INVALID_ARGUMENT', `Expected role 'prefill' or 'decode', got ${String(options.role)}`);
  const layerwise = layerwiseEnabled(options.layerwise);
  checksumMode(options.checksums); // a TE_KV_CHECKSUMS it cannot read is refused before anything is registered
  const debug = /^(debug|trace)$/i.test(process.env.MC_LOG_LEVEL ?? '');
  const log = options.log ?? ((m: string) => void (debug && process.stderr.write(`te:disagg ${m}\n`)));
  expectObject(options.layout, "`layout` (the rank's ParallelLayout)");
  checkLayout(options.layout);
  expectObject(options.buffers, "`buffers` (the rank's KVBuffers)");
  checkBuffers(options.buffers, options.layout);
  const timeouts = resolveTimeouts(options.timeouts);
  const staging = resolveStaging(options.staging);
  const engine = await engineFor(options);
  const store = bootstrapStoreOf(options.bootstrapStore);
  const directoryOf = directoryFactory(store, engine);
  const registered = await registerBuffers(engine, options.buffers);
  // Whatever fails from here on (a refused layout in a rank's constructor, the bootstrap
  // server's port, a registration timeout) leaves nothing behind: no registered memory,
  // no handlers on the engine, no listening bootstrap port.
  let rank: PrefillRank | DecodeRank | undefined;
  let server: BootstrapServer | undefined;
  try {
    if (options.role === 'decode') {
      rank = new DecodeRank(engine, options.layout, options.buffers, timeouts, directoryOf, staging, log);
      return new Manager('decode', options.layout, engine, timeouts, rank, registered, undefined, false, log);
    }
    const l = options.layout;
    const host = options.bootstrapHost ?? '127.0.0.1';
    const port = options.bootstrapPort ?? 8998;
    const blocked = store === 'http' ? fetchBlockedPort(port) : undefined;
    if (blocked) throw new TransferError('INVALID_CONFIG', `bootstrapPort ${port}: ${blocked}`);
    const first = l.attnTpRank === 0 && l.attnDpRank === 0 && l.ppRank === 0 && l.systemDpRank === 0;
    if (store === 'http' && (options.serveBootstrap ?? first)) server = await BootstrapServer.start({ host: options.bootstrapHost ?? '0.0.0.0', port });
    const prefill = new PrefillRank(engine, l, options.buffers, timeouts, directoryOf, {
      staging,
      log,
      ...(options.checksums !== undefined ? { checksums: options.checksums } : {}),
    });
    rank = prefill;
    await prefill.registerWith(`${host}:${server?.port ?? port}`);
    return new Manager('prefill', l, engine, timeouts, prefill, registered, server, layerwise, log);
  } catch (e) {
    await rank?.close().catch(() => undefined);
    await server?.close();
    for (const addr of registered) await engine.unregisterMemory(addr).catch(() => undefined);
    throw e;
  }
}
