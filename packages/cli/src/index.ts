export { runCli, mainHelp, COMMANDS } from "./run.js";
export { EXIT_CODES, type ExitCode } from "./exit-codes.js";
export {
  parseTarget,
  openLedger,
  openConversationStore,
  redact,
  type LedgerTarget,
  type OpenLedgerOptions,
  type OpenedLedger,
  type OpenConversationStoreOptions,
  type OpenedConversationStore,
} from "./target.js";
export { loadToolsModule } from "./tools-module.js";
export { auditTools, checkRowKeys, DEFAULT_MAX_AUDIT_ROWS, MAX_ORDINAL_TRIED, type RowKeyCheck, type ToolGuardReport } from "./audit.js";
export { parseDuration } from "./duration.js";
export type { CliIo, Command, CommandContext } from "./context.js";
export {
  CliError,
  UsageError,
  InvalidTargetError,
  AdapterMissingError,
  KeyNotFoundError,
  UnsupportedOperationError,
  ToolsModuleError,
  NothingSettledError,
  TooSoonError,
  FenceMovedError,
  MismatchNotReleasableError,
  RecordRowError,
  type CliErrorCode,
} from "./errors/index.js";
