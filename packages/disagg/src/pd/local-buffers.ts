import { TransferError, type BufferGroup, type KVBuffers, type ParallelLayout, type TransferEngine } from '@te/connector';
import { shardOfRank, toSafeNumber, type BufferTable } from '../plan/index.js';
import type { BufferTableWire } from '../protocol/messages.js';

export function tableOf(group: BufferGroup, what: string): BufferTable {
  const n = group.addrs.length;
  if (group.lengths.length !== n || group.itemLengths.length !== n) {
    throw new TransferError(
      'INVALID_ARGUMENT',
      `${what}: addrs, lengths and itemLengths must have the same length (${n}, ${group.lengths.length}, ${group.itemLengths.length})`,
    );
  }
  const t: BufferTable = { addrs: new Float64Array(n), lengths: new Float64Array(n), itemLens: new Float64Array(n) };
  for (let i = 0; i < n; i++) {
    t.addrs[i] = toSafeNumber(group.addrs[i]!, `${what} buffer ${i} address`);
    t.lengths[i] = toSafeNumber(group.lengths[i]!, `${what} buffer ${i} length`);
    t.itemLens[i] = toSafeNumber(group.itemLengths[i]!, `${what} buffer ${i} item length`);
    if (t.itemLens[i]! <= 0 || t.itemLens[i]! > t.lengths[i]!)
      throw new TransferError('INVALID_ARGUMENT', `${what} buffer ${i}: item length ${t.itemLens[i]} must be in (0, ${t.lengths[i]}]`);
  }
  return t;
}

export function wireOf(group: BufferGroup): BufferTableWire {
  return { addrs: BigUint64Array.from(group.addrs), lengths: BigUint64Array.from(group.lengths), itemLens: BigUint64Array.from(group.itemLengths) };
}

export function tableFromWire(w: BufferTableWire, what: string): BufferTable {
  return tableOf({ addrs: w.addrs, lengths: w.lengths, itemLengths: w.itemLens }, what);
}

/** One group's three arrays: the same count, every entry a u64 bigint. */
function checkGroup(group: unknown, what: string, bad: (m: string) => never): void {
  const g = group as Partial<Record<keyof BufferGroup, ArrayLike<unknown>>> | undefined;
  if (typeof g !== 'object' || g === null) bad(`${what} must be { addrs, lengths, itemLengths }, got ${String(group)}`);
  const fields = ['addrs', 'lengths', 'itemLengths'] as const;
  for (const f of fields) if (typeof g![f]?.length !== 'number') bad(`${what}.${f} must be a BigUint64Array, got ${String(g![f])}`);
  const n = g!.addrs!.length;
  for (const f of fields) {
    const values = g![f]!;
    if (values.length !== n) bad(`${what}: addrs, lengths and itemLengths must have the same length (${n}, ${g!.lengths!.length}, ${g!.itemLengths!.length})`);
    for (let i = 0; i < n; i++) {
      const v = values[i];
      if (typeof v !== 'bigint' || v < 0n || v > 0xffff_ffff_ffff_ffffn) bad(`${what}.${f}[${i}] must be a u64 bigint, got ${String(v)}`);
    }
  }
}

/**
 * No two buffers share a byte: a page or slot written into one would land in the other.
 * The same region given twice is allowed (registered once).
 */
function checkDisjoint(b: KVBuffers, bad: (m: string) => never): void {
  const spans: { from: bigint; to: bigint; name: string }[] = [];
  const add = (g: BufferGroup, what: string) => {
    for (let i = 0; i < g.addrs.length; i++) spans.push({ from: g.addrs[i]!, to: g.addrs[i]! + g.lengths[i]!, name: `${what} buffer ${i}` });
  };
  add(b.kv, 'kv');
  add(b.aux, 'aux');
  if (b.state) add(b.state, 'state');
  spans.sort((x, y) => (x.from < y.from ? -1 : x.from > y.from ? 1 : 0));
  for (let i = 1; i < spans.length; i++) {
    const [p, q] = [spans[i - 1]!, spans[i]!];
    if (q.from < p.to && !(q.from === p.from && q.to === p.to))
      bad(`${p.name} [0x${p.from.toString(16)}, 0x${p.to.toString(16)}) overlaps ${q.name} [0x${q.from.toString(16)}, 0x${q.to.toString(16)})`);
  }
}

/** A count the planner shards by: undefined, or a positive integer. */
function checkCount(value: unknown, name: string, bad: (m: string) => never): void {
  if (value !== undefined && (!Number.isInteger(value) || (value as number) < 1)) bad(`${name} must be a positive integer, got ${String(value)}`);
}

/** Checks the KV buffers a framework hands in, before anything is registered. */
export function checkBuffers(b: KVBuffers, layout: ParallelLayout): void {
  const bad = (m: string): never => {
    throw new TransferError('INVALID_ARGUMENT', `KV buffers: ${m}`);
  };
  checkGroup(b.kv, 'kv', bad);
  checkGroup(b.aux, 'aux', bad);
  if (b.state !== undefined) checkGroup(b.state, 'state', bad);
  checkDisjoint(b, bad);
  checkCount(b.kvHeadsPerRank, 'kvHeadsPerRank', bad);
  checkCount(b.totalKvHeads, 'totalKvHeads', bad);
  checkCount(b.headBytes, 'headBytes', bad);
  if (b.totalKvHeads !== undefined && b.attention === 'mha') {
    let heads: number;
    try {
      heads = shardOfRank(b.totalKvHeads, layout.attnTpSize, layout.attnTpRank).count;
    } catch (e) {
      return bad(`totalKvHeads ${b.totalKvHeads} cannot be sharded over attention TP ${layout.attnTpSize}: ${(e as Error).message}`);
    }
    if (b.kvHeadsPerRank !== undefined && b.kvHeadsPerRank !== heads)
      bad(
        `kvHeadsPerRank ${b.kvHeadsPerRank}, but totalKvHeads ${b.totalKvHeads} over attention TP ${layout.attnTpSize} gives rank ${layout.attnTpRank} ${heads}`,
      );
  }
  if (b.attention !== 'mha' && b.attention !== 'mla') bad(`attention must be 'mha' or 'mla', got ${String(b.attention)}`);
  if (!Number.isInteger(b.numLayers) || b.numLayers < 1) bad(`numLayers must be a positive integer, got ${b.numLayers}`);
  if (!Number.isInteger(b.pageSize) || b.pageSize < 1) bad(`pageSize must be a positive integer, got ${b.pageSize}`);
  const perLayer = b.attention === 'mha' ? 2 : 1;
  if (b.kv.addrs.length !== b.numLayers * perLayer)
    bad(`${b.attention} with ${b.numLayers} layers needs ${b.numLayers * perLayer} KV buffers, got ${b.kv.addrs.length}`);
  const first = b.firstLayer ?? 0;
  const total = b.totalLayers ?? b.numLayers;
  if (!Number.isInteger(first) || first < 0 || first + b.numLayers > total) bad(`layers [${first}, ${first + b.numLayers}) do not fit in totalLayers ${total}`);
  if (b.state && b.state.kind !== 'mamba' && b.state.kind !== 'swa') bad(`state.kind must be 'mamba' or 'swa', got ${String(b.state.kind)}`);
  if (b.pageLayout !== undefined && b.pageLayout !== 'NHD' && b.pageLayout !== 'HND') bad(`pageLayout must be 'NHD' or 'HND', got ${String(b.pageLayout)}`);
}

/**
 * Registers every KV, aux and state buffer not yet registered with the engine (one
 * registration per region, shared with every other user of the engine), and returns
 * the ones this call registered so close() can release exactly those.
 */
export async function registerBuffers(engine: TransferEngine, b: KVBuffers): Promise<bigint[]> {
  const known = engine.registeredMemory();
  const covered = (addr: bigint, len: bigint): boolean => known.some((r) => addr >= r.addr && addr + len <= r.addr + r.length);
  const mine: bigint[] = [];
  const groups: [BufferGroup, 'cpu' | `cuda:${number}`][] = [
    [b.kv, b.device],
    [b.aux, 'cpu'],
  ];
  if (b.state) groups.push([b.state, b.device]);
  try {
    for (const [g, device] of groups) {
      for (let i = 0; i < g.addrs.length; i++) {
        const addr = g.addrs[i]!;
        const len = g.lengths[i]!;
        if (covered(addr, len) || mine.includes(addr)) continue;
        const h = await engine.registerMemory({ addr, length: len, device });
        mine.push(h.addr);
        known.push(h);
      }
    }
  } catch (e) {
    // One refused buffer (overlap, bad address) must not leave the ones before it registered.
    for (const addr of mine) await engine.unregisterMemory(addr).catch(() => undefined);
    throw e;
  }
  return mine;
}
