/**
 * In-process misuse of the mock (bad options, a bad fault, using a closed server) raises a
 * MockPaymentsError with a stable `code`. Over HTTP the same mistakes become problem+json.
 */
export type MockPaymentsErrorCode = "invalid_option" | "invalid_fault" | "server_closed";

export class MockPaymentsError extends Error {
  readonly code: MockPaymentsErrorCode;
  constructor(code: MockPaymentsErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    this.name = "MockPaymentsError";
  }
}
