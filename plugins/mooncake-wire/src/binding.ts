/**
 * The native surface of mooncake-wire: the one place that declares what the addon exports
 * and loads it. Arguments are validated in TypeScript before they get here.
 */
import { fileURLToPath } from 'node:url';
import { loadNativeAddon } from '@te/connector';

export const PLUGIN_NAME = 'mooncake-wire';

export interface NativeTransportOptions {
  listen: boolean;
  bindAddress: string;
  port: number;
  maxConnections: number;
  maxConnectionsPerAddress: number;
  maxWaitingConnections: number;
  idleTimeoutMs: number;
  ioTimeoutMs: number;
  connectTimeoutMs: number;
  maxQueued: number;
}

export interface NativeCallbacks {
  /** A batch is terminal (see BatchTracker.complete). */
  onBatch(batchId: number, batchStatus: number, statuses: Int32Array, bytes: bigint, message: string, remoteMayBeWritten: boolean): void;
}

export interface NativePeer {
  host: string;
  port: number;
  v2: boolean;
  pool: boolean;
  lanes: number;
  bufferAddrs: BigUint64Array;
  bufferLengths: BigUint64Array;
}

/** What the data listener served (absent keys: not listening), and the initiator's connects. */
export interface NativeStats {
  connectionsOpened: number;
  writes?: number;
  reads?: number;
  bytesWritten?: number;
  bytesRead?: number;
  v2Requests?: number;
  v1Requests?: number;
  rejected?: number;
  truncated?: number;
  timeouts?: number;
  connectionsAccepted?: number;
  connectionsRefused?: number;
  /** Connections accepted over maxConnections or maxConnectionsPerAddress, served once a place freed. */
  connectionsWaited?: number;
  connectionsOpen?: number;
}

export interface NativeWireTransport {
  /** The bound data port (0 when not listening). */
  port(): number;
  registerMemory(buffer: ArrayBuffer | SharedArrayBuffer | ArrayBufferView | null, addr: bigint, length: bigint, remoteAccess: boolean): bigint;
  unregisterMemory(addr: bigint): Promise<void>;
  /** Starts lanes toward a target; connections open on first use. */
  openPeer(peer: NativePeer): number;
  closePeer(peerId: number): void;
  submit(peerId: number, opcodes: Uint8Array, localAddrs: BigUint64Array, remoteAddrs: BigUint64Array, lengths: BigUint64Array, timeoutMs: number): number;
  cancel(batchId: number, status: number): void;
  stats(): NativeStats;
  close(): Promise<void>;
}

export interface NativeModule {
  WireTransport: new (options: NativeTransportOptions, callbacks: NativeCallbacks) => NativeWireTransport;
  setErrorFactory(factory: (status: number, message: string) => Error): void;
  statusName(status: number): string;
}

let cached: NativeModule | undefined;

/** The package root (src/ and dist/ are both one level below it). */
export function packageRoot(): string {
  return fileURLToPath(new URL('..', import.meta.url));
}

export function loadBinding(): NativeModule {
  cached ??= loadNativeAddon<NativeModule>({
    plugin: PLUGIN_NAME,
    file: 'te_mooncake_wire.node',
    packageRoot: packageRoot(),
    envVar: 'TE_MOONCAKE_WIRE_ADDON',
    solutions: ['build it: `npm run build:native -w @te/mooncake-wire` (needs cmake >= 3.18 and g++; Debian: apt-get install -y cmake g++)'],
  });
  return cached;
}
