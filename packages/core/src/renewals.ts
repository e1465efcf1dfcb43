/**
 * One timer for all of a dispatcher's lease renewals (LEDGER-9). A timer per claimed call was a
 * setInterval created and cleared on every dispatch, a measurable part of the dispatcher's CPU;
 * here every running call is an entry, and one interval ticking at a quarter of the renewal
 * period renews the entries that are due within the next tick. A renewal is therefore sent up
 * to a quarter period early, never later than the per-call interval sent it, so a lease is
 * kept exactly as well. The interval stops at the first tick that finds no entry (a process
 * keeps no timer for a dispatcher that is idle) and is unref'd (it never keeps a process alive).
 */
export class RenewalWheel {
  private readonly entries = new Set<RenewalEntry>();
  private readonly tickMs: number;
  private timer: ReturnType<typeof setInterval> | undefined;

  /** @param periodMs time between two renewals of one entry (a third of the lease). */
  constructor(private readonly periodMs: number) {
    this.tickMs = Math.max(1, Math.floor(periodMs / 4));
  }

  /**
   * Renew with `fire` every period from now, until the returned entry is removed. (The entry, not
   * a function that removes it: one allocation less on every dispatch.)
   */
  add(fire: () => void): RenewalEntry {
    const entry: RenewalEntry = { due: Date.now() + this.periodMs, fire };
    this.entries.add(entry);
    if (this.timer === undefined) {
      this.timer = setInterval(() => this.tick(), this.tickMs);
      this.timer.unref?.();
    }
    return entry;
  }

  /** Stop renewing an entry; removing it again does nothing. */
  remove(entry: RenewalEntry): void {
    this.entries.delete(entry);
  }

  private tick(): void {
    if (this.entries.size === 0) {
      clearInterval(this.timer);
      this.timer = undefined;
      return;
    }
    const now = Date.now();
    for (const entry of this.entries) {
      if (entry.due > now + this.tickMs) continue;
      entry.due = now + this.periodMs;
      // A renewal that throws synchronously must not stop the others from being renewed.
      try {
        entry.fire();
      } catch {
        // fire() reports its own failures (the dispatcher's renew handles its rejection).
      }
    }
  }
}

export interface RenewalEntry {
  due: number;
  fire: () => void;
}
