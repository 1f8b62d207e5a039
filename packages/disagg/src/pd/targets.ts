import { TypeCompiler } from '@sinclair/typebox/compiler';
import { TransferError, type KVBuffers, type ParallelLayout } from '@te/connector';
import { PrefillInfoSchema, type PrefillInfo } from '../bootstrap/schema.js';
import { totalHeadsMismatch } from '../shared/pairing.js';
import { firstSchemaError } from '../shared/schema-error.js';
import { planShardSlices, prefillDpRankFor, resolveRankTargets, slicesCover, type ShardSlice } from '../plan/index.js';

/** One prefill rank a decode rank receives a room from, and what it sends. */
export interface TargetPlan {
  tpRank: number;
  ppRank: number;
  kvSlice: ShardSlice | undefined;
  stateSlice: ShardSlice | undefined;
  dummy: boolean;
  sendsAux: boolean;
  sendsState: boolean;
  requiredDecodeRanks: number;
}

export interface TargetSet {
  dpRank: number;
  targets: TargetPlan[];
}

function mismatch(message: string): never {
  throw new TransferError('LAYOUT_MISMATCH', message);
}

const checkInfo = TypeCompiler.Compile(PrefillInfoSchema);

/**
 * Checks the prefill layout a bootstrap server (or the cluster store) answered before it
 * is planned with: it comes from a peer, and a size of 0 or a fraction would otherwise
 * end as a division by zero or a wrong rank.
 */
export function checkPrefillInfo(info: unknown, source: string): PrefillInfo {
  if (!checkInfo.Check(info)) {
    throw new TransferError('INVALID_ARGUMENT', `${source} answered a malformed prefill layout: ${firstSchemaError(checkInfo, info)}`);
  }
  return info;
}

/**
 * Pure: from the prefill layout and this decode rank's layout, which prefill ranks send
 * what (SGLang's rank-mapping rules; head slicing when attention TP differs; MLA and
 * covered GQA replicas as dummies; the last PP stage's first target writes aux).
 */
export function planTargets(info: PrefillInfo, layout: ParallelLayout, buffers: KVBuffers, room: bigint, chosenDp?: number): TargetSet {
  try {
    return plan(checkPrefillInfo(info, 'the bootstrap server'), layout, buffers, room, chosenDp);
  } catch (e) {
    // The planners (rank mapping, head slicing) refuse a layout they cannot serve with a RangeError.
    if (e instanceof RangeError)
      mismatch(
        `prefill layout (attn_tp_size ${info.attn_tp_size}, pp_size ${info.pp_size}, dp_size ${info.dp_size}) cannot serve decode rank tp=${layout.attnTpRank}/${layout.attnTpSize} pp=${layout.ppRank}/${layout.ppSize}: ${e.message}`,
      );
    throw e;
  }
}

function plan(info: PrefillInfo, layout: ParallelLayout, buffers: KVBuffers, room: bigint, chosenDp?: number): TargetSet {
  const ptp = info.attn_tp_size;
  const dtp = layout.attnTpSize;
  const mapping = resolveRankTargets(
    { tpSize: ptp, ppSize: info.pp_size, dpSize: info.dp_size },
    { tpSize: dtp, tpRank: layout.attnTpRank, ppSize: layout.ppSize, ppRank: layout.ppRank },
  );
  const tpRanks = [...mapping.tpRanks];
  let kvSlices: (ShardSlice | undefined)[] = tpRanks.map(() => undefined);
  let dummies = tpRanks.map(() => false);
  if (info.attention === 'mla') {
    dummies = tpRanks.map((_, i) => i > 0); // MLA KV is replicated across TP: one real sender
  } else if (ptp !== dtp) {
    const total = info.total_kv_heads ?? buffers.totalKvHeads;
    if (total === undefined) mismatch(`attention TP differs (decode ${dtp}, prefill ${ptp}): totalKvHeads must be known for head slicing`);
    const heads = totalHeadsMismatch(buffers.totalKvHeads, info.total_kv_heads);
    if (heads) mismatch(heads);
    const slices = planShardSlices(total, ptp, dtp, layout.attnTpRank, tpRanks);
    if (!slicesCover(total, dtp, layout.attnTpRank, slices))
      mismatch(`prefill ranks ${tpRanks.join(',')} do not cover the heads of decode rank ${layout.attnTpRank}`);
    kvSlices = slices;
    dummies = slices.map((s) => s.count === 0);
  }
  let stateSlices: (ShardSlice | undefined)[] = tpRanks.map(() => undefined);
  let stateSenders = tpRanks.map((_, i) => i === 0);
  if (buffers.state && ptp !== dtp) {
    if (buffers.state.kind === 'swa') mismatch(`SWA state with different attention TP (decode ${dtp}, prefill ${ptp}) is not supported`);
    const total = buffers.state.totalUnits;
    if (total === undefined) mismatch(`Mamba state with different attention TP (decode ${dtp}, prefill ${ptp}) needs state.totalUnits`);
    const slices = planShardSlices(total, ptp, dtp, layout.attnTpRank, tpRanks);
    if (!slicesCover(total, dtp, layout.attnTpRank, slices))
      mismatch(`prefill ranks ${tpRanks.join(',')} do not cover the state units of decode rank ${layout.attnTpRank}`);
    stateSlices = slices;
    stateSenders = slices.map((s) => s.count > 0);
  }
  const lastStage = info.pp_size - 1;
  const targets: TargetPlan[] = [];
  for (const pp of mapping.ppRanks) {
    tpRanks.forEach((tp, i) => {
      targets.push({
        tpRank: tp,
        ppRank: pp,
        kvSlice: kvSlices[i],
        stateSlice: stateSlices[i],
        dummy: dummies[i]!,
        sendsAux: i === 0 && (pp === lastStage || mapping.ppRanks.length === 1),
        sendsState: Boolean(buffers.state) && stateSenders[i]!,
        requiredDecodeRanks: mapping.decodeRanksPerPrefillRank,
      });
    });
  }
  return { dpRank: prefillDpRankFor(room, info.dp_size, chosenDp), targets };
}
