// ERR-6: a tool's failure is stored and recorded in the same `code` field as Dispatch-Once's own
// errors, and Dispatch-Once reads some of those codes back from storage: a failed row whose code is
// result_not_storable is an effect that HAPPENED (LEDGER-10), a call recorded with
// invalid_arguments_json was never dispatched. A tool that declared a declined card as definite under
// such a code was told "not happened" on its first run and "happened" on every replay. Other codes,
// Dispatch-Once's included, are the tool's own: a downstream's "idempotency_key_reused" is forwarded.
import { describe, expect, it } from "vitest";
import { z } from "zod";
import {
  Dispatcher,
  InvalidArgumentError,
  MemoryLedger,
  ToolError,
  defineTool,
  effectOf,
  isDispatchOnceError,
  type FailureDisposition,
} from "../src/index.js";
import { turnRowEffect, turnRowsOf } from "../src/internal/index.js";

const turn0 = { conversationId: "conv_reserved_codes", turnIndex: 0 };

/**
 * A ToolError as another copy of the package makes it (an older version that did not check its
 * code, or one whose `code` was set after construction): the shared brand, its fields as given.
 */
function otherCopyToolError(message: string, disposition: FailureDisposition, code: string): Error {
  const error = new Error(message);
  error.name = "ToolError";
  Object.defineProperty(error, Symbol.for("dispatch-once.tool-error"), { value: true });
  return Object.assign(error, { disposition, code, details: undefined });
}

function world(effect: "keyed_write" | "unkeyed_write", code: string) {
  const ledger = new MemoryLedger();
  // The effect log: a declined card moves no money.
  const payments: string[] = [];
  const declined: string[] = [];
  const tool = defineTool({
    name: "send_payment",
    effect,
    input: z.object({ amount: z.number() }),
    run: (args) => {
      declined.push(`decline ${args.amount}`);
      throw otherCopyToolError("card declined", "definite", code);
    },
  });
  const dispatcher = new Dispatcher({ tools: [tool], ledger, pollMs: 1, allowVolatileLedgerForUnkeyedWrites: true });
  const dispatch = () =>
    dispatcher
      .turn(turn0)
      .dispatch({ name: "send_payment", input: { amount: 5 } })
      .then(
        () => {
          throw new Error("the declined payment was answered with a result");
        },
        (e: unknown) => e,
      );
  return { ledger, payments, declined, dispatch };
}

describe("ERR-6 a tool's failure cannot carry a code Dispatch-Once reads back", () => {
  it("the reserved codes are the ones read back from stored failures and records", () => {
    expect([...ToolError.reservedCodes].sort()).toEqual(["invalid_arguments_json", "result_not_storable", "tool_definition_changed"]);
    // Not a list an app can empty by accident and so switch the check off.
    expect(Object.isFrozen(ToolError.reservedCodes)).toBe(true);
  });

  it.each([...ToolError.reservedCodes])("new ToolError(..., { code: %j }) is refused with invalid_argument", (code) => {
    let thrown: unknown;
    try {
      new ToolError("card declined", { disposition: "definite", code });
    } catch (error) {
      thrown = error;
    }
    expect(InvalidArgumentError.isInstance(thrown)).toBe(true);
    expect((thrown as InvalidArgumentError).field).toBe("options.code");
    expect((thrown as Error).message).toContain(JSON.stringify(code));
  });

  it("a code of the tool's own domain is kept as given", () => {
    // A downstream's codes forwarded as they are, even where Dispatch-Once has a code of the same name
    // that it never reads back from a stored failure (a payments API's 422 "idempotency_key_reused").
    for (const code of ["card_declined", "insufficient_funds", "INVALID_ARGUMENT", "result-not-storable", "Result_Not_Storable", "idempotency_key_reused", "tool_failed"]) {
      expect(new ToolError("declined", { disposition: "definite", code }).code).toBe(code);
    }
    expect(new ToolError("declined", { disposition: "definite" }).code).toBeUndefined();
  });

  it("a code that is not a string is refused, not stored as something else", () => {
    expect(() => new ToolError("declined", { disposition: "definite", code: 402 as unknown as string })).toThrow(InvalidArgumentError);
  });

  // Read back from storage, these codes change what the row or record says of the effect.
  for (const code of ToolError.reservedCodes) {
    for (const effect of ["keyed_write", "unkeyed_write"] as const) {
      it(`a ${effect}'s definite failure under ${code}, from a copy that did not refuse it: its first run and its replay say the same of the effect, and neither says it happened`, async () => {
        const w = world(effect, code);
        const first = await w.dispatch();
        const second = await w.dispatch();
        const rows = (await turnRowsOf(w.ledger, turn0.conversationId, 0)) ?? [];
        const said = [effectOf(first), effectOf(second), ...rows.map((row) => turnRowEffect(row).effect)];
        console.log(`${effect} ${code}: declined ${w.declined.length}, payments ${w.payments.length}; first ${(first as { code?: string }).code}/${effectOf(first)}, replay ${(second as { code?: string }).code}/${effectOf(second)}; rows ${rows.map((r) => `${r.state}${r.state === "failed" ? `:${r.error.code}` : ""}`).join(",")}`);
        // The effect log: nothing was paid. Nothing may say it was.
        expect(w.payments).toEqual([]);
        expect(said).not.toContain("yes");
        expect(said).not.toContain("happened");
        expect(effectOf(second)).toBe(effectOf(first));
        // No stored failure carries the reserved code as the tool's: it would be read as Dispatch-Once's.
        for (const row of rows) if (row.state === "failed") expect(row.error.code).not.toBe(code);
        // The tool broke ERR-6: its failure names no disposition Dispatch-Once can trust (LEDGER-8).
        expect(isDispatchOnceError(first, effect === "keyed_write" ? "claim_released" : "outcome_unknown")).toBe(true);
      });
    }
  }
});
