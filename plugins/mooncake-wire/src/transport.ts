import { createHash } from 'node:crypto';
import { lookup } from 'node:dns/promises';
import { isIP } from 'node:net';
import {
  advertisedHost,
  BatchTracker,
  TransferError,
  checkSubmit,
  keepAttached,
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
import { loadBinding, PLUGIN_NAME, type NativeStats, type NativeWireTransport } from './binding.js';
import { HandshakeServer, handshake } from './handshake.js';
import { MSG_METADATA, MSG_NOTIFY } from './handshake-frame.js';
import type { WireOptions } from './options.js';
import { MooncakeEtcd, etcdEndpoints } from './mooncake-etcd.js';
import { encodeSegment, joinSegmentName, parseSegment, splitSegmentName, type MooncakeSegment } from './segment.js';

const opts = { plugin: PLUGIN_NAME };

function fail(code: ConstructorParameters<typeof TransferError>[0], message: string): TransferError {
  return new TransferError(code, message, opts);
}

/** The endpoint a descriptor made from a Mooncake segment carries: where its data port is, which framing. */
export interface MooncakeEndpoint {
  mooncake: true;
  host: string;
  handshakePort: number;
  dataPort: number;
  protoVersion: number;
}

interface WirePeer extends TransportPeer {
  readonly id: number;
  readonly owner: MooncakeWireTransport;
  readonly host: string;
  readonly handshakePort: number;
}

/**
 * A stand-in for the epoch Mooncake does not have, from what identifies one life of a
 * Mooncake process: its data port (random at every start) and its buffers' addresses. The
 * timestamp is left out (it may be rewritten at every encoding), so fetching the same
 * descriptor twice gives the same epoch.
 */
function epochOf(s: MooncakeSegment): bigint {
  const h = createHash('sha256')
    .update(`${s.name}|${s.tcpDataPort}|${s.buffers.map((b) => `${b.addr}:${b.length}`).join(',')}`)
    .digest();
  return h.readBigUInt64LE(0) & ((1n << 63n) - 1n);
}

/** A te segment descriptor that stands for a Mooncake segment (only this plugin can reach it). */
export function descriptorOf(segment: string, host: string, handshakePort: number, s: MooncakeSegment): SegmentDescriptor {
  const endpoint: MooncakeEndpoint = { mooncake: true, host, handshakePort, dataPort: s.tcpDataPort, protoVersion: s.tcpProtoVersion };
  return {
    version: 1,
    name: segment,
    epoch: epochOf(s),
    hostname: host,
    pid: 0,
    transports: { [PLUGIN_NAME]: { class: 'tcp', memoryKinds: ['cpu'], endpoint: endpoint as unknown as WireValue } },
    buffers: s.buffers.map((b) => ({ addr: b.addr, length: b.length, device: 'cpu' as const, attrs: {} })),
  };
}

function mooncakeEndpoint(peer: SegmentDescriptor): MooncakeEndpoint | undefined {
  const e = peer.transports[PLUGIN_NAME]?.endpoint as Partial<MooncakeEndpoint> | undefined;
  if (
    !e ||
    e.mooncake !== true ||
    typeof e.host !== 'string' ||
    typeof e.dataPort !== 'number' ||
    typeof e.handshakePort !== 'number' ||
    typeof e.protoVersion !== 'number'
  )
    return undefined;
  return e as MooncakeEndpoint;
}

export class MooncakeWireTransport implements Transport {
  readonly #native: NativeWireTransport;
  readonly #context: TransportContext;
  readonly #options: WireOptions;
  readonly #batches: BatchTracker;
  readonly #listeners = new Set<(n: Notification) => void>();
  /** Remote-accessible regions in registration order: Mooncake initiators address buffers[0] first. */
  readonly #published = new Map<bigint, bigint>();
  readonly #bind: string;
  #handshake: HandshakeServer | undefined;
  #segmentName: string | undefined;
  /** Descriptors in a shared etcd (metadataServer etcd://); undefined in P2P handshake mode. */
  #etcd: MooncakeEtcd | undefined;
  #advertised = '';
  #closed = false;

  constructor(context: TransportContext, options: WireOptions, bind: string) {
    const native = loadBinding();
    this.#context = context;
    this.#options = options;
    this.#bind = bind;
    this.#native = new native.WireTransport(
      {
        listen: options.listen,
        bindAddress: bind,
        port: options.dataPort,
        maxConnections: options.maxConnections,
        maxConnectionsPerAddress: options.maxConnectionsPerAddress,
        maxWaitingConnections: options.maxWaitingConnections,
        idleTimeoutMs: options.idleTimeoutMs,
        ioTimeoutMs: options.ioTimeoutMs,
        connectTimeoutMs: options.connectTimeoutMs ?? context.connectTimeoutMs,
        maxQueued: options.maxQueued,
      },
      { onBatch: (id, status, statuses, bytes, message, mayBeWritten) => this.#batches.complete(id, status, statuses, bytes, message, mayBeWritten) },
    );
    this.#batches = new BatchTracker(PLUGIN_NAME, (id, status) => this.#native.cancel(id, status));
  }

  /** Connects to etcd (etcd mode), starts the handshake listener (with `listen`) and says loudly what is exposed. */
  async start(): Promise<void> {
    try {
      const endpoints = etcdEndpoints(this.#options.metadataServer);
      if (endpoints) this.#etcd = await MooncakeEtcd.connect(endpoints, this.#options.clusterId ?? '', this.#options.handshakeTimeoutMs);
      if (!this.#options.listen) return;
      this.#handshake = await HandshakeServer.listen(
        {
          host: this.#bind,
          port: this.#options.handshakePort,
          maxConnections: this.#options.maxHandshakeConnections,
          timeoutMs: this.#options.handshakeTimeoutMs,
        },
        { metadata: () => this.#descriptorJson(), notify: (name, message) => this.#onNotify(name, message) },
      );
      this.#advertised = advertisedHost(this.#bind, this.#options.advertiseHost);
      // P2P: the name is where the handshake is. etcd: the name given (Mooncake's local_server_name).
      this.#segmentName = (this.#etcd && this.#options.segmentName) || joinSegmentName(this.#advertised, this.#handshake.port);
      await this.#publish();
    } catch (e) {
      await this.#handshake?.close();
      this.#etcd?.close();
      await this.#native.close();
      throw e;
    }
    this.#context.log(
      'warn',
      `Mooncake compatibility listener ON: segment ${this.#segmentName} (handshake ${this.#bind}:${this.#handshake.port}, data ${this.#bind}:${this.#native.port()}). ` +
        "Mooncake's protocol has no authentication: anyone who reaches these ports can read and write every remote-accessible region of this process" +
        (this.#context.secret ? " (the deployment secret does not protect them; te's own transports stay authenticated)" : ''),
    );
  }

  /** The Mooncake segment name Mooncake peers open (`host:handshake-port`); undefined unless listening. */
  get mooncakeSegment(): string | undefined {
    return this.#segmentName;
  }

  endpoint(): WireValue {
    return this.#segmentName ? { mooncakeSegment: this.#segmentName, dataPort: this.#native.port() } : { mooncakeSegment: null };
  }

  /** Only Mooncake segments: a te peer is never reached over this unauthenticated wire. */
  reaches(peer: SegmentDescriptor): boolean {
    return mooncakeEndpoint(peer) !== undefined;
  }

  /** etcd mode: the whole descriptor again, as Mooncake rewrites it at every (un)registration. */
  async #publish(): Promise<void> {
    if (this.#etcd && this.#handshake) await this.#etcd.publish(this.#segmentName!, this.#descriptorJson(), this.#advertised, this.#handshake.port);
  }

  #descriptorJson(): string {
    return encodeSegment({
      name: this.#segmentName!,
      tcpDataPort: this.#native.port(),
      buffers: [...this.#published].map(([addr, length]) => ({ addr, length })),
    });
  }

  #onNotify(name: string, message: string): boolean {
    const n: Notification = { from: name, payload: new Uint8Array(Buffer.from(message, 'utf8')) };
    for (const l of this.#listeners) {
      try {
        l(n);
      } catch (e) {
        this.#context.log('error', `notification listener threw: ${(e as Error).message}`);
      }
    }
    return true;
  }

  async registerMemory(request: RegisterRequest): Promise<TransportRegistration> {
    this.#checkOpen();
    if (typeof request.length !== 'bigint' || request.length <= 0n) throw fail('INVALID_ARGUMENT', 'Expected `length` to be a positive bigint');
    if (request.device !== 'cpu')
      throw fail('MEMORY_KIND_UNSUPPORTED', `${PLUGIN_NAME} moves host memory only (Mooncake's TCP transport), not ${request.device}`);
    if (!request.buffer && request.addr === undefined) throw fail('INVALID_ARGUMENT', 'registerMemory needs `buffer` or `addr`');
    if (request.buffer) keepAttached(request.buffer);
    const buffer = request.buffer instanceof SharedArrayBuffer ? new Uint8Array(request.buffer) : (request.buffer ?? null);
    const addr = this.#native.registerMemory(buffer, request.addr ?? 0n, request.length, request.remoteAccess);
    if (request.remoteAccess) {
      this.#published.set(addr, request.length);
      try {
        await this.#publish();
      } catch (e) {
        // Not registered at all rather than registered and unpublished: the engine rolls back too.
        this.#published.delete(addr);
        await this.#native.unregisterMemory(addr);
        throw e;
      }
    }
    return { addr, length: request.length };
  }

  async unregisterMemory(addr: bigint): Promise<void> {
    this.#checkOpen();
    // Gone from the descriptor first; the native call waits out requests still in it.
    if (this.#published.delete(addr))
      await this.#publish().catch((e: Error) =>
        this.#context.log('warn', `etcd: the descriptor without 0x${addr.toString(16)} was not published: ${e.message}`),
      );
    await this.#native.unregisterMemory(addr);
  }

  /**
   * Fetches a Mooncake segment's descriptor over its P2P handshake port (`host:port`) and
   * returns it as a te descriptor this transport can open.
   */
  async fetchSegment(segment: string, timeoutMs = this.#options.handshakeTimeoutMs): Promise<SegmentDescriptor> {
    this.#checkOpen();
    const stored = await this.#fromEtcd(segment);
    if (stored) return stored;
    const { host, port } = splitSegmentName(segment);
    const ip =
      isIP(host) !== 0
        ? host
        : await lookup(host).then(
            (r) => r.address,
            (e: Error) => {
              throw fail('PEER_UNREACHABLE', `cannot resolve the host of Mooncake segment "${segment}": ${e.message}`);
            },
          );
    const text = await handshake(ip, port, MSG_METADATA, '{}\n', timeoutMs);
    // Data goes to the host that was asked, never to one the reply names.
    return descriptorOf(segment, ip, port, parseSegment(text, segment));
  }

  /**
   * For the engine's openSegment: a Mooncake descriptor when `segment` answers Mooncake's
   * handshake, undefined when it does not (a te peer's control endpoint closes the connection
   * at once, an unreachable one fails to connect). A Mooncake peer whose descriptor is
   * malformed is an error, not "not Mooncake".
   */
  async lookupSegment(segment: string, timeoutMs: number): Promise<SegmentDescriptor | undefined> {
    // With a deployment secret, te peers are authenticated: an answer in Mooncake's protocol at
    // a te peer's address must not be able to divert its traffic onto this unauthenticated wire.
    if (this.#closed || !(this.#options.lookup ?? !this.#context.secret)) return undefined;
    const stored = await this.#fromEtcd(segment);
    if (stored) return stored;
    let host: string;
    let port: number;
    try {
      ({ host, port } = splitSegmentName(segment));
    } catch {
      return undefined;
    }
    let ip = host;
    if (isIP(host) === 0) {
      try {
        ip = (await lookup(host)).address;
      } catch {
        return undefined;
      }
    }
    let text: string;
    try {
      text = await handshake(ip, port, MSG_METADATA, '{}\n', Math.max(1, Math.min(timeoutMs, this.#options.handshakeTimeoutMs)));
    } catch {
      return undefined;
    }
    return descriptorOf(segment, ip, port, parseSegment(text, segment));
  }

  /** etcd mode: the segment's descriptor from etcd, its data host from rpc_meta; undefined when etcd does not know it. */
  async #fromEtcd(segment: string): Promise<SegmentDescriptor | undefined> {
    const rec = await this.#etcd?.fetch(segment);
    if (!rec) return undefined;
    const ip =
      isIP(rec.host) !== 0
        ? rec.host
        : await lookup(rec.host).then(
            (r) => r.address,
            (e: Error) => {
              throw fail('PEER_UNREACHABLE', `cannot resolve ${rec.host}, the host etcd names for Mooncake segment "${segment}": ${e.message}`);
            },
          );
    return descriptorOf(segment, ip, rec.port, parseSegment(rec.descriptor, segment));
  }

  /** fetchSegment + openPeer: what `openSegment('host:port')` is for a Mooncake peer. */
  async openSegment(segment: string): Promise<{ descriptor: SegmentDescriptor; peer: TransportPeer }> {
    const descriptor = await this.fetchSegment(segment);
    return { descriptor, peer: await this.openPeer(descriptor) };
  }

  async openPeer(peer: SegmentDescriptor): Promise<TransportPeer> {
    this.#checkOpen();
    const e = mooncakeEndpoint(peer);
    if (!e)
      throw fail(
        'NO_COMMON_TRANSPORT',
        `segment "${peer.name}" is not a Mooncake segment (${PLUGIN_NAME} speaks only to Mooncake peers; te peers use te's own transports)`,
      );
    const buffers = peer.buffers.filter((b) => b.device === 'cpu');
    const id = this.#native.openPeer({
      host: e.host,
      port: e.dataPort,
      v2: this.#options.framing === 'auto' && e.protoVersion >= 2,
      pool: this.#options.connectionPool,
      lanes: this.#options.lanesPerPeer,
      bufferAddrs: BigUint64Array.from(buffers.map((b) => b.addr)),
      bufferLengths: BigUint64Array.from(buffers.map((b) => b.length)),
    });
    const handle: WirePeer = { segment: peer.name, epoch: peer.epoch, id, owner: this, host: e.host, handshakePort: e.handshakePort };
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
      const id = this.#native.submit(p.id, batch.opcodes, batch.localAddrs, batch.remoteAddrs, batch.lengths, Math.max(1, Math.ceil(options.timeoutMs)));
      const done = this.#batches.track(id, p.segment, options);
      return options.notify ? done.then((r) => this.#notify(p, r, options)) : done;
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /**
   * Mooncake delivers a notification over the peer's handshake port after the batch's data
   * landed (its notify_msg is text: the payload is sent as UTF-8).
   */
  async #notify(p: WirePeer, r: BatchResult, options: SubmitOptions): Promise<BatchResult> {
    if (r.statuses.some((s) => s !== 0)) return r;
    const body = JSON.stringify({ name: this.#segmentName ?? this.#context.segmentName, notify_msg: Buffer.from(options.notify!).toString('utf8') });
    const reply = await handshake(p.host, p.handshakePort, MSG_NOTIFY, `${body}\n`, Math.max(1, Math.min(options.timeoutMs, this.#options.handshakeTimeoutMs)));
    let accepted = false;
    try {
      const msg = (JSON.parse(reply) as { notify_msg?: unknown }).notify_msg;
      accepted = typeof msg === 'string' && msg !== ''; // Mooncake's refusal is an empty notify_msg
    } catch {
      accepted = false;
    }
    if (!accepted) throw fail('TRANSFER_FAILED', `Mooncake segment "${p.segment}" did not accept the notification (its data landed)`);
    return r;
  }

  onNotification(listener: (notification: Notification) => void): void {
    this.#listeners.add(listener);
  }

  /** Counters of the data listener and the initiator, and the handshake server's. */
  stats(): NativeStats & { handshakesServed: number; handshakesRefused: number } {
    return { ...this.#native.stats(), handshakesServed: this.#handshake?.served ?? 0, handshakesRefused: this.#handshake?.refused ?? 0 };
  }

  describe(): Record<string, WireValue> {
    return {
      listening: this.#segmentName
        ? `segment ${this.#segmentName}, data port ${this.#native.port()} on ${this.#bind} (unauthenticated)`
        : 'off (initiator only)',
      framing: this.#options.framing,
      connectionPool: this.#options.connectionPool,
      lanesPerPeer: this.#options.lanesPerPeer,
      authentication: 'none (Mooncake protocol)',
    };
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    // Mooncake peers stop finding this process before its ports close.
    if (this.#etcd && this.#handshake)
      await this.#etcd
        .remove(this.#segmentName!)
        .catch((e: Error) => this.#context.log('warn', `etcd: keys of ${this.#segmentName} not removed: ${e.message}`));
    this.#etcd?.close();
    await this.#handshake?.close();
    await this.#native.close();
    this.#batches.abandonAll('transport closed');
    this.#listeners.clear();
  }

  #checkOpen(): void {
    if (this.#closed) throw fail('ABORTED', 'transport is closed');
  }

  #own(peer: TransportPeer): WirePeer {
    const p = peer as WirePeer;
    if (p.owner !== this) throw fail('PEER_NOT_FOUND', `peer "${peer.segment}" was not opened by this ${PLUGIN_NAME} transport`);
    return p;
  }
}

export async function createWireTransport(context: TransportContext, options: WireOptions): Promise<Transport> {
  let bind = options.bindAddress ?? context.bindAddress;
  if (isIP(bind) === 0) {
    try {
      bind = (await lookup(bind)).address;
    } catch (cause) {
      throw new TransferError('INVALID_CONFIG', `cannot resolve the Mooncake listeners' bind address "${bind}": ${(cause as Error).message}`, {
        ...opts,
        cause,
      });
    }
  }
  if (!options.listen)
    context.log('info', 'Mooncake compatibility listener off (set listen / TE_MOONCAKE_WIRE_LISTEN=1 to serve Mooncake initiators); initiator only');
  const t = new MooncakeWireTransport(context, options, bind);
  await t.start();
  return t;
}
