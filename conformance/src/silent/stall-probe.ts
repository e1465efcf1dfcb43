/**
 * How long the kit's own process could not run its timers: a timer-drift probe, as
 * perf_hooks.monitorEventLoopDelay measures it, but summed (how much of a window the loop was
 * unavailable) and read live (a stall still going on when it is read counts already). A starved
 * process (a loaded CI runner), a long synchronous task of the kit's, and a subject that blocks the
 * event loop itself (a synchronous busy-wait inside an operation) all show here alike: the probe
 * cannot tell them apart, and the checks that read it never certify on a stalled window (CONF-5).
 */
export interface StallProbe {
  /** Milliseconds the probe's timer was late in all since it started, the gap still open included. */
  stalledMs(): number;
  stop(): void;
}

/** The probe's period: a gap between two ticks longer than this (and the tolerance) is counted as stall. */
export const STALL_PROBE_TICK_MS = 10;
/** Timer jitter of a healthy process that is not counted (a few ms per tick would add up over a window). */
const STALL_TOLERANCE_MS = 5;

function lateness(gapMs: number): number {
  return Math.max(0, gapMs - STALL_PROBE_TICK_MS - STALL_TOLERANCE_MS);
}

export function startStallProbe(): StallProbe {
  let stalled = 0;
  let last = performance.now();
  let stoppedAt: number | undefined;
  const timer = setInterval(() => {
    const now = performance.now();
    stalled += lateness(now - last);
    last = now;
  }, STALL_PROBE_TICK_MS);
  // The probe never keeps a process alive on its own.
  (timer as { unref?: () => void }).unref?.();
  return {
    stalledMs: () => stalled + lateness((stoppedAt ?? performance.now()) - last),
    stop() {
      if (stoppedAt !== undefined) return;
      stoppedAt = performance.now();
      clearInterval(timer);
    },
  };
}
