export {
  startMockPayments,
  DEFAULT_RETENTION_MS,
  type MockPaymentsOptions,
  type MockPaymentsServer,
  type StorageOption,
  type InFlightClaim,
  type StopReason,
} from "./server.js";
export {
  createPaymentsClient,
  PaymentsError,
  PaymentsApiError,
  PaymentsConnectionError,
  PaymentsInputError,
  type PaymentsClient,
  type PaymentsClientOptions,
  type PaymentsOutcome,
  type PaymentsResult,
  type RequestOptions,
  type KeyedRequestOptions,
  DISPOSITION_BY_OUTCOME,
} from "./client.js";
export { MockPaymentsError, type MockPaymentsErrorCode } from "./errors.js";
export {
  PROBLEM_TYPE_BASE,
  PROBLEM_CONTENT_TYPE,
  PROBLEM_CATALOG,
  problemTypeUri,
  type Problem,
  type ProblemSlug,
} from "./problems.js";
export {
  parseIdempotencyKey,
  formatIdempotencyKey,
  MAX_IDEMPOTENCY_KEY_LENGTH,
  type ParsedIdempotencyKey,
} from "./idempotency-key.js";
export { canonicalJson, fingerprint } from "./canonical.js";
export { ISO_4217_CURRENCIES, isIso4217Currency } from "./currencies.js";
export { parseFaultHeader, type FaultDecision, type FaultSource, type FaultState, type QueuedFault } from "./faults.js";
export type { Effect, EffectKind, EffectFilter } from "./store.js";
export {
  OPERATIONS,
  WRITE_OPERATIONS,
  FAULT_OUTCOMES,
  createPaymentBodySchema,
  createInvoiceBodySchema,
  voidPaymentBodySchema,
  type CreatePaymentBody,
  type CreateInvoiceBody,
  type VoidPaymentBody,
  type Payment,
  type Invoice,
  type ListResponse,
  type IdempotencyKeyLookup,
  type Operation,
  type FaultOutcome,
  type FaultSpec,
  type InjectedFault,
  type FaultPlan,
} from "./schemas.js";
