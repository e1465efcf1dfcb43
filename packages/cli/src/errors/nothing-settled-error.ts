import { EXIT_CODES } from "../exit-codes.js";
import { CliError } from "./cli-error.js";

/**
 * `reconcile` ran but the row is still open: no probe ran (the row is not unknown, the tool has
 * no probe or is not in the registry) or the probe could not tell. The report is printed first. Exit 4.
 */
export class NothingSettledError extends CliError {
  readonly key: string;
  constructor(key: string, detail: string) {
    super("nothing_settled", EXIT_CODES.refused, `reconcile settled nothing for ${key}: ${detail}`);
    this.key = key;
  }
}
