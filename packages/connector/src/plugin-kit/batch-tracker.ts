import { NATIVE_STATUS } from '../errors/codes.js';
import { TransferError } from '../errors/transfer-error.js';
import type { BatchResult, SubmitOptions } from '../spi/batch.js';
import { Deadlines, type Deadline } from '../timing/deadlines.js';

/** A submitted batch waiting for its native completion; queued on the tracker's deadlines. */
class Pending implements Deadline {
  at = 0;
  slot = -1;
  onAbort: (() => void) | undefined = undefined;

  constructor(
    readonly id: number,
    readonly peer: string,
    readonly signal: AbortSignal | undefined,
    readonly resolve: (result: BatchResult) => void,
    readonly reject: (error: TransferError) => void,
    private readonly cancel: (id: number, status: number) => void,
  ) {}

  expire(): void {
    this.cancel(this.id, NATIVE_STATUS.TIMEOUT);
  }
}

/**
 * The JS half of a native transport's batches: one promise per batch id, a deadline and
 * an abort listener that ask native code to cancel, and the rule that turns a native
 * completion into a result or a TransferError. Native code completes every batch exactly
 * once (also after a cancel); this class never settles a batch on its own. The deadlines
 * of all its batches share one timer (timing/deadlines.ts).
 */
export class BatchTracker {
  private readonly pending = new Map<number, Pending>();
  private readonly deadlines = new Deadlines();

  constructor(
    private readonly plugin: string,
    /** Asks native code to stop a batch; it then completes with `status`. */
    private readonly cancel: (id: number, status: number) => void,
  ) {}

  get size(): number {
    return this.pending.size;
  }

  /** Registers a submitted batch; returns its promise. */
  track(id: number, peer: string, options: Pick<SubmitOptions, 'timeoutMs' | 'signal'>): Promise<BatchResult> {
    return new Promise<BatchResult>((resolve, reject) => {
      const entry = new Pending(id, peer, options.signal, resolve, reject, this.cancel);
      this.deadlines.add(entry, options.timeoutMs);
      if (options.signal) {
        entry.onAbort = () => this.cancel(id, NATIVE_STATUS.ABORTED);
        options.signal.addEventListener('abort', entry.onAbort, { once: true });
      }
      this.pending.set(id, entry);
    });
  }

  /**
   * Settles a batch from its native completion. A batch-level status, or any request
   * failing with a peer/connection/system status (≤ -100), rejects with `statuses`
   * attached; per-request argument and memory failures (-1..-99) resolve in `statuses`.
   * `remoteMayBeWritten`: native code settled a write whose bytes, already sent, may still
   * land at the peer (it could not confirm they were discarded); the error's details say so.
   */
  complete(id: number, batchStatus: number, statuses: Int32Array, bytes: bigint, message = '', remoteMayBeWritten = false): void {
    const b = this.pending.get(id);
    if (!b) return;
    this.pending.delete(id);
    this.deadlines.remove(b);
    if (b.signal && b.onAbort) b.signal.removeEventListener('abort', b.onAbort);
    let status = batchStatus;
    if (status === 0) {
      for (let i = 0; i < statuses.length; i++) {
        if (statuses[i]! <= -100) {
          status = statuses[i]!;
          break;
        }
      }
    }
    if (status === 0) {
      b.resolve({ statuses, bytes });
      return;
    }
    const what =
      status === NATIVE_STATUS.TIMEOUT
        ? `batch to "${b.peer}" timed out`
        : status === NATIVE_STATUS.ABORTED
          ? `batch to "${b.peer}" aborted`
          : `batch to "${b.peer}" failed`;
    // A cancel's own reason (what the transport did with slices still in flight) follows it.
    const text = !message ? what : status === NATIVE_STATUS.TIMEOUT || status === NATIVE_STATUS.ABORTED ? `${what}; ${message}` : `${what}: ${message}`;
    const details: Record<string, unknown> = { peer: b.peer, bytes };
    if (remoteMayBeWritten) details.remoteMayBeWritten = true;
    b.reject(TransferError.fromStatus(status, text, { plugin: this.plugin, statuses, details }));
  }

  /** Rejects every pending batch (the transport closed and native code will not complete them). */
  abandonAll(reason: string): void {
    for (const [id, b] of this.pending) {
      this.deadlines.remove(b);
      if (b.signal && b.onAbort) b.signal.removeEventListener('abort', b.onAbort);
      b.reject(new TransferError('ABORTED', `${reason}; batch to "${b.peer}" abandoned`, { plugin: this.plugin }));
      this.pending.delete(id);
    }
  }
}
