// The engine's public argument and handle types (re-exported from the package index).
import type { DeviceName, BufferSource } from '../spi/memory.js';
import type { PluginRegistry } from '../registry/registry.js';

/** A registered region as the caller sees it. */
export interface MemoryHandle {
  readonly addr: bigint;
  readonly length: bigint;
  readonly device: DeviceName;
  readonly remoteAccess: boolean;
}

/** Memory from `allocateMemory`: registered, and viewable from JS when it is host memory. */
export interface AllocatedHandle extends MemoryHandle {
  readonly buffer?: Uint8Array;
}

export type MemoryTarget = BufferSource | { addr: bigint; length: bigint | number; device?: DeviceName };

export interface RegisterOptions {
  device?: DeviceName;
  /** Whether peers may read/write it (default true). */
  remoteAccess?: boolean;
}

export interface TransferOptions {
  timeoutMs?: number;
  signal?: AbortSignal;
  notify?: Uint8Array;
}

export interface CreateEngineOptions {
  /** Registry to resolve plugin names with (default: the process-wide registry). */
  registry?: PluginRegistry;
  /** Environment used by plugins' option parsing (default: process.env). */
  env?: NodeJS.ProcessEnv;
}
