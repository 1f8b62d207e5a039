import { randomBytes } from 'node:crypto';
import { constants as bufferConstants } from 'node:buffer';
import {
  NativeTransportBase,
  threadPolicyOf,
  type AllocatedMemory,
  type DeviceName,
  type RegisterRequest,
  type SegmentDescriptor,
  type Transport,
  type TransportContext,
  type TransportPeer,
  type TransportRegistration,
  type WireValue,
} from '@te/connector';
import { loadBinding, PLUGIN_NAME, type NativeShmTransport, type NativeTransportOptions } from './binding.js';
import { parseEndpoint, type ShmEndpoint } from './endpoint.js';
import { localLocality, ptraceScope, unreachableBecause } from './locality.js';
import { poolPages } from './pool-pages.js';
import type { ShmOptions } from './options.js';

export class MooncakeShmTransport extends NativeTransportBase<NativeShmTransport> {
  readonly #options: ShmOptions;
  readonly #endpoint: ShmEndpoint;
  #hugePages = 'nothing registered yet';

  constructor(context: TransportContext, options: ShmOptions) {
    const native = loadBinding();
    // Random, so a name cannot be predicted and squatted before this process binds it.
    const socket = options.enabled ? `te-shm/${process.pid}/${randomBytes(12).toString('hex')}` : '';
    super(PLUGIN_NAME, context, (callbacks) => new native.ShmTransport(nativeOptions(context, options, socket), callbacks));
    this.#options = options;
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
    if (peer.epoch === this.context.epoch) return undefined;
    const advert = peer.transports[PLUGIN_NAME];
    if (!advert) return `segment "${peer.name}" does not advertise ${PLUGIN_NAME}`;
    let e: ShmEndpoint;
    try {
      e = parseEndpoint(advert.endpoint, peer.name);
    } catch (error) {
      return (error as Error).message;
    }
    if (!e.enabled) return `${PLUGIN_NAME} is disabled at segment "${peer.name}"`;
    if (e.protocol !== this.#endpoint.protocol)
      return `segment "${peer.name}" speaks ${PLUGIN_NAME} protocol ${e.protocol}, this build ${this.#endpoint.protocol}`;
    const why = unreachableBecause(this.#endpoint, e);
    return why === undefined ? undefined : `segment "${peer.name}" is not reachable through ${PLUGIN_NAME}: ${why}`;
  }

  async registerMemory(request: RegisterRequest): Promise<TransportRegistration> {
    this.checkOpen();
    this.checkLength(request);
    if (request.device !== 'cpu') throw this.fail('MEMORY_KIND_UNSUPPORTED', `cannot register ${request.device} memory: ${PLUGIN_NAME} moves host memory only`);
    const r = this.native.registerMemory(this.hostBuffer(request), request.addr ?? 0n, request.length, request.remoteAccess, this.#options.hugePages);
    this.#hugePages = r.hugePages;
    return { addr: r.addr, length: request.length };
  }

  /**
   * The engine's allocator hook (`engine.allocateMemory`): host memory from a sealed memfd.
   * A target maps it and copies requests on it with memcpy (memory speed) instead of
   * process_vm_readv/writev; everything else about a transfer is the same.
   */
  async allocateMemory(length: bigint, device: DeviceName): Promise<AllocatedMemory> {
    this.checkOpen();
    if (device !== 'cpu') throw this.fail('MEMORY_KIND_UNSUPPORTED', `${PLUGIN_NAME} allocates host memory only; cannot allocate ${device}`);
    if (length > BigInt(Number.MAX_SAFE_INTEGER)) throw this.fail('INVALID_ARGUMENT', `cannot allocate ${length} bytes of host memory`);
    // Past the longest ArrayBuffer this Node.js makes (4 GiB on Node 20) the pool has no JS
    // view: it is registered by address, and moves like any other.
    const a = this.native.allocateMemory(length, length <= BigInt(bufferConstants.MAX_LENGTH));
    return a.buffer ? { addr: a.addr, length, buffer: new Uint8Array(a.buffer) } : { addr: a.addr, length };
  }

  async freeMemory(addr: bigint): Promise<void> {
    this.checkOpen();
    this.native.freeMemory(addr);
  }

  async openPeer(peer: SegmentDescriptor): Promise<TransportPeer> {
    this.checkOpen();
    const local = this.isSelf(peer);
    const why = this.#unreachable(peer);
    if (why !== undefined) throw this.fail('PEER_UNREACHABLE', why);
    // A same-process peer goes through this process's own socket: one code path for both.
    const socket = local ? this.#endpoint.socket : parseEndpoint(peer.transports[PLUGIN_NAME]!.endpoint, peer.name).socket;
    return this.peerHandle(peer, this.native.openPeer(socket, peer.epoch, peer.name), true);
  }

  describe(): Record<string, WireValue> {
    const scope = ptraceScope();
    return {
      enabled: this.#options.enabled,
      socket: this.#endpoint.socket ? `@${this.#endpoint.socket}` : 'none (disabled)',
      copyThreads: this.#options.copyThreads,
      chunkBytes: this.#options.chunkBytes,
      // What the kernel reports for this process's shm threads, not what was asked for (a refusal is also logged).
      threadPolicy: threadPolicyOf('te-shm-'),
      hugePages: this.#options.hugePages ? this.#hugePages : 'off',
      // What the kernel gives allocateMemory's pool memory, whose huge pages a system setting decides.
      poolPages: poolPages(),
      ptraceScope: scope === undefined ? 'no Yama (same user may attach)' : scope,
      // As a target: how initiators' bytes were copied (pool memory with memcpy, other memory with process_vm_*).
      ...(this.closed ? {} : { copies: { ...this.native.copyStats() } }),
    };
  }

  /** The native side's warnings (a refused or dropped connection) name the peer already. */
  protected override log(level: 'warn', message: string): void {
    this.context.log(level, message);
  }
}

function nativeOptions(context: TransportContext, options: ShmOptions, socket: string): NativeTransportOptions {
  return {
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
    batchScheduling: options.batchScheduling,
  };
}

export async function createShmTransport(context: TransportContext, options: ShmOptions): Promise<Transport> {
  return new MooncakeShmTransport(context, options);
}
