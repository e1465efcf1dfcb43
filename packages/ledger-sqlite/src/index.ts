export {
  SqliteLedger,
  createSqliteLedger,
  type SqliteLedgerOptions,
  type SqliteDatabase,
  type SqliteSynchronous,
  type ListExpiredInFlightOptions,
} from "./sqlite-ledger.js";
export {
  schemaSql,
  tableSql,
  listIndexesSql,
  auditTableSql,
  retiredTableSql,
  addConversationColumnsSql,
  addRequestColumnSql,
  addClaimIdColumnSql,
  inFlightIndexSql, DEFAULT_TABLE, TABLE_NAME_PATTERN } from "./schema.js";
// Core's error for bad adapter options and arguments (code invalid_ledger_input), re-exported for convenience.
export { InvalidLedgerInputError } from "@dispatch-once/core";
