// Both errors belong to core's catalogue (ERR-1), shared by every adapter.
export { InvalidLedgerInputError, UnsafeStoreConfigError } from "@dispatch-once/core";
