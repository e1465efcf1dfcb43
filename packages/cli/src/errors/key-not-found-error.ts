import { EXIT_CODES } from "../exit-codes.js";
import { CliError } from "./cli-error.js";

/** The shape of a key the dispatcher derives (KEY-1). A ledger takes any key (LEDGER-30); this is only for the message. */
const DERIVED_KEY = /^[0-9a-f]{32}$/;

/** The ledger has no row for the key (never claimed, or swept after its retention). Exit 3. */
export class KeyNotFoundError extends CliError {
  readonly key: string;
  constructor(key: string) {
    super(
      "key_not_found",
      EXIT_CODES.notFound,
      // A derived key (KEY-1) prints as it is; anything else quoted (no control characters reach
      // the terminal) with a hint: an abbreviated, re-cased or partly pasted key finds no row.
      DERIVED_KEY.test(key)
        ? `no ledger row for key ${key}`
        : `no ledger row for key ${JSON.stringify(key)} (a derived key is 32 lowercase hex digits; this one is not: copied in full?)`,
    );
    this.key = key;
  }
}
