import { lookup } from 'node:dns/promises';
import { isIP } from 'node:net';
import {
  advertisedHost,
  NativeTransportBase,
  threadPolicyOf,
  TransferError,
  type RegisterRequest,
  type SegmentDescriptor,
  type Transport,
  type TransportContext,
  type TransportPeer,
  type TransportRegistration,
  type WireValue,
} from '@te/connector';
import { loadBinding, PLUGIN_NAME, type NativeTcpTransport, type NativeTransportOptions } from './binding.js';
import type { TcpOptions } from './options.js';

/** What mooncake-tcp publishes as its endpoint in the segment descriptor. */
export interface TcpEndpoint {
  host: string;
  port: number;
  protocol: number;
}

const opts = { plugin: PLUGIN_NAME };

function fail(code: ConstructorParameters<typeof TransferError>[0], message: string): TransferError {
  return new TransferError(code, message, opts);
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

export class MooncakeTcpTransport extends NativeTransportBase<NativeTcpTransport> {
  readonly #options: TcpOptions;
  readonly #endpoint: TcpEndpoint;
  protected override readonly gathersWrites = true;
  protected override readonly scattersWrites = true;
  protected override readonly verifiesWrites = true;

  constructor(context: TransportContext, options: TcpOptions) {
    const native = loadBinding();
    super(PLUGIN_NAME, context, (callbacks) => new native.TcpTransport(nativeOptions(context, options), callbacks));
    this.#options = options;
    this.#endpoint = {
      host: advertisedHost(context.bindAddress, options.advertiseHost),
      port: this.native.port(),
      protocol: native.protocolVersion,
    };
  }

  endpoint(): WireValue {
    return { ...this.#endpoint };
  }

  async registerMemory(request: RegisterRequest): Promise<TransportRegistration> {
    this.checkOpen();
    this.checkLength(request);
    if (request.device !== 'cpu') return this.#registerDevice(request);
    const addr = this.native.registerMemory(this.hostBuffer(request), request.addr ?? 0n, request.length, request.remoteAccess);
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
    const addr = this.native.registerMemory(null, request.addr, request.length, request.remoteAccess, Number(m[1]));
    return { addr, length: request.length };
  }

  async openPeer(peer: SegmentDescriptor): Promise<TransportPeer> {
    this.checkOpen();
    const local = this.isSelf(peer);
    const ep = local ? this.#endpoint : parseEndpoint(this.advertOf(peer).endpoint, peer.name);
    if (ep.protocol !== 1) throw fail('PROTOCOL_MISMATCH', `segment "${peer.name}" speaks mooncake-tcp protocol ${ep.protocol}, this build speaks 1`);
    // A host name is resolved here, asynchronously: the I/O threads connect to addresses
    // only, so a slow resolver never stalls the other peers their loops serve.
    const host = local || isIP(ep.host) !== 0 ? ep.host : await resolveHost(ep.host, peer.name);
    const id = this.native.openPeer(host, ep.port, peer.epoch, peer.name, local);
    return this.peerHandle(peer, id, true, { local });
  }

  describe(): Record<string, WireValue> {
    return {
      host: this.#endpoint.host,
      port: this.#endpoint.port,
      protocol: this.#endpoint.protocol,
      ioThreads: this.#options.ioThreads,
      lanesPerPeer: this.#options.lanesPerPeer,
      sliceSize: this.#options.sliceSize,
      congestionControl: this.#options.congestionControl ?? 'system default',
      // What the kernel reports for the I/O threads, not what was asked for (a refusal is also logged).
      ioThreadPolicy: threadPolicyOf('te-tcp-io'),
      authentication: (this.#options.authSecret ?? this.context.secret) ? 'hmac-sha256' : 'none',
      cuda: loadBinding().builtWithCuda ? 'staged through pinned host buffers' : 'built without CUDA',
      // Gathered writes whose rows are under 4 KiB go out packed through a 256 KiB buffer per lane.
      rowsPackedBytes: Number(this.native.rowsPacked()),
    };
  }
}

/** The native constructor's options from the context and the parsed plugin options. */
function nativeOptions(context: TransportContext, options: TcpOptions): NativeTransportOptions {
  const secret = options.authSecret ?? context.secret;
  return {
    segmentName: context.segmentName,
    epoch: context.epoch,
    bindAddress: context.bindAddress,
    port: options.port,
    ioThreads: options.ioThreads,
    lanesPerPeer: options.lanesPerPeer,
    connectTimeoutMs: options.connectTimeoutMs ?? context.connectTimeoutMs,
    sliceSize: options.sliceSize,
    socketBufferBytes: options.socketBufferBytes,
    ...(options.congestionControl === undefined ? {} : { congestionControl: options.congestionControl }),
    windowBytes: options.windowBytes,
    cancelGraceMs: options.cancelGraceMs,
    notifyQueuePerPeer: options.notifyQueuePerPeer,
    notifyQueueBytes: options.notifyQueueBytes,
    maxConnections: options.maxConnections,
    maxConnectionsPerAddress: options.maxConnectionsPerAddress,
    handshakeTimeoutMs: options.handshakeTimeoutMs,
    idleTimeoutMs: options.idleTimeoutMs,
    busyPollUs: options.busyPollUs,
    batchScheduling: options.batchScheduling,
    coalesceWrites: options.coalesceWrites,
    // The plugin's own secret, else the deployment's (config `secret`): either turns authentication on.
    ...(secret ? { authSecret: Buffer.from(secret, 'utf8') } : {}),
  };
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
