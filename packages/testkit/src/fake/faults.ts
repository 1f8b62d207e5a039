import { NATIVE_STATUS } from '@te/connector';

/**
 * Fault injection for the fake transport, shared by every instance of one fake plugin.
 * Tests flip these between calls to exercise the engine's failure handling.
 */
export class FakeFaults {
  /** The n-th request submitted from now on (1-based, across batches) fails with `status`. */
  failNth: { n: number; status: number } | undefined;
  /** Batches never complete: only their deadline or abort ends them. */
  neverComplete = false;
  /** Odd-numbered batches complete after even-numbered ones submitted later. */
  outOfOrder = false;
  /**
   * Batches ignore their deadline and abort and settle only on `releaseHung()`: a broken
   * transport, for testing what the engine does when one never lets go of memory.
   */
  hang = false;
  private readonly hung = new Set<(unconfirmed: boolean) => void>();
  /**
   * A batch with a write that is cancelled (deadline or abort) says that its bytes may still
   * land at the peer (`details.remoteMayBeWritten`), as a transport does whose peer did not
   * confirm the cancel.
   */
  unconfirmedCancel = false;
  /** Delay before a batch completes, in ms. */
  latencyMs = 0;
  /**
   * Requests are applied when the batch is submitted, as a real transport's bytes land
   * before its completion arrives: a batch that then times out or is aborted has already
   * changed memory. Off, data is applied only at completion.
   */
  writeEarly = false;
  /**
   * A transport's close() waits until `releaseClose()`, as one draining a long queue does:
   * it holds its engine's close at that step, for testing what peers see meanwhile.
   */
  readonly closeStep = new HeldStep();
  /**
   * A transport's unregisterMemory() waits until `unregisterStep.release()`: the engine's
   * unregistration is then under way (the region out of its map, the transport still
   * holding it), for testing what a batch from that region gets meanwhile.
   */
  readonly unregisterStep = new HeldStep();
  /** Segments whose peer is considered dead. */
  readonly droppedPeers = new Set<string>();
  submitted = 0;
  batches = 0;
  private readonly dropListeners = new Set<(segment: string) => void>();
  private readonly batchWaiters = new Set<() => void>();

  /** @internal A batch was submitted (counted in `batches`). */
  countBatch(): number {
    ++this.batches;
    for (const w of [...this.batchWaiters]) w();
    return this.batches;
  }

  /** Resolves once `batches` reaches `n`: a test waits for the submit it means, not for a clock. */
  untilBatches(n: number): Promise<void> {
    if (this.batches >= n) return Promise.resolve();
    return new Promise((resolve) => {
      const check = (): void => {
        if (this.batches < n) return;
        this.batchWaiters.delete(check);
        resolve();
      };
      this.batchWaiters.add(check);
    });
  }

  failRequest(n: number, status: number = NATIVE_STATUS.TRANSFER_FAILED): void {
    this.failNth = { n: this.submitted + n, status };
  }

  /** Kills the link to a peer: in-flight and later batches to it fail with PEER_FAILED. */
  dropPeer(segment: string): void {
    this.droppedPeers.add(segment);
    for (const l of this.dropListeners) l(segment);
  }

  restorePeer(segment: string): void {
    this.droppedPeers.delete(segment);
  }

  /** @internal */
  parkHung(settle: (unconfirmed: boolean) => void): void {
    this.hung.add(settle);
  }

  /**
   * Lets every hung batch complete now; with `unconfirmed`, the transport gives up on them
   * instead: TIMEOUT, and batches with a write say their bytes may still land at the peer.
   */
  releaseHung(options: { unconfirmed?: boolean } = {}): void {
    const all = [...this.hung];
    this.hung.clear();
    for (const settle of all) settle(options.unconfirmed === true);
  }

  /** Whether close() is held (`closeStep.hold`). */
  get holdClose(): boolean {
    return this.closeStep.hold;
  }

  set holdClose(on: boolean) {
    this.closeStep.hold = on;
  }

  /** Resolves once a transport's close() is held (`holdClose`): an event, not a clock. */
  untilCloseHeld(): Promise<void> {
    return this.closeStep.untilHeld();
  }

  /** Lets every held close() go on. */
  releaseClose(): void {
    this.closeStep.release();
  }

  onDrop(listener: (segment: string) => void): () => void {
    this.dropListeners.add(listener);
    return () => this.dropListeners.delete(listener);
  }

  reset(): void {
    this.failNth = undefined;
    this.neverComplete = false;
    this.hang = false;
    this.unconfirmedCancel = false;
    this.outOfOrder = false;
    this.latencyMs = 0;
    this.writeEarly = false;
    for (const step of [this.closeStep, this.unregisterStep]) {
      step.hold = false;
      step.release();
    }
    this.droppedPeers.clear();
  }
}

/**
 * A step of the fake transport that waits while `hold` is set, until `release()`:
 * `untilHeld()` resolves once a call waits there (an event a test waits for, not a clock).
 */
export class HeldStep {
  hold = false;
  private readonly held = new Set<() => void>();
  private readonly waiters = new Set<() => void>();

  /** @internal The transport's method waits here. */
  pass(): Promise<void> {
    if (!this.hold) return Promise.resolve();
    const held = new Promise<void>((resolve) => this.held.add(resolve));
    for (const w of [...this.waiters]) w();
    this.waiters.clear();
    return held;
  }

  untilHeld(): Promise<void> {
    if (this.held.size > 0) return Promise.resolve();
    return new Promise((resolve) => this.waiters.add(resolve));
  }

  /** Lets every held call go on. */
  release(): void {
    const all = [...this.held];
    this.held.clear();
    for (const go of all) go();
  }
}
