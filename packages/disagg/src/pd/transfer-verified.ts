import { NATIVE_STATUS, TransferError, isTransferError, type TransferBatch } from '@te/connector';
import type { BufferTable } from '../plan/index.js';
import { listed } from './kv-checksum.js';
import type { Destination } from './destination.js';
import { movesOnlyThroughTransport, type KvWrite } from './kv-write.js';
import type { PrefillRoomContext } from './room-context.js';

/*
 * KV checked by the transport instead of page checksums (checksums on, mode `auto`): where
 * the transport to a decode rank verifies writes (capabilities.verifiedWrites) and the room's
 * KV goes through no staging copy, its writes carry `verifyWrites`. The transport takes a
 * digest of the bytes as it sends them and the decode's side one as they land, and fails a
 * write whose digests differ with DATA_CORRUPTED: what page checksums check, without reading
 * every byte again on both sides afterwards (mooncake-tcp: docs/benchmarks.md). What it does
 * not see is a page changed on the decode after its bytes landed; `checksums: 'pages'`
 * checks that too. State and aux keep their checksums either way (a slot each).
 */

/**
 * Decides, at the first KV write of a room to a decode rank, whether its KV is verified by
 * the transport; the answer holds for every later write of the room to that rank (the route
 * and the transport do not change within a room).
 */
export class TransferVerification {
  private readonly decided = new Map<string, Promise<boolean>>();

  verifies(rank: PrefillRoomContext, w: KvWrite): Promise<boolean> {
    if (rank.checksums !== 'auto' || w.req.dummy || refusing.get(rank)?.has(w.dest.segment)) return Promise.resolve(false);
    let d = this.decided.get(w.dest.segment);
    if (!d) {
      d = decide(rank, w).catch(() => false); // no route at all: the write itself says why
      this.decided.set(w.dest.segment, d);
    }
    return d;
  }

  /**
   * The decode's transport refused a verified write unsent (an earlier build, without
   * digests): this room's KV to it, and every later room's, goes with page checksums.
   */
  refused(rank: PrefillRoomContext, dest: Destination): void {
    let set = refusing.get(rank);
    if (!set) refusing.set(rank, (set = new Set()));
    set.add(dest.segment);
    this.decided.set(dest.segment, Promise.resolve(false));
  }

  /** Whether the room's KV to `dest` was verified by the transport (decided, and yes). */
  async verified(dest: Destination): Promise<boolean> {
    return (await this.decided.get(dest.segment)) ?? false;
  }
}

/** Per prefill rank: decode segments whose transport refused verified writes unsent. */
const refusing = new WeakMap<PrefillRoomContext, Set<string>>();

async function decide(rank: PrefillRoomContext, w: KvWrite): Promise<boolean> {
  if (!(await movesOnlyThroughTransport(w))) return false;
  return rank.engine.verifiesWrites(w.dest.segment, BigInt(rank.source.kv.addrs[0]!), BigInt(w.dest.kv.addrs[0]!));
}

/** `batch` with its writes verified. */
export function verifiedBatch(batch: TransferBatch): TransferBatch {
  return { ...batch, verifyWrites: true };
}

/**
 * A verified KV write's failure: where requests failed with DATA_CORRUPTED, the room's error
 * names the decode's layer buffer and pages they landed in (from their remote addresses).
 */
export function namedCorruption(e: unknown, batch: TransferBatch, dest: Destination, attention: string, room: bigint): unknown {
  if (!isTransferError(e, 'DATA_CORRUPTED')) return e;
  const statuses = e.statuses ?? (isTransferError(e.cause) ? e.cause.statuses : undefined);
  const bad = new Map<number, number[]>();
  for (let i = 0; i < (statuses?.length ?? 0); i++) {
    if (statuses![i] !== NATIVE_STATUS.DATA_CORRUPTED) continue;
    const at = itemOf(dest.kv, Number(batch.remoteAddrs[i]!));
    if (!at) continue;
    const pages = bad.get(at.buffer) ?? [];
    if (pages[pages.length - 1] !== at.item) pages.push(at.item);
    bad.set(at.buffer, pages);
  }
  if (bad.size === 0) return e;
  const [buffer, pages] = [...bad][0]!;
  const kv = attention === 'mha' ? 2 : 1;
  const layers = dest.span.layers;
  const layer = dest.span.firstLayer + (kv === 2 && buffer >= layers ? buffer - layers : buffer);
  const name = `layer ${layer}${kv === 2 ? (buffer >= layers ? ' V' : ' K') : ''}`;
  return new TransferError(
    'DATA_CORRUPTED',
    `room ${room}: KV written to ${dest.segment} landed differently from what was sent (the transport's digests differ) in ${name}, destination pages ${listed(pages)}${bad.size > 1 ? `, and ${bad.size - 1} more buffers` : ''}`,
    { cause: e, ...(e.statuses ? { statuses: e.statuses } : {}), details: { room, buffer, layer, pages: pages.slice(0, 64) } },
  );
}

/** The buffer and item (page) of a table holding address `addr`. */
function itemOf(t: BufferTable, addr: number): { buffer: number; item: number } | undefined {
  for (let b = 0; b < t.addrs.length; b++) {
    const off = addr - t.addrs[b]!;
    if (off >= 0 && off < t.lengths[b]!) return { buffer: b, item: Math.floor(off / t.itemLens[b]!) };
  }
  return undefined;
}
