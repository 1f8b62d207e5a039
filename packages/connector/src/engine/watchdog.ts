// Deadlines enforced from outside the transports: a step (descriptor fetch, connect) that
// outlives the batch deadline or its signal is abandoned, and a transport that does not
// settle a batch well past its deadline is reported while the batch's memory stays
// marked in use until it does (settled means done with memory).
import { TransferError, isTransferError } from '../errors/transfer-error.js';
import type { BatchResult, SubmitOptions, TransferBatch } from '../spi/batch.js';
import type { TransportPeer } from '../spi/transport.js';
import type { Log } from './logger.js';
import type { MemoryMap } from './memory-map.js';
import { Deadlines, type Deadline } from '../timing/deadlines.js';
import type { EngineTransport } from './router.js';

/** Extra time a transport gets past the deadline before the engine stops waiting for it. */
export const WATCHDOG_GRACE_MS = 2_000;

/** Regions that a batch no transport has settled still uses, by start address. */
export class RegionPins {
  private readonly inUse = new Map<bigint, number>();

  constructor(private readonly memory: MemoryMap) {}

  has(addr: bigint): boolean {
    return this.inUse.has(addr);
  }

  /** Marks the regions holding the batch's local addresses as in use; returns their starts. */
  pin(batch: TransferBatch): bigint[] {
    const starts = new Set<bigint>();
    for (let i = 0; i < batch.localAddrs.length; i++) {
      const r = this.memory.find(batch.localAddrs[i]!, 1n);
      if (r) starts.add(r.addr);
    }
    for (const a of starts) this.inUse.set(a, (this.inUse.get(a) ?? 0) + 1);
    return [...starts];
  }

  unpin(starts: bigint[]): void {
    for (const a of starts) {
      const n = (this.inUse.get(a) ?? 1) - 1;
      if (n <= 0) this.inUse.delete(a);
      else this.inUse.set(a, n);
    }
  }
}

export function beforeDeadline<T>(step: Promise<T>, deadline: number, signal: AbortSignal | undefined, what: string): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(new TransferError('ABORTED', `The transfer was aborted while ${what}`));
    };
    const timer = setTimeout(
      () => {
        signal?.removeEventListener('abort', onAbort);
        reject(new TransferError('TIMEOUT', `The batch deadline passed while ${what}`));
      },
      Math.max(0, deadline - Date.now()),
    );
    signal?.addEventListener('abort', onAbort, { once: true });
    step.then(
      (value) => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        resolve(value);
      },
      (error) => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        reject(error);
      },
    );
  });
}

/** Where the watchdog leaves the settlements of batches it released the caller from. */
export interface UnsettledSink {
  unsettled: Promise<unknown>[] | undefined;
}

/** A batch its transport has not settled yet, queued on the watchdog's deadlines. */
class WatchedBatch implements Deadline {
  at = 0;
  slot = -1;
  /** The regions kept in use once the watchdog gave up waiting, until the transport settles. */
  pinned: bigint[] | undefined = undefined;

  constructor(
    private readonly dog: Watchdog,
    readonly via: EngineTransport,
    readonly batch: TransferBatch,
    readonly timeoutMs: number,
    readonly submitted: Promise<BatchResult>,
    readonly sink: UnsettledSink,
    readonly reject: (error: TransferError) => void,
  ) {}

  expire(): void {
    this.dog.overdue(this);
  }
}

/**
 * Submits through a transport and enforces the deadline from outside too: a transport
 * that does not settle well past its deadline is reported, and the caller is released.
 * The batches of an engine share one timer (timing/deadlines.ts).
 */
export class Watchdog {
  private readonly deadlines = new Deadlines();

  constructor(
    private readonly pins: RegionPins,
    private readonly log: Log,
  ) {}

  submit(
    via: EngineTransport,
    peer: TransportPeer,
    batch: TransferBatch,
    options: SubmitOptions,
    /** Collects the settlement of a batch whose caller was released before its transport settled. */
    sink: UnsettledSink = { unsettled: undefined },
  ): Promise<BatchResult> {
    return new Promise((resolve, reject) => {
      const submitted = via.transport.submit(peer, batch, options);
      const watched = new WatchedBatch(this, via, batch, options.timeoutMs, submitted, sink, reject);
      this.deadlines.add(watched, options.timeoutMs + WATCHDOG_GRACE_MS);
      submitted.then(
        (r) => {
          this.release(watched);
          resolve(r);
        },
        (e) => {
          this.release(watched);
          reject(
            isTransferError(e)
              ? e
              : new TransferError('INTERNAL', `transport ${via.name} failed with a non-TransferError: ${(e as Error)?.message ?? String(e)}`, {
                  plugin: via.name,
                  cause: e,
                }),
          );
        },
      );
    });
  }

  /** The grace past the deadline ran out and the transport has not settled the batch. */
  overdue(w: WatchedBatch): void {
    // Settled means done with memory, and this batch is not settled: the caller gets a
    // deadline-bound answer, but the batch's local regions stay marked in use (their
    // unregistration is refused) until the transport really settles it.
    w.pinned = this.pins.pin(w.batch);
    (w.sink.unsettled ??= []).push(w.submitted);
    this.log(
      'error',
      `transport ${w.via.name} did not settle a batch ${WATCHDOG_GRACE_MS} ms past its ${w.timeoutMs} ms deadline; its memory stays in use until it does`,
    );
    w.reject(
      new TransferError(
        'TIMEOUT',
        `Batch did not complete within ${w.timeoutMs} ms and the transport has not settled it: its local memory is still in use (unregistering it is refused until the transport lets go)`,
        {
          plugin: w.via.name,
          details: { settled: false },
        },
      ),
    );
  }

  private release(w: WatchedBatch): void {
    this.deadlines.remove(w);
    if (w.pinned) this.pins.unpin(w.pinned);
  }
}
