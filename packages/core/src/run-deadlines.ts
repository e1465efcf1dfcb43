/**
 * The run timeouts of a dispatcher's pending runs (DISPATCH-18), with one timer per distinct bound
 * instead of one per run. A setTimeout created and cleared on every dispatch was most of the
 * bound's cost (about 0.8 µs of the 1 µs it added to a call, in a micro-benchmark); here a run is
 * an entry in the list of its bound, and since every entry of one list gets the same bound, the
 * list is in deadline order by construction: its head is always the next to expire. The list's
 * timer is armed for its head; a head that settles first leaves the timer armed, and when it
 * fires it expires what is due and arms itself again for the new head. The timer keeps the
 * process alive only while a bounded run is pending (an answer is due at the bound even in a
 * process with nothing else to do); a list that empties unrefs it, and the next run refs it again
 * rather than making a new one.
 *
 * Entries are linked through themselves (O(1) removal, nothing allocated per run but the entry),
 * as the renewal wheel's are.
 */
export class RunDeadlines {
  private readonly lists = new Map<number, DeadlineList>();

  /** Expire `entry` at now + `ms` unless it is removed first; an entry is added once. */
  add(entry: RunDeadline, ms: number): void {
    let list = this.lists.get(ms);
    if (list === undefined) {
      list = new DeadlineList(ms);
      this.lists.set(ms, list);
    }
    list.add(entry);
  }

  /** The run settled: forget its deadline. Removing it again, or once it expired, does nothing. */
  remove(entry: RunDeadline): void {
    entry.list?.remove(entry);
  }
}

/** What a pending run keeps in the list of its bound. */
export abstract class RunDeadline {
  deadline = 0;
  prev: RunDeadline | undefined = undefined;
  next: RunDeadline | undefined = undefined;
  /** The list it is in; undefined before it is added and once removed or expired. */
  list: DeadlineList | undefined = undefined;
  /** Called once, when the bound passes with the run still pending. */
  abstract expire(): void;
}

class DeadlineList {
  private head: RunDeadline | undefined;
  private tail: RunDeadline | undefined;
  /** Armed for the head's deadline, or for an earlier head's that settled first. */
  private timer: ReturnType<typeof setTimeout> | undefined;

  constructor(private readonly ms: number) {}

  add(entry: RunDeadline): void {
    entry.deadline = Date.now() + this.ms;
    entry.list = this;
    entry.prev = this.tail;
    entry.next = undefined;
    if (this.tail === undefined) this.head = entry;
    else this.tail.next = entry;
    this.tail = entry;
    // For the head, not this entry: an add from inside fire() (an expiry that started a run) comes
    // while the timer is down and earlier entries are still waiting. A timer still armed for an
    // earlier run fires before this one's deadline, and arms itself again then.
    if (this.timer === undefined) this.arm(this.head!.deadline);
    else if (this.head === entry) this.timer.ref();
  }

  remove(entry: RunDeadline): void {
    if (entry.list !== this) return;
    entry.list = undefined;
    if (entry.prev === undefined) this.head = entry.next;
    else entry.prev.next = entry.next;
    if (entry.next === undefined) this.tail = entry.prev;
    else entry.next.prev = entry.prev;
    entry.prev = undefined;
    entry.next = undefined;
    // The last pending run settled: the timer stays armed but no longer keeps the process alive.
    // Clearing it would cost a new timer at the next run (one dispatch after another is the common
    // case); it fires once at most, finds nothing due and is gone.
    if (this.head === undefined) this.timer?.unref();
  }

  private arm(at: number): void {
    this.timer = setTimeout(() => this.fire(), Math.max(0, at - Date.now()));
  }

  private fire(): void {
    this.timer = undefined;
    const now = Date.now();
    // Unlink each due entry before expiring it: expire() may settle other runs, which remove themselves.
    for (let entry = this.head; entry !== undefined && entry.deadline <= now; entry = this.head) {
      this.remove(entry);
      try {
        entry.expire();
      } catch {
        // expire() only rejects the run's own promise; one that throws must not stop the others.
      }
    }
    if (this.head !== undefined && this.timer === undefined) this.arm(this.head.deadline);
  }
}
