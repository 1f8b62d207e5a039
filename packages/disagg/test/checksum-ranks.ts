// In-process PD ranks for the checksum tests: each rank its own engine (mooncake-tcp, or the
// flipping fake transport of flipping-transport.ts) and KV manager with checksums on, its
// memory from the PD model fixture; hooks on a decode's Success reports; one room run on
// every rank with the errors each side ended with.
import { KVStatus, createTransferEngine, type ParallelLayout, type TransferEngine } from '@te/connector';
import { createKVManager, PD_MESSAGES, type DisaggKVManager } from '../src/index.js';
import { allocateRank, fillPrefill, type ModelSpec, type PageSide } from './fixtures/pd-model.js';
import { flippingRegistry } from './flipping-transport.js';
import { freePort, TCP_CONFIG } from './pd-harness.js';
import { FAST } from './pd-scenario.js';

export type Rank = { engine: TransferEngine; manager: DisaggKVManager; memory: Awaited<ReturnType<typeof allocateRank>> };

export interface RanksOptions {
  model: ModelSpec;
  /** The flipping fake transport instead of mooncake-tcp ('verifying': declaring verified writes; 'refusing': declaring them and refusing them unsent). */
  fake?: boolean | 'verifying' | 'refusing';
  checksums?: boolean | 'pages';
  prefillSide?: PageSide;
  decodeSide?: PageSide;
}

export async function withRanks(
  o: RanksOptions,
  body: (make: (role: 'prefill' | 'decode', l: ParallelLayout) => Promise<Rank>, port: number) => Promise<void>,
): Promise<void> {
  const port = await freePort();
  const made: Rank[] = [];
  try {
    await body(async (role, l) => {
      const engine = o.fake
        ? await createTransferEngine(
            { connector: 'flip-fabric' },
            { registry: flippingRegistry(o.fake === 'verifying' || o.fake === 'refusing' ? (o.fake === 'refusing' ? 'refusing' : true) : false) },
          )
        : await createTransferEngine(TCP_CONFIG);
      const memory = await allocateRank(engine, o.model, l, (role === 'prefill' ? o.prefillSide : o.decodeSide) ?? {});
      const manager = await createKVManager({
        role,
        layout: l,
        buffers: memory.buffers,
        engine,
        bootstrapHost: '127.0.0.1',
        bootstrapPort: port,
        timeouts: FAST,
        layerwise: true,
        checksums: o.checksums ?? true,
      });
      const r = { engine, manager, memory };
      made.push(r);
      return r;
    }, port);
  } finally {
    for (const r of made) await r.manager.close();
    for (const r of made) await r.engine.close();
  }
}

/** Wraps a decode's status handler: `before` runs on each report before the decode takes it. */
export function onReport(d: Rank, before: (m: Record<string, unknown>) => void): void {
  onMessage(d, PD_MESSAGES.status, before);
}

/** Wraps a decode's handler of chunk checksums (a chunk reported written before the last): `before` runs first. */
export function onChunkSums(d: Rank, before: (m: Record<string, unknown>) => void): void {
  onMessage(d, PD_MESSAGES.sums, before);
}

function onMessage(d: Rank, type: string, before: (m: Record<string, unknown>) => void): void {
  const handlers = (d.engine.control as unknown as { handlers: Map<string, (body: unknown) => unknown> }).handlers;
  const original = handlers.get(type)!;
  handlers.set(type, (body) => {
    before(body as Record<string, unknown>);
    return original(body);
  });
}

export const ending = (cell: { reached(s: KVStatus, o?: { timeoutMs?: number }): Promise<unknown> }) =>
  cell.reached(KVStatus.Success, { timeoutMs: 10_000 }).then(
    () => undefined,
    (e: Error & { code?: string }) => e,
  );

export interface RoomSpec {
  room: bigint;
  src: number[];
  dst: number[];
  how: 'whole' | 'chunked' | 'layerwise';
  /** State slots on each side (a model with state). */
  stateSrc?: number[];
  stateDst?: number[];
}

/** Runs one room from every prefill rank to every decode rank (aux slot 1 → 2); the error each side ended with (undefined: Success). */
export async function runRoom(
  model: ModelSpec,
  prefills: Rank[],
  decodes: Rank[],
  port: number,
  r: RoomSpec,
): Promise<{ decode: (Error | undefined)[]; prefill: (Error | undefined)[] }> {
  const pages = Uint32Array.from(r.src);
  const stateSrc = r.stateSrc ? Uint32Array.from(r.stateSrc) : undefined;
  const senders = prefills.map((p) => {
    fillPrefill(model, p.memory, r.room, pages, 1, stateSrc);
    const s = p.manager.createSender({ host: '127.0.0.1', port, room: r.room });
    s.init(pages.length, 1);
    return s;
  });
  const receivers = decodes.map((d) => d.manager.createReceiver({ host: '127.0.0.1', port, room: r.room }));
  await Promise.all(receivers.map((x) => x.init(Uint32Array.from(r.dst), 2, r.stateDst ? Uint32Array.from(r.stateDst) : undefined)));
  await Promise.all(
    senders.map(async (s, i) => {
      const opts = stateSrc ? { stateIndices: stateSrc } : {};
      if (r.how === 'layerwise') {
        await s.cell.reached(KVStatus.WaitingForInput, { timeoutMs: 10_000 });
        const batch = prefills[i]!.manager.beginBatch([{ sender: s, pages, ...(stateSrc ? { stateIndices: stateSrc } : {}) }]);
        const span = prefills[i]!.memory;
        for (let l = 0; l < span.layers; l++) batch.layerReady(span.firstLayer + l);
        await batch.finish().catch(() => undefined);
      } else if (r.how === 'chunked') {
        await s.send(pages.subarray(0, 1)).catch(() => undefined);
        await s.send(pages.subarray(1), { last: true, ...opts }).catch(() => undefined);
      } else {
        await s.send(pages, { last: true, ...opts }).catch(() => undefined);
      }
    }),
  );
  return { decode: await Promise.all(receivers.map((x) => ending(x.cell))), prefill: await Promise.all(senders.map((s) => ending(s.cell))) };
}
