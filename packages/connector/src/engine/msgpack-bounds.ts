/**
 * A pass over msgpack bytes before they are decoded, because the decoder trusts headers:
 * msgpackr allocates and walks an array or map of the length its header declares before it
 * notices that the input ended, so a 5-byte message declaring 10^7 elements held the event
 * loop for 350 ms and took 80 MB, and some extension types make it decode further values
 * with no bound. This scan allocates nothing and rejects, with a reason:
 *   - a container declaring more elements than bytes remain (each element takes one at least);
 *   - a string, binary or extension payload running past the end;
 *   - nesting deeper than `maxDepth`;
 *   - extension types te never sends: only undefined (0x00), big integers (0x42, short),
 *     typed arrays (0x74) and timestamps (0xff) pass. The others (records, structured-clone
 *     references, Set, Error, RegExp, bundled strings) decode more input than their payload.
 * Every byte is scanned as a sequence of values, not only the first value, so nothing the
 * decoder might read is left unchecked.
 */
export class MsgpackBoundsError extends Error {}

const ALLOWED_EXT = new Set([0x00, 0x42, 0x74, 0xff]);
/** Big integers te sends fit in 64 bits (plain int64 encodings); a long one costs quadratic time. */
const MAX_BIGINT_EXT_BYTES = 32;

/** Bytes a value of fixed size takes, type byte included: nil, booleans, floats, integers. */
const FIXED_SIZE = new Map([
  [0xc0, 1],
  [0xc2, 1],
  [0xc3, 1],
  [0xca, 5],
  [0xcb, 9],
  [0xcc, 2],
  [0xcd, 3],
  [0xce, 5],
  [0xcf, 9],
  [0xd0, 2],
  [0xd1, 3],
  [0xd2, 5],
  [0xd3, 9],
]);
/** fixext 1, 2, 4, 8, 16: the payload length by type byte. */
const FIXEXT_LENGTH = new Map([
  [0xd4, 1],
  [0xd5, 2],
  [0xd6, 4],
  [0xd7, 8],
  [0xd8, 16],
]);

export function checkMsgpackBounds(bytes: Uint8Array, maxDepth = 64): void {
  const scan = new BoundsScan(bytes, maxDepth);
  while (!scan.done) scan.next();
  scan.finish();
}

/** The scan's position and the containers open there. */
class BoundsScan {
  private readonly view: DataView;
  private readonly end: number;
  /** Elements still to read in each open container, innermost last. */
  private readonly open: number[] = [];
  private pos = 0;

  constructor(
    private readonly bytes: Uint8Array,
    private readonly maxDepth: number,
  ) {
    this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    this.end = bytes.byteLength;
  }

  get done(): boolean {
    return this.pos >= this.end;
  }

  /** Steps over one value's header (a scalar's payload too: a container's elements are values of their own). */
  next(): void {
    const before = this.open.length;
    this.value(this.bytes[this.pos]!);
    // A scalar, or an empty container, completed one element of the enclosing containers.
    if (this.open.length === before) this.completeElement();
  }

  finish(): void {
    if (this.open.length > 0) this.fail('input ended inside a container');
  }

  private value(b: number): void {
    if (b <= 0x7f || b >= 0xe0)
      this.pos += 1; // positive and negative fixint
    else if (b <= 0x8f)
      this.container(1, (b & 0x0f) * 2); // fixmap
    else if (b <= 0x9f)
      this.container(1, b & 0x0f); // fixarray
    else if (b <= 0xbf)
      this.skip(1 + (b & 0x1f)); // fixstr
    else if (FIXED_SIZE.has(b)) this.skip(FIXED_SIZE.get(b)!);
    else if (FIXEXT_LENGTH.has(b)) this.ext(2, this.u8(this.pos + 1), FIXEXT_LENGTH.get(b)!);
    else this.sized(b);
  }

  /** A type whose length field follows its type byte: str, bin and ext 8/16/32, array and map 16/32. */
  private sized(b: number): void {
    const at = this.pos + 1;
    switch (b) {
      case 0xc4:
      case 0xd9:
        return this.skip(2 + this.u8(at));
      case 0xc5:
      case 0xda:
        return this.skip(3 + this.u16(at));
      case 0xc6:
      case 0xdb:
        return this.skip(5 + this.u32(at));
      case 0xc7:
        return this.ext(3, this.u8(at + 1), this.u8(at));
      case 0xc8:
        return this.ext(4, this.u8(at + 2), this.u16(at));
      case 0xc9:
        return this.ext(6, this.u8(at + 4), this.u32(at));
      case 0xdc:
        return this.container(3, this.u16(at));
      case 0xdd:
        return this.container(5, this.u32(at));
      case 0xde:
        return this.container(3, this.u16(at) * 2);
      case 0xdf:
        return this.container(5, this.u32(at) * 2);
      default:
        this.fail('type byte 0xc1 is never used'); // the only byte left in 0xc0-0xdf
    }
  }

  private completeElement(): void {
    const open = this.open;
    while (open.length > 0) {
      const left = open[open.length - 1]! - 1;
      if (left > 0) {
        open[open.length - 1] = left;
        return;
      }
      open.pop();
    }
  }

  private container(header: number, elements: number): void {
    this.skip(header);
    if (elements > this.end - this.pos) this.fail(`a container declares ${elements} elements with ${this.end - this.pos} bytes left`);
    if (elements > 0) {
      if (this.open.length >= this.maxDepth) this.fail(`nesting deeper than ${this.maxDepth}`);
      this.open.push(elements);
    }
  }

  private ext(header: number, type: number, length: number): void {
    if (!ALLOWED_EXT.has(type)) this.fail(`extension type 0x${type.toString(16)} is not accepted`);
    if (type === 0x42 && length > MAX_BIGINT_EXT_BYTES) this.fail(`a big integer of ${length} bytes`);
    this.skip(header + length);
  }

  private skip(n: number): void {
    if (n > this.end - this.pos) this.fail(`needs ${n} bytes, ${this.end - this.pos} remain`);
    this.pos += n;
  }

  private u8(at: number): number {
    return at < this.end ? this.bytes[at]! : this.fail('truncated header');
  }

  private u16(at: number): number {
    return at + 2 <= this.end ? this.view.getUint16(at) : this.fail('truncated header');
  }

  private u32(at: number): number {
    return at + 4 <= this.end ? this.view.getUint32(at) : this.fail('truncated header');
  }

  private fail(why: string): never {
    throw new MsgpackBoundsError(`malformed msgpack at byte ${this.pos}: ${why}`);
  }
}
