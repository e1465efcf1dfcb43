/**
 * One timer for all of a dispatcher's lease renewals (LEDGER-9). A timer per claimed call was a
 * setInterval created and cleared on every dispatch, a measurable part of the dispatcher's CPU;
 * here every running call is an entry, and one interval ticking at a quarter of the renewal
 * period renews the entries that are due within the next tick. A renewal is therefore sent up
 * to a quarter period early, never later than the per-call interval sent it, so a lease is
 * kept exactly as well. The interval stops at the first tick that finds no entry (a process
 * keeps no timer for a dispatcher that is idle) and is unref'd (it never keeps a process alive).
 *
 * The entries are a list linked through the entries themselves, in the order they were added:
 * a Set that gains and loses an entry on every dispatch rebuilt its hash table as it grew and
 * shrank (about 500 bytes a dispatch, in a heap profile).
 */
export class RenewalWheel<E extends RenewalEntry = RenewalEntry> {
  private head: E | undefined;
  private tail: E | undefined;
  private readonly tickMs: number;
  private timer: ReturnType<typeof setInterval> | undefined;

  /**
   * @param periodMs time between two renewals of one entry (a third of the lease).
   * @param renew renews one entry; one function for every entry, so an entry is the caller's own
   *   object and no closure is made per entry.
   */
  constructor(
    private readonly periodMs: number,
    private readonly renew: (entry: E) => void,
  ) {
    this.tickMs = Math.max(1, Math.floor(periodMs / 4));
  }

  /** Renew `entry` every period from now, until it is removed; an entry is added once. */
  add(entry: E): void {
    entry.due = Date.now() + this.periodMs;
    entry.prev = this.tail;
    entry.next = undefined;
    entry.removed = false;
    if (this.tail === undefined) this.head = entry;
    else this.tail.next = entry;
    this.tail = entry;
    if (this.timer === undefined) {
      this.timer = setInterval(() => this.tick(), this.tickMs);
      this.timer.unref?.();
    }
  }

  /** Stop renewing an entry; removing it again, or one never added, does nothing. */
  remove(entry: E): void {
    // In the list, an entry has a predecessor or is the head: unlinking one that is not (never
    // added, whatever its flag says) would drop the head, and every other lease with it.
    if (entry.removed || (entry.prev === undefined && this.head !== entry)) return;
    entry.removed = true;
    if (entry.prev === undefined) this.head = entry.next as E | undefined;
    else entry.prev.next = entry.next;
    if (entry.next === undefined) this.tail = entry.prev as E | undefined;
    else entry.next.prev = entry.prev;
    // Unlinked both ways: a removed entry still held somewhere holds no other entry.
    entry.prev = undefined;
    entry.next = undefined;
  }

  private tick(): void {
    if (this.head === undefined) {
      clearInterval(this.timer);
      this.timer = undefined;
      return;
    }
    const now = Date.now();
    // The entries due first, then their renewals: a fire() that removed an entry would otherwise
    // cut the walk short (a tick is rare; this list is its only allocation).
    const due: E[] = [];
    for (let entry: E | undefined = this.head; entry !== undefined; entry = entry.next as E | undefined) if (entry.due <= now + this.tickMs) due.push(entry);
    for (const entry of due) {
      if (entry.removed) continue;
      entry.due = now + this.periodMs;
      // A renewal that throws synchronously must not stop the others from being renewed.
      try {
        this.renew(entry);
      } catch {
        // renew() reports its own failures (the dispatcher's handles its rejection).
      }
    }
  }
}

/** What the wheel keeps in an entry; set by add(). */
export interface RenewalEntry {
  due: number;
  /** The wheel's links, cleared when the entry is removed. */
  prev: RenewalEntry | undefined;
  next: RenewalEntry | undefined;
  /** True until add(), and again once removed. */
  removed: boolean;
}
