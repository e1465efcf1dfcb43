export { turnIndexOf } from "./turn-index.js";
export {
  createOnceTools,
  OnceTools,
  dispatchOnceOf,
  type OnceToolsOptions,
  type OnceTurn,
  type OnceTurnInput,
  type OnceExecutionOptions,
  type DispatchOnceCallInfo,
  type ClaimedDenial,
  type UnansweredCall,
  type UnansweredCalls,
} from "./once-tools.js";
export { spliceGuard } from "./splice-guard.js";
export { providerToolsGuard, type ProviderToolsGuardOptions, type ProviderToolsPolicy } from "./provider-tools.js";
export type { UnansweredCallRecord } from "@dispatch-once/runner";
// Lives in @dispatch-once/runner (shared with the Anthropic SDK tool runner's profile, ATR-11); re-exported so imports keep working.
export { boundedFetch, type BoundedFetchOptions } from "@dispatch-once/runner";
