import { EXIT_CODES } from "../exit-codes.js";
import { CliError } from "./cli-error.js";

/** The ledger has no row for the key (never claimed, or swept after its retention). Exit 3. */
export class KeyNotFoundError extends CliError {
  readonly key: string;
  constructor(key: string) {
    super("key_not_found", EXIT_CODES.notFound, `no ledger row for key ${key}`);
    this.key = key;
  }
}
