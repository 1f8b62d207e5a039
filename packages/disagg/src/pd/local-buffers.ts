import { TransferError, type BufferGroup, type KVBuffers, type TransferEngine } from '@te/connector';
import { toSafeNumber, type BufferTable } from '../plan/index.js';
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

/** Checks the KV buffers a framework hands in, before anything is registered. */
export function checkBuffers(b: KVBuffers): void {
  const bad = (m: string): never => {
    throw new TransferError('INVALID_ARGUMENT', `KV buffers: ${m}`);
  };
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
