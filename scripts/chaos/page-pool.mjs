// Free page (or aux slot) indexes of one buffer of a rank, handed to rooms and given back.
export class PagePool {
  constructor(n) {
    this.free = Array.from({ length: n }, (_, i) => i);
    this.quarantined = 0;
  }
  take(n) {
    if (this.free.length < n) return undefined;
    return this.free.splice(0, n);
  }
  give(pages) {
    this.free.push(...pages);
  }
}
