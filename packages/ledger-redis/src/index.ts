export {
  RedisLedger,
  createRedisLedger,
  decodeRow,
  type RedisClient,
  type RedisLedgerOptions,
  type CreateRedisLedgerOptions,
  type RedisServerReport,
} from "./redis-ledger.js";
export { InvalidLedgerInputError, UnsafeStoreConfigError } from "./errors.js";
export { CLAIM_LUA, RENEW_LUA, FINISH_LUA } from "./scripts.js";
