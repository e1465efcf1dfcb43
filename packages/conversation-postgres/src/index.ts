export {
  PostgresConversationStore,
  createPostgresConversationStore,
  DEFAULT_TIMEOUT_MS,
  type PostgresConversationStoreOptions,
  type PostgresPool,
} from "./postgres-conversation-store.js";
export { schemaSql, tablesFor, DEFAULT_SCHEMA, DEFAULT_TABLE_PREFIX, TABLE_PREFIX_PATTERN, NOW_MS, type ConversationTables } from "./sql.js";
