export {
  SqliteConversationStore,
  createSqliteConversationStore,
  type SqliteConversationStoreOptions,
  type SqliteDatabase,
} from "./sqlite-conversation-store.js";
export { schemaSql, upgradeSql, leaseGrantUpgradeSql, failedAtUpgradeSql, firstFailedAtUpgradeSql, boundAtUpgradeSql, callKeysUpgradeSql, failedIndexSql, failedAtTriggerSql, STORE_NOW_SQL, tablesFor, DEFAULT_TABLE_PREFIX, TABLE_PREFIX_PATTERN, type ConversationTables } from "./schema.js";
