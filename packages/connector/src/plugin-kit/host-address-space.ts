import { NATIVE_STATUS } from '../errors/codes.js';
import { TransferError } from '../errors/transfer-error.js';
import { keepAttached } from '../spi/keep-attached.js';
import type { BufferSource, RegisterRequest } from '../spi/memory.js';

interface Region {
  addr: bigint;
  length: bigint;
  bytes: Uint8Array;
  remoteAccess: boolean;
}

const FIRST_ADDRESS = 0x5000_0000_0000n;
const GUARD = 0x1000n;

function bytesOf(buffer: BufferSource): Uint8Array {
  return ArrayBuffer.isView(buffer) ? new Uint8Array(buffer.buffer, buffer.byteOffset, buffer.byteLength) : new Uint8Array(buffer);
}

/**
 * Stable u64 addresses for JS buffers, for transports written in JavaScript: every region
 * a peer can name by address, and a bounds-checked view for each request.
 *
 * The registration rule (one for every transport): when the engine passes `addr` with the
 * `buffer`, another transport of this engine registered the buffer first and the region
 * already has that address — register it under exactly that address. Without `addr`, choose
 * one (`add` hands out fresh, never-reused addresses with a guard gap between regions).
 */
export class HostAddressSpace {
  private readonly regions: Region[] = [];
  private next = FIRST_ADDRESS;

  /** Registers `request.buffer`; returns its address (the engine's, or a fresh one). */
  add(request: RegisterRequest): bigint {
    if (!request.buffer) throw new TransferError('MEMORY_KIND_UNSUPPORTED', 'this transport registers JS buffers only (ArrayBuffer, typed arrays)');
    const bytes = bytesOf(request.buffer);
    if (BigInt(bytes.byteLength) < request.length)
      throw new TransferError('INVALID_ARGUMENT', `buffer of ${bytes.byteLength} bytes is shorter than the ${request.length} registered`);
    keepAttached(request.buffer);
    const addr = request.addr ?? this.next;
    if (this.regions.some((r) => addr < r.addr + r.length && r.addr < addr + request.length)) {
      throw new TransferError('MEMORY_OVERLAP', `0x${addr.toString(16)} (+${request.length}) overlaps a registered region`);
    }
    if (request.addr === undefined) this.next = addr + request.length + GUARD;
    this.regions.push({ addr, length: request.length, bytes: bytes.subarray(0, Number(request.length)), remoteAccess: request.remoteAccess });
    return addr;
  }

  remove(addr: bigint): boolean {
    const i = this.regions.findIndex((r) => r.addr === addr);
    if (i < 0) return false;
    this.regions.splice(i, 1);
    return true;
  }

  /**
   * The bytes of [addr, addr + length) inside one region, or the status a transport reports:
   * MEMORY_NOT_REGISTERED (no region there, or not remote-accessible for a peer's request),
   * ADDRESS_OUT_OF_RANGE (it starts in a region and runs past its end).
   */
  view(addr: bigint, length: bigint, remote: boolean): { status: number; bytes?: Uint8Array } {
    const r = this.regions.find((x) => addr >= x.addr && addr < x.addr + x.length && (!remote || x.remoteAccess));
    if (!r) return { status: NATIVE_STATUS.MEMORY_NOT_REGISTERED };
    if (addr + length > r.addr + r.length) return { status: NATIVE_STATUS.ADDRESS_OUT_OF_RANGE };
    const off = Number(addr - r.addr);
    return { status: NATIVE_STATUS.OK, bytes: r.bytes.subarray(off, off + Number(length)) };
  }

  get size(): number {
    return this.regions.length;
  }
}
