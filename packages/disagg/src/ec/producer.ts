import {
  TransferError,
  allocateBatch,
  codeForStatus,
  isTransferError,
  untilSettled,
  OP_WRITE,
  type ECItemParams,
  type ECProducer,
  type ECTransferParams,
  type TransferEngine,
} from '@te/connector';
import { handleMessage } from '../protocol/handle.js';
import { engineFor } from '../shared/engine.js';
import { waitAtMost } from '../shared/wait-at-most.js';
import { EC_PROTOCOL_VERSION, EC_PULL, PullSchema, type PullMessage, type PullReply } from './messages.js';
import { TransferPool } from './transfer-pool.js';
import type { PoolItem } from './pool-allocator.js';
import { checksumsEnabled } from '../pd/kv-checksum.js';
import { crc32cOfViews } from './item-checksums.js';
import { expectObject } from '../shared/expect-object.js';

/** How long close waits past the last pull's deadline for a transport that holds a batch longer. */
const CLOSE_GRACE_MS = 10_000;

export interface ECProducerOptions {
  /** Transport plugin name (or a third party's with `modulePath`), read through loadConfig. */
  connector?: string;
  modulePath?: string;
  config?: Record<string, unknown>;
  engine?: TransferEngine;
  /** Bytes of the transfer pool (default 256 MiB). */
  poolBytes?: number;
  poolDevice?: 'cpu' | `cuda:${number}`;
  /**
   * The control port consumers reach: this, else `bootstrapPort` (the contract's name), else
   * VLLM_EC_MOONCAKE_BOOTSTRAP_PORT (plus this rank's offset, as vLLM binds), else the
   * engine's own (TE_HANDSHAKE_PORT / `metadata.port`).
   */
  port?: number;
  bootstrapPort?: number;
  /** Pulls served at once (default 256); one more is refused with POOL_EXHAUSTED (the consumer encodes locally). */
  maxPulls?: number;
  /** vLLM's rank offset on VLLM_EC_MOONCAKE_BOOTSTRAP_PORT: `+ dpRank · tpSize + tpRank`. */
  rank?: { dpRank?: number; tpRank?: number; tpSize?: number };
  /** A CRC32C of each item written, which the consumer checks (DATA_CORRUPTED). Default: TE_KV_CHECKSUMS=1. */
  checksums?: boolean;
}

/** VLLM_EC_MOONCAKE_BOOTSTRAP_PORT, offset by the rank as vLLM's workers bind it. */
function portFromEnv(rank: ECProducerOptions['rank'] = {}): number | undefined {
  const raw = process.env.VLLM_EC_MOONCAKE_BOOTSTRAP_PORT;
  if (raw === undefined || raw === '') return undefined;
  const { dpRank = 0, tpRank = 0, tpSize = 1 } = rank;
  for (const [name, v] of [
    ['dpRank', dpRank],
    ['tpRank', tpRank],
    ['tpSize', tpSize],
  ] as const) {
    if (!Number.isInteger(v) || v < (name === 'tpSize' ? 1 : 0))
      throw new TransferError('INVALID_ARGUMENT', `Expected rank.${name} to be an integer ≥ ${name === 'tpSize' ? 1 : 0}, got ${v}`);
  }
  const base = Number(raw);
  const port = base + dpRank * tpSize + tpRank;
  if (!/^\d+$/.test(raw) || base < 1 || port > 65535)
    throw new TransferError(
      'INVALID_CONFIG',
      `Expected VLLM_EC_MOONCAKE_BOOTSTRAP_PORT to be a port number (with this rank's offset ${port - base} at most 65535), got "${raw}"`,
    );
  return port;
}

function portOf(segment: string): number {
  return Number(segment.slice(segment.lastIndexOf(':') + 1));
}

/**
 * The encoder side of EPD: saves each item's embedding into a registered transfer pool,
 * keyed by its content hash, and writes items into consumers' memory when they ask. An
 * item is pinned while a transfer reads it, so eviction never frees it mid-transfer;
 * several consumers may pull the same item.
 */
export class ECPoolProducer implements ECProducer {
  private readonly unhandle: () => void;
  /** Pulls being served: close waits for them, so the pool is freed only once no transfer reads it. */
  private readonly serving = new Set<Promise<PullReply>>();
  pulls = 0;
  /** When the latest pull's transfer deadline passes. */
  private lastDeadline = 0;

  private constructor(
    readonly engine: TransferEngine,
    readonly pool: TransferPool,
    readonly maxPulls: number,
    readonly checksums = false,
  ) {
    this.unhandle = handleMessage(engine, EC_PULL, PullSchema, (m) => {
      // Bounded: every pull pins items and holds a batch; past the cap the consumer is told at once.
      if (this.serving.size >= this.maxPulls)
        throw new TransferError('POOL_EXHAUSTED', `the EC producer is serving ${this.serving.size} pulls (its limit); encode locally or retry`);
      this.lastDeadline = Math.max(this.lastDeadline, Date.now() + m.timeoutMs);
      const served = this.onPull(m);
      this.serving.add(served);
      void served.finally(() => this.serving.delete(served)).catch(() => undefined);
      return served;
    });
  }

  static async create(options: ECProducerOptions = {}): Promise<ECPoolProducer> {
    expectObject(options, "createECProducer's options");
    const checksums = checksumsEnabled(options.checksums); // TE_KV_CHECKSUMS refused, if it must be, before anything is allocated
    const port = options.port ?? options.bootstrapPort ?? portFromEnv(options.rank);
    const engine = await engineFor(options, port !== undefined && !options.engine ? { metadata: { port } } : {});
    // A given (or already shared) engine listens where it listens: a different port asked
    // for would be silently ignored, and consumers sent to it would find nobody.
    if (port !== undefined && port !== 0 && portOf(engine.segmentName) !== port) {
      throw new TransferError(
        'ENGINE_CONFIG_MISMATCH',
        `the EC producer should listen on port ${port} (${(options.port ?? options.bootstrapPort) ? 'option' : 'VLLM_EC_MOONCAKE_BOOTSTRAP_PORT'}), but its engine's control endpoint is ${engine.segmentName}; start the engine with metadata.port ${port} (TE_HANDSHAKE_PORT) or drop the port`,
      );
    }
    const maxPulls = options.maxPulls ?? 256;
    if (!Number.isInteger(maxPulls) || maxPulls < 1) throw new TransferError('INVALID_ARGUMENT', `Expected maxPulls to be an integer ≥ 1, got ${maxPulls}`);
    const pool = await TransferPool.create(engine, options.poolBytes ?? 256 << 20, options.poolDevice ?? 'cpu');
    return new ECPoolProducer(engine, pool, maxPulls, checksums);
  }

  /** The written items' answers, with their CRC32C when checksums are on (still pinned: their bytes are as written). */
  private async written(items: PoolItem[]): Promise<PullReply['results']> {
    const view = this.checksums ? this.pool.memory.buffer : undefined;
    if (!view) return items.map(() => ({ ok: true }));
    const crcs = await crc32cOfViews(items.map((item) => view.subarray(item.offset, item.offset + item.length)));
    return items.map((_, i) => ({ ok: true, crc32c: crcs[i]! }));
  }

  /** Where consumers reach this producer: its engine's control endpoint. */
  get endpoint(): { host: string; port: number } {
    const name = this.engine.segmentName;
    return { host: name.slice(0, name.lastIndexOf(':')).replace(/^\[|\]$/g, ''), port: portOf(name) };
  }

  async save(mmHash: string, embedding: ArrayBufferView, meta: { dtype?: string; shape?: number[] } = {}): Promise<ECItemParams> {
    if (typeof mmHash !== 'string' || mmHash === '' || mmHash.length > 256)
      throw new TransferError('INVALID_ARGUMENT', 'Expected mmHash to be a non-empty string of at most 256 characters');
    if (!ArrayBuffer.isView(embedding)) throw new TransferError('INVALID_ARGUMENT', 'Expected the embedding to be a typed array or DataView');
    this.pool.store(mmHash, embedding, meta);
    return this.paramsOf(mmHash)!;
  }

  has(mmHash: string): boolean {
    return this.pool.has(mmHash);
  }

  private paramsOf(mmHash: string): ECItemParams | undefined {
    const item = this.pool.pin(mmHash);
    if (!item) return undefined;
    this.pool.unpin(item);
    const { host, port } = this.endpoint;
    const p: ECItemParams = { do_remote_encode: true, remote_host: host, remote_port: port, length: String(item.length) };
    const meta = this.pool.metaOf(mmHash);
    if (meta?.dtype) p.dtype = meta.dtype;
    if (meta?.shape) p.shape = meta.shape;
    return p;
  }

  /** Params of saved items; handing them out counts as a use (a consumer is about to pull them). */
  transferParams(mmHashes: readonly string[]): ECTransferParams {
    // A string is iterable too: "abc" would be looked up as the hashes "a", "b" and "c".
    if (!Array.isArray(mmHashes))
      throw new TransferError(
        'INVALID_ARGUMENT',
        `Expected transferParams' mmHashes to be an array of strings, got ${mmHashes === null ? 'null' : typeof mmHashes}`,
      );
    const out: ECTransferParams = {};
    for (const h of mmHashes) {
      const p = this.paramsOf(h);
      if (!p) continue;
      this.pool.touch(h);
      out[h] = p;
    }
    return out;
  }

  /** Writes the asked items into the consumer's memory; answers per item once the batch settled. */
  private async onPull(m: PullMessage): Promise<PullReply> {
    if (m.addrs.length !== m.hashes.length || m.lengths.length !== m.hashes.length)
      throw new TransferError('INVALID_ARGUMENT', `${m.hashes.length} hashes but ${m.addrs.length} addresses and ${m.lengths.length} lengths`);
    this.pulls++;
    const results: PullReply['results'] = m.hashes.map(() => ({ ok: false }));
    const pinned = m.hashes.map((h, i) => {
      const item = this.pool.pin(h);
      if (!item) results[i] = { ok: false, code: 'PEER_NOT_FOUND', message: `item ${h} is not in the producer's pool (never saved, or evicted)` };
      else if (BigInt(item.length) !== m.lengths[i]) {
        this.pool.unpin(item);
        results[i] = { ok: false, code: 'INVALID_ARGUMENT', message: `item ${h} has ${item.length} bytes, the consumer expects ${m.lengths[i]}` };
        return undefined;
      }
      return item;
    });
    const present = pinned.map((item, i) => (item ? i : -1)).filter((i) => i >= 0);
    try {
      if (present.length === 0) return { results };
      const batch = allocateBatch(present.length);
      present.forEach((i, j) => {
        batch.opcodes[j] = OP_WRITE;
        batch.localAddrs[j] = this.pool.addressOf(pinned[i]!);
        batch.remoteAddrs[j] = m.addrs[i]!;
        batch.lengths[j] = m.lengths[i]!;
      });
      try {
        await this.engine.transfer(m.consumerSegment, batch, { timeoutMs: m.timeoutMs });
        const answers = await this.written(present.map((i) => pinned[i]!));
        present.forEach((i, j) => (results[i] = answers[j]!));
      } catch (e) {
        // A batch the engine gave up on at its deadline may still be read by its transport
        // (and written into the consumer): the items stay pinned, and the answer waits.
        const { remoteMayBeWritten } = await untilSettled(e);
        const error = isTransferError(e) ? e : new TransferError('INTERNAL', (e as Error).message);
        const landed = present.filter((_, j) => error.statuses?.[j] === 0);
        const answers = await this.written(landed.map((i) => pinned[i]!));
        landed.forEach((i, j) => (results[i] = answers[j]!));
        present.forEach((i, j) => {
          const st = error.statuses?.[j];
          if (st !== 0) {
            results[i] = { ok: false, code: st !== undefined ? codeForStatus(st) : error.code, message: error.message.slice(0, 2000) };
            if (remoteMayBeWritten) results[i]!.destinationMayBeWritten = true;
          }
        });
      }
      return { results };
    } finally {
      // The batch settled: no transport reads these items any more.
      for (const item of pinned) if (item) this.pool.unpin(item);
    }
  }

  /**
   * Stops serving pulls, waits for those in flight, then frees the pool. Each pull ends by
   * its transfer deadline, or when its transport lets go of a batch it held past it; the
   * wait stops `CLOSE_GRACE_MS` after the last deadline, and memory a transport still holds
   * is not freed (the engine keeps it in use until the transport lets go).
   */
  async close(): Promise<void> {
    this.unhandle();
    await waitAtMost(Promise.allSettled([...this.serving]), Math.max(0, this.lastDeadline - Date.now()) + CLOSE_GRACE_MS);
    await this.pool.close();
  }
}

export function createECProducer(options: ECProducerOptions = {}): Promise<ECPoolProducer> {
  return ECPoolProducer.create(options);
}

export { EC_PROTOCOL_VERSION };
