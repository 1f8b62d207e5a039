// PD ranks in the test process: each its own engine and manager, all on one bootstrap port.
import type { ParallelLayout, TransferEngine } from '@te/connector';
import { createKVManager, type DisaggKVManager, type PDTimeouts, type StagingOptions } from '../src/index.js';
import { allocateRank, type ModelSpec } from './fixtures/pd-model.js';
import { freePort } from './pd-harness.js';
import { FAST } from './pd-scenario.js';

export interface InProcessRank {
  engine: TransferEngine;
  memory: Awaited<ReturnType<typeof allocateRank>>;
  manager: DisaggKVManager;
}

export type MakeRank = (role: 'prefill' | 'decode', layout: ParallelLayout) => Promise<InProcessRank>;

/**
 * Runs `body` with a factory of ranks (`engine()` creates each one's engine) and the
 * bootstrap port they share; every manager, then every engine, is closed afterwards.
 */
export async function withInProcessRanks<T>(
  o: { model: ModelSpec; engine: () => Promise<TransferEngine>; timeouts?: Partial<PDTimeouts>; staging?: StagingOptions },
  body: (make: MakeRank, port: number) => Promise<T>,
): Promise<T> {
  const port = await freePort();
  const engines: TransferEngine[] = [];
  const managers: DisaggKVManager[] = [];
  const make: MakeRank = async (role, layout) => {
    const engine = await o.engine();
    engines.push(engine);
    const memory = await allocateRank(engine, o.model, layout);
    const manager = await createKVManager({
      role,
      layout,
      buffers: memory.buffers,
      engine,
      bootstrapHost: '127.0.0.1',
      bootstrapPort: port,
      timeouts: o.timeouts ?? FAST,
      ...(o.staging ? { staging: o.staging } : {}),
    });
    managers.push(manager);
    return { engine, memory, manager };
  };
  try {
    return await body(make, port);
  } finally {
    for (const m of managers) await m.close();
    for (const e of engines) await e.close();
  }
}
