import { EXIT_CODES } from "../exit-codes.js";
import { CliError } from "./cli-error.js";

/**
 * The ledger target is not one the CLI opens: an unsupported URL scheme, or a SQLite file that
 * does not exist (the CLI never creates an empty ledger where a typo pointed). Exit 2.
 */
export class InvalidTargetError extends CliError {
  readonly target: string;
  constructor(target: string, message: string) {
    super("invalid_target", EXIT_CODES.usage, message);
    this.target = target;
  }
}
