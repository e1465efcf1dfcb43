import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it, vi } from "vitest";
import { onTurnAttempt, setPaymentsUrl } from "../examples/adopt.js";

/** A call dispatched in an attempt of its own (one call per attempt, as most of these cases need). */
const onToolCall = (conversationId: string, turnIndex: number, name: string, input: unknown) => onTurnAttempt(conversationId, turnIndex)(name, input);
import { describeFailure } from "../examples/errors.js";
import { EffectNeedsAPerson, runAssistantCalls } from "../examples/framework-loop.js";
import { errorTable, tableIn } from "../scripts/error-table.js";
import { z } from "zod";
import { ClaimReleasedError, Dispatcher, ERROR_CATALOGUE, InFlightElsewhereError, MemoryLedger, OutcomeUnknownError, StaleClaimError, ToolError, ToolInputError, defineTool } from "../src/index.js";

describe("README", () => {
  const readme = readFileSync(join(__dirname, "..", "README.md"), "utf8");

  it("shows every file of examples/ verbatim", () => {
    const files = readdirSync(join(__dirname, "..", "examples")).filter((f) => f.endsWith(".ts"));
    expect(files).toEqual(expect.arrayContaining(["adopt.ts", "errors.ts"]));
    for (const file of files) {
      expect(readme, file).toContain(readFileSync(join(__dirname, "..", "examples", file), "utf8").trim());
    }
  });

  it("ERR-4 the error table is the one generated from ERROR_CATALOGUE (pnpm --filter @dispatch-once/core readme:errors)", () => {
    expect(tableIn(readme)).toBe(errorTable());
    for (const entry of ERROR_CATALOGUE) expect(readme).toContain(`| \`${entry.code}\` |`);
  });

  it("the error example tells a re-send that can help from one that cannot, and what happened to the effect", () => {
    expect(describeFailure(new InFlightElsewhereError("k", 10_000))).toEqual({ code: "in_flight_elsewhere", resend: true, effect: "possibly" });
    expect(describeFailure(new OutcomeUnknownError("k", "lease expired"))).toEqual({ code: "outcome_unknown", resend: false, effect: "possibly" });
    expect(describeFailure(new ClaimReleasedError("k", false, new Error("503")))).toEqual({ code: "claim_released", resend: true, effect: "no" });
    expect(describeFailure(new ToolInputError("send_payment", []))).toMatchObject({ code: "tool_input_invalid", resend: false, effect: "no" });
    expect(describeFailure(new Error("boom"))).toEqual({ code: "internal_error", resend: true, effect: "possibly" });
    // What the error knows beyond its code (ERR-4): a re-send cannot help these.
    expect(describeFailure(new StaleClaimError("k", 1, "claim is no longer held", { effectHappened: true }))).toEqual({ code: "stale_claim", resend: false, effect: "yes" });
    const turnFailed = Object.defineProperty({ code: "turn_failed", message: "turn 0 failed", record: { kind: "failed_turn", retryable: false } }, Symbol.for("dispatch-once.error"), { value: true });
    expect(describeFailure(turnFailed)).toEqual({ code: "turn_failed", resend: false, effect: "possibly" });
  });

  it("the adoption example pays once across a replayed turn and forwards the key", async () => {
    const keys: string[] = [];
    const server = createServer((req, res) => {
      keys.push(String(req.headers["idempotency-key"]));
      res.setHeader("content-type", "application/json");
      res.end(JSON.stringify({ id: `pay_${keys.length}` }));
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    setPaymentsUrl(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
    try {
      const args = { payee: "acme", amount: 100, currency: "EUR", reference: "INV-2041", memo: "May invoice" };
      const first = await onToolCall("conv-readme", 0, "send_payment", args);
      const retry = await onToolCall("conv-readme", 0, "send_payment", { ...args, memo: "Invoice for May" });
      expect(keys).toHaveLength(1);
      expect(keys[0]).toMatch(/^[0-9a-f]{32}$/);
      expect(retry).toMatchObject({ replayed: true, result: { id: "pay_1" } });
      expect(first).toMatchObject({ replayed: false, result: { id: "pay_1" } });
    } finally {
      server.close();
    }
  });

  it("TURN-4 the adoption example pays twice for two identical calls of one response (a user who asked twice), and once across a retry", async () => {
    const keys: string[] = [];
    const server = createServer((req, res) => {
      keys.push(String(req.headers["idempotency-key"]));
      res.setHeader("content-type", "application/json");
      res.end(JSON.stringify({ id: `pay_${keys.length}` }));
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    setPaymentsUrl(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
    try {
      const args = { payee: "acme", amount: 100, currency: "EUR", reference: "INV-7", memo: "twice" };
      // One response holding the same call twice, dispatched as the README says: one context per attempt.
      const attempt = onTurnAttempt("conv-readme-twice", 0);
      const first = await attempt("send_payment", args);
      const second = await attempt("send_payment", args);
      expect(keys).toHaveLength(2);
      expect(new Set(keys).size).toBe(2);
      expect([first, second]).toMatchObject([{ ordinal: 0, result: { id: "pay_1" } }, { ordinal: 1, result: { id: "pay_2" } }]);
      // A retried attempt of the turn (a cut stream, a re-run node) meets both and pays nothing more.
      const retry = onTurnAttempt("conv-readme-twice", 0);
      expect([await retry("send_payment", args), await retry("send_payment", args)]).toMatchObject([
        { replayed: true, result: { id: "pay_1" } },
        { replayed: true, result: { id: "pay_2" } },
      ]);
      expect(keys).toHaveLength(2);
    } finally {
      server.close();
    }
  });

  it("TURN-4, DISPATCH-8 a framework's step re-run: runAssistantCalls pays twice for two identical calls, throws a lost response to the step's retry (same key), stops for a person on outcome_unknown, and never pays again on a re-run", async () => {
    // A payments API that deduplicates on Idempotency-Key, as the real one does; `lose` drops the
    // response of the first request with that reference after the payment is made.
    const payments = new Map<string, { id: string; reference: string }>();
    const seen: string[] = [];
    const lose = new Set(["INV-lost"]);
    const invoices: string[] = [];
    const server = createServer((req, res) => {
      let body = "";
      req.on("data", (chunk: Buffer) => (body += chunk.toString()));
      req.on("end", () => {
        const key = String(req.headers["idempotency-key"]);
        const { reference } = JSON.parse(body) as { reference: string };
        seen.push(key);
        if (reference === "INV-declined") {
          res.statusCode = 402;
          res.end("{}");
          return;
        }
        const payment = payments.get(key) ?? { id: `pay_${payments.size + 1}`, reference };
        payments.set(key, payment);
        if (lose.delete(reference)) {
          res.socket?.destroy(); // made, and the answer lost
          return;
        }
        res.setHeader("content-type", "application/json");
        res.end(JSON.stringify(payment));
      });
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/payments`;
    const pay = defineTool({
      name: "send_payment",
      effect: "keyed_write",
      input: z.object({ payee: z.string(), amount: z.number().int(), reference: z.string() }),
      async run(args, { idempotencyKey, signal }) {
        const res = await fetch(url, { method: "POST", headers: { "idempotency-key": idempotencyKey }, body: JSON.stringify(args), signal });
        if (res.status === 402) throw new ToolError("card declined", { disposition: "definite", code: "card_declined" });
        if (!res.ok) throw new ToolError(`payments API ${res.status}`, { disposition: "unknown" });
        return res.json();
      },
    });
    // An API without keys: a failure after sending leaves its effect unknown, never re-run (EFFECT-3).
    const invoice = defineTool({
      name: "send_invoice",
      effect: "unkeyed_write",
      input: z.object({ to: z.string() }),
      async run(args) {
        invoices.push(args.to);
        throw new Error("mail server hung up after DATA");
      },
    });
    const dispatcher = new Dispatcher({ tools: [pay, invoice], ledger: new MemoryLedger(), logger: { warn: () => {} }, allowVolatileLedgerForUnkeyedWrites: true });
    const twice = { payee: "acme", amount: 100, reference: "INV-7" };
    try {
      // Two identical calls in one message: two asks, two payments, ordinals 0 and 1.
      const calls = [
        { id: "toolu_a", name: "send_payment", args: twice },
        { id: "toolu_b", name: "send_payment", args: twice },
        { id: "toolu_c", name: "send_payment", args: { payee: "bob", amount: 5, reference: "INV-declined" } },
      ];
      const first = await runAssistantCalls(dispatcher, "thread-1", 0, calls);
      expect(first.map((a) => a.outcome?.result ?? a.effect)).toEqual([{ id: "pay_1", reference: "INV-7" }, { id: "pay_2", reference: "INV-7" }, "no"]);
      expect(first[2]!.content).toMatch(/^error tool_failed: /);
      // The framework re-runs the step (a resume after a crash, a retry policy), the model's ids new.
      const again = await runAssistantCalls(dispatcher, "thread-1", 0, calls.map((c) => ({ ...c, id: `${c.id}_2` })));
      expect(again.map((a) => a.outcome?.replayed ?? a.effect)).toEqual([true, true, "no"]);
      expect(payments.size).toBe(2);

      // A lost response: thrown to the step's retry, never told to the model; the re-run sends the same key.
      const lost = [{ id: "toolu_d", name: "send_payment", args: { payee: "cleo", amount: 9, reference: "INV-lost" } }];
      await expect(runAssistantCalls(dispatcher, "thread-1", 1, lost)).rejects.toMatchObject({ code: "claim_released" });
      const retried = await runAssistantCalls(dispatcher, "thread-1", 1, lost);
      expect(retried[0]!.outcome).toMatchObject({ replayed: false, result: { id: "pay_3", reference: "INV-lost" } });
      expect(seen.slice(-2)[0]).toBe(seen.slice(-2)[1]);
      expect(payments.size).toBe(3);

      // outcome_unknown: stop for a person, with what the message's earlier calls did; a re-run sends nothing.
      const mixed = [
        { id: "toolu_e", name: "send_payment", args: { payee: "dora", amount: 3, reference: "INV-9" } },
        { id: "toolu_f", name: "send_invoice", args: { to: "dora@example.com" } },
      ];
      const stopped = await runAssistantCalls(dispatcher, "thread-1", 2, mixed).catch((e: unknown) => e);
      expect(stopped).toBeInstanceOf(EffectNeedsAPerson);
      expect((stopped as EffectNeedsAPerson).answered.map((a) => a.outcome?.result)).toEqual([{ id: "pay_4", reference: "INV-9" }]);
      expect((stopped as EffectNeedsAPerson).cause).toMatchObject({ code: "outcome_unknown" });
      await expect(runAssistantCalls(dispatcher, "thread-1", 2, mixed)).rejects.toBeInstanceOf(EffectNeedsAPerson);
      expect(invoices).toEqual(["dora@example.com"]);
      expect(payments.size).toBe(4);
    } finally {
      server.close();
    }
  });

  it("the adoption example's request is one @dispatch-once/mock-payments accepts (the URL, token and port it points at)", async () => {
    // mock-payments' POST /v1/payments body, as its README states it: strict, `reference` required,
    // `memo` optional. A body it refuses is a 400, which the example reads as a definite refusal.
    const bodies: Record<string, unknown>[] = [];
    const server = createServer((req, res) => {
      let text = "";
      req.on("data", (chunk: Buffer) => (text += chunk.toString("utf8")));
      req.on("end", () => {
        const body = JSON.parse(text) as Record<string, unknown>;
        bodies.push(body);
        const allowed = ["payee", "amount", "currency", "reference", "memo"];
        const ok = ["payee", "amount", "currency", "reference"].every((k) => k in body) && Object.keys(body).every((k) => allowed.includes(k));
        res.statusCode = ok ? 201 : 400;
        res.setHeader("content-type", "application/json");
        res.end(JSON.stringify(ok ? { id: "pay_1" } : { code: "invalid_request_body" }));
      });
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    setPaymentsUrl(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
    try {
      const args = { payee: "acme", amount: 100, currency: "EUR", reference: "INV-2041", memo: "May invoice" };
      await expect(onToolCall("conv-readme-body", 0, "send_payment", args)).resolves.toMatchObject({ result: { id: "pay_1" } });
      expect(bodies).toEqual([args]);
    } finally {
      server.close();
    }
  });

  it("DISPATCH-18 the adoption example hands the run's signal to its request, so an aborted run stops sending", async () => {
    const server = createServer((_req, res) => {
      res.statusCode = 201;
      res.setHeader("content-type", "application/json");
      res.end(JSON.stringify({ id: "pay_1" }));
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    setPaymentsUrl(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
    const fetchSpy = vi.spyOn(globalThis, "fetch");
    try {
      await onToolCall("conv-readme-signal", 0, "send_payment", { payee: "acme", amount: 1, currency: "EUR", reference: "INV-1", memo: "m" });
      expect(fetchSpy).toHaveBeenCalledTimes(1);
      expect(fetchSpy.mock.calls[0]?.[1]?.signal).toBeInstanceOf(AbortSignal);
    } finally {
      fetchSpy.mockRestore();
      server.close();
    }
  });

  it("LEDGER-8 the adoption example never stores a refused or failed payment as its result", async () => {
    const statuses = [500, 201, 402, 401];
    const seen: { key: string; auth: string | undefined }[] = [];
    const server = createServer((req, res) => {
      seen.push({ key: String(req.headers["idempotency-key"]), auth: req.headers.authorization });
      res.statusCode = statuses[seen.length - 1] ?? 500;
      res.setHeader("content-type", "application/json");
      res.end(JSON.stringify(res.statusCode < 300 ? { id: `pay_${seen.length}` } : { error: `status ${res.statusCode}` }));
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    setPaymentsUrl(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
    try {
      const args = { payee: "acme", amount: 250, currency: "EUR", reference: "INV-2042", memo: "June invoice" };
      // A 500: the payment may have happened; released, and the re-send re-runs it under the same key.
      await expect(onToolCall("conv-readme-statuses", 0, "send_payment", args)).rejects.toMatchObject({ code: "claim_released", effectMayHaveHappened: true });
      expect(await onToolCall("conv-readme-statuses", 0, "send_payment", args)).toMatchObject({ replayed: false, result: { id: "pay_2" } });
      expect(seen[1]!.key).toBe(seen[0]!.key);
      // A decline and a refusal are definite failures, recorded and replayed as failures, never as results.
      await expect(onToolCall("conv-readme-statuses", 1, "send_payment", args)).rejects.toMatchObject({ code: "tool_failed", error: { code: "card_declined" } });
      await expect(onToolCall("conv-readme-statuses", 2, "send_payment", args)).rejects.toMatchObject({ code: "tool_failed" });
      await expect(onToolCall("conv-readme-statuses", 2, "send_payment", args)).rejects.toMatchObject({ code: "tool_failed", replayed: true });
      expect(seen).toHaveLength(4);
      expect(seen.every((s) => s.auth === "Bearer acct_demo")).toBe(true);
    } finally {
      server.close();
    }
  });
});
