export {
  PostgresLedger,
  createPostgresLedger,
  MAX_CONFIGURABLE_RESULT_BYTES,
  DEFAULT_TIMEOUT_MS,
  DEFAULT_CONNECT_TIMEOUT_MS,
  MAX_SERIALIZATION_ATTEMPTS,
  type PostgresLedgerOptions,
  type DurabilityProbe,
  type ListExpiredInFlightOptions,
  type Queryable,
} from "./postgres-ledger.js";
export { InvalidLedgerInputError } from "./errors.js";
export {
  schemaSql,
  quoteIdentifier,
  validateIdentifier,
  DEFAULT_SCHEMA,
  DEFAULT_TABLE,
  type TableName,
  type SchemaOptions,
} from "./sql.js";
