/**
 * An entry of a Deadlines queue: the caller's own object (a pending batch), so that
 * queueing it allocates nothing.
 */
export interface Deadline {
  /** When it expires, in performance.now() milliseconds (monotonic); set by `add`. */
  at: number;
  /** Its place in the queue; -1 while not queued. Only Deadlines writes it. */
  slot: number;
  /** Called once, on the JS thread, when `at` has passed and the entry is still queued. */
  expire(): void;
}

/**
 * The longest delay a Node.js timer holds (2^31 - 1 ms, 24.9 days): a longer one runs after
 * 1 ms. Every timeout te accepts is at most this.
 */
export const MAX_TIMER_MS = 2_147_483_647;

/**
 * Many deadlines on one Node.js timer. A batch used to get a setTimeout of its own (and
 * the engine's watchdog a second one), an object, a closure and a timer-list insertion per
 * batch, plus a clearTimeout when it settled, nearly always long before its deadline.
 * Here a batch's own object waits in a binary heap ordered by `at`: adding one whose
 * deadline is later than the queue's earliest (the usual case: the same timeout, a later
 * start) is one comparison, and removing one is a few.
 *
 * The timer is set for the earliest deadline when it is set, and is not moved when that
 * entry leaves: it fires then, finds nothing due, and is set again for the new earliest.
 * So it fires about once per timeout period while batches keep coming, not once per batch.
 * It is set earlier only when an entry is added with an earlier deadline than it is set
 * for. While the queue is empty the timer does not keep the process alive.
 */
export class Deadlines {
  private readonly heap: Deadline[] = [];
  private timer: NodeJS.Timeout | undefined;
  /** When the timer fires (performance.now() ms); Infinity while no timer is set. */
  private timerAt = Infinity;

  get size(): number {
    return this.heap.length;
  }

  /** The queued entries, in no useful order: for a rare scan, not to be changed. */
  entries(): readonly Deadline[] {
    return this.heap;
  }

  /** Queues `d` to expire `ms` from now. A queued entry must be removed before it is added again. */
  add(d: Deadline, ms: number): void {
    if (d.slot !== -1) throw new Error('deadline entry is already queued');
    d.at = performance.now() + ms;
    const heap = this.heap;
    d.slot = heap.length;
    heap.push(d);
    this.up(d.slot);
    if (heap.length === 1) this.timer?.ref();
    if (d.at < this.timerAt) this.arm(d.at);
  }

  /** Takes `d` out of the queue; it will not expire. Removing an entry not queued does nothing. */
  remove(d: Deadline): void {
    const i = d.slot;
    if (i < 0) return;
    const heap = this.heap;
    d.slot = -1;
    const last = heap.pop()!;
    if (last !== d) {
      heap[i] = last;
      last.slot = i;
      // The moved entry may belong above or below its new place.
      if (i > 0 && last.at < heap[(i - 1) >> 1]!.at) this.up(i);
      else this.down(i);
    }
    // An idle queue must not hold the process open; the timer stays set (cheap) for reuse.
    if (heap.length === 0) this.timer?.unref();
  }

  /** Takes every entry out without expiring any. */
  clear(): void {
    for (const d of this.heap) d.slot = -1;
    this.heap.length = 0;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    this.timerAt = Infinity;
  }

  private arm(at: number): void {
    if (this.timer) clearTimeout(this.timer);
    this.timerAt = at;
    // Rounded up: a timer set for a fraction of a millisecond early would only fire to find
    // nothing due.
    // Node.js takes a delay past 2^31 - 1 ms as 1 ms: a far deadline is approached in steps.
    this.timer = setTimeout(this.fire, Math.min(MAX_TIMER_MS, Math.max(0, Math.ceil(at - performance.now()))));
  }

  /** Expires what is due, then sets the timer for what is left. */
  private readonly fire = (): void => {
    this.timer = undefined;
    this.timerAt = Infinity;
    const heap = this.heap;
    const now = performance.now();
    // An expire() may add or remove entries (a cancel that settles at once): take the
    // earliest each time rather than a list made before.
    while (heap.length > 0 && heap[0]!.at <= now) {
      const d = heap[0]!;
      this.remove(d);
      try {
        d.expire();
      } catch (error) {
        // Thrown on as a timer of its own would have (an uncaught exception), but only
        // after the other entries due now have expired and the timer is set again.
        queueMicrotask(() => {
          throw error;
        });
      }
    }
    if (heap.length > 0 && heap[0]!.at < this.timerAt) this.arm(heap[0]!.at);
  };

  private up(i: number): void {
    const heap = this.heap;
    const d = heap[i]!;
    while (i > 0) {
      const p = (i - 1) >> 1;
      const parent = heap[p]!;
      if (parent.at <= d.at) break;
      heap[i] = parent;
      parent.slot = i;
      i = p;
    }
    heap[i] = d;
    d.slot = i;
  }

  private down(i: number): void {
    const heap = this.heap;
    const n = heap.length;
    const d = heap[i]!;
    for (;;) {
      const l = 2 * i + 1;
      if (l >= n) break;
      const r = l + 1;
      const c = r < n && heap[r]!.at < heap[l]!.at ? r : l;
      const child = heap[c]!;
      if (child.at >= d.at) break;
      heap[i] = child;
      child.slot = i;
      i = c;
    }
    heap[i] = d;
    d.slot = i;
  }
}
