export { ATTR, METRIC, SPAN } from "./attributes.js";
export {
  DispatchTelemetry,
  dispatchTelemetry,
  INSTRUMENTATION_NAME,
  INSTRUMENTATION_VERSION,
  type TelemetryOptions,
} from "./telemetry.js";
