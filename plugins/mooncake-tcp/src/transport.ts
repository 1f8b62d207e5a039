import { lookup } from 'node:dns/promises';
import { isIP } from 'node:net';
import { networkInterfaces } from 'node:os';
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
import { loadBinding, PLUGIN_NAME, type NativeTcpTransport } from './binding.js';
import type { TcpOptions } from './options.js';

/** What mooncake-tcp publishes as its endpoint in the segment descriptor. */
export interface TcpEndpoint {
  host: string;
  port: number;
  protocol: number;
}

interface TcpPeer extends TransportPeer {
  readonly id: number;
  readonly local: boolean;
  readonly owner: MooncakeTcpTransport;
}

const opts = { plugin: PLUGIN_NAME };

function fail(code: ConstructorParameters<typeof TransferError>[0], message: string): TransferError {
  return new TransferError(code, message, opts);
}

function advertisedHost(bind: string, override?: string): string {
  if (override) return override;
  if (bind !== '0.0.0.0' && bind !== '::') return bind;
  for (const list of Object.values(networkInterfaces())) {
    for (const a of list ?? []) if (a.family === 'IPv4' && !a.internal) return a.address;
  }
  return '127.0.0.1';
}

function parseEndpoint(value: WireValue | undefined, peer: string): TcpEndpoint {
  const e = value as Partial<TcpEndpoint> | null | undefined;
  if (!e || typeof e !== 'object' || typeof e.host !== 'string' || typeof e.port !== 'number' || e.port < 1 || e.port > 65535) {
    throw fail('INVALID_ARGUMENT', `segment "${peer}" publishes no usable mooncake-tcp endpoint ({host, port})`);
  }
  return { host: e.host, port: e.port, protocol: typeof e.protocol === 'number' ? e.protocol : 1 };
}

async function resolveHost(host: string, segment: string): Promise<string> {
  try {
    return (await lookup(host)).address;
  } catch (e) {
    throw fail('PEER_UNREACHABLE', `cannot resolve the host ${JSON.stringify(host)} of segment "${segment}": ${(e as Error).message}`);
  }
}

export class MooncakeTcpTransport implements Transport {
  readonly #native: NativeTcpTransport;
  readonly #context: TransportContext;
  readonly #options: TcpOptions;
  readonly #endpoint: TcpEndpoint;
  readonly #batches: BatchTracker;
  readonly #opening = new Map<number, { resolve(): void; reject(e: TransferError): void }>();
  readonly #listeners = new Set<(n: Notification) => void>();
  #closed = false;

  constructor(context: TransportContext, options: TcpOptions) {
    const native = loadBinding();
    this.#context = context;
    this.#options = options;
    this.#native = new native.TcpTransport(
      {
        segmentName: context.segmentName,
        epoch: context.epoch,
        bindAddress: context.bindAddress,
        port: options.port,
        ioThreads: options.ioThreads,
        lanesPerPeer: options.lanesPerPeer,
        connectTimeoutMs: options.connectTimeoutMs ?? context.connectTimeoutMs,
        sliceSize: options.sliceSize,
        socketBufferBytes: options.socketBufferBytes,
        windowBytes: options.windowBytes,
        cancelGraceMs: options.cancelGraceMs,
        notifyQueuePerPeer: options.notifyQueuePerPeer,
        notifyQueueBytes: options.notifyQueueBytes,
        maxConnections: options.maxConnections,
        maxConnectionsPerAddress: options.maxConnectionsPerAddress,
        handshakeTimeoutMs: options.handshakeTimeoutMs,
        idleTimeoutMs: options.idleTimeoutMs,
        busyPollUs: options.busyPollUs,
        // The plugin's own secret, else the deployment's (config `secret`): either turns authentication on.
        ...(options.authSecret ?? context.secret ? { authSecret: Buffer.from((options.authSecret ?? context.secret)!, 'utf8') } : {}),
      },
      {
        onBatch: (id, batchStatus, statuses, bytes, message, remoteMayBeWritten) => this.#batches.complete(id, batchStatus, statuses, bytes, message, remoteMayBeWritten),
        onOpen: (id, status, message) => this.#onOpen(id, status, message),
        onNotify: (from, payload) => this.#onNotify(from, payload),
        onLog: (level, message) => context.log(level, `[${PLUGIN_NAME}] ${message}`),
      },
    );
    this.#batches = new BatchTracker(PLUGIN_NAME, (id, status) => this.#native.cancel(id, status));
    this.#endpoint = {
      host: advertisedHost(context.bindAddress, options.advertiseHost),
      port: this.#native.port(),
      protocol: native.protocolVersion,
    };
  }

  endpoint(): WireValue {
    return { ...this.#endpoint };
  }

  async registerMemory(request: RegisterRequest): Promise<TransportRegistration> {
    this.#checkOpen();
    if (typeof request.length !== 'bigint' || request.length <= 0n) throw fail('INVALID_ARGUMENT', 'Expected `length` to be a positive bigint');
    if (request.device !== 'cpu') return this.#registerDevice(request);
    if (!request.buffer && request.addr === undefined) throw fail('INVALID_ARGUMENT', 'registerMemory needs `buffer` or `addr`');
    // A bare SharedArrayBuffer has no Node-API accessor at NAPI 8: pass a view of it.
    const buffer = request.buffer instanceof SharedArrayBuffer ? new Uint8Array(request.buffer) : request.buffer ?? null;
    const addr = this.#native.registerMemory(buffer, request.addr ?? 0n, request.length, request.remoteAccess);
    return { addr, length: request.length };
  }

  /** Raw device memory: validated natively, staged through pinned host buffers on the data path. */
  #registerDevice(request: RegisterRequest): TransportRegistration {
    const m = /^cuda:(\d+)$/.exec(String(request.device));
    if (!m) throw fail('INVALID_ARGUMENT', `Expected \`device\` to be "cpu" or "cuda:N", got ${JSON.stringify(request.device)}`);
    if (request.buffer !== undefined) throw fail('INVALID_ARGUMENT', `A JS buffer is host memory; it cannot be registered as ${request.device}`);
    if (request.addr === undefined) throw fail('INVALID_ARGUMENT', `registering ${request.device} memory needs \`addr\``);
    if (!loadBinding().builtWithCuda) {
      throw fail(
        'MEMORY_KIND_UNSUPPORTED',
        `cannot register ${request.device} memory: this mooncake-tcp addon was built without CUDA (the CUDA toolkit was not found at build time; install it at /usr/local/cuda and rebuild: npm run build:native -w @te/mooncake-tcp)`,
      );
    }
    const addr = this.#native.registerMemory(null, request.addr, request.length, request.remoteAccess, Number(m[1]));
    return { addr, length: request.length };
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
    const advert = peer.transports[PLUGIN_NAME];
    if (!advert && !local) throw fail('NO_COMMON_TRANSPORT', `segment "${peer.name}" does not advertise ${PLUGIN_NAME}`);
    const ep = local ? this.#endpoint : parseEndpoint(advert!.endpoint, peer.name);
    if (ep.protocol !== 1) throw fail('PROTOCOL_MISMATCH', `segment "${peer.name}" speaks mooncake-tcp protocol ${ep.protocol}, this build speaks 1`);
    // A host name is resolved here, asynchronously: the I/O threads connect to addresses
    // only, so a slow resolver never stalls the other peers their loops serve.
    const host = local || isIP(ep.host) !== 0 ? ep.host : await resolveHost(ep.host, peer.name);
    const id = this.#native.openPeer(host, ep.port, peer.epoch, peer.name, local);
    try {
      await new Promise<void>((resolve, reject) => this.#opening.set(id, { resolve, reject }));
    } catch (e) {
      this.#native.closePeer(id);
      throw e;
    }
    const handle: TcpPeer = { segment: peer.name, epoch: peer.epoch, id, local, owner: this };
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
    return {
      host: this.#endpoint.host,
      port: this.#endpoint.port,
      protocol: this.#endpoint.protocol,
      ioThreads: this.#options.ioThreads,
      lanesPerPeer: this.#options.lanesPerPeer,
      sliceSize: this.#options.sliceSize,
      authentication: this.#options.authSecret ?? this.#context.secret ? 'hmac-sha256' : 'none',
      cuda: loadBinding().builtWithCuda ? 'staged through pinned host buffers' : 'built without CUDA',
    };
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    // Joins the I/O threads on a worker thread; the ABORTED completions of pending batches arrive first.
    await this.#native.close();
    for (const [id, o] of this.#opening) o.reject(fail('ABORTED', `transport closed while opening peer ${id}`));
    this.#opening.clear();
    this.#batches.abandonAll('transport closed');
    this.#listeners.clear();
  }

  #checkOpen(): void {
    if (this.#closed) throw fail('ABORTED', 'transport is closed');
  }

  #own(peer: TransportPeer): TcpPeer {
    const p = peer as TcpPeer;
    if (p.owner !== this) throw fail('PEER_NOT_FOUND', `peer "${peer.segment}" was not opened by this mooncake-tcp transport`);
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

export async function createTcpTransport(context: TransportContext, options: TcpOptions): Promise<Transport> {
  // The native side binds IP literals only: resolve a host name here, off the I/O threads.
  if (isIP(context.bindAddress) === 0) {
    try {
      context = { ...context, bindAddress: (await lookup(context.bindAddress)).address };
    } catch (cause) {
      throw new TransferError('INVALID_CONFIG', `cannot resolve bind address "${context.bindAddress}": ${(cause as Error).message}`, { ...opts, cause });
    }
  }
  return new MooncakeTcpTransport(context, options);
}
