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

export function checkMsgpackBounds(bytes: Uint8Array, maxDepth = 64): void {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const end = bytes.byteLength;
  // Elements still to read in each open container, innermost last.
  const open: number[] = [];
  let pos = 0;
  const fail = (why: string): never => {
    throw new MsgpackBoundsError(`malformed msgpack at byte ${pos}: ${why}`);
  };
  const need = (n: number): void => {
    if (n > end - pos) fail(`needs ${n} bytes, ${end - pos} remain`);
  };
  const u8 = (at: number): number => (at < end ? bytes[at]! : fail('truncated header'));
  const u16 = (at: number): number => (at + 2 <= end ? view.getUint16(at) : fail('truncated header'));
  const u32 = (at: number): number => (at + 4 <= end ? view.getUint32(at) : fail('truncated header'));

  const container = (header: number, elements: number): void => {
    need(header);
    pos += header;
    if (elements > end - pos) fail(`a container declares ${elements} elements with ${end - pos} bytes left`);
    if (elements > 0) {
      if (open.length >= maxDepth) fail(`nesting deeper than ${maxDepth}`);
      open.push(elements);
    }
  };
  const ext = (header: number, type: number, length: number): void => {
    if (!ALLOWED_EXT.has(type)) fail(`extension type 0x${type.toString(16)} is not accepted`);
    if (type === 0x42 && length > MAX_BIGINT_EXT_BYTES) fail(`a big integer of ${length} bytes`);
    need(header + length);
    pos += header + length;
  };

  while (pos < end) {
    const b = bytes[pos]!;
    const before = open.length;
    if (b <= 0x7f || b >= 0xe0) pos += 1;
    else if (b <= 0x8f) container(1, (b & 0x0f) * 2);
    else if (b <= 0x9f) container(1, b & 0x0f);
    else if (b <= 0xbf) {
      need(1 + (b & 0x1f));
      pos += 1 + (b & 0x1f);
    } else {
      switch (b) {
        case 0xc0:
        case 0xc2:
        case 0xc3:
          pos += 1;
          break;
        case 0xc4:
        case 0xd9:
          need(2 + u8(pos + 1));
          pos += 2 + u8(pos + 1);
          break;
        case 0xc5:
        case 0xda:
          need(3 + u16(pos + 1));
          pos += 3 + u16(pos + 1);
          break;
        case 0xc6:
        case 0xdb:
          need(5 + u32(pos + 1));
          pos += 5 + u32(pos + 1);
          break;
        case 0xc7:
          ext(3, u8(pos + 2), u8(pos + 1));
          break;
        case 0xc8:
          ext(4, u8(pos + 3), u16(pos + 1));
          break;
        case 0xc9:
          ext(6, u8(pos + 5), u32(pos + 1));
          break;
        case 0xca:
          need(5);
          pos += 5;
          break;
        case 0xcb:
          need(9);
          pos += 9;
          break;
        case 0xcc:
        case 0xd0:
          need(2);
          pos += 2;
          break;
        case 0xcd:
        case 0xd1:
          need(3);
          pos += 3;
          break;
        case 0xce:
        case 0xd2:
          need(5);
          pos += 5;
          break;
        case 0xcf:
        case 0xd3:
          need(9);
          pos += 9;
          break;
        case 0xd4:
          ext(2, u8(pos + 1), 1);
          break;
        case 0xd5:
          ext(2, u8(pos + 1), 2);
          break;
        case 0xd6:
          ext(2, u8(pos + 1), 4);
          break;
        case 0xd7:
          ext(2, u8(pos + 1), 8);
          break;
        case 0xd8:
          ext(2, u8(pos + 1), 16);
          break;
        case 0xdc:
          container(3, u16(pos + 1));
          break;
        case 0xdd:
          container(5, u32(pos + 1));
          break;
        case 0xde:
          container(3, u16(pos + 1) * 2);
          break;
        case 0xdf:
          container(5, u32(pos + 1) * 2);
          break;
        default:
          fail('type byte 0xc1 is never used'); // the only byte left in 0xc0-0xdf
      }
    }
    // A scalar, or an empty container, completed one element of the enclosing containers.
    if (open.length === before) {
      while (open.length > 0) {
        const left = open[open.length - 1]! - 1;
        if (left > 0) {
          open[open.length - 1] = left;
          break;
        }
        open.pop();
      }
    }
  }
  if (open.length > 0) fail('input ended inside a container');
}
