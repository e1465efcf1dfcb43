import { describe, expect, it } from "vitest";
import * as payments from "../src/index.js";
import { createPaymentsClient, type PaymentsClientOptions } from "../src/index.js";
import { payment, startServer } from "./helpers.js";

/**
 * Findings of the adoption trial (part 2): createPaymentsClient is what adopters copy, and bad
 * input to it sent requests without their key, looked up the key "undefined", or reported a
 * request that was never sent as one whose outcome is unknown.
 */

/** `[code, field, outcome]` of what `f` throws or rejects with, or "accepted". */
async function refusal(f: () => unknown): Promise<[string, string | undefined, string | undefined] | "accepted"> {
  try {
    await f();
  } catch (error) {
    const e = error as { code?: string; field?: string; outcome?: string; name?: string; message?: string };
    // The library's own input error, recognised by its brand (any copy of the package), not by class.
    const typed = (payments as unknown as { PaymentsInputError?: { isInstance(e: unknown): boolean } }).PaymentsInputError?.isInstance(error) === true;
    return typed ? [e.code!, e.field, e.outcome] : [`untyped ${e.name}: ${e.message}`, undefined, undefined];
  }
  return "accepted";
}

const refused = (field: string) => ["invalid_argument", field, "rejected"];

describe("adoption trial (mock-payments client): bad input is refused before anything is sent", () => {
  it("a misspelt idempotencyKey option is refused: the request went out without its key, and its re-run paid twice", async () => {
    const server = await startServer();
    const client = createPaymentsClient({ baseURL: server.url, token: "acct_1" });
    for (let run = 0; run < 2; run++) {
      expect(await refusal(() => client.createPayment(payment(), { idempotency_key: "turn-3-pay-0" } as never))).toEqual(refused("options.idempotency_key"));
    }
    expect(server.effects()).toHaveLength(0);
    // Spelt right, the re-run is answered from the first.
    await client.createPayment(payment(), { idempotencyKey: "turn-3-pay-0" });
    expect((await client.createPayment(payment(), { idempotencyKey: "turn-3-pay-0" })).replayed).toBe(true);
    expect(server.effects()).toHaveLength(1);
  });

  it("a key lookup with no key is refused: lookupIdempotencyKey(undefined) answered the key \"undefined\" as absent, which a reconcile probe reads as not performed", async () => {
    const server = await startServer();
    const client = createPaymentsClient({ baseURL: server.url, token: "acct_1" });
    expect(await refusal(() => client.lookupIdempotencyKey(undefined as never))).toEqual(refused("key"));
    expect(await refusal(() => client.lookupIdempotencyKey(""))).toEqual(refused("key"));
    expect(await refusal(() => client.getPayment(undefined as never))).toEqual(refused("id"));
    expect(await refusal(() => client.voidPayment("", { idempotencyKey: "k-void" }))).toEqual(refused("id"));
  });

  it("a key the server would refuse, or that cannot be sent, is refused as rejected; it was a TypeError (5, null) or a lost connection of unknown outcome (a newline, a lone surrogate)", async () => {
    const server = await startServer();
    const client = createPaymentsClient({ baseURL: server.url, token: "acct_1" });
    for (const key of [5, null, "", "a\nb", "a\uD800b", "k".repeat(10_000)]) {
      expect(await refusal(() => client.createPayment(payment(), { idempotencyKey: key as never })), JSON.stringify(key)).toEqual(refused("options.idempotencyKey"));
    }
    expect(await refusal(() => client.createPayment(payment(), { idempotencyKey: "k", signal: 5 as never }))).toEqual(refused("options.signal"));
    expect(await refusal(() => client.createPayment(payment(), 5 as never))).toEqual(refused("options"));
    expect(await refusal(() => client.listPayments({ limt: 1 } as never))).toEqual(refused("options.limt"));
    expect(server.effects()).toHaveLength(0);
  });

  it("the client's options are checked when it is made (a TypeError for a missing baseURL; a misspelt timeoutMs, a NaN one and a token of undefined were accepted)", async () => {
    const server = await startServer();
    const base: PaymentsClientOptions = { baseURL: server.url, token: "acct_1" };
    const cases: [string, unknown][] = [
      ["options", undefined],
      ["options.baseURL", { token: "t" }],
      ["options.baseURL", { ...base, baseURL: 5 }],
      ["options.baseURL", { ...base, baseURL: "not a url" }],
      ["options.token", { ...base, token: undefined }],
      ["options.token", { ...base, token: "" }],
      ["options.token", { ...base, token: "a\nb" }],
      ["options.timeoutMS", { ...base, timeoutMS: 5000 }],
      ["options.timeoutMs", { ...base, timeoutMs: Number.NaN }],
      ["options.timeoutMs", { ...base, timeoutMs: 0 }],
      ["options.timeoutMs", { ...base, timeoutMs: "5s" }],
      ["options.idempotencyKeyFormat", { ...base, idempotencyKeyFormat: "quoted" }],
      ["options.fetch", { ...base, fetch: 5 }],
      ["options.agent", { ...base, agent: {} }],
    ];
    for (const [field, options] of cases) {
      expect(await refusal(() => createPaymentsClient(options as never)), field).toEqual(refused(field));
    }
    expect(await refusal(() => createPaymentsClient({ ...base, timeoutMs: 5000, idempotencyKeyFormat: "bare" }))).toBe("accepted");
  });
});
