import { TransferError } from '@te/connector';

interface Waiter {
  bytes: number;
  owner: unknown;
  resolve: (offset: number) => void;
  reject: (e: TransferError) => void;
  timer: NodeJS.Timeout;
}

const ALIGN = 64;

/**
 * Fixed staging memory handed out in variable-size pieces: first fit over a sorted free
 * list, neighbours joined on free. Never overcommits: a request that does not fit waits,
 * first come first served (a large request is not overtaken forever by small ones),
 * until its deadline; one larger than the whole pool is refused at once. Every piece and
 * every waiter belongs to an owner (a room), so a failed room gives back its share.
 */
export class BytePool {
  /** Free ranges [offset, offset + length), sorted by offset. */
  private free: { offset: number; length: number }[];
  private readonly taken = new Map<number, { length: number; owner: unknown }>();
  private readonly waiters: Waiter[] = [];
  used = 0;
  peak = 0;
  waits = 0;

  constructor(
    readonly capacity: number,
    private readonly what: string,
  ) {
    if (!Number.isInteger(capacity) || capacity < ALIGN) throw new TransferError('INVALID_ARGUMENT', `${what}: ${capacity} bytes is too small`);
    this.free = [{ offset: 0, length: capacity }];
  }

  /** A piece of `bytes` (rounded up to 64) for `owner`; waits at most `timeoutMs` for room. */
  alloc(bytes: number, owner: unknown, timeoutMs: number): Promise<number> {
    const size = Math.ceil(bytes / ALIGN) * ALIGN;
    if (!Number.isInteger(bytes) || bytes < 1) return Promise.reject(new TransferError('INVALID_ARGUMENT', `${this.what}: cannot allocate ${bytes} bytes`));
    if (size > this.capacity)
      return Promise.reject(new TransferError('INVALID_ARGUMENT', `${this.what}: ${bytes} bytes can never fit in ${this.capacity} bytes`));
    if (this.waiters.length === 0) {
      const offset = this.take(size, owner);
      if (offset >= 0) return Promise.resolve(offset);
    }
    this.waits++;
    return new Promise((resolve, reject) => {
      const w: Waiter = {
        bytes: size,
        owner,
        resolve,
        reject,
        timer: setTimeout(() => {
          this.drop(w);
          reject(
            new TransferError('TIMEOUT', `${this.what}: no room for ${bytes} bytes within ${timeoutMs} ms (${this.used} of ${this.capacity} bytes in use)`),
          );
        }, timeoutMs),
      };
      this.waiters.push(w);
    });
  }

  release(offset: number): void {
    const t = this.taken.get(offset);
    if (!t) return;
    this.taken.delete(offset);
    this.used -= t.length;
    this.give(offset, t.length);
    this.serveWaiters();
  }

  /** Refuses `owner`'s waiters with `error` (its pieces stay until released: a write may still use them). */
  refuseWaiters(owner: unknown, error: TransferError): void {
    for (const w of [...this.waiters]) {
      if (w.owner !== owner) continue;
      this.drop(w);
      w.reject(error);
    }
  }

  /** Frees every piece of `owner`: only once nothing can still read or write them. */
  releaseOwner(owner: unknown): void {
    for (const [offset, t] of [...this.taken]) if (t.owner === owner) this.release(offset);
  }

  /** Pieces held by `owner`. */
  heldBy(owner: unknown): number {
    let n = 0;
    for (const t of this.taken.values()) if (t.owner === owner) n++;
    return n;
  }

  /** Whether [offset, offset + bytes) lies inside one piece held by `owner`. */
  owns(owner: unknown, offset: number, bytes: number): boolean {
    for (const [start, t] of this.taken) if (t.owner === owner && offset >= start && offset + bytes <= start + t.length) return true;
    return false;
  }

  /** Refuses every waiter (closing). */
  close(error: TransferError): void {
    for (const w of this.waiters.splice(0)) {
      clearTimeout(w.timer);
      w.reject(error);
    }
  }

  private take(size: number, owner: unknown): number {
    const i = this.free.findIndex((f) => f.length >= size);
    if (i < 0) return -1;
    const f = this.free[i]!;
    const offset = f.offset;
    if (f.length === size) this.free.splice(i, 1);
    else this.free[i] = { offset: f.offset + size, length: f.length - size };
    this.taken.set(offset, { length: size, owner });
    this.used += size;
    this.peak = Math.max(this.peak, this.used);
    return offset;
  }

  private give(offset: number, length: number): void {
    let i = this.free.findIndex((f) => f.offset > offset);
    if (i < 0) i = this.free.length;
    this.free.splice(i, 0, { offset, length });
    // Join with the next, then with the previous range.
    const next = this.free[i + 1];
    if (next && offset + length === next.offset) {
      this.free[i] = { offset, length: length + next.length };
      this.free.splice(i + 1, 1);
    }
    const prev = this.free[i - 1];
    if (prev && prev.offset + prev.length === offset) {
      prev.length += this.free[i]!.length;
      this.free.splice(i, 1);
    }
  }

  private serveWaiters(): void {
    while (this.waiters.length > 0) {
      const w = this.waiters[0]!;
      const offset = this.take(w.bytes, w.owner);
      if (offset < 0) return;
      this.waiters.shift();
      clearTimeout(w.timer);
      w.resolve(offset);
    }
  }

  private drop(w: Waiter): void {
    clearTimeout(w.timer);
    const i = this.waiters.indexOf(w);
    if (i >= 0) this.waiters.splice(i, 1);
    // The head left: those behind it may fit now.
    if (i === 0) queueMicrotask(() => this.serveWaiters());
  }
}
