import { describeValue } from "../errors/index.js";

/**
 * Every option an adapter takes, named once: a mapped type over the options interface, so a
 * member added to the interface and not named here fails to compile, and a name that is not a
 * member does too.
 */
export type OptionNames<Options> = { readonly [Name in keyof Required<Options>]: true };

/**
 * The first own enumerable member of `options` that `known` does not name, or undefined (ERR-1).
 * A misspelt option (`tableName` for `table`) would otherwise be ignored, and the adapter would
 * write where its defaults say: into another table, beside another application's rows.
 */
export function unknownOptionName(options: object, known: Readonly<Record<string, true>>): string | undefined {
  for (const name of Object.keys(options)) if (!Object.hasOwn(known, name)) return name;
  return undefined;
}

/** The message for an unknown option: what was given, and the options there are. */
export function unknownOptionMessage(owner: string, known: Readonly<Record<string, true>>): string {
  return `is not an option of ${owner} (its options: ${Object.keys(known).join(", ")})`;
}

/** The longest delay a timer takes: past 2^31 - 1 ms, setTimeout fires at once. Bounds every ms option that sets a timer. */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * The app's clock, each reading checked: one that answers anything but a finite number (a Date,
 * NaN, undefined) is refused, never used. Used, every lease measured by it had passed at once, and
 * a second claimant took a live claim over while its tool ran (the same effect run twice).
 */
export function checkedClock(now: () => number, refuse: (reason: string) => Error): () => number {
  return () => {
    const value: unknown = now();
    if (typeof value !== "number" || !Number.isFinite(value)) throw refuse(`must return a finite number of milliseconds, got ${describeValue(value)}`);
    return value;
  };
}
