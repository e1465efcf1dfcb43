export { ResponsesTurnAccumulator } from "./accumulator.js";
export type { CallPhase, CallState, FailurePosition, OutputItem, StreamErrorReport, TerminalEvent } from "./accumulator.js";
