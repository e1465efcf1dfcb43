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
} from "./once-tools.js";
export { boundedFetch, type BoundedFetchOptions } from "./bounded-fetch.js";
