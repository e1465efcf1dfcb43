/** Longest lease a store accepts: a year. Longer is a configuration mistake, not a lease. */
export const MAX_LEASE_MS = 366 * 24 * 60 * 60 * 1000;

/**
 * Whole milliseconds of a caller's lease, rounded up so a lease is never shorter than asked.
 * Anything else (not a finite number, negative, past MAX_LEASE_MS) is refused with the
 * store's own typed error, which `refuse` builds.
 */
export function checkLeaseMs(leaseMs: unknown, refuse: (field: "leaseMs", reason: string) => Error): number {
  if (typeof leaseMs !== "number" || !Number.isFinite(leaseMs) || leaseMs < 0 || leaseMs > MAX_LEASE_MS) {
    throw refuse("leaseMs", `${String(leaseMs)} is not a number of milliseconds in 0..${MAX_LEASE_MS}`);
  }
  return Math.ceil(leaseMs);
}
