import { TransferError } from '@te/connector';
import { loadBinding, PLUGIN_NAME, type HandleType } from './binding.js';

export interface FabricAllocation {
  /** Device address of the mapping (register this, or ranges inside it). */
  addr: bigint;
  /** Bytes mapped: the request rounded up to the allocation granularity. */
  size: bigint;
  device: number;
  handleType: HandleType;
}

export interface AllocateOptions {
  /** GPU ordinal (default 0). */
  device?: number;
  /** Handle type the memory is exportable with; must match the transport's `handleType` (default: $TE_NVLINK_HANDLE_TYPE or "fabric"). */
  handleType?: HandleType;
}

const fail = (message: string) => new TransferError('INVALID_ARGUMENT', message, { plugin: PLUGIN_NAME });

/**
 * Allocates GPU memory that mooncake-nvlink can share (cuMemCreate with an exportable
 * handle type, granularity-aligned, mapped read-write for its device). Only memory from
 * here can be registered with mooncake-nvlink. Free it with `freeFabricMemory` after
 * unregistering it.
 */
export function allocateFabricMemory(bytes: bigint | number, options: AllocateOptions = {}): FabricAllocation {
  const size = typeof bytes === 'number' && Number.isSafeInteger(bytes) && bytes > 0 ? BigInt(bytes) : bytes;
  if (typeof size !== 'bigint' || size <= 0n) throw fail(`Expected \`bytes\` to be a positive integer, got ${String(bytes)}`);
  const device = options.device ?? 0;
  if (!Number.isInteger(device) || device < 0) throw fail(`Expected the \`device\` option to be a GPU ordinal, got ${String(options.device)}`);
  const handleType = options.handleType ?? ((process.env.TE_NVLINK_HANDLE_TYPE as HandleType | undefined) || 'fabric');
  if (handleType !== 'fabric' && handleType !== 'posix-fd')
    throw fail(`Expected the \`handleType\` option to be "fabric" or "posix-fd", got ${JSON.stringify(handleType)}`);
  const a = loadBinding().allocator.allocate(device, size, handleType);
  return { addr: a.addr, size: a.size, device: a.device, handleType };
}

/** Frees memory from `allocateFabricMemory` (refused while it is registered). */
export function freeFabricMemory(memory: bigint | FabricAllocation): void {
  const addr = typeof memory === 'bigint' ? memory : memory?.addr;
  if (typeof addr !== 'bigint') throw fail('Expected an address (bigint) or the object allocateFabricMemory returned');
  loadBinding().allocator.free(addr);
}

/** The fabric allocation holding [addr, addr+length), or undefined when it is not from this allocator. */
export function findFabricAllocation(addr: bigint, length = 1n): FabricAllocation | undefined {
  const a = loadBinding().allocator.find(addr, length);
  return a ? { addr: a.addr, size: a.size, device: a.device, handleType: a.handleType } : undefined;
}
