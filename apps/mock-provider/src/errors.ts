/**
 * Every error the mock provider raises in-process is a MockProviderError with a stable `code`.
 * Over HTTP the same codes appear in the message of a 500 `api_error` (with `x-should-retry: false`)
 * so that a mis-scripted test fails loudly instead of silently completing a turn.
 */
export type MockProviderErrorCode =
  | "invalid_fault"
  | "fault_position_unreachable"
  | "fault_not_applicable"
  | "invalid_turn"
  | "unknown_tool"
  | "no_plan"
  | "invalid_timing"
  | "invalid_option"
  | "no_held_stream"
  | "provider_closed";

export class MockProviderError extends Error {
  readonly code: MockProviderErrorCode;
  constructor(code: MockProviderErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    this.name = "MockProviderError";
  }
}
