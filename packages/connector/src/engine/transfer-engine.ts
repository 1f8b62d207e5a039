import { hostname } from 'node:os';
import { TransferError } from '../errors/transfer-error.js';
import type { TeConfig, TeConfigInput } from '../config/types.js';
import { batchOf, type BatchResult, type Notification, type TransferBatch } from '../spi/batch.js';
import { DESCRIPTOR_VERSION, type SegmentDescriptor } from '../spi/descriptor.js';
import { isDeviceName, memoryKindOf, type DeviceName, type RegisterRequest, type WireValue } from '../spi/memory.js';
import type { TransportPlugin } from '../spi/plugin.js';
import { transferBatch, type TransferContext } from './batch-transfer.js';
import type { ControlServer } from './control-plane.js';
import type { ControlClient } from './control-client.js';
import type { Log } from './logger.js';
import { assembleEngine } from './assemble.js';
import { RegistrationQueue } from './registration-queue.js';
import { TRANSPORT_CLOSE_BOUND_MS } from './guarded-transport.js';
import { PeerTable } from './peer-table.js';
import { MemoryMap, type LocalRegion } from './memory-map.js';
import { checkSegmentName } from './segment-name.js';
import { type P2PHandshake, REVOKE_REQUEST } from './metadata.js';
import type { EtcdMetadata } from '../metadata/etcd-store.js';
import type { MetadataRecords } from '../metadata/records.js';
import type { BatchRecord, EngineMetrics } from './metrics.js';
import { BatchStats } from './batch-stats.js';
import type { AllocatedHandle, CreateEngineOptions, MemoryHandle, MemoryTarget, RegisterOptions, TransferOptions } from './engine-api.js';
import { registers, registrationRequest, registrationTargets, regionAddressOf, toBigInt } from './registration-request.js';
import { jsHostBuffer } from './js-host-buffer.js';
import { keepAttached } from '../spi/keep-attached.js';
import { Watchdog, beforeDeadline } from './watchdog.js';
import { checkListener } from './listener-check.js';
import { startMetricLog } from '../metrics/periodic-log.js';
import { commonTransports, routesWith, type EngineTransport, type WriteCapability } from './router.js';

export type { AllocatedHandle, CreateEngineOptions, MemoryHandle, MemoryTarget, RegisterOptions, TransferOptions } from './engine-api.js';

/**
 * The transfer engine of a process: its transports, its segment (registered memory and
 * descriptor) and its control endpoint. KV connectors, EC connectors and offload users
 * share one instance (see `initTransferEngine`).
 */
export class TransferEngine {
  readonly segmentName: string;
  readonly epoch: bigint;
  private readonly memory = new MemoryMap();
  private readonly peers: PeerTable;
  private readonly listeners = new Set<(n: Notification) => void>();
  /** Allocations by address, with the transport that made them (none: plain host memory). */
  private readonly allocations = new Map<bigint, EngineTransport | undefined>();
  private readonly registrations = new RegistrationQueue();
  private closing: Promise<void> | undefined;
  private readonly stats: BatchStats;
  /** What `transfer` needs of this engine. */
  private readonly batches: TransferContext;

  private constructor(
    readonly config: TeConfig,
    readonly control: ControlServer,
    private readonly handshake: P2PHandshake,
    private readonly held: EngineTransport[],
    segmentName: string,
    epoch: bigint,
    private readonly log: Log,
    /** Descriptors in etcd (metadata type `etcd`); otherwise they are fetched from peers. */
    private readonly etcd?: EtcdMetadata,
  ) {
    this.stats = new BatchStats(config.metrics, log);
    this.peers = new PeerTable(held, (segment) => (segment === this.segmentName ? Promise.resolve(this.descriptor()) : this.fetchDescriptor(segment)));
    this.segmentName = segmentName;
    this.epoch = epoch;
    this.batches = this.transferContext();
    control.handle(REVOKE_REQUEST, (body) => this.onPeerRevoked(body));
    for (const t of held) {
      t.transport.onNotification?.((n) => {
        for (const l of this.listeners) {
          try {
            l(n);
          } catch (e) {
            this.log('error', `notification listener threw: ${(e as Error).message}`);
          }
        }
      });
    }
  }

  /** Builds an engine; most code calls `initTransferEngine` to share one per process. */
  static async create(input: TeConfig | TeConfigInput, options: CreateEngineOptions = {}): Promise<TransferEngine> {
    // The watch may report a changed peer before the engine exists: held until then.
    let onPeerChanged: (segment: string) => void = () => undefined;
    const parts = await assembleEngine(input, options, (segment) => onPeerChanged(segment));
    const { config, control, handshake, held, endpoint, epoch, log, etcd } = parts;
    const engine = new TransferEngine(config, control, handshake, held, endpoint, epoch, log, etcd);
    onPeerChanged = (segment) => void engine.forgetSegment(segment).catch(() => undefined);
    if (config.metrics) engine.stopMetricLog = startMetricLog(engine, (line) => log('info', line), config.metricIntervalS);
    await engine.publish();
    log('info', `segment ${endpoint} epoch ${epoch} with transports ${held.map((t) => t.name).join(', ')}`);
    return engine;
  }

  private transferContext(): TransferContext {
    const { held, memory, peers, stats, config } = this;
    return { held, memory, peers, watchdog: new Watchdog(this.log), stats, config, forgetSegment: (segment) => this.forgetSegment(segment) };
  }

  /** Names of the transports this engine holds, primary first. */
  get transports(): string[] {
    return this.held.map((t) => t.name);
  }

  /** The plugin object of a held transport (capabilities, version). */
  plugin(name: string): TransportPlugin | undefined {
    return this.held.find((t) => t.name === name)?.plugin;
  }

  private assertOpen(): void {
    if (this.closing) throw new TransferError('ENGINE_CLOSED', `The transfer engine of segment ${this.segmentName} is closed`);
  }

  /**
   * Registers memory with every transport that handles its kind and publishes it to peers.
   * A JS buffer is kept alive until `unregisterMemory`; raw addresses (GPU pointers) need `length` and `device`.
   */
  async registerMemory(target: MemoryTarget, options: RegisterOptions = {}): Promise<MemoryHandle> {
    this.assertOpen();
    const request = registrationRequest(target, options);
    return this.registrations.run(() => this.registerNow(request));
  }

  private async registerNow(request: RegisterRequest): Promise<MemoryHandle> {
    this.assertOpen();
    if (request.addr !== undefined) this.memory.assertFree(request.addr, request.length);
    const able = await registrationTargets(this.held, request);
    if (request.buffer !== undefined) keepAttached(request.buffer);
    const done: { t: EngineTransport; addr: bigint }[] = [];
    const attrs: Record<string, unknown> = {};
    let addr = request.addr;
    try {
      for (const t of able) {
        const reg = await t.transport.registerMemory(addr === undefined ? request : { ...request, addr });
        if (addr === undefined) {
          addr = reg.addr;
          this.memory.assertFree(addr, request.length);
        } else if (reg.addr !== addr) {
          throw new TransferError('INTERNAL', `transport ${t.name} registered the buffer at 0x${reg.addr.toString(16)}, another at 0x${addr.toString(16)}`);
        }
        done.push({ t, addr: reg.addr });
        if (reg.attrs !== undefined) attrs[t.name] = reg.attrs;
      }
      if (this.registrations.abandoned)
        throw new TransferError('ENGINE_CLOSED', `The transfer engine of segment ${this.segmentName} closed during this registration`);
    } catch (error) {
      await Promise.allSettled(done.map((d) => d.t.transport.unregisterMemory(d.addr)));
      throw error;
    }
    const region: LocalRegion = { addr: addr!, length: request.length, device: request.device, remoteAccess: request.remoteAccess, attrs };
    if (request.buffer !== undefined) region.buffer = request.buffer;
    this.memory.insert(region);
    await this.publish();
    return { addr: region.addr, length: region.length, device: region.device, remoteAccess: region.remoteAccess };
  }

  /**
   * Allocates and registers memory peers can reach. A transport with an allocator for the
   * device (a pre-registered pool, fabric GPU memory) provides it; otherwise host memory is plain
   * JS memory. Use it instead of `registerMemory` when writing code for any transport.
   */
  async allocateMemory(length: bigint | number, options: { device?: DeviceName; remoteAccess?: boolean } = {}): Promise<AllocatedHandle> {
    this.assertOpen();
    const size = toBigInt('length', length);
    if (size === 0n) throw new TransferError('INVALID_ARGUMENT', 'Cannot allocate 0 bytes');
    const device = options.device ?? 'cpu';
    if (!isDeviceName(device)) throw new TransferError('INVALID_ARGUMENT', `Expected \`device\` to be "cpu" or "cuda:N", got ${JSON.stringify(device)}`);
    const kind = memoryKindOf(device);
    const allocators = this.held.filter((t) => t.transport.allocateMemory && t.plugin.capabilities.memoryKinds.includes(kind));
    // A transport that moves only its own memory comes first: memory from another allocator it could not move.
    const allocator = allocators.find((t) => t.plugin.capabilities.ownMemoryOnly) ?? allocators[0];
    const registerOptions: RegisterOptions = options.remoteAccess === undefined ? {} : { remoteAccess: options.remoteAccess };
    if (!allocator) {
      if (kind !== 'cpu')
        throw new TransferError(
          'MEMORY_KIND_UNSUPPORTED',
          `No transport of this engine (${this.transports.join(', ')}) allocates ${kind} memory; allocate it yourself and use registerMemory({addr, length, device})`,
        );
      const buffer = jsHostBuffer(size);
      const handle = await this.registerMemory(buffer, registerOptions);
      this.allocations.set(handle.addr, undefined);
      return { ...handle, buffer };
    }
    const a = await allocator.transport.allocateMemory!(size, device);
    try {
      const handle = await this.registerMemory(a.buffer ?? { addr: a.addr, length: a.length, device }, { ...registerOptions, ...(a.buffer ? {} : { device }) });
      this.allocations.set(handle.addr, allocator);
      return a.buffer ? { ...handle, buffer: a.buffer } : handle;
    } catch (error) {
      await allocator.transport.freeMemory?.(a.addr).catch(() => undefined);
      throw error;
    }
  }

  /** Unregisters and returns memory from `allocateMemory`. */
  async freeMemory(target: MemoryHandle | bigint): Promise<void> {
    const addr = regionAddressOf(target);
    if (!this.allocations.has(addr)) throw new TransferError('MEMORY_NOT_REGISTERED', `0x${addr.toString(16)} was not allocated by allocateMemory`);
    const allocator = this.allocations.get(addr);
    await this.unregisterMemory(addr);
    this.allocations.delete(addr);
    await allocator?.transport.freeMemory?.(addr);
  }

  /** Unregisters a region by handle or start address; peers' later requests to it fail. */
  async unregisterMemory(target: MemoryHandle | bigint): Promise<void> {
    this.assertOpen();
    const addr = regionAddressOf(target);
    return this.registrations.run(async () => {
      // A batch of this engine still using it (in flight, or unsettled past its deadline): refused.
      const held = this.memory.find(addr, 1n);
      if (held?.addr === addr) this.batches.watchdog.assertUnused(held);
      const region = this.memory.retire(addr);
      let results: PromiseSettledResult<void>[];
      try {
        if (region.remoteAccess) {
          // Peers drop what they cached of it (imported handles, keys) and finish their
          // batches into it before the transports let go of the memory.
          await this.publish();
          await this.handshake.revoke({ segment: this.segmentName, epoch: this.epoch }, addr, this.config.timeouts.handshakeMs);
        }
        const holders = this.held.filter((t) => registers(t, region.device, region.buffer !== undefined));
        results = await Promise.allSettled(holders.map((t) => t.transport.unregisterMemory(addr)));
      } finally {
        this.memory.retired();
      }
      await this.publish();
      const failed = results.find((r) => r.status === 'rejected') as PromiseRejectedResult | undefined;
      if (failed) throw failed.reason;
    });
  }

  /**
   * The JS bytes behind registered host memory [addr, addr + length), when the region was
   * registered from a JS buffer (or allocated by `allocateMemory` as one); undefined for
   * memory registered by address or device memory. Native helpers that copy locally (the
   * staging copier) find the region's real address from it: a transport written in JavaScript names JS buffers by addresses of its own.
   */
  hostView(addr: bigint, length: bigint): Uint8Array | undefined {
    const r = this.memory.find(addr, length);
    if (!r?.buffer || r.device !== 'cpu') return undefined;
    const b = r.buffer;
    const bytes = ArrayBuffer.isView(b) ? new Uint8Array(b.buffer, b.byteOffset, b.byteLength) : new Uint8Array(b);
    return bytes.subarray(Number(addr - r.addr), Number(addr - r.addr + length));
  }

  /** Regions registered by this process. */
  registeredMemory(): MemoryHandle[] {
    return this.memory.all().map((r) => ({ addr: r.addr, length: r.length, device: r.device, remoteAccess: r.remoteAccess }));
  }

  /** This process's segment descriptor, as peers receive it. */
  descriptor(): SegmentDescriptor {
    return {
      version: DESCRIPTOR_VERSION,
      name: this.segmentName,
      epoch: this.epoch,
      hostname: hostname(),
      pid: process.pid,
      transports: Object.fromEntries(
        this.held.map((t) => [
          t.name,
          { class: t.plugin.capabilities.class, memoryKinds: [...t.plugin.capabilities.memoryKinds], endpoint: t.transport.endpoint() },
        ]),
      ),
      buffers: this.memory
        .all()
        .filter((r) => r.remoteAccess)
        .map((r) => ({ addr: r.addr, length: r.length, device: r.device, attrs: r.attrs as Record<string, WireValue> })),
    };
  }

  private async publish(): Promise<void> {
    // The control plane serves the descriptor in every mode (revocation and peers that
    // fetch it directly); with etcd it is also written there.
    const d = this.descriptor();
    await this.handshake.publish(d);
    await this.etcd?.publish(d);
  }

  /** A peer's descriptor: from etcd when configured, else from the peer itself. */
  private async fetchDescriptor(segment: string): Promise<SegmentDescriptor> {
    const { handshakeMs } = this.config.timeouts;
    if (!this.etcd) {
      // A peer of another engine (a transport speaks its metadata protocol) first.
      for (const t of this.held) {
        const foreign = await t.transport.lookupSegment?.(segment, handshakeMs);
        if (foreign) return foreign;
      }
      return this.handshake.fetch(segment, handshakeMs, this.segmentName);
    }
    const d = await this.etcd.fetch(segment, handshakeMs);
    // Tell the owner this process holds its descriptor before the descriptor is used, so an
    // unregistration that follows (revocation, over the control plane in every mode) reaches
    // this process before the owner frees the memory. A peer that does not answer within
    // the deadline does not fail the lookup: the transports refuse stale access on their own.
    await this.handshake.fetch(segment, handshakeMs, this.segmentName).catch((e: unknown) => {
      this.log('debug', `${segment} did not take note of this process (${(e as Error)?.message ?? e}); its unregistrations will not be announced here`);
    });
    return d;
  }

  /**
   * Records in the cluster store beside the descriptors (metadata type `etcd`), for runtimes
   * that find each other through it; undefined with `p2p` metadata.
   */
  get metadataRecords(): MetadataRecords | undefined {
    return this.etcd;
  }

  /** A client for a peer's control endpoint, shared by every user of the engine. */
  controlClient(segment: string): ControlClient {
    this.assertOpen();
    return this.handshake.client(checkSegmentName(segment));
  }

  /**
   * Fetches (once, or again with `refresh`) a peer's descriptor and opens the transports
   * both sides share (connections, channels, key imports), so the first transfer does not
   * pay for them. With `connect: false` only the descriptor is fetched.
   */
  async openSegment(segment: string, options: { refresh?: boolean; connect?: boolean } = {}): Promise<SegmentDescriptor> {
    this.assertOpen();
    checkSegmentName(segment);
    if (options.refresh) await this.forgetSegment(segment);
    const state = await this.peers.state(segment);
    if (options.connect !== false && segment !== this.segmentName) {
      let candidates: EngineTransport[] = [];
      try {
        candidates = state.candidates ??= commonTransports(this.held, state.descriptor, this.config.forceTcp);
      } catch {
        // No shared transport: the descriptor is still useful; a transfer will say why.
      }
      const deadline = Date.now() + this.config.timeouts.connectMs;
      // Held while connecting, so the peer is not evicted under it (and what it opens on a
      // peer forgotten meanwhile is closed when it lets go).
      this.peers.acquire(state);
      try {
        await Promise.all(
          candidates.map((via) => beforeDeadline(this.peers.open(state, via), deadline, undefined, `connecting to ${segment} over ${via.name}`)),
        );
      } finally {
        this.peers.release(state);
      }
    }
    return state.descriptor;
  }

  /**
   * Whether a write from local `local` to the peer's `remote` would go through a transport that gathers rows
   * (`capabilities.gatherWrites`), so a caller can send strided rows as gathered writes rather than copy them into
   * staging memory first. Fetches the peer's descriptor if it is not cached; false when no transport routes such a write.
   */
  async gathersWrites(segment: string, local: bigint, remote: bigint): Promise<boolean> {
    return this.routesWith(segment, local, remote, 'gatherWrites');
  }

  /** As gathersWrites, for writes into strided rows of the peer's memory (`capabilities.scatterWrites`). */
  async scattersWrites(segment: string, local: bigint, remote: bigint): Promise<boolean> {
    return this.routesWith(segment, local, remote, 'scatterWrites');
  }

  /** As gathersWrites, for verified writes (`capabilities.verifiedWrites`): the caller may then set `TransferBatch.verifyWrites`. */
  async verifiesWrites(segment: string, local: bigint, remote: bigint): Promise<boolean> {
    return this.routesWith(segment, local, remote, 'verifiedWrites');
  }

  private async routesWith(segment: string, local: bigint, remote: bigint, capability: WriteCapability): Promise<boolean> {
    this.assertOpen();
    const state = await this.peers.state(checkSegmentName(segment));
    state.candidates ??= commonTransports(this.held, state.descriptor, this.config.forceTcp);
    return routesWith(this.memory, state.routing, state.candidates, { local, remote }, capability);
  }

  /** Drops what is cached about a peer (descriptor, transport connections). */
  async forgetSegment(segment: string): Promise<void> {
    this.etcd?.forget(segment);
    await this.peers.forget(segment);
  }

  /**
   * Moves a batch to or from a peer segment. Resolves when every request succeeded;
   * otherwise rejects with a TransferError whose `statuses` holds each request's status.
   */
  async transfer(segment: string, batch: TransferBatch, options: TransferOptions = {}): Promise<BatchResult> {
    this.assertOpen();
    return transferBatch(this.batches, segment, batch, options);
  }

  /**
   * A peer unregistered a region (REVOKE_REQUEST): what is cached of it goes (descriptor,
   * transport peers, and with them imported handles and keys), and the answer waits until
   * the batches in flight to it settled, so nothing of this process still writes into the
   * region when the owner frees it. The next transfer fetches a fresh descriptor.
   */
  private async onPeerRevoked(body: unknown): Promise<{ dropped: boolean }> {
    const m = body as { segment?: unknown; epoch?: unknown; addr?: unknown } | null;
    if (typeof m?.segment !== 'string' || (typeof m.epoch !== 'bigint' && typeof m.epoch !== 'number') || typeof m.addr !== 'bigint') {
      throw new TransferError('INVALID_ARGUMENT', 'malformed revocation: expected {segment, epoch, addr}');
    }
    const pending = this.peers.known(m.segment);
    const state = await pending?.catch(() => undefined);
    if (!state || state.descriptor.epoch !== BigInt(m.epoch)) return { dropped: false };
    if (!state.descriptor.buffers.some((b) => b.addr === m.addr)) return { dropped: false };
    await this.forgetSegment(m.segment);
    await this.peers.idle(state);
    return { dropped: true };
  }

  /** Counters collected when `metrics` (MC_TE_METRIC) is on. */
  metrics(): EngineMetrics {
    return this.stats.metrics();
  }

  /** Calls `observer` after every batch settles (metrics exporters use it); returns the unsubscribe. */
  observeBatches(observer: (r: BatchRecord) => void): () => void {
    return this.stats.observe(observer);
  }

  /** Batches in flight now, by transport. */
  inFlight(): Record<string, number> {
    return this.stats.inFlight();
  }

  /** Convenience: one WRITE of `length` bytes from local `local` to the peer's `remote`. */
  async write(segment: string, local: bigint, remote: bigint, length: bigint | number, options?: TransferOptions): Promise<BatchResult> {
    return this.transfer(segment, batchOf([{ op: 'write', local, remote, length }]), options);
  }

  /** Convenience: one READ of `length` bytes from the peer's `remote` into local `local`. */
  async read(segment: string, local: bigint, remote: bigint, length: bigint | number, options?: TransferOptions): Promise<BatchResult> {
    return this.transfer(segment, batchOf([{ op: 'read', local, remote, length }]), options);
  }

  /** Subscribes to notifications from peers; returns the unsubscribe function. */
  onNotification(listener: (notification: Notification) => void): () => void {
    checkListener(listener, "onNotification's listener");
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Facts about each transport for `te doctor`. */
  describe(): Record<string, unknown> {
    return Object.fromEntries(
      this.held.map((t) => [t.name, { version: t.plugin.version, capabilities: t.plugin.capabilities, ...(t.transport.describe?.() ?? {}) }]),
    );
  }

  get closed(): boolean {
    return this.closing !== undefined;
  }

  /** Stops MC_TE_METRIC's periodic line (set when metrics are on). */
  private stopMetricLog: (() => void) | undefined;

  /** Closes transports and the control endpoint. Idempotent. A registration under way gets TRANSPORT_CLOSE_BOUND_MS to finish. */
  close(): Promise<void> {
    this.stopMetricLog?.();
    this.closing ??= (async () => {
      // From here on peers are told this process is going away, not that its handlers are unknown.
      this.control.refuseRequests('this process is closing its transfer engine');
      await this.registrations.drain(TRANSPORT_CLOSE_BOUND_MS, this.log);
      // Memory from transport allocators goes back (a transport's pool may outlive one engine).
      for (const [addr, allocator] of this.allocations) {
        if (!allocator) continue;
        if (this.memory.find(addr, 1n)) {
          this.memory.remove(addr);
          await Promise.allSettled(this.held.map((t) => t.transport.unregisterMemory(addr)));
        }
        await allocator.transport.freeMemory?.(addr).catch(() => undefined);
      }
      this.allocations.clear();
      // Closing the handshake first fails descriptor fetches still in flight, so close()
      // does not wait out their timeouts.
      await this.handshake.close();
      // Revoking the etcd lease removes this process's descriptor at once.
      await this.etcd?.close();
      for (const segment of this.peers.segments()) await this.forgetSegment(segment);
      await Promise.allSettled(this.held.map((t) => t.transport.close()));
      await this.control.close();
      this.listeners.clear();
    })();
    return this.closing;
  }
}

/** Builds a standalone engine (tests, tools); applications share one with `initTransferEngine`. */
export function createTransferEngine(config: TeConfig | TeConfigInput, options?: CreateEngineOptions): Promise<TransferEngine> {
  return TransferEngine.create(config, options);
}
