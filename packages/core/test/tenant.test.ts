import { describe, expect, it } from "vitest";
import { deriveKey, tenantConversationId } from "../src/index.js";

describe("tenant namespaces (KEY-11)", () => {
  it("KEY-11 two tenants' identical conversation ids get different keys", () => {
    const call = { turnIndex: 0, name: "send_payment", args: { payee: "acme", amount: 100 } };
    const a = deriveKey({ ...call, conversationId: tenantConversationId("tenant-a", "conv-1") });
    const b = deriveKey({ ...call, conversationId: tenantConversationId("tenant-b", "conv-1") });
    expect(a).not.toBe(b);
    expect(tenantConversationId("tenant-a", "conv-1")).toBe("tenant-a:conv-1");
  });

  it("KEY-11 the separator cannot be forged: a tenant with ':' and ids outside the alphabet are refused", () => {
    expect(() => tenantConversationId("a:b", "c")).toThrow(expect.objectContaining({ code: "invalid_key_input", field: "tenant" }));
    expect(() => tenantConversationId("a", "b|c")).toThrow(expect.objectContaining({ code: "invalid_key_input", field: "conversationId" }));
    expect(() => tenantConversationId("a", "")).toThrow(expect.objectContaining({ code: "invalid_key_input" }));
    expect(() => tenantConversationId("a", "x".repeat(255))).toThrow(expect.objectContaining({ code: "invalid_key_input" }));
    expect(() => tenantConversationId(10n as never, "c")).toThrow(expect.objectContaining({ code: "invalid_key_input" }));
  });
});
