/**
 * A first-in, first-out queue whose take is O(1) at any length (Array.prototype.shift moves
 * every element once the array is large). `keep` drops the entries a predicate rejects.
 */
export class Fifo<T> {
  private items: T[] = [];
  private head = 0;

  get length(): number {
    return this.items.length - this.head;
  }

  push(item: T): void {
    this.items.push(item);
  }

  take(): T | undefined {
    if (this.head >= this.items.length) return undefined;
    const item = this.items[this.head]!;
    this.items[this.head++] = undefined as T; // released for the collector at once
    // Taken entries are cut off once they are most of the array.
    if (this.head >= 1024 && this.head * 2 >= this.items.length) {
      this.items = this.items.slice(this.head);
      this.head = 0;
    }
    return item;
  }

  keep(predicate: (item: T) => boolean): void {
    this.items = this.items.slice(this.head).filter(predicate);
    this.head = 0;
  }

  clear(): void {
    this.items = [];
    this.head = 0;
  }
}
