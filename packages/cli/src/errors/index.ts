export { CliError, type CliErrorCode } from "./cli-error.js";
export { UsageError } from "./usage-error.js";
export { InvalidTargetError } from "./invalid-target-error.js";
export { AdapterMissingError } from "./adapter-missing-error.js";
export { KeyNotFoundError } from "./key-not-found-error.js";
export { UnsupportedOperationError } from "./unsupported-operation-error.js";
export { ToolsModuleError } from "./tools-module-error.js";
export { NothingSettledError } from "./nothing-settled-error.js";
export { TooSoonError } from "./too-soon-error.js";
