import type { BootstrapInfo } from '@te/connector';
import type { DecodeRoomContext } from './room-context.js';
import { planTargets, type TargetPlan } from './targets.js';

/** One prefill rank a decode room receives from, planned, with its control endpoint. */
export interface ResolvedTarget extends TargetPlan {
  segment: string;
}

/** A decode room's prefill side, once resolved. */
export interface ResolvedRoom {
  targets: ResolvedTarget[];
  /** Distinct prefill segments (heartbeat targets). */
  segments: string[];
  prefillPageSize: number;
}

/**
 * Finds the prefill ranks a decode room needs, within `bootstrapMs`: the prefill layout
 * from its directory (checked there against this decode's fields), the plan of which rank
 * sends what, the staging ring where the slices need one, each rank's endpoint, and this
 * decode's registration with each (once per rank).
 */
export async function resolveRoom(ctx: DecodeRoomContext, bootstrap: BootstrapInfo): Promise<ResolvedRoom> {
  const deadline = Date.now() + ctx.timeouts.bootstrapMs;
  const left = (): number => Math.max(1, deadline - Date.now());
  const client = ctx.directory(`${bootstrap.host}:${bootstrap.port}`);
  const info = await client.prefillInfo(ctx.decode.bootstrapFields, ctx.timeouts.bootstrapMs);
  const set = planTargets(info, ctx.decode.layout, ctx.decode.buffers, bootstrap.room, bootstrap.prefillDpRank);
  await ctx.prepareStaging(
    info,
    set.targets.filter((t) => !t.dummy).map((t) => t.kvSlice),
  );
  const targets = await Promise.all(
    set.targets.map(async (t) => {
      const ep = await client.rankEndpoint(set.dpRank, t.tpRank, t.ppRank, left());
      await ctx.ensureRegistered(ep.endpoint, left());
      return { ...t, segment: ep.endpoint };
    }),
  );
  return { targets, segments: [...new Set(targets.map((t) => t.segment))], prefillPageSize: info.page_size };
}
