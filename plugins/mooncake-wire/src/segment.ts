/**
 * Mooncake's segment descriptor (protocol "tcp"): what a Mooncake peer publishes about its
 * registered memory and data port, and what this plugin publishes to Mooncake peers. Parsing
 * is strict and all-or-nothing, like Mooncake's own decoder, plus what a careful reader adds:
 * buffers must not wrap or overlap, and their number is bounded.
 */
import { TransferError } from '@te/connector';
import { parseJson64, stringifyJson64, type Json64 } from './json64.js';

export interface MooncakeBuffer {
  name: string;
  addr: bigint;
  length: bigint;
}

export interface MooncakeSegment {
  /** `host:handshake-port` ("[v6]:port" for IPv6). */
  name: string;
  tcpDataPort: number;
  /** 2: acknowledged framing; 1 (or a descriptor without the field): the legacy framing. */
  tcpProtoVersion: number;
  buffers: MooncakeBuffer[];
  timestamp?: string;
}

export const MAX_BUFFERS = 65536;
const U64_END = 1n << 64n;

function bad(code: 'BAD_FRAME' | 'NO_COMMON_TRANSPORT', segment: string, why: string): TransferError {
  return new TransferError(code, `descriptor of Mooncake segment "${segment}" ${why}`, { plugin: 'mooncake-wire', details: { segment } });
}

/** Splits `host:port` (IPv6 in brackets). Throws INVALID_ARGUMENT when it is not one. */
export function splitSegmentName(name: string): { host: string; port: number } {
  const m = /^(?:\[([0-9a-fA-F:.]+)\]|([^:[\]\s]+)):(\d{1,5})$/.exec(name);
  const port = m ? Number(m[3]) : 0;
  if (!m || port < 1 || port > 65535) {
    throw new TransferError('INVALID_ARGUMENT', `"${name}" is not a Mooncake segment name (host:port, with the handshake port)`, { plugin: 'mooncake-wire' });
  }
  return { host: m[1] ?? m[2]!, port };
}

export function joinSegmentName(host: string, port: number): string {
  return host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
}

function int(v: Json64 | undefined): bigint | undefined {
  return typeof v === 'bigint' ? v : undefined;
}

/** Parses a descriptor's JSON text (as fetched for `segment`). Throws BAD_FRAME / NO_COMMON_TRANSPORT. */
export function parseSegment(text: string, segment: string): MooncakeSegment {
  let v: Json64;
  try {
    v = parseJson64(text);
  } catch (e) {
    throw bad('BAD_FRAME', segment, `is not JSON: ${(e as Error).message}`);
  }
  if (v === null || typeof v !== 'object' || Array.isArray(v)) throw bad('BAD_FRAME', segment, 'is not a JSON object');
  const name = v.name;
  if (typeof name !== 'string' || name.length === 0) throw bad('BAD_FRAME', segment, 'has no `name`');
  const protocol = v.protocol;
  const speaksTcp = protocol === 'tcp' || (Array.isArray(protocol) && protocol.includes('tcp'));
  if (!speaksTcp)
    throw bad(
      'NO_COMMON_TRANSPORT',
      segment,
      `offers protocol ${JSON.stringify(stringifyJson64(protocol ?? null))}, not "tcp": this plugin speaks Mooncake's TCP transport only`,
    );
  const port = int(v.tcp_data_port);
  if (port === undefined || port < 1n || port > 65535n) throw bad('BAD_FRAME', segment, 'has no valid `tcp_data_port`');
  const version = v.tcp_proto_version === undefined ? 1n : int(v.tcp_proto_version);
  if (version === undefined || version < 0n || version > 1000n) throw bad('BAD_FRAME', segment, 'has an invalid `tcp_proto_version`');
  const list = v.buffers ?? [];
  if (!Array.isArray(list)) throw bad('BAD_FRAME', segment, '`buffers` is not an array');
  if (list.length > MAX_BUFFERS) throw bad('BAD_FRAME', segment, `lists ${list.length} buffers, more than ${MAX_BUFFERS}`);
  const buffers: MooncakeBuffer[] = list.map((b, i) => {
    if (b === null || typeof b !== 'object' || Array.isArray(b)) throw bad('BAD_FRAME', segment, `buffer ${i} is not an object`);
    const addr = int(b.addr);
    const length = int(b.length);
    if (typeof b.name !== 'string' || b.name.length === 0) throw bad('BAD_FRAME', segment, `buffer ${i} has no name`);
    if (addr === undefined || addr <= 0n || addr >= U64_END) throw bad('BAD_FRAME', segment, `buffer ${i} has an invalid addr`);
    if (length === undefined || length <= 0n || addr + length > U64_END)
      throw bad('BAD_FRAME', segment, `buffer ${i} has an invalid length (zero, or it runs past 2^64)`);
    return { name: b.name, addr, length };
  });
  const sorted = [...buffers].sort((a, b) => (a.addr < b.addr ? -1 : a.addr > b.addr ? 1 : 0));
  for (let i = 1; i < sorted.length; i++) {
    if (sorted[i - 1]!.addr + sorted[i - 1]!.length > sorted[i]!.addr)
      throw bad('BAD_FRAME', segment, `lists overlapping buffers at 0x${sorted[i]!.addr.toString(16)}`);
  }
  const out: MooncakeSegment = { name, tcpDataPort: Number(port), tcpProtoVersion: Number(version), buffers };
  if (typeof v.timestamp === 'string') out.timestamp = v.timestamp;
  return out;
}

/** Mooncake's timestamp format, local time: "YYYY-MM-DD HH:MM:SS.uuuuuu". */
function timestamp(d = new Date()): string {
  const p = (n: number, w = 2) => String(n).padStart(w, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}.${p(d.getMilliseconds() * 1000, 6)}`;
}

/** The descriptor this process publishes: keys sorted and a trailing newline, as jsoncpp writes it. */
export function encodeSegment(s: { name: string; tcpDataPort: number; buffers: { addr: bigint; length: bigint }[] }): string {
  const body: Json64 = {
    buffers: s.buffers.map((b) => ({ addr: b.addr, length: b.length, name: s.name })),
    name: s.name,
    protocol: 'tcp',
    tcp_data_port: BigInt(s.tcpDataPort),
    tcp_proto_version: 2n,
    timestamp: timestamp(),
  };
  return `${stringifyJson64(body)}\n`;
}
