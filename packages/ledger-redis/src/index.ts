export {
  RedisLedger,
  createRedisLedger,
  decodeRow,
  DEFAULT_COMMAND_TIMEOUT_MS,
  LEDGER_CLUSTER_OPTIONS,
  LEDGER_REDIS_OPTIONS,
  MAX_LIST_LIMIT,
  MAX_OLDER_THAN_MS,
  MIN_RETENTION_MS,
  type DurabilityViolation,
  type ListExpiredInFlightOptions,
  type RedisClient,
  type RedisLedgerOptions,
  type CreateRedisLedgerOptions,
  type RedisServerReport,
} from "./redis-ledger.js";
export { InvalidLedgerInputError, UnsafeStoreConfigError } from "./errors.js";
export { CANCEL_LUA, CLAIM_LUA, FINISH_LUA, LIST_EXPIRED_LUA, RENEW_LUA, RETIRE_LUA } from "./scripts.js";
export { keySlot } from "./slots.js";
