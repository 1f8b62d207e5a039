// What the vLLM-shaped worker takes from its caller, checked before it becomes a region or
// a page list. Block ids go into Uint32Arrays and sizes into bigints, which change bad
// values without a word (1.5 becomes block 1, -1 becomes block 4294967295, a number
// address cannot be added to a bigint): a bad value is INVALID_ARGUMENT naming it instead.
import { TransferError } from '@te/connector';
import type { LayerCache } from './types.js';

/** `numBlocks`: a positive safe integer (the blocks of each half of a layer cache). */
export function blockCountOf(value: unknown): bigint {
  if (typeof value === 'number' && Number.isSafeInteger(value) && value > 0) return BigInt(value);
  throw new TransferError('INVALID_ARGUMENT', `Expected the worker's numBlocks to be a positive integer, got ${String(value)}`);
}

function byteValueOf(layer: string, field: 'addr' | 'length', value: unknown): bigint {
  if (typeof value === 'bigint' && value >= 0n && value <= 0xffff_ffff_ffff_ffffn) return value;
  if (typeof value === 'number' && Number.isSafeInteger(value) && value >= 0) return BigInt(value);
  throw new TransferError(
    'INVALID_ARGUMENT',
    `layer ${layer}: expected \`${field}\` to be a u64 bigint (or a non-negative safe integer), got ${typeof value === 'bigint' ? `${value}n` : String(value)}`,
  );
}

/**
 * The K and V regions of every layer, in layer order (all K halves, then all V halves),
 * and the bytes of each half. Every layer cache is the same size, two halves of
 * `numBlocks` equal blocks; names are distinct (saveKvLayer finds a layer by its name).
 */
export function layerRegionsOf(layers: readonly LayerCache[], numBlocks: bigint): { regions: bigint[]; half: bigint } {
  if (!Array.isArray(layers) || layers.length === 0) throw new TransferError('INVALID_ARGUMENT', 'registerKvCaches needs at least one layer');
  const names = new Set<string>();
  const addrs: bigint[] = [];
  let length: bigint | undefined;
  for (const layer of layers) {
    if (typeof layer?.name !== 'string' || layer.name === '')
      throw new TransferError('INVALID_ARGUMENT', `Expected every layer to have a name, got ${String(layer?.name)}`);
    if (names.has(layer.name)) throw new TransferError('INVALID_ARGUMENT', `layer ${layer.name} is given twice`);
    names.add(layer.name);
    addrs.push(byteValueOf(layer.name, 'addr', layer.addr));
    const bytes = byteValueOf(layer.name, 'length', layer.length);
    length ??= bytes;
    if (bytes !== length || bytes === 0n || bytes % (2n * numBlocks) !== 0n)
      throw new TransferError(
        'INVALID_ARGUMENT',
        `layer ${layer.name}: its cache is ${bytes} bytes; every layer cache must be the same size (the first is ${length}), ` +
          `K and V halves of ${numBlocks} equal blocks (a multiple of ${2n * numBlocks} bytes)`,
      );
  }
  const half = length! / 2n;
  return { regions: [...addrs, ...addrs.map((a) => a + half)], half };
}

/** A request's block ids: distinct integers in [0, numBlocks), as the page list the runtime takes. */
export function blockIdsOf(requestId: string, ids: unknown, numBlocks: bigint): Uint32Array {
  if (!Array.isArray(ids)) throw new TransferError('INVALID_ARGUMENT', `request ${requestId}: expected its block ids to be an array, got ${String(ids)}`);
  const out = new Uint32Array(ids.length);
  const seen = new Set<number>();
  ids.forEach((id: unknown, i) => {
    if (typeof id !== 'number' || !Number.isInteger(id) || id < 0 || id >= Number(numBlocks))
      throw new TransferError('INVALID_ARGUMENT', `request ${requestId}: block id ${String(id)} is not a block of this worker (0 to ${numBlocks - 1n})`);
    if (seen.has(id)) throw new TransferError('INVALID_ARGUMENT', `request ${requestId}: block ${id} is given twice`);
    seen.add(id);
    out[i] = id;
  });
  return out;
}
