import type { DeviceName, WireValue } from './memory.js';

/** The version of the segment descriptor layout. New fields are appended and optional. */
export const DESCRIPTOR_VERSION = 1;

/** One registered, remote-accessible buffer as peers see it. */
export interface BufferDescriptor {
  addr: bigint;
  length: bigint;
  device: DeviceName;
  /** Per-transport attributes, keyed by plugin name (remote keys, IPC handles, ...). */
  attrs: Record<string, WireValue>;
}

/** What a transport advertises about itself to peers. */
export interface TransportAdvert {
  /** The locality class used by the negotiation policy. */
  class: TransportClass;
  /** Memory kinds a peer may target through this transport. */
  memoryKinds: readonly ('cpu' | 'cuda')[];
  /** Transport-specific endpoint information (address, port, fabric names). */
  endpoint: WireValue;
}

/**
 * Everything a peer needs to move bytes to and from this process. The epoch changes at
 * every start, so a descriptor cached from an earlier life of the same address is
 * recognised as stale and never used for a write.
 */
export interface SegmentDescriptor {
  version: number;
  name: string;
  epoch: bigint;
  hostname: string;
  pid: number;
  transports: Record<string, TransportAdvert>;
  buffers: BufferDescriptor[];
}

/**
 * The well-known locality classes, best first: the engine prefers the closest transport
 * both peers support for the memory kinds of a request. `same-host` transports reach only
 * peers on this machine; they say which through `Transport.reaches`. A plugin may declare a
 * class of its own: it then declares where it ranks (`capabilities.locality`).
 */
export const TRANSPORT_CLASSES = ['intra-nvlink', 'nvlink', 'same-host', 'rdma', 'tcp', 'test'] as const;
export type KnownTransportClass = (typeof TRANSPORT_CLASSES)[number];
/** A well-known class, or a plugin's own name for one (lower-case words joined by '-'). */
export type TransportClass = KnownTransportClass | (string & Record<never, never>);

/** Lower-case words joined by '-': how a class of a plugin's own is spelled. */
export const TRANSPORT_CLASS_PATTERN = /^[a-z][a-z0-9]*(?:-[a-z0-9]+)*$/;

/**
 * Where a transport ranks among those both peers share, lower first: what the plugin
 * declares (`capabilities.locality`), else its well-known class's place in TRANSPORT_CLASSES.
 */
export function localityOf(capabilities: { class: TransportClass; locality?: number }): number {
  if (capabilities.locality !== undefined) return capabilities.locality;
  const known = (TRANSPORT_CLASSES as readonly string[]).indexOf(capabilities.class);
  return known === -1 ? TRANSPORT_CLASSES.length : known;
}
