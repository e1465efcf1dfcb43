export {
  SqliteConversationStore,
  createSqliteConversationStore,
  STORE_NOW_SQL,
  type SqliteConversationStoreOptions,
  type SqliteDatabase,
} from "./sqlite-conversation-store.js";
export { schemaSql, upgradeSql, failedAtUpgradeSql, failedIndexSql, tablesFor, DEFAULT_TABLE_PREFIX, TABLE_PREFIX_PATTERN, type ConversationTables } from "./schema.js";
