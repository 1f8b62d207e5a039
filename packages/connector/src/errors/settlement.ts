// A transfer that failed before one of its transports let go of the memory (the engine's
// watchdog answered at the deadline plus a grace, `details.settled: false`) carries the
// moment that transport does. A protocol that hands memory back to a peer on failure (a
// decode freeing its pages, a consumer reusing a slot) waits for it first.
//
// Kept on the error under a registered symbol, not in `details`, so it survives copies of
// this module loaded side by side and stays out of serialised details.
const SETTLEMENT = Symbol.for('te.TransferError.settlement');

/** @internal Records on `error` when the transports of its transfer settle. */
export function attachSettlement(error: object, settlement: Promise<unknown>): void {
  if (Object.prototype.hasOwnProperty.call(error, SETTLEMENT)) return;
  Object.defineProperty(error, SETTLEMENT, { value: settlement.then(() => undefined, () => undefined) });
}

/**
 * Resolves once no transport touches memory for the transfer that failed with `error`
 * (on either side). At once for every error but a transfer the engine answered before
 * its transport settled; that one resolves when the transport does (or is closed).
 * Never rejects.
 */
export function untilSettled(error: unknown): Promise<void> {
  const settlement = typeof error === 'object' && error !== null ? ((error as Record<symbol, unknown>)[SETTLEMENT] as Promise<void> | undefined) : undefined;
  return settlement ?? Promise.resolve();
}
