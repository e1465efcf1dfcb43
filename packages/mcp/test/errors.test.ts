import { describe, expect, it } from "vitest";
import { IdempotencyKeyMalformedError, IdempotencyKeyMissingError, McpGuardError } from "../src/index.js";

describe("the guard's own error classes", () => {
  const missing = new IdempotencyKeyMissingError("send_payment");
  const malformed = new IdempotencyKeyMalformedError("send_payment", '"short"');

  it("a subclass's isInstance recognises its own code only, as core's classes do", () => {
    expect(IdempotencyKeyMissingError.isInstance(missing)).toBe(true);
    expect(IdempotencyKeyMissingError.isInstance(malformed)).toBe(false);
    expect(IdempotencyKeyMalformedError.isInstance(malformed)).toBe(true);
    expect(IdempotencyKeyMalformedError.isInstance(missing)).toBe(false);
    // A code other than the class's own is never recognised through the subclass.
    expect(IdempotencyKeyMissingError.isInstance(missing, "idempotency_key_malformed")).toBe(false);
    expect(IdempotencyKeyMissingError.code).toBe("idempotency_key_missing");
    expect(IdempotencyKeyMalformedError.code).toBe("idempotency_key_malformed");
  });

  it("McpGuardError.isInstance recognises every code, or the one given", () => {
    expect(McpGuardError.isInstance(missing)).toBe(true);
    expect(McpGuardError.isInstance(malformed)).toBe(true);
    expect(McpGuardError.isInstance(malformed, "idempotency_key_missing")).toBe(false);
    expect(McpGuardError.isInstance(new Error("x"))).toBe(false);
  });

  it("recognises an error of another copy of the package by its brand and code, and narrows to the class", () => {
    const copy = Object.assign(new Error("m"), { code: "idempotency_key_malformed", toolName: "t" });
    Object.defineProperty(copy, Symbol.for("dispatch-once.mcp.error"), { value: true });
    expect(IdempotencyKeyMalformedError.isInstance(copy)).toBe(true);
    expect(IdempotencyKeyMissingError.isInstance(copy)).toBe(false);
    const unknown: unknown = copy;
    if (IdempotencyKeyMalformedError.isInstance(unknown)) expect(unknown.toolName).toBe("t");
  });
});
