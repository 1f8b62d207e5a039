import type { TransferEngine, TransferError } from '@te/connector';
import { stagingAvailability } from '@te/staging';
import type { BufferTable } from '../plan/copy-plan.js';
import type { KvStaging, StagingStats } from '../pd/kv-write.js';
import type { ResolvedStaging } from './options.js';
import { Stager } from './stager.js';

/** Why staging cannot run for KV in `device` memory on this machine, or undefined. */
export function stagingBlocker(device: string): string | undefined {
  if (device !== 'cpu') return `KV in ${device} memory (the staging copier copies host memory)`;
  const a = stagingAvailability();
  return a.available ? undefined : `the staging copier is not built: ${a.reason}`;
}

/** A prefill rank's staging: created on first use, so ranks that never need it allocate nothing. */
export class PrefillStaging implements KvStaging {
  private readonly counters: StagingStats = {
    transportGathers: 0,
    transportScatters: 0,
    gatherWrites: 0,
    ringWrites: 0,
    stagedBytes: 0,
    gatherMs: 0,
    stagedDescriptors: 0,
    inUse: 0,
    fallbacks: {},
    scatterRefusals: 0,
  };
  readonly noScatter = new Set<string>();
  private current: Stager | undefined;

  get stats(): StagingStats {
    this.counters.inUse = this.current?.stats.used ?? 0;
    return this.counters;
  }
  readonly unavailable: string | undefined;
  private created: Promise<Stager> | undefined;

  constructor(
    private readonly engine: TransferEngine,
    readonly options: ResolvedStaging,
    private readonly kv: BufferTable,
    device: string,
    readonly log: (message: string) => void,
  ) {
    this.unavailable = options.enabled ? stagingBlocker(device) : undefined;
  }

  stager(): Promise<Stager> {
    if (!this.created) {
      this.created = Stager.create(this.engine, this.options, this.kv);
      void this.created.then(
        (s) => (this.current = s),
        () => undefined,
      );
      // A failed creation (no memory) is tried again by the next room.
      this.created.catch(() => (this.created = undefined));
    }
    return this.created;
  }

  refuse(room: bigint, error: TransferError): void {
    void this.created?.then(
      (s) => s.refuse(room, error),
      () => undefined,
    );
  }

  async close(): Promise<void> {
    const s = await this.created?.catch(() => undefined);
    await s?.close();
  }
}
