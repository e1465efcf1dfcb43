/** Every error the mock raises in-process is a MockOpenAIError with a stable `code`. */
export type MockOpenAIErrorCode = "invalid_fault" | "invalid_option" | "fault_position_unreachable" | "invalid_turn" | "no_plan" | "no_held_stream" | "fault_not_applicable";

export class MockOpenAIError extends Error {
  readonly code: MockOpenAIErrorCode;
  constructor(code: MockOpenAIErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    this.name = "MockOpenAIError";
  }
}
