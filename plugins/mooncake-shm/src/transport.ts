import { randomBytes } from 'node:crypto';
import {
  BatchTracker,
  TransferError,
  checkSubmit,
  type BatchResult,
  type Notification,
  type RegisterRequest,
  type SegmentDescriptor,
  type SubmitOptions,
  type TransferBatch,
  type Transport,
  type TransportContext,
  type TransportPeer,
  type TransportRegistration,
  type WireValue,
} from '@te/connector';
import { loadBinding, PLUGIN_NAME, type NativeShmTransport } from './binding.js';
import { parseEndpoint, type ShmEndpoint } from './endpoint.js';
import { localLocality, ptraceScope, unreachableBecause } from './locality.js';
import type { ShmOptions } from './options.js';

interface ShmPeer extends TransportPeer {
  readonly id: number;
  readonly owner: MooncakeShmTransport;
}

const opts = { plugin: PLUGIN_NAME };
const fail = (code: ConstructorParameters<typeof TransferError>[0], message: string): TransferError => new TransferError(code, message, opts);

export class MooncakeShmTransport implements Transport {
  readonly #native: NativeShmTransport;
  readonly #context: TransportContext;
  readonly #options: ShmOptions;
  readonly #endpoint: ShmEndpoint;
  readonly #batches: BatchTracker;
  readonly #opening = new Map<number, { resolve(): void; reject(e: TransferError): void }>();
  readonly #listeners = new Set<(n: Notification) => void>();
  #hugePages = 'nothing registered yet';
  #closed = false;

  constructor(context: TransportContext, options: ShmOptions) {
    const native = loadBinding();
    this.#context = context;
    this.#options = options;
    // Random, so a name cannot be predicted and squatted before this process binds it.
    const socket = options.enabled ? `te-shm/${process.pid}/${randomBytes(12).toString('hex')}` : '';
    this.#native = new native.ShmTransport(
      {
        segmentName: context.segmentName,
        epoch: context.epoch,
        socketName: socket,
        copyThreads: options.copyThreads,
        chunkBytes: options.chunkBytes,
        maxOutstanding: options.maxOutstanding,
        maxConnections: options.maxConnections,
        handshakeTimeoutMs: options.handshakeTimeoutMs,
        connectTimeoutMs: options.connectTimeoutMs ?? context.connectTimeoutMs,
        cancelGraceMs: options.cancelGraceMs,
        notifyQueuePerPeer: options.notifyQueuePerPeer,
        notifyQueueBytes: options.notifyQueueBytes,
      },
      {
        onBatch: (id, batchStatus, statuses, bytes, message) => this.#batches.complete(id, batchStatus, statuses, bytes, message),
        onOpen: (id, status, message) => this.#onOpen(id, status, message),
        onNotify: (from, payload) => this.#onNotify(from, payload),
        onLog: (level, message) => context.log(level, message),
      },
    );
    this.#batches = new BatchTracker(PLUGIN_NAME, (id, status) => this.#native.cancel(id, status));
    this.#endpoint = { ...localLocality(), socket, enabled: options.enabled, protocol: native.protocolVersion };
  }

  endpoint(): WireValue {
    return { ...this.#endpoint };
  }

  /**
   * Whether this transport can move bytes to `peer` at all: only when both ends have it
   * enabled and the peer runs on this machine, in the same pid and network namespaces, as
   * the same user. The router skips this transport for every other peer.
   */
  reaches(peer: SegmentDescriptor): boolean {
    return this.#unreachable(peer) === undefined;
  }

  #unreachable(peer: SegmentDescriptor): string | undefined {
    if (!this.#options.enabled) return `${PLUGIN_NAME} is disabled here (option enabled / TE_SHM)`;
    if (peer.epoch === this.#context.epoch) return undefined;
    const advert = peer.transports[PLUGIN_NAME];
    if (!advert) return `segment "${peer.name}" does not advertise ${PLUGIN_NAME}`;
    let e: ShmEndpoint;
    try {
      e = parseEndpoint(advert.endpoint, peer.name);
    } catch (error) {
      return (error as Error).message;
    }
    if (!e.enabled) return `${PLUGIN_NAME} is disabled at segment "${peer.name}"`;
    if (e.protocol !== this.#endpoint.protocol) return `segment "${peer.name}" speaks ${PLUGIN_NAME} protocol ${e.protocol}, this build ${this.#endpoint.protocol}`;
    const why = unreachableBecause(this.#endpoint, e);
    return why === undefined ? undefined : `segment "${peer.name}" is not reachable through ${PLUGIN_NAME}: ${why}`;
  }

  async registerMemory(request: RegisterRequest): Promise<TransportRegistration> {
    this.#checkOpen();
    if (typeof request.length !== 'bigint' || request.length <= 0n) throw fail('INVALID_ARGUMENT', 'Expected `length` to be a positive bigint');
    if (request.device !== 'cpu') throw fail('MEMORY_KIND_UNSUPPORTED', `cannot register ${request.device} memory: ${PLUGIN_NAME} moves host memory only`);
    if (!request.buffer && request.addr === undefined) throw fail('INVALID_ARGUMENT', 'registerMemory needs `buffer` or `addr`');
    // A bare SharedArrayBuffer has no Node-API accessor at NAPI 8: pass a view of it.
    const buffer = request.buffer instanceof SharedArrayBuffer ? new Uint8Array(request.buffer) : request.buffer ?? null;
    const r = this.#native.registerMemory(buffer, request.addr ?? 0n, request.length, request.remoteAccess, this.#options.hugePages);
    this.#hugePages = r.hugePages;
    return { addr: r.addr, length: request.length };
  }

  async unregisterMemory(addr: bigint): Promise<void> {
    this.#checkOpen();
    await this.#native.unregisterMemory(addr);
  }

  async openPeer(peer: SegmentDescriptor): Promise<TransportPeer> {
    this.#checkOpen();
    const local = peer.epoch === this.#context.epoch;
    if (!local && peer.name === this.#context.segmentName) {
      throw fail('STALE_DESCRIPTOR', `descriptor of segment "${peer.name}" has epoch ${peer.epoch}, but this process is epoch ${this.#context.epoch}: it describes an earlier life of this segment`);
    }
    const why = this.#unreachable(peer);
    if (why !== undefined) throw fail('PEER_UNREACHABLE', why);
    // A same-process peer goes through this process's own socket: one code path for both.
    const socket = local ? this.#endpoint.socket : parseEndpoint(peer.transports[PLUGIN_NAME]!.endpoint, peer.name).socket;
    const id = this.#native.openPeer(socket, peer.epoch, peer.name);
    try {
      await new Promise<void>((resolve, reject) => this.#opening.set(id, { resolve, reject }));
    } catch (e) {
      this.#native.closePeer(id);
      throw e;
    }
    const handle: ShmPeer = { segment: peer.name, epoch: peer.epoch, id, owner: this };
    return handle;
  }

  async closePeer(peer: TransportPeer): Promise<void> {
    const p = this.#own(peer);
    if (!this.#closed) this.#native.closePeer(p.id);
  }

  submit(peer: TransportPeer, batch: TransferBatch, options: SubmitOptions): Promise<BatchResult> {
    try {
      this.#checkOpen();
      const p = this.#own(peer);
      checkSubmit(PLUGIN_NAME, p.segment, batch, options);
      const id = this.#native.submit(p.id, batch.opcodes, batch.localAddrs, batch.remoteAddrs, batch.lengths, options.notify ?? null);
      return this.#batches.track(id, p.segment, options);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  onNotification(listener: (notification: Notification) => void): void {
    this.#listeners.add(listener);
  }

  describe(): Record<string, WireValue> {
    const scope = ptraceScope();
    return {
      enabled: this.#options.enabled,
      socket: this.#endpoint.socket ? `@${this.#endpoint.socket}` : 'none (disabled)',
      copyThreads: this.#options.copyThreads,
      chunkBytes: this.#options.chunkBytes,
      hugePages: this.#options.hugePages ? this.#hugePages : 'off',
      ptraceScope: scope === undefined ? 'no Yama (same user may attach)' : scope,
    };
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    // Fences every connection and joins the threads on a worker; ABORTED completions arrive first.
    await this.#native.close();
    for (const [id, o] of this.#opening) o.reject(fail('ABORTED', `transport closed while opening peer ${id}`));
    this.#opening.clear();
    this.#batches.abandonAll('transport closed');
    this.#listeners.clear();
  }

  #checkOpen(): void {
    if (this.#closed) throw fail('ABORTED', 'transport is closed');
  }

  #own(peer: TransportPeer): ShmPeer {
    const p = peer as ShmPeer;
    if (p.owner !== this) throw fail('PEER_NOT_FOUND', `peer "${peer.segment}" was not opened by this ${PLUGIN_NAME} transport`);
    return p;
  }

  #onOpen(id: number, status: number, message: string): void {
    const o = this.#opening.get(id);
    if (!o) return;
    this.#opening.delete(id);
    if (status === 0) o.resolve();
    else o.reject(TransferError.fromStatus(status, message || `cannot open peer ${id}`, opts));
  }

  #onNotify(from: string, payload: Uint8Array): void {
    for (const l of this.#listeners) l({ from, payload });
  }
}

export async function createShmTransport(context: TransportContext, options: ShmOptions): Promise<Transport> {
  return new MooncakeShmTransport(context, options);
}
