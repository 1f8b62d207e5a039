import { TransferError } from '../errors/transfer-error.js';
import { NATIVE_STATUS } from '../errors/codes.js';
import { localityOf, type SegmentDescriptor, type BufferDescriptor } from '../spi/descriptor.js';
import { memoryKindOf, type MemoryKind } from '../spi/memory.js';
import { batchOf, localSpan, type TransferBatch } from '../spi/batch.js';
import type { TransportPlugin } from '../spi/plugin.js';
import type { Transport } from '../spi/transport.js';
import type { MemoryMap } from './memory-map.js';

/** A transport held by an engine. */
export interface EngineTransport {
  name: string;
  plugin: TransportPlugin;
  transport: Transport;
}

/** What routing needs of a peer, computed once per descriptor. */
export interface PeerRouting {
  descriptor: SegmentDescriptor;
  remoteKinds: MemoryKind[];
  sortedBuffers: BufferDescriptor[];
  /** The last whole-batch plan made for this peer, reused while its inputs are the same. */
  wholeBatch?: { local: MemoryKind; remote: MemoryKind; candidates: readonly EngineTransport[]; plan: RoutePlan };
}

export function peerRouting(descriptor: SegmentDescriptor): PeerRouting {
  return {
    descriptor,
    remoteKinds: [...new Set(descriptor.buffers.map((b) => memoryKindOf(b.device)))],
    sortedBuffers: [...descriptor.buffers].sort((a, b) => (a.addr < b.addr ? -1 : a.addr > b.addr ? 1 : 0)),
  };
}

/** A part of a batch sent through one transport; `indexes` null means the whole batch. */
export interface Route {
  via: EngineTransport;
  indexes: Uint32Array | null;
}

/** Shared by every batch of a peer that takes one route (readonly: never modified). */
export interface RoutePlan {
  readonly routes: readonly Readonly<Route>[];
  /** Requests refused before submission (index → native status). */
  readonly refused: ReadonlyMap<number, number>;
}

const NONE_REFUSED: ReadonlyMap<number, number> = new Map();

const rank = (t: EngineTransport): number => localityOf(t.plugin.capabilities);

/**
 * Transports both sides hold and that can reach the peer (`Transport.reaches`: a same-host
 * transport only for a peer on this machine), best locality first. With `forceTcp` only
 * TCP-class transports qualify. No common transport is a typed error naming both sides' lists.
 */
export function commonTransports(local: readonly EngineTransport[], peer: SegmentDescriptor, forceTcp: boolean): EngineTransport[] {
  const shared = local.filter((t) => peer.transports[t.name] !== undefined && (!forceTcp || t.plugin.capabilities.class === 'tcp') && reaches(t, peer));
  if (shared.length === 0) {
    const why = forceTcp ? ' (MC_FORCE_TCP is set, so only TCP transports qualify)' : '';
    throw new TransferError(
      'NO_COMMON_TRANSPORT',
      `This process and segment ${peer.name} share no transport${why}: local [${local.map((t) => t.name).join(', ')}], peer [${Object.keys(peer.transports).join(', ')}]; add a transport both support to \`transports\``,
      { details: { peer: peer.name } },
    );
  }
  return shared.sort((a, b) => rank(a) - rank(b));
}

function reaches(t: EngineTransport, peer: SegmentDescriptor): boolean {
  try {
    return t.transport.reaches?.(peer) ?? true;
  } catch {
    return false; // a transport that cannot even judge the peer cannot carry its traffic
  }
}

function supports(t: EngineTransport, peer: SegmentDescriptor, local: MemoryKind, remote: MemoryKind): boolean {
  const peerKinds = peer.transports[t.name]?.memoryKinds ?? [];
  return t.plugin.capabilities.memoryKinds.includes(local) && peerKinds.includes(remote);
}

function pick(candidates: readonly EngineTransport[], peer: SegmentDescriptor, local: MemoryKind, remote: MemoryKind): EngineTransport | undefined {
  return candidates.find((t) => supports(t, peer, local, remote));
}

function findBuffer(sorted: readonly BufferDescriptor[], addr: bigint): BufferDescriptor | undefined {
  let lo = 0;
  let hi = sorted.length - 1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    const b = sorted[mid]!;
    if (addr < b.addr) hi = mid - 1;
    else if (addr >= b.addr + b.length) lo = mid + 1;
    else return b;
  }
  return undefined;
}

/**
 * Chooses a transport for every request by the memory kinds on both ends. When each side
 * has one memory kind (the common case) the whole batch takes one route without a
 * per-request look-up; mixed kinds (GPU KV beside host aux buffers) are classified per
 * request, and so is every batch while a local region is being unregistered (a request
 * from it is refused MEMORY_NOT_REGISTERED).
 */
export function planRoutes(batch: TransferBatch, memory: MemoryMap, peer: PeerRouting, candidates: readonly EngineTransport[]): RoutePlan {
  const localKinds = memory.kinds();
  const { remoteKinds } = peer;

  // While an unregistration is under way, every request's local range is looked up (below).
  if (localKinds.length <= 1 && remoteKinds.length <= 1 && memory.retiring === 0) {
    const l = localKinds[0] ?? 'cpu';
    const r = remoteKinds[0] ?? l;
    // The same plan for every batch of this peer while the kinds and transports stay: a
    // plan object (and its empty map) per batch was garbage the JS thread collected.
    const last = peer.wholeBatch;
    if (last && last.local === l && last.remote === r && last.candidates === candidates) return last.plan;
    const via = pick(candidates, peer.descriptor, l, r);
    if (!via) throw noRoute(peer, candidates, l, r);
    const plan: RoutePlan = { routes: [{ via, indexes: null }], refused: NONE_REFUSED };
    peer.wholeBatch = { local: l, remote: r, candidates, plan };
    return plan;
  }

  const sortedRemote = peer.sortedBuffers;
  const perTransport = new Map<EngineTransport, number[]>();
  const refused = new Map<number, number>();
  for (let i = 0; i < batch.opcodes.length; i++) {
    const region = memory.find(batch.localAddrs[i]!, localSpan(batch, i));
    if (!region) {
      refused.set(i, NATIVE_STATUS.MEMORY_NOT_REGISTERED);
      continue;
    }
    const l = memoryKindOf(region.device);
    const remoteBuffer = findBuffer(sortedRemote, batch.remoteAddrs[i]!);
    // A buffer the cached descriptor does not list yet is validated by the peer itself.
    const r = remoteBuffer ? memoryKindOf(remoteBuffer.device) : l;
    const via = pick(candidates, peer.descriptor, l, r);
    if (!via) throw noRoute(peer, candidates, l, r);
    let list = perTransport.get(via);
    if (!list) perTransport.set(via, (list = []));
    list.push(i);
  }
  const routes = [...perTransport].map(([via, idx]) => ({ via, indexes: Uint32Array.from(idx) }));
  return { routes, refused };
}

function noRoute(peer: PeerRouting, candidates: readonly EngineTransport[], l: MemoryKind, r: MemoryKind): TransferError {
  return new TransferError(
    'NO_COMMON_TRANSPORT',
    `No transport shared with ${peer.descriptor.name} moves ${l} memory to ${r} memory (candidates: ${candidates.map((c) => c.name).join(', ')})`,
    { details: { peer: peer.descriptor.name } },
  );
}

/** Capabilities of a transport a caller shapes its writes by: strided rows (from local rows, into remote rows), verified writes. */
export type WriteCapability = 'gatherWrites' | 'scatterWrites' | 'verifiedWrites';

/**
 * Whether a write from `at.local` to the peer's `at.remote` would route through a transport
 * that declares `capability`; for rows, the rows' side must be host memory (rows are host
 * memory only).
 */
export function routesWith(
  memory: MemoryMap,
  peer: PeerRouting,
  candidates: readonly EngineTransport[],
  at: { local: bigint; remote: bigint },
  capability: WriteCapability,
): boolean {
  if (capability !== 'verifiedWrites') {
    const device = capability === 'gatherWrites' ? memory.find(at.local, 1n)?.device : findBuffer(peer.sortedBuffers, at.remote)?.device;
    if (memoryKindOf(device ?? 'cpu') !== 'cpu') return false;
  }
  try {
    const { routes } = planRoutes(batchOf([{ op: 'write', local: at.local, remote: at.remote, length: 1 }]), memory, peer, candidates);
    return routes.length === 1 && routes[0]!.via.plugin.capabilities[capability] === true;
  } catch {
    return false; // no route at all: the transfer itself will say why
  }
}
