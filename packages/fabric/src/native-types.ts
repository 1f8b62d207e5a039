/**
 * The native surface shared by the libfabric plugins: their addons are built from
 * native/fabric (include/te/fabric/napi_addon.h). Declarations only.
 * Arguments are validated in TypeScript before they get here.
 */
import type { NativeAddonModule, NativeCallbacks, NativeTransportHandle } from '@te/connector';

/** Options of one native transport (validated and defaulted by the plugin's options schema). */
export interface NativeFabricOptions {
  /** The plugin's name, for messages. */
  plugin: string;
  /** The plugin's environment prefix ("TE_<NAME>"): native messages name its variables. */
  envPrefix?: string;
  segmentName: string;
  epoch: bigint;
  /** libfabric provider name ('' = automatic). */
  provider: string;
  /** Domain (NIC) names to use; empty = all of the provider's domains. */
  nics: string[];
  /** Node passed with FI_SOURCE to socket-based providers ('' = provider default). */
  sourceAddress: string;
  allowShm: boolean;
  maxRails: number;
  /** Endpoints per NIC (0 = automatic: 1 on hardware providers, by CPU count on socket-based ones). */
  railsPerNic?: number;
  /** CPUs this process may use (affinity capped by a cgroup quota); sizes the automatic rails. */
  cpus?: number;
  sliceSize: number;
  window: number;
  connectTimeoutMs: number;
  cancelGraceMs: number;
  deliveryComplete: boolean;
  writeFence: boolean;
  /** Slices one RMA may carry as a scatter-gather list (bounded by the provider's iov limits). */
  slicesPerOp: number;
  /** Microseconds a rail keeps polling after its last sign of work before it sleeps. */
  idleSpinUs: number;
  /** Received notifications not yet handed to listeners: per peer, and bytes in all. */
  notifyQueuePerPeer: number;
  notifyQueueBytes: number;
}

export interface NativeRail {
  provider: string;
  fabric: string;
  domain: string;
  /** The endpoint's address (fi_getname). */
  addr: Uint8Array;
  /** FI_MR_VIRT_ADDR: peers address this rail's memory by virtual address (else by offset in the MR). */
  virtAddr: boolean;
  mrMode: number;
  keySize: number;
  /** Slices one RMA operation carries at most (the provider's iov limits and `slicesPerOp`). */
  slicesPerOp: number;
  /** RMA operations posted on this rail so far, and the slices they carried. */
  rmaOps: number;
  rmaSlices: number;
  /** Of those operations, the ones posted with FI_DELIVERY_COMPLETE (fenced plain writes are not). */
  rmaDeliveryCompleteOps: number;
  /** Writes ask for delivery completion: the `deliveryComplete` option, fixed for the rail's life. */
  deliveryComplete: boolean;
  /** Times the rail's thread slept on its completion queue, and of those, the waits during which the provider moved data. */
  waits: number;
  waitsWithData: number;
}

export interface NativeRemoteRegion {
  addr: bigint;
  length: bigint;
  /** Start of the memory registration holding the region (offset addressing is relative to it). */
  base: bigint;
  /** One key per peer rail. */
  keys: bigint[];
}

export interface NativeFabricTransport extends NativeTransportHandle {
  rails(): NativeRail[];
  /** Registers [addr, addr+length) in every rail's domain (or inside the plugin's arena). Throws a TransferError. */
  /** Registers on a worker thread (fi_mr_reg can take long for large regions). */
  registerMemory(
    buffer: ArrayBuffer | ArrayBufferView | null,
    addr: bigint,
    length: bigint,
    remoteAccess: boolean,
  ): Promise<{ addr: bigint; keys: bigint[]; base: bigint }>;
  /** Starts the hello on every rail; `onOpen(id, ...)` reports. */
  openPeer(
    name: string,
    epoch: bigint,
    provider: string,
    rails: Uint8Array[],
    virtAddr: boolean[],
    sameProcess: boolean,
    regions: NativeRemoteRegion[],
  ): number;
  /** Pings every rail of the peer; `onCheck(id, ...)` reports. */
  checkPeer(peerId: number, timeoutMs: number): number;
  /** Whether registered memory starts at `addr` (false once closed). */
  isRegistered(addr: bigint): boolean;
}

export interface NativeDiscovery {
  builtWithLibfabric: boolean;
  version: string;
  providers: string[];
  rma: { provider: string; fabric: string; domain: string; mrMode: number; hardware: boolean }[];
  /** What automatic selection picks ('' = nothing fits, see `message`). */
  chosen: string;
  message: string;
}

export interface NativeFabricModule extends NativeAddonModule {
  /** `options` may carry a plugin's own fields, read by its addon's options hook. */
  FabricTransport: new (options: NativeFabricOptions, callbacks: NativeCallbacks) => NativeFabricTransport;
  discover(options: Partial<NativeFabricOptions>): NativeDiscovery;
  processEpoch(): bigint;
  /** false when the addon was compiled without libfabric (libfabric-dev missing). */
  builtWithLibfabric: boolean;
  protocolVersion: number;
}
