// A transfer that failed before one of its transports let go of the memory (the engine's
// watchdog answered at the deadline plus a grace, `details.settled: false`) carries the
// moment that transport does. A protocol that hands memory back to a peer on failure (a
// decode freeing its pages, a consumer reusing a slot) waits for it first, and then asks
// whether a write of the transfer may still land at that peer (`remoteMayBeWritten`).
//
// Kept on the error under a registered symbol, not in `details`, so it survives copies of
// this module loaded side by side and stays out of serialised details.
const SETTLEMENT = Symbol.for('te.TransferError.settlement');

/** How a failed transfer ended, once every transport that carried a part of it let go. */
export interface Settlement {
  /**
   * A write of the transfer may still land in the peer's memory: its transport settled a
   * cancelled write without knowing that the bytes it had already sent were discarded
   * (`details.remoteMayBeWritten` on a transport's error). The peer must not reuse the
   * written range for something else on the strength of this failure.
   */
  remoteMayBeWritten: boolean;
}

/** Whether `error` says that bytes of its writes may still land at the peer. */
export function remoteMayBeWritten(error: unknown): boolean {
  const details = typeof error === 'object' && error !== null ? (error as { details?: unknown }).details : undefined;
  return typeof details === 'object' && details !== null && (details as Record<string, unknown>).remoteMayBeWritten === true;
}

/** @internal Marks `error` as one after which bytes of its writes may still land at the peer. */
export function markRemoteMayBeWritten(error: unknown): void {
  if (typeof error !== 'object' || error === null || remoteMayBeWritten(error)) return;
  const e = error as { details?: Record<string, unknown> };
  e.details = { ...(e.details ?? {}), remoteMayBeWritten: true };
}

/**
 * @internal Records on `error` when the transports of its transfer settle: `parts` are the
 * submissions the engine stopped waiting for. Their late errors count for `remoteMayBeWritten`.
 */
export function attachSettlement(error: object, parts: Promise<unknown>[]): void {
  if (Object.prototype.hasOwnProperty.call(error, SETTLEMENT)) return;
  const settlement = Promise.allSettled(parts).then((results): Settlement => ({
    remoteMayBeWritten: remoteMayBeWritten(error) || results.some((r) => r.status === 'rejected' && remoteMayBeWritten(r.reason)),
  }));
  Object.defineProperty(error, SETTLEMENT, { value: settlement });
}

/**
 * Resolves once no transport touches memory for the transfer that failed with `error`
 * (on either side), with whether a write of it may still land at the peer. At once for
 * every error but a transfer the engine answered before its transport settled; that one
 * resolves when the transport does (or is closed). Never rejects.
 */
export function untilSettled(error: unknown): Promise<Settlement> {
  const settlement =
    typeof error === 'object' && error !== null ? ((error as Record<symbol, unknown>)[SETTLEMENT] as Promise<Settlement> | undefined) : undefined;
  return settlement ?? Promise.resolve({ remoteMayBeWritten: remoteMayBeWritten(error) });
}
