import { TransferError, isTransferError } from '../errors/transfer-error.js';
import { decodeMessage, encodeMessage } from '../engine/codec.js';
import { checkDescriptor } from '../engine/descriptor-check.js';
import type { Log } from '../engine/logger.js';
import type { MetadataStore } from '../engine/metadata.js';
import type { SegmentDescriptor } from '../spi/descriptor.js';
import type { MetadataRecords } from './records.js';

// The part of etcd3's API used here (an optional peer dependency, loaded on demand).
interface EtcdKv {
  key: Buffer;
  value: Buffer;
}
interface EtcdWatcher {
  on(event: 'put' | 'delete', fn: (kv: EtcdKv) => void): EtcdWatcher;
  on(event: 'error' | 'disconnected' | 'connected', fn: (e?: unknown) => void): EtcdWatcher;
  cancel(): Promise<void>;
}
interface EtcdLease {
  grant(): Promise<string>;
  revoke(): Promise<void>;
  release(): void;
  put(key: string): { value(v: Buffer): Promise<unknown> };
  on(event: 'lost', fn: (e: unknown) => void): EtcdLease;
}
interface EtcdClient {
  lease(ttl: number, options?: { autoKeepAlive?: boolean }): EtcdLease;
  get(key: string): { buffer(): Promise<Buffer | null> };
  getAll(): { prefix(p: string): { buffers(): Promise<Record<string, Buffer>> } };
  delete(): { key(k: string): Promise<unknown> };
  watch(): { prefix(p: string): { create(): Promise<EtcdWatcher> } };
  close(): void;
}
type EtcdModule = { Etcd3: new (options: Record<string, unknown>) => EtcdClient };

export interface EtcdStoreOptions {
  endpoints: string[];
  /** Key prefix (cluster id). */
  prefix: string;
  leaseTtlS: number;
  /** This process's segment name (its own key is not watched into the cache). */
  self: string;
  /** Deadline of connecting at start (ms). */
  connectMs: number;
  log: Log;
  /** A peer's descriptor changed (new epoch) or disappeared: what is cached of it must go. */
  onPeerChanged: (segment: string) => void;
}

const RETRY_MS = 500;

/**
 * Segment descriptors in etcd. Each process writes its own under
 * `<prefix>/segments/<segment name>` with a lease it keeps alive, so the key disappears
 * within the lease TTL after the process dies; readers cache descriptors and a watch on the
 * prefix drops a cached one when its key changes epoch or is deleted. A lost lease (etcd
 * restarted without its data, or unreachable past the TTL) is replaced and the descriptor
 * written again without the process restarting.
 */
export class EtcdMetadata implements MetadataStore, MetadataRecords {
  private readonly cache = new Map<string, SegmentDescriptor>();
  /** This process's records (written again with the descriptor after a lost lease). */
  private readonly records = new Map<string, Buffer>();
  private current: SegmentDescriptor | undefined;
  private lease: EtcdLease | undefined;
  private watcher: EtcdWatcher | undefined;
  private dirty = false;
  private closed = false;
  private retry: ReturnType<typeof setTimeout> | undefined;
  /** A write failed and was reported; the next ones are quiet until one succeeds. */
  private warned = false;

  private constructor(
    private readonly client: EtcdClient,
    private readonly options: EtcdStoreOptions,
  ) {}

  /** Connects (lease granted, prefix watched) or fails with PEER_UNREACHABLE naming etcd. */
  static async connect(options: EtcdStoreOptions): Promise<EtcdMetadata> {
    let mod: EtcdModule;
    try {
      mod = (await import('etcd3')) as unknown as EtcdModule;
    } catch (cause) {
      throw new TransferError('INVALID_CONFIG', 'etcd metadata needs the etcd3 package: npm install etcd3', { cause });
    }
    const client = new mod.Etcd3({ hosts: options.endpoints.map((e) => `http://${e}`), dialTimeout: options.connectMs });
    const store = new EtcdMetadata(client, options);
    try {
      await store.withDeadline(store.newLease(), options.connectMs, 'granting a lease');
      store.watcher = await store.withDeadline(client.watch().prefix(store.segmentsPrefix).create(), options.connectMs, 'watching the segment keys');
    } catch (error) {
      client.close();
      throw error;
    }
    store.watcher.on('put', (kv) => store.onPut(kv)).on('delete', (kv) => store.onDelete(kv));
    store.watcher.on('error', () => undefined);
    return store;
  }

  private get segmentsPrefix(): string {
    return `${this.options.prefix}/segments/`;
  }

  private get where(): string {
    return `etcd at ${this.options.endpoints.join(',')}`;
  }

  private withDeadline<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
    let timer: ReturnType<typeof setTimeout>;
    const deadline = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new TransferError('PEER_UNREACHABLE', `${this.where} did not answer within ${ms} ms (${what})`, { details: { endpoints: this.options.endpoints } })), ms);
    });
    return Promise.race([p, deadline])
      .catch((cause: unknown) => {
        if (isTransferError(cause)) throw cause;
        throw new TransferError('PEER_UNREACHABLE', `${this.where} failed while ${what}: ${(cause as Error)?.message ?? cause}`, { cause, details: { endpoints: this.options.endpoints } });
      })
      .finally(() => clearTimeout(timer));
  }

  private async newLease(): Promise<void> {
    const lease = this.client.lease(this.options.leaseTtlS, { autoKeepAlive: true });
    lease.on('lost', (e) => {
      if (this.closed || this.lease !== lease) return;
      this.options.log('warn', `etcd lease lost (${(e as Error)?.message ?? e}); writing this process's descriptor again under a new lease`);
      this.lease = undefined;
      this.dirty = true;
      this.scheduleRepublish(0);
    });
    await lease.grant();
    this.lease = lease;
  }

  private scheduleRepublish(delayMs: number): void {
    if (this.closed || this.retry) return;
    this.retry = setTimeout(() => {
      this.retry = undefined;
      void this.republish();
    }, delayMs);
    this.retry.unref?.();
  }

  /** Writes the current descriptor (under a fresh lease when needed); retried until etcd takes it. */
  private async republish(): Promise<void> {
    if (this.closed || !this.dirty) return;
    try {
      if (!this.lease) await this.withDeadline(this.newLease(), this.options.connectMs, 'granting a lease');
      if (this.current) await this.withDeadline(this.lease!.put(this.keyOf(this.current.name)).value(encodeMessage(this.current)), this.options.connectMs, 'writing the descriptor');
      for (const [key, value] of this.records) await this.withDeadline(this.lease!.put(this.recordKey(key)).value(value), this.options.connectMs, `writing record ${key}`);
      this.dirty = false;
      if (this.warned) this.options.log('info', `etcd: this process's descriptor is written again (${this.where})`);
      this.warned = false;
    } catch (error) {
      this.options.log('debug', `etcd: descriptor not written yet (${(error as Error).message}); retrying`);
      this.scheduleRepublish(RETRY_MS);
    }
  }

  private keyOf(segment: string): string {
    return `${this.segmentsPrefix}${segment}`;
  }

  private segmentOf(key: Buffer): string {
    return key.toString('utf8').slice(this.segmentsPrefix.length);
  }

  private onPut(kv: EtcdKv): void {
    const segment = this.segmentOf(kv.key);
    if (segment === this.options.self) return;
    const cached = this.cache.get(segment);
    if (!cached) return;
    let epoch: bigint | undefined;
    try {
      epoch = checkDescriptor(decodeMessage(kv.value), segment).epoch;
    } catch {
      epoch = undefined;
    }
    // A new epoch is a restarted process: nothing cached of the old one may be used.
    // The same epoch with other buffers is a registration change: re-read on next use.
    this.cache.delete(segment);
    if (epoch !== cached.epoch) this.options.onPeerChanged(segment);
  }

  private onDelete(kv: EtcdKv): void {
    const segment = this.segmentOf(kv.key);
    if (segment === this.options.self) {
      // Our own key went (lease expired during an outage, or removed by hand): write it again.
      if (!this.closed && this.current) {
        this.dirty = true;
        this.scheduleRepublish(0);
      }
      return;
    }
    if (this.cache.delete(segment)) this.options.onPeerChanged(segment);
  }

  async publish(descriptor: SegmentDescriptor): Promise<void> {
    this.current = descriptor;
    this.dirty = true;
    try {
      if (!this.lease) throw new Error('no lease');
      await this.withDeadline(this.lease.put(this.keyOf(descriptor.name)).value(encodeMessage(descriptor)), this.options.connectMs, 'writing the descriptor');
      this.dirty = false;
    } catch (error) {
      // Registration does not fail because etcd is away: the descriptor is written when it
      // returns (peers that read the old one meanwhile refresh it on a refused request).
      this.options.log(this.warned ? 'debug' : 'warn', `etcd: this process's descriptor could not be written now (${(error as Error).message}); retrying in the background`);
      this.warned = true;
      this.scheduleRepublish(RETRY_MS);
    }
  }

  async fetch(segment: string, timeoutMs: number): Promise<SegmentDescriptor> {
    const cached = this.cache.get(segment);
    if (cached) return cached;
    const bytes = await this.withDeadline(this.client.get(this.keyOf(segment)).buffer(), timeoutMs, `looking up segment ${segment}`);
    if (bytes === null) {
      throw new TransferError('PEER_NOT_FOUND', `Segment ${segment} is not registered in ${this.where} under prefix "${this.options.prefix}" (the process is not running, or its lease expired)`, { details: { segment } });
    }
    let descriptor: SegmentDescriptor;
    try {
      descriptor = checkDescriptor(decodeMessage(bytes), segment);
    } catch (cause) {
      if (isTransferError(cause)) throw cause;
      throw new TransferError('BAD_FRAME', `Segment descriptor of ${segment} in ${this.where} is not a te descriptor`, { cause });
    }
    this.cache.set(segment, descriptor);
    return descriptor;
  }

  private recordKey(key: string): string {
    return `${this.options.prefix}/records/${key}`;
  }

  async put(key: string, value: Uint8Array): Promise<void> {
    checkRecordKey(key);
    const bytes = Buffer.from(value);
    this.records.set(key, bytes);
    if (!this.lease) throw new TransferError('PEER_UNREACHABLE', `${this.where} has no live lease for this process now; record ${key} is written when it returns`);
    await this.withDeadline(this.lease.put(this.recordKey(key)).value(bytes), this.options.connectMs, `writing record ${key}`);
  }

  async list(prefix: string, timeoutMs: number): Promise<Map<string, Uint8Array>> {
    checkRecordKey(prefix, true);
    const all = await this.withDeadline(this.client.getAll().prefix(this.recordKey(prefix)).buffers(), timeoutMs, `listing records under ${prefix}`);
    const strip = this.recordKey('').length;
    return new Map(Object.entries(all).map(([k, v]) => [k.slice(strip), new Uint8Array(v)]));
  }

  async delete(key: string): Promise<void> {
    checkRecordKey(key);
    this.records.delete(key);
    await this.withDeadline(this.client.delete().key(this.recordKey(key)), this.options.connectMs, `deleting record ${key}`);
  }

  /** Drops a cached descriptor (the engine forgot the peer: read it afresh next time). */
  forget(segment: string): void {
    this.cache.delete(segment);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.retry) clearTimeout(this.retry);
    await this.watcher?.cancel().catch(() => undefined);
    // Revoking the lease removes the key at once: peers see this process leave now, not
    // after the TTL.
    if (this.lease) await this.withDeadline(this.lease.revoke(), 1000, 'revoking the lease').catch(() => this.lease?.release());
    this.client.close();
  }
}

function checkRecordKey(key: unknown, prefix = false): asserts key is string {
  if (typeof key !== 'string' || key.length > 512 || (!prefix && key === '') || !/^[A-Za-z0-9._:/-]*$/.test(key)) {
    throw new TransferError('INVALID_ARGUMENT', `Expected a record key of up to 512 characters of letters, digits and . _ : / -, got ${JSON.stringify(key)?.slice(0, 80)}`);
  }
}
