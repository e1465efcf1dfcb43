import { EXIT_CODES } from "../exit-codes.js";
import { CliError } from "./cli-error.js";

/** The ledger does not implement an OPTIONAL method the command needs (listRows, resolve, ...). Exit 4. */
export class UnsupportedOperationError extends CliError {
  readonly operation: string;
  constructor(operation: string, ledgerName: string) {
    super(
      "unsupported_operation",
      EXIT_CODES.refused,
      `this ledger (${ledgerName}) does not support ${operation}: its adapter does not offer this OPTIONAL method (capabilities.supports)`,
    );
    this.operation = operation;
  }
}
