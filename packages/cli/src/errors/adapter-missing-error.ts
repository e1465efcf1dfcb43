import { EXIT_CODES } from "../exit-codes.js";
import { CliError } from "./cli-error.js";

/**
 * The package that opens this kind of target is not installed: the CLI loads adapters lazily,
 * so a user installs only the one (and the driver) they use. Exit 6.
 */
export class AdapterMissingError extends CliError {
  /** What to install, e.g. `@dispatch-once/ledger-postgres pg`. */
  readonly packages: readonly string[];
  constructor(packages: readonly string[], target: string, options?: { cause?: unknown }) {
    super(
      "adapter_missing",
      EXIT_CODES.missingPackage,
      `opening ${target} needs ${packages.join(" and ")}: install it next to @dispatch-once/cli (npm i ${packages.join(" ")})`,
      options,
    );
    this.packages = packages;
  }
}
