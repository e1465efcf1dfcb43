const BRAND: unique symbol = Symbol.for("dispatch-once.conformance.level-not-installed") as never;

/**
 * A level of the kit that lives in its own package was asked for but that package cannot be
 * loaded. The end-to-end level (CONF-2) is `@dispatch-once/conformance-e2e`, kept apart so that an
 * adapter author who installs `@dispatch-once/conformance` for the ledger level does not install
 * the mocks (express, better-sqlite3) and the Anthropic SDK. The CLI exits 2 on it.
 *
 * Matched with `LevelNotInstalledError.isInstance(error)` (a `Symbol.for` brand), so that two
 * copies of the kit in one process (ESM and CJS, or two versions) agree.
 */
export class LevelNotInstalledError extends Error {
  readonly code = "level_not_installed" as const;
  /** The level asked for (`e2e`). */
  readonly level: string;
  /** The package that provides it. */
  readonly packageName: string;
  declare readonly [BRAND]: true;
  constructor(level: string, packageName: string, options?: { cause?: unknown }) {
    super(
      `the ${level} level is in a separate package, ${packageName}, which is not installed here: ` +
        `install it next to @dispatch-once/conformance (npm i -D ${packageName}, or pnpm add -D ${packageName}), ` +
        `or run another level (--level ledger)`,
      options,
    );
    this.name = "LevelNotInstalledError";
    this.level = level;
    this.packageName = packageName;
    Object.defineProperty(this, BRAND, { value: true });
  }

  static isInstance(error: unknown): error is LevelNotInstalledError {
    return typeof error === "object" && error !== null && (error as { [BRAND]?: unknown })[BRAND] === true;
  }
}
