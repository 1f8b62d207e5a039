// Deadlines enforced from outside the transports: a step (descriptor fetch, connect) that
// outlives the batch deadline or its signal is abandoned, and a transport that does not
// settle a batch well past its deadline is reported. Every batch a transport has not
// settled keeps its local memory in use: its unregistration is refused (settled means
// done with memory).
import { TransferError } from '../errors/transfer-error.js';
import type { BatchResult, SubmitOptions, TransferBatch } from '../spi/batch.js';
import type { TransportPeer } from '../spi/transport.js';
import type { Log } from './logger.js';
import type { LocalRegion } from './memory-map.js';
import { Deadlines, type Deadline } from '../timing/deadlines.js';
import type { EngineTransport } from './router.js';
import { checkedResult, submitThrough } from './transport-answer.js';
import { asTransferError } from './guarded-transport.js';

/** Extra time a transport gets past the deadline before the engine stops waiting for it. */
export const WATCHDOG_GRACE_MS = 2_000;

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
  /** Whether the watchdog gave up waiting: the caller was answered, the transport has not settled. */
  overdue = false;

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
  /** Batches past their deadline and the grace, which the transport has not settled. */
  private readonly overdueBatches = new Set<WatchedBatch>();

  constructor(private readonly log: Log) {}

  submit(
    via: EngineTransport,
    peer: TransportPeer,
    batch: TransferBatch,
    options: SubmitOptions,
    /** Collects the settlement of a batch whose caller was released before its transport settled. */
    sink: UnsettledSink = { unsettled: undefined },
  ): Promise<BatchResult> {
    return new Promise((resolve, reject) => {
      const submitted = submitThrough(via.name, via.transport, peer, batch, options);
      const watched = new WatchedBatch(this, via, batch, options.timeoutMs, submitted, sink, reject);
      this.deadlines.add(watched, options.timeoutMs + WATCHDOG_GRACE_MS);
      submitted.then(
        (r) => {
          this.release(watched);
          try {
            resolve(checkedResult(via.name, batch, r));
          } catch (e) {
            reject(e as TransferError);
          }
        },
        (e) => {
          this.release(watched);
          reject(asTransferError(via.name, 'submit', e, 'rejected with'));
        },
      );
    });
  }

  /** The grace past the deadline ran out and the transport has not settled the batch. */
  overdue(w: WatchedBatch): void {
    // Settled means done with memory, and this batch is not settled: the caller gets a
    // deadline-bound answer, but the batch's local regions stay marked in use (their
    // unregistration is refused) until the transport really settles it.
    w.overdue = true;
    this.overdueBatches.add(w);
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
    if (w.overdue) this.overdueBatches.delete(w);
  }

  /**
   * Refuses to let `region` go while a batch of this engine still has local memory in it:
   * one in flight (its caller can await or abort it), or one its transport has not settled
   * past the deadline. A transport that lost a batch's memory under it would end the batch
   * its own way (a lost connection, a refused request, a copy from freed memory). Scans the
   * batches in flight: unregistering is rare, submitting is not, so submitting pays nothing.
   */
  assertUnused(region: Pick<LocalRegion, 'addr' | 'length'>): void {
    let inFlight = 0;
    let overdue = 0;
    for (const d of this.deadlines.entries()) if (hasLocalIn((d as WatchedBatch).batch, region)) inFlight++;
    for (const w of this.overdueBatches) if (hasLocalIn(w.batch, region)) overdue++;
    if (inFlight + overdue === 0) return;
    const at = `0x${region.addr.toString(16)}`;
    const why =
      inFlight > 0
        ? `is local memory of ${inFlight} batch${inFlight > 1 ? 'es' : ''} in flight${overdue > 0 ? ` and of ${overdue} its transport has not settled past the deadline` : ''}; await ${inFlight + overdue > 1 ? 'them' : 'it'} (or abort ${inFlight + overdue > 1 ? 'them' : 'it'}) before unregistering the region`
        : `is still used by ${overdue > 1 ? `${overdue} batches` : 'a batch'} its transport has not settled (it timed out without releasing the memory); it cannot be unregistered yet`;
    throw new TransferError('MEMORY_IN_USE', `Region ${at} ${why}`, { details: { addr: region.addr, inFlight, overdue } });
  }
}

/** Whether a request of `batch` has its local address in `region` (a request lies in one region). */
function hasLocalIn(batch: TransferBatch, region: Pick<LocalRegion, 'addr' | 'length'>): boolean {
  const start = region.addr;
  const end = region.addr + region.length;
  const addrs = batch.localAddrs;
  for (let i = 0; i < addrs.length; i++) {
    const a = addrs[i]!;
    if (a >= start && a < end) return true;
  }
  return false;
}
