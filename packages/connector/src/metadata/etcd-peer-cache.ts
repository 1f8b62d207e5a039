import { TransferError, isTransferError } from '../errors/transfer-error.js';
import { decodeMessage } from '../engine/codec.js';
import { checkDescriptor } from '../engine/descriptor-check.js';
import type { Log } from '../engine/logger.js';
import type { SegmentDescriptor } from '../spi/descriptor.js';
import { etcdCall, type EtcdClient, type EtcdKv, type EtcdWatcher } from './etcd-client.js';

/** Peers' descriptors remembered (the least recently read forgotten first). */
const MAX_CACHED = 4096;
const RETRY_MS = 500;

export interface PeerCacheOptions {
  endpoints: string[];
  /** `<prefix>/segments/`: the keys watched. */
  keyPrefix: string;
  /** This process's segment (its own key is looked after by its owner, not cached). */
  self: string;
  /** Deadline of each etcd call made in the background (ms). */
  callMs: number;
  log: Log;
  /** A peer's descriptor changed epoch or disappeared: what is cached of it must go. */
  onPeerChanged: (segment: string) => void;
  /** A key of this process changed under it (`undefined`: deleted). */
  onOwnKey: (value: Buffer | undefined) => void;
}

/**
 * Peers' descriptors read from etcd, kept current by a watch on the segment keys. The
 * watch is made again from etcd's present state whenever it can no longer be trusted:
 * etcd cancelled it (its revision was compacted away), or etcd came back with an older
 * revision than already seen (restarted without its data, where a resumed watch would wait
 * for a revision that is far in the future and report nothing meanwhile). Each remake
 * compares what is cached with what etcd holds, so a change missed meanwhile is not kept.
 */
export class PeerDescriptorCache {
  private readonly cache = new Map<string, SegmentDescriptor>();
  private watcher: EtcdWatcher | undefined;
  /** The highest etcd revision seen: a lower one later means etcd lost its data. */
  private seen = 0n;
  private retry: ReturnType<typeof setTimeout> | undefined;
  private rewatching: Promise<void> | undefined;
  private closed = false;

  constructor(
    private readonly client: EtcdClient,
    private readonly options: PeerCacheOptions,
  ) {}

  /** Starts the watch (within `ms`), or fails with PEER_UNREACHABLE. */
  async start(ms: number): Promise<void> {
    await this.watchFromNow(ms);
  }

  private segmentOf(key: Buffer): string {
    return key.toString('utf8').slice(this.options.keyPrefix.length);
  }

  private see(revision: string | undefined): bigint {
    const r = BigInt(revision ?? 0);
    if (r > this.seen) this.seen = r;
    return r;
  }

  /** Reads the segment keys now, drops what changed, and watches from just after that read. */
  private async watchFromNow(ms: number): Promise<void> {
    const { endpoints, keyPrefix } = this.options;
    await this.cancelWatch(ms);
    const now = await etcdCall(endpoints, this.client.getAll().prefix(keyPrefix).exec(), ms, 'reading the segment keys');
    const revision = BigInt(now.header.revision);
    // etcd restarted empty: its revisions start again; compare with them from here on.
    this.seen = revision;
    const present = new Map(now.kvs.map((kv) => [this.segmentOf(kv.key), kv] as const));
    for (const segment of [...this.cache.keys()]) {
      const kv = present.get(segment);
      // A key not (yet) written again is left alone: its owner may still be re-writing it
      // after an empty restart, and transfers to it go on meanwhile; if the owner is dead
      // the transports say so.
      if (kv && epochOf(kv.value, segment) !== this.cache.get(segment)!.epoch) this.drop(segment);
    }
    const own = present.get(this.options.self);
    this.options.onOwnKey(own?.value);
    const watcher = await etcdCall(
      endpoints,
      this.client
        .watch()
        .prefix(keyPrefix)
        .startRevision(String(revision + 1n))
        .create(),
      ms,
      'watching the segment keys',
    );
    if (this.closed) {
      await etcdCall(endpoints, watcher.cancel(), ms, 'cancelling the watch').catch(() => undefined);
      return;
    }
    this.watcher = watcher;
    watcher
      .on('put', (kv) => this.onPut(kv))
      .on('delete', (kv) => this.onDelete(kv))
      .on('data', (res) => this.see(res.header?.revision))
      .on('connected', (res) => {
        // Resumed after an outage: a lower revision than seen is an etcd without its data.
        const seen = this.seen;
        if (this.see(res.header?.revision) < seen) this.rewatch('etcd came back with an older revision (restarted without its data)');
      })
      .on('error', (e) => this.rewatch(`the watch was cancelled (${(e as Error)?.message ?? e})`));
  }

  /** Cancels the watch; one that etcd does not confirm in time is given up all the same. */
  private async cancelWatch(ms: number): Promise<void> {
    const old = this.watcher;
    this.watcher = undefined;
    if (old) await etcdCall(this.options.endpoints, old.cancel(), ms, 'cancelling the watch').catch(() => undefined);
  }

  /** Makes the watch again in the background, retried until etcd answers. */
  rewatch(why: string): void {
    if (this.closed || this.rewatching) return;
    this.options.log('info', `etcd: watching the segment keys again: ${why}`);
    this.rewatching = this.watchFromNow(this.options.callMs)
      .catch((error: unknown) => {
        this.options.log('debug', `etcd: watch not made again yet (${(error as Error).message}); retrying`);
        if (this.closed) return;
        this.retry = setTimeout(() => {
          this.retry = undefined;
          this.rewatch(why);
        }, RETRY_MS);
        this.retry.unref?.();
      })
      .finally(() => (this.rewatching = undefined));
  }

  private onPut(kv: EtcdKv): void {
    const segment = this.segmentOf(kv.key);
    if (segment === this.options.self) return this.options.onOwnKey(kv.value);
    const cached = this.cache.get(segment);
    if (!cached) return;
    // A new epoch is a restarted process: nothing cached of the old one may be used. The
    // same epoch with other buffers is a registration change: read again on next use.
    this.cache.delete(segment);
    if (epochOf(kv.value, segment) !== cached.epoch) this.options.onPeerChanged(segment);
  }

  private onDelete(kv: EtcdKv): void {
    const segment = this.segmentOf(kv.key);
    if (segment === this.options.self) return this.options.onOwnKey(undefined);
    this.drop(segment);
  }

  private drop(segment: string): void {
    if (this.cache.delete(segment)) this.options.onPeerChanged(segment);
  }

  /** A peer's descriptor: cached, else read from etcd within `timeoutMs`. */
  async get(segment: string, timeoutMs: number): Promise<SegmentDescriptor> {
    const cached = this.cache.get(segment);
    if (cached) {
      this.cache.delete(segment);
      this.cache.set(segment, cached);
      return cached;
    }
    const { endpoints, keyPrefix } = this.options;
    const where = `etcd at ${endpoints.join(',')}`;
    const bytes = await etcdCall(endpoints, this.client.get(`${keyPrefix}${segment}`).buffer(), timeoutMs, `looking up segment ${segment}`);
    if (bytes === null) {
      throw new TransferError(
        'PEER_NOT_FOUND',
        `Segment ${segment} is not registered in ${where} under "${keyPrefix}" (the process is not running, or its lease expired)`,
        { details: { segment } },
      );
    }
    let descriptor: SegmentDescriptor;
    let decoded: unknown;
    try {
      decoded = decodeMessage(bytes);
    } catch (cause) {
      throw new TransferError('BAD_FRAME', `Segment descriptor of ${segment} in ${where} is not a te descriptor`, { cause });
    }
    try {
      descriptor = checkDescriptor(decoded, segment);
    } catch (cause) {
      if (isTransferError(cause)) throw cause;
      throw new TransferError('BAD_FRAME', `Segment descriptor of ${segment} in ${where} is not a te descriptor`, { cause });
    }
    if (descriptor.name !== segment) {
      throw new TransferError('BAD_FRAME', `The key of segment ${segment} in ${where} holds the descriptor of ${descriptor.name}`, { details: { segment } });
    }
    this.cache.set(segment, descriptor);
    if (this.cache.size > MAX_CACHED) this.cache.delete(this.cache.keys().next().value!);
    return descriptor;
  }

  forget(segment: string): void {
    this.cache.delete(segment);
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.retry) clearTimeout(this.retry);
    await this.rewatching;
    await this.cancelWatch(1000);
  }
}

/** The epoch a stored descriptor carries (undefined when it is not a te descriptor). */
export function epochOf(value: Buffer, segment: string): bigint | undefined {
  try {
    return checkDescriptor(decodeMessage(value), segment).epoch;
  } catch {
    return undefined;
  }
}
