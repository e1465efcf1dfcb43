import { UsageError } from "./errors/usage-error.js";

const UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/**
 * A duration in milliseconds from `500ms`, `30s`, `10m`, `2h` or `7d` (one number, one unit).
 * A bare number is refused: "10" could mean seconds or minutes, and a wrong guess lists the wrong rows.
 *
 * @example parseDuration("10m", "--older-than") // 600000
 */
export function parseDuration(text: string, option: string, command?: string): number {
  const match = /^(\d{1,9})(ms|s|m|h|d)$/.exec(text.trim());
  if (match === null) {
    throw new UsageError(`${option} takes a duration like 30s, 10m, 2h or 7d, not ${JSON.stringify(text)}`, command);
  }
  const ms = Number(match[1]) * (UNITS[match[2] as string] as number);
  // 999999999d is past what a ledger can count in milliseconds: refused here, naming the flag the
  // operator typed, not the ledger's olderThanMs or retentionMs.
  if (!Number.isSafeInteger(ms)) {
    throw new UsageError(`${option} is too long: ${JSON.stringify(text)} is more milliseconds than can be counted exactly`, command);
  }
  return ms;
}

/** A non-negative safe integer from an option's text (`--limit`, `--expected-fence`). */
export function parseCount(text: string, option: string, command: string, min = 0): number {
  if (!/^\d{1,15}$/.test(text.trim()) || Number(text) < min) {
    throw new UsageError(`${option} takes a whole number of at least ${min}, not ${JSON.stringify(text)}`, command);
  }
  return Number(text);
}

/** `3m12s ago`-style age of a ledger-clock timestamp, for the table. */
export function formatAge(ms: number): string {
  if (!Number.isFinite(ms) || ms < 0) return "0s";
  const s = Math.floor(ms / 1000);
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m${s % 60 > 0 ? `${s % 60}s` : ""}`;
  const h = Math.floor(m / 60);
  if (h < 48) return `${h}h${m % 60 > 0 ? `${m % 60}m` : ""}`;
  return `${Math.floor(h / 24)}d`;
}
