import { EventEmitter } from 'node:events';
import { TransferError } from '../errors/transfer-error.js';
import { checkMilliseconds } from '../timing/milliseconds.js';

/**
 * Per-request transfer status (SGLang's KVPoll). Ordered: a request only moves up,
 * except to Failed, which is sticky. Ranks of one request combine by MIN.
 */
export const KVStatus = {
  Failed: 0,
  Bootstrapping: 1,
  WaitingForInput: 2,
  Transferring: 3,
  Success: 4,
} as const;
export type KVStatus = (typeof KVStatus)[keyof typeof KVStatus];

const NAMES = ['Failed', 'Bootstrapping', 'WaitingForInput', 'Transferring', 'Success'] as const;

export function kvStatusName(status: KVStatus): string {
  return NAMES[status] ?? `Unknown(${status})`;
}

/** Combines the statuses of the ranks serving one request: the slowest (or failed) one decides. */
export function combineStatus(statuses: Iterable<KVStatus>): KVStatus {
  let min: KVStatus = KVStatus.Success;
  for (const s of statuses) if (s < min) min = s;
  return min;
}

export interface StatusEvents {
  status: [status: KVStatus];
}

/**
 * A monotonic status with promises and events, the one implementation behind every
 * sender and receiver: `value` to poll, `reached()` to await, `on('status')` to observe.
 */
export class StatusCell extends EventEmitter<StatusEvents> {
  private current: KVStatus;
  private failure: TransferError | undefined;

  constructor(initial: KVStatus = KVStatus.Bootstrapping) {
    super();
    this.current = initial;
  }

  get value(): KVStatus {
    return this.current;
  }

  get error(): TransferError | undefined {
    return this.failure;
  }

  /** Moves forward; a lower status than the current one is ignored, and nothing leaves Failed. */
  advance(next: KVStatus): boolean {
    if (this.current === KVStatus.Failed || next <= this.current) return false;
    this.current = next;
    this.emit('status', next);
    return true;
  }

  /** Fails the request (sticky). The first error is kept. */
  fail(error: TransferError): boolean {
    if (this.current === KVStatus.Failed || this.current === KVStatus.Success) return false;
    this.current = KVStatus.Failed;
    this.failure = error;
    this.emit('status', KVStatus.Failed);
    return true;
  }

  /** Resolves once the status is at least `target`; rejects with the failure if it fails first. */
  reached(target: KVStatus, options: { signal?: AbortSignal; timeoutMs?: number } = {}): Promise<KVStatus> {
    const refused = checkReachedArgs(target, options);
    if (refused) return Promise.reject(refused);
    if (this.current === KVStatus.Failed) return Promise.reject(this.failure);
    if (this.current >= target) return Promise.resolve(this.current);
    return new Promise((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      const cleanup = (): void => {
        this.off('status', onStatus);
        if (timer) clearTimeout(timer);
        options.signal?.removeEventListener('abort', onAbort);
      };
      const onStatus = (s: KVStatus): void => {
        if (s === KVStatus.Failed) {
          cleanup();
          reject(this.failure);
        } else if (s >= target) {
          cleanup();
          resolve(s);
        }
      };
      const onAbort = (): void => {
        cleanup();
        reject(new TransferError('ABORTED', `Stopped waiting for ${kvStatusName(target)}`));
      };
      this.on('status', onStatus);
      if (options.signal) {
        if (options.signal.aborted) return onAbort();
        options.signal.addEventListener('abort', onAbort, { once: true });
      }
      if (options.timeoutMs !== undefined) {
        timer = setTimeout(() => {
          cleanup();
          reject(
            new TransferError('TIMEOUT', `Status did not reach ${kvStatusName(target)} within ${options.timeoutMs} ms (now ${kvStatusName(this.current)})`),
          );
        }, options.timeoutMs);
      }
    });
  }
}

/**
 * What `reached` refuses: a status that does not exist (it would never be reached), a
 * timeout no timer can hold (it would fire at once), a signal that is not an AbortSignal.
 */
function checkReachedArgs(target: unknown, options: { signal?: unknown; timeoutMs?: unknown }): TransferError | undefined {
  if (typeof target !== 'number' || !Number.isInteger(target) || target < KVStatus.Failed || target > KVStatus.Success)
    return new TransferError('INVALID_ARGUMENT', `Expected a KVStatus (${KVStatus.Failed} to ${KVStatus.Success}) to wait for, got ${String(target)}`);
  if (options.timeoutMs !== undefined) {
    try {
      checkMilliseconds('the `timeoutMs` option', options.timeoutMs, 0);
    } catch (e) {
      return e as TransferError;
    }
  }
  if (options.signal !== undefined && !(options.signal instanceof AbortSignal))
    return new TransferError('INVALID_ARGUMENT', 'Expected the `signal` option to be an AbortSignal');
  return undefined;
}
