export {
  SqliteLedger,
  createSqliteLedger,
  type SqliteLedgerOptions,
  type SqliteDatabase,
  type SqliteSynchronous,
} from "./sqlite-ledger.js";
export { schemaSql, DEFAULT_TABLE, TABLE_NAME_PATTERN } from "./schema.js";
export { InvalidLedgerInputError } from "./errors.js";
