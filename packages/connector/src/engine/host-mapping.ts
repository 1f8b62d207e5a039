// A raw host address is checked against this process's mappings before any transport
// registers it. A transport serving a peer dereferences registered memory itself (memcpy
// on a socket thread, process_vm_readv, a provider's copy loop): a region that is not
// mapped, or mapped without read and write access, would kill this process with SIGSEGV
// the first time a peer reads or writes it, long after the call that was wrong.
// ibv_reg_mr refuses such regions (EFAULT); this gives every transport the same promise.
import { readFile } from 'node:fs/promises';
import { TransferError } from '../errors/transfer-error.js';

const MAPS = '/proc/self/maps';

/** What is wrong with [addr, addr + length) in a `/proc/<pid>/maps` text; undefined: mapped read-write throughout. */
export function unusableHostRange(maps: string, addr: bigint, length: bigint): string | undefined {
  const end = addr + length;
  let cursor = addr;
  for (const line of maps.split('\n')) {
    const match = /^([0-9a-f]+)-([0-9a-f]+) (\S{4})/.exec(line);
    if (!match) continue;
    const from = BigInt(`0x${match[1]}`);
    const to = BigInt(`0x${match[2]}`);
    if (to <= cursor) continue;
    if (from > cursor) return `${hex(cursor)} to ${hex(from < end ? from : end)} is not mapped in this process`;
    const perms = match[3]!;
    if (perms[0] !== 'r' || perms[1] !== 'w') return `${hex(cursor)} to ${hex(to < end ? to : end)} is mapped ${perms} (not readable and writable)`;
    cursor = to;
    if (cursor >= end) return undefined;
  }
  return `${hex(cursor)} to ${hex(end)} is not mapped in this process`;
}

/**
 * Throws ADDRESS_OUT_OF_RANGE when host memory at `addr` cannot be registered. Where the
 * process's mappings cannot be read (not Linux), nothing is checked.
 */
export async function assertHostMapped(addr: bigint, length: bigint): Promise<void> {
  let maps: string;
  try {
    maps = await readFile(MAPS, 'utf8');
  } catch {
    return;
  }
  const problem = unusableHostRange(maps, addr, length);
  if (problem === undefined) return;
  throw new TransferError(
    'ADDRESS_OUT_OF_RANGE',
    `Cannot register host memory [${hex(addr)}, ${hex(addr + length)}): ${problem}. ` +
      'Register memory this process allocated and keeps mapped read-write (a JS buffer, allocateMemory, or a live allocation of its own) until unregisterMemory',
    { details: { addr: hex(addr), length: length.toString() } },
  );
}

function hex(value: bigint): string {
  return `0x${value.toString(16)}`;
}
