import * as assert from 'uvu/assert';
import type { ParallelLayout, TeConfigInput } from '@te/connector';
import type { ModelSpec, PageSide } from './fixtures/pd-model.js';
import { closeAll, freePort, roomArgs, spawnRank, type RankProcess } from './pd-harness.js';
import type { PDTimeouts, RingStats, StagingOptions, StagingStats } from '../src/index.js';

export interface Scenario {
  model: ModelSpec;
  prefill: ParallelLayout[];
  decode: ParallelLayout[];
  rooms: {
    room: bigint;
    srcPages: number[];
    dstPages: number[];
    auxSrc: number;
    auxDst: number;
    stateSrc?: number[];
    stateDst?: number[];
    chunks?: number;
    prefillDp?: number;
    decodeDp?: number;
  }[];
  config?: TeConfigInput;
  env?: NodeJS.ProcessEnv;
  timeouts?: Partial<PDTimeouts>;
  /** Page size and layout of each side, where they differ from the model's. */
  prefillSide?: PageSide;
  decodeSide?: PageSide;
  prefillStaging?: StagingOptions;
  decodeStaging?: StagingOptions;
}

/** What the ranks' staging did: per prefill rank its staged writes and fallbacks, per decode rank its ring's use. */
export interface ScenarioStats {
  prefill: (StagingStats | null)[];
  decode: (RingStats | null)[];
}

export const FAST: Partial<PDTimeouts> = { bootstrapMs: 20_000, waitingMs: 20_000, heartbeatMs: 300, abortMs: 10_000, transferMs: 10_000 };
/**
 * For scenarios where no peer is lost: short deadlines still bound every wait, but a rank
 * busy for a second (many processes on a small CI machine) is not taken for a lost peer.
 * Failure tests that need a quick verdict use FAST.
 */
export const STEADY: Partial<PDTimeouts> = { ...FAST, heartbeatMs: 3_000 };

/**
 * Runs every room across real processes (one per rank) and asserts, on every decode
 * rank, Success and that its whole memory is exactly what the rooms should have written.
 */
export async function runScenario(s: Scenario): Promise<ScenarioStats> {
  const port = await freePort();
  const ranks: RankProcess[] = [];
  try {
    const common = {
      model: s.model,
      bootstrapPort: port,
      timeouts: s.timeouts ?? STEADY,
      ...(s.config ? { config: s.config } : {}),
      ...(s.env ? { env: s.env } : {}),
    };
    const side = (x: PageSide | undefined, staging: StagingOptions | undefined) => ({ ...(x ? { side: x } : {}), ...(staging ? { staging } : {}) });
    const prefill = await Promise.all(s.prefill.map((layout) => spawnRank({ role: 'prefill', layout, ...common, ...side(s.prefillSide, s.prefillStaging) })));
    ranks.push(...prefill);
    const decode = await Promise.all(s.decode.map((layout) => spawnRank({ role: 'decode', layout, ...common, ...side(s.decodeSide, s.decodeStaging) })));
    ranks.push(...decode);
    for (const r of s.rooms) {
      const decodeRanks = decode.filter((_, i) => (s.decode[i]!.attnDpRank ?? 0) === (r.decodeDp ?? 0));
      const prefillDp = r.prefillDp ?? Number(r.room % BigInt(s.prefill[0]!.attnDpSize));
      const prefillRanks = prefill.filter((_, i) => s.prefill[i]!.attnDpRank === prefillDp);
      const state = (pages: number[] | undefined) => (pages ? { stateIdx: pages } : {});
      const sends = prefillRanks.map((p) => p.call('send', roomArgs(r.room, r.srcPages, r.auxSrc, { chunks: r.chunks ?? 1, ...state(r.stateSrc) })));
      // A decode page holding several prefill pages holds only the room's tokens.
      const tokens = s.decodeSide?.pageSize !== undefined ? { tokens: r.srcPages.length * (s.prefillSide?.pageSize ?? s.model.pageSize) } : {};
      const receives = decodeRanks.map((d) =>
        d.call(
          'receive',
          roomArgs(r.room, r.dstPages, r.auxDst, { ...state(r.stateDst), ...tokens, ...(r.prefillDp !== undefined ? { prefillDpRank: r.prefillDp } : {}) }),
        ),
      );
      const [sent, got] = await Promise.all([Promise.all(sends), Promise.all(receives)]);
      sent.forEach((x, i) => assert.is(x.status, 4, `prefill rank ${i} room ${r.room}: ${x.code ?? ''} ${x.message ?? ''}`));
      got.forEach((x, i) => {
        assert.is(x.status, 4, `decode rank ${i} room ${r.room}: ${x.code ?? ''} ${x.message ?? ''}`);
        assert.is(x.mismatch, null, `decode rank ${i} room ${r.room}: ${x.mismatch}`);
      });
    }
    // Every decode rank's whole memory: exactly its rooms' bytes and nothing else.
    for (const d of decode) assert.is((await d.call('verify')).mismatch, null);
    // A prefill rank answers with its staging's stats, a decode rank with its ring's.
    return {
      prefill: (await Promise.all(prefill.map((p) => p.call('stats')))) as ScenarioStats['prefill'],
      decode: (await Promise.all(decode.map((d) => d.call('stats')))) as ScenarioStats['decode'],
    };
  } finally {
    await closeAll(ranks);
  }
}
