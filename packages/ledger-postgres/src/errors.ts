// The adapter's input error belongs to core's catalogue (ERR-1), shared by every adapter:
// code "invalid_ledger_input", with the refused option or argument in `field`.
export { InvalidLedgerInputError } from "@dispatch-once/core";
