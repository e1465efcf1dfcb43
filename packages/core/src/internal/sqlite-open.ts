/** What openWithin needs of a better-sqlite3 connection (core does not depend on the driver). */
export interface PragmaConnection {
  pragma(source: string): unknown;
  readonly open: boolean;
}

/**
 * Run `setUp` until it succeeds or `boundMs` has passed IN TOTAL, retrying on SQLITE_BUSY and
 * SQLITE_LOCKED (any extended code): the errors another process's setup or write lock causes,
 * including those SQLite returns at once without calling the busy handler. Each attempt's own
 * busy waits count against the same bound (busy_timeout is lowered to the time left and then
 * restored), so a first open never takes much longer than the busy timeout. Between attempts
 * it sleeps 1, 2, 4 ... up to 50 ms with jitter (synchronously: a constructor is synchronous,
 * as is every better-sqlite3 call and SQLite's own busy handler).
 */
export function openWithin<T>(db: PragmaConnection, boundMs: number, setUp: () => T): T {
  const started = performance.now();
  const deadline = started + boundMs;
  let pause = 1;
  let attempts = 0;
  for (;;) {
    attempts++;
    try {
      db.pragma(`busy_timeout = ${Math.max(0, Math.floor(deadline - performance.now()))}`);
      return setUp();
    } catch (cause) {
      const code = (cause as { code?: unknown }).code;
      const busy = typeof code === "string" && (code.startsWith("SQLITE_BUSY") || code.startsWith("SQLITE_LOCKED"));
      const now = performance.now();
      if (!busy || now >= deadline) {
        if (busy && cause instanceof Error) {
          cause.message += ` (still locked after ${Math.round(now - started)} ms and ${attempts} attempts; the bound is busyTimeoutMs = ${boundMs} ms)`;
        }
        throw cause;
      }
      sleepSync(Math.min(pause * (0.5 + Math.random()), deadline - now));
      pause = Math.min(pause * 2, 50);
    } finally {
      if (db.open) db.pragma(`busy_timeout = ${boundMs}`);
    }
  }
}

/** Block the thread for `ms` milliseconds (no busy loop). */
function sleepSync(ms: number): void {
  if (ms > 0) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}
