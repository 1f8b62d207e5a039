import { TransferError } from '../errors/transfer-error.js';
import { encodeMessage } from '../engine/codec.js';
import type { Log } from '../engine/logger.js';
import type { MetadataStore } from '../engine/metadata.js';
import type { SegmentDescriptor } from '../spi/descriptor.js';
import { etcdCall, openEtcdClient, type EtcdClient, type EtcdLease } from './etcd-client.js';
import { PeerDescriptorCache, epochOf } from './etcd-peer-cache.js';
import type { MetadataRecords } from './records.js';
import { checkMilliseconds } from '../timing/milliseconds.js';

export interface EtcdStoreOptions {
  endpoints: string[];
  /** Key prefix (cluster id). */
  prefix: string;
  leaseTtlS: number;
  /** This process's segment name. */
  self: string;
  /** Deadline of connecting at start, and of each write (ms). */
  connectMs: number;
  log: Log;
  /** A peer's descriptor changed (new epoch) or disappeared: what is cached of it must go. */
  onPeerChanged: (segment: string) => void;
}

const RETRY_MS = 500;

/** Where the segment descriptors of cluster `prefix` live: `<prefix>/segments/<segment name>`. */
export function segmentKeyPrefix(prefix: string): string {
  return `${prefix}/segments/`;
}
/** Records one process may keep (each is written again after a lost lease). */
const MAX_RECORDS = 1024;
/** etcd refuses requests over 1.5 MiB by default; a record is far smaller than that. */
const MAX_RECORD_BYTES = 512 * 1024;

/**
 * Segment descriptors in etcd. Each process writes its own under
 * `<prefix>/segments/<segment name>` with a lease it keeps alive, so the key disappears
 * within the lease TTL after the process dies; peers' descriptors are read and cached by
 * PeerDescriptorCache. A lost lease (etcd restarted without its data, or unreachable past
 * the TTL) is replaced and everything this process wrote is written again, without the
 * process restarting.
 */
export class EtcdMetadata implements MetadataStore, MetadataRecords {
  /** This process's records (written again with the descriptor after a lost lease). */
  private readonly records = new Map<string, Buffer>();
  private current: SegmentDescriptor | undefined;
  private lease: EtcdLease | undefined;
  private dirty = false;
  private closed = false;
  private retry: ReturnType<typeof setTimeout> | undefined;
  /** A write failed and was reported; the next ones are quiet until one succeeds. */
  private warned = false;
  /** When our key was last reported holding another epoch (reported once a minute at most). */
  private contestedAt = -Infinity;
  private readonly peers: PeerDescriptorCache;

  private constructor(
    private readonly client: EtcdClient,
    private readonly options: EtcdStoreOptions,
  ) {
    this.peers = new PeerDescriptorCache(client, {
      endpoints: options.endpoints,
      keyPrefix: segmentKeyPrefix(options.prefix),
      self: options.self,
      callMs: options.connectMs,
      log: options.log,
      onPeerChanged: options.onPeerChanged,
      onOwnKey: (value) => this.onOwnKey(value),
    });
  }

  /** Connects (lease granted, segment keys watched) or fails with PEER_UNREACHABLE naming etcd. */
  static async connect(options: EtcdStoreOptions): Promise<EtcdMetadata> {
    const client = await openEtcdClient(options.endpoints, options.connectMs);
    const store = new EtcdMetadata(client, options);
    try {
      await store.call(store.newLease(), 'granting a lease');
      await store.peers.start(options.connectMs);
    } catch (error) {
      await store.close();
      throw error;
    }
    return store;
  }

  private get where(): string {
    return `etcd at ${this.options.endpoints.join(',')}`;
  }

  private call<T>(p: Promise<T>, what: string): Promise<T> {
    return etcdCall(this.options.endpoints, p, this.options.connectMs, what);
  }

  private async newLease(): Promise<void> {
    const lease = this.client.lease(this.options.leaseTtlS, { autoKeepAlive: true });
    lease.on('lost', (e) => {
      if (this.closed || this.lease !== lease) return;
      this.options.log('warn', `etcd lease lost (${(e as Error)?.message ?? e}); writing this process's descriptor again under a new lease`);
      this.lease = undefined;
      this.dirty = true;
      this.scheduleRepublish(0);
      // Whatever made the lease go (an outage past the TTL, etcd restarted empty) may have
      // hidden changes of peers from the watch too.
      this.peers.rewatch('the lease was lost');
    });
    try {
      await lease.grant();
    } catch (error) {
      lease.release();
      throw error;
    }
    this.lease = lease;
  }

  /** Our own key changed under us: gone (TTL passed during an outage) or written by another epoch. */
  private onOwnKey(value: Buffer | undefined): void {
    if (this.closed || !this.current) return;
    if (value !== undefined) {
      const epoch = epochOf(value, this.current.name);
      if (epoch === this.current.epoch) return;
      // Not ours: a stale write, or another process announcing the same segment name (two
      // hosts binding the same address). Ours is written again, no faster than RETRY_MS.
      const quiet = Date.now() - this.contestedAt < 60_000;
      if (!quiet) this.contestedAt = Date.now();
      this.options.log(
        quiet ? 'debug' : 'warn',
        `etcd: the key of segment ${this.current.name} holds epoch ${epoch ?? '(not a te descriptor)'}, not this process's ${this.current.epoch}; writing this process's descriptor again (two processes announcing the same address keep doing this)`,
      );
      this.dirty = true;
      this.scheduleRepublish(RETRY_MS);
      return;
    }
    this.dirty = true;
    this.scheduleRepublish(0);
  }

  private scheduleRepublish(delayMs: number): void {
    if (this.closed || this.retry) return;
    this.retry = setTimeout(() => {
      this.retry = undefined;
      void this.republish();
    }, delayMs);
    this.retry.unref?.();
  }

  /** Writes the current descriptor and records (under a fresh lease when needed); retried until etcd takes them. */
  private async republish(): Promise<void> {
    if (this.closed || !this.dirty) return;
    try {
      if (!this.lease) await this.call(this.newLease(), 'granting a lease');
      if (this.current) await this.call(this.lease!.put(this.keyOf(this.current.name)).value(encodeMessage(this.current)), 'writing the descriptor');
      for (const [key, value] of this.records) await this.call(this.lease!.put(this.recordKey(key)).value(value), `writing record ${key}`);
      this.dirty = false;
      if (this.warned) this.options.log('info', `etcd: this process's descriptor is written again (${this.where})`);
      this.warned = false;
    } catch (error) {
      this.options.log('debug', `etcd: descriptor not written yet (${(error as Error).message}); retrying`);
      this.scheduleRepublish(RETRY_MS);
    }
  }

  private keyOf(segment: string): string {
    return segmentKeyPrefix(this.options.prefix) + segment;
  }

  async publish(descriptor: SegmentDescriptor): Promise<void> {
    this.current = descriptor;
    this.dirty = true;
    try {
      if (!this.lease) throw new Error('no lease');
      await this.call(this.lease.put(this.keyOf(descriptor.name)).value(encodeMessage(descriptor)), 'writing the descriptor');
      // A later publish may have started meanwhile: only the newest clears the flag.
      if (this.current === descriptor) this.dirty = false;
    } catch (error) {
      // Registration does not fail because etcd is away: the descriptor is written when it
      // returns (peers that read the old one meanwhile refresh it on a refused request).
      this.options.log(
        this.warned ? 'debug' : 'warn',
        `etcd: this process's descriptor could not be written now (${(error as Error).message}); retrying in the background`,
      );
      this.warned = true;
      this.scheduleRepublish(RETRY_MS);
    }
  }

  fetch(segment: string, timeoutMs: number): Promise<SegmentDescriptor> {
    return this.peers.get(segment, timeoutMs);
  }

  /** Drops a cached descriptor (the engine forgot the peer: read it afresh next time). */
  forget(segment: string): void {
    this.peers.forget(segment);
  }

  private recordKey(key: string): string {
    return `${this.options.prefix}/records/${key}`;
  }

  async put(key: string, value: Uint8Array): Promise<void> {
    checkRecordKey(key);
    if (!(value instanceof Uint8Array) || value.byteLength > MAX_RECORD_BYTES) {
      throw new TransferError(
        'INVALID_ARGUMENT',
        `Expected a record value of up to ${MAX_RECORD_BYTES} bytes (a Uint8Array), got ${value instanceof Uint8Array ? `${value.byteLength} bytes` : typeof value}`,
      );
    }
    if (!this.records.has(key) && this.records.size >= MAX_RECORDS) {
      throw new TransferError('POOL_EXHAUSTED', `This process already keeps ${MAX_RECORDS} records in ${this.where}; delete some first`);
    }
    const bytes = Buffer.from(value);
    this.records.set(key, bytes);
    if (!this.lease)
      throw new TransferError('PEER_UNREACHABLE', `${this.where} has no live lease for this process now; record ${key} is written when it returns`);
    await this.call(this.lease.put(this.recordKey(key)).value(bytes), `writing record ${key}`);
  }

  async list(prefix: string, timeoutMs: number): Promise<Map<string, Uint8Array>> {
    checkRecordKey(prefix, true);
    checkMilliseconds('the list timeout', timeoutMs, 1);
    const all = await etcdCall(
      this.options.endpoints,
      this.client.getAll().prefix(this.recordKey(prefix)).buffers(),
      timeoutMs,
      `listing records under ${prefix}`,
    );
    const strip = this.recordKey('').length;
    return new Map(Object.entries(all).map(([k, v]) => [k.slice(strip), new Uint8Array(v)]));
  }

  async delete(key: string): Promise<void> {
    checkRecordKey(key);
    this.records.delete(key);
    await this.call(this.client.delete().key(this.recordKey(key)), `deleting record ${key}`);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.retry) clearTimeout(this.retry);
    await this.peers.close();
    // Revoking the lease removes this process's keys at once: peers see it leave now, not
    // after the TTL.
    if (this.lease) await etcdCall(this.options.endpoints, this.lease.revoke(), 1000, 'revoking the lease').catch(() => this.lease?.release());
    this.client.close();
  }
}

function checkRecordKey(key: unknown, prefix = false): asserts key is string {
  if (typeof key !== 'string' || key.length > 512 || (!prefix && key === '') || !/^[A-Za-z0-9._:/-]*$/.test(key)) {
    throw new TransferError(
      'INVALID_ARGUMENT',
      `Expected a record key of up to 512 characters of letters, digits and . _ : / -, got ${JSON.stringify(key)?.slice(0, 80)}`,
    );
  }
}
