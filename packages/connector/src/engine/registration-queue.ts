import type { Log } from './logger.js';

/**
 * An engine's registrations and unregistrations, one at a time, in call order: a transport
 * sees a region's registration finish before its unregistration starts, and the memory map
 * changes in the order the caller asked. close() waits for the queue to drain, but not past a
 * bound: a registration still waiting for its transport then finds, when the transport answers,
 * that the engine closed without it, and gives the region back instead of adding it.
 */
export class RegistrationQueue {
  private tail: Promise<unknown> = Promise.resolve();
  private gaveUp = false;

  run<T>(work: () => Promise<T>): Promise<T> {
    const next = this.tail.then(work, work);
    this.tail = next.catch(() => undefined);
    return next;
  }

  /** Whether close() stopped waiting for the queue: work that finishes now must not add to the engine. */
  get abandoned(): boolean {
    return this.gaveUp;
  }

  /** Resolves once the queue drained, or after `boundMs` (logged), whichever comes first. */
  drain(boundMs: number, log: Log): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.gaveUp = true;
        log('error', `a registration still waits for its transport after ${boundMs} ms; the engine closes without it`);
        resolve();
      }, boundMs);
      void this.tail.then(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }
}
