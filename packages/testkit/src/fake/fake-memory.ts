/**
 * The fake fabric's address space. JS buffers have no address visible to JS, so the
 * fake transport gives each registered buffer a synthetic one (stable per buffer and
 * offset), and `allocFakeDeviceMemory` hands out "device" memory reachable by raw address,
 * so routing of cuda memory can be tested without a GPU. Everything here is in-process.
 */
const BASE = 0x1000_0000_0000n;
// A gap after every block, so an off-by-one write lands in no one's memory.
const GUARD = 4096n;

interface Block {
  addr: bigint;
  bytes: Uint8Array;
}

const blocks: Block[] = [];
const byBuffer = new WeakMap<ArrayBufferLike, Map<number, bigint>>();
let next = BASE;

function reserve(length: number): bigint {
  const addr = next;
  next += ((BigInt(length) + 4095n) / 4096n) * 4096n + GUARD;
  return addr;
}

function viewOf(buffer: ArrayBuffer | SharedArrayBuffer | ArrayBufferView): Uint8Array {
  return ArrayBuffer.isView(buffer) ? new Uint8Array(buffer.buffer, buffer.byteOffset, buffer.byteLength) : new Uint8Array(buffer);
}

/** The synthetic address of a JS buffer (the same every time for the same memory). */
export function fakeAddressOf(buffer: ArrayBuffer | SharedArrayBuffer | ArrayBufferView): bigint {
  const bytes = viewOf(buffer);
  let offsets = byBuffer.get(bytes.buffer);
  if (!offsets) byBuffer.set(bytes.buffer, (offsets = new Map()));
  let addr = offsets.get(bytes.byteOffset);
  if (addr === undefined) {
    addr = reserve(bytes.byteLength);
    offsets.set(bytes.byteOffset, addr);
    blocks.push({ addr, bytes });
  }
  return addr;
}

/** Allocates simulated device memory: a raw address and the bytes behind it. */
export function allocFakeDeviceMemory(length: number): { addr: bigint; bytes: Uint8Array } {
  const bytes = new Uint8Array(length);
  const addr = reserve(length);
  blocks.push({ addr, bytes });
  return { addr, bytes };
}

/** The bytes at [addr, addr+length) if one block holds them all. */
export function fakeBytesAt(addr: bigint, length: bigint): Uint8Array | undefined {
  for (const b of blocks) {
    const end = b.addr + BigInt(b.bytes.byteLength);
    if (addr >= b.addr && addr + length <= end) {
      const off = Number(addr - b.addr);
      return b.bytes.subarray(off, off + Number(length));
    }
  }
  return undefined;
}
