import { TransferError, type BootstrapInfo, type TransferEngine } from '@te/connector';
import type { RankDirectory } from '../bootstrap/directory.js';
import { prefillDpRankFor } from '../plan/index.js';
import { MSG, PD_PROTOCOL_VERSION, type AbortMessage } from '../protocol/messages.js';
import { waitAtMost } from '../shared/wait-at-most.js';
import { checkPrefillInfo } from './targets.js';

// A peer's layout bounds the ranks told; past this many, the bootstrap timeout ends the room.
const MAX_RANKS_TOLD = 4096;

/**
 * Codes a decode is refused with when the prefill layout cannot serve it (by the bootstrap
 * server, its own planning, or a prefill rank's registration check). A refusal is final
 * for the room: the prefill ranks are told, so their senders fail at once with this reason
 * instead of holding the request's pages until their bootstrap timeout.
 */
export const REFUSAL_CODES: ReadonlySet<string> = new Set(['LAYOUT_MISMATCH', 'INVALID_ARGUMENT', 'PROTOCOL_MISMATCH']);

/** What telling a refusal needs of the decode rank: its engine and the prefill instance's directory. */
export interface RefusalContext {
  readonly engine: TransferEngine;
  directory(address: string): RankDirectory;
}

/**
 * Tells every prefill rank of the room's DP group that this decode rank was refused (a
 * `te.kv.p.abort` carrying the code and reason): those already holding a sender fail it,
 * the others fail it when it is created. Best effort, bounded by `timeoutMs`: a prefill
 * rank that cannot be reached still ends the room at its bootstrap timeout.
 */
export async function tellRefusal(ctx: RefusalContext, bootstrap: BootstrapInfo, error: TransferError, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  const left = () => Math.max(1, deadline - Date.now());
  const work = (async () => {
    const directory: RankDirectory = ctx.directory(`${bootstrap.host}:${bootstrap.port}`);
    // The instance's layout unchecked against this decode: the checked lookup is what refused it.
    const info = checkPrefillInfo(await directory.layout(left()), `bootstrap server ${directory.address}`);
    if (info.attn_tp_size * info.pp_size > MAX_RANKS_TOLD) return;
    const dp = prefillDpRankFor(bootstrap.room, info.dp_size, bootstrap.prefillDpRank);
    const msg: AbortMessage = {
      v: PD_PROTOCOL_VERSION,
      room: bootstrap.room,
      decodeSegment: ctx.engine.segmentName,
      reason: error.message.slice(0, 2000),
      code: error.code,
    };
    const ranks = [];
    for (let pp = 0; pp < info.pp_size; pp++) for (let tp = 0; tp < info.attn_tp_size; tp++) ranks.push({ tp, pp });
    await Promise.allSettled(
      ranks.map(async ({ tp, pp }) => {
        const ep = await directory.rankEndpoint(dp, tp, pp, left());
        await ctx.engine.controlClient(ep.endpoint).request(MSG.abort, msg, left(), { urgent: true });
      }),
    );
  })();
  await waitAtMost(work, timeoutMs);
}
