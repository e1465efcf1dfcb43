// ERR-6 for an operator: `resolve --failed <message> --code <code>` stores the operator's definite
// failure under --code, in the same field as Dispatch-Once's own codes, and some of those are read
// back as facts about the effect: a failed row under result_not_storable is an effect that HAPPENED
// (LEDGER-10). An operator who found the card declined and typed the code shown by another row
// (`inspect` of a result_not_storable row) had the payment that never moved answered "happened" by
// every replay, `inspect` and `list`.
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { Dispatcher, ToolError, defineTool, effectOf, isDispatchOnceError } from "@dispatch-once/core";
import { EXIT_CODES } from "../src/index.js";
import { runBin, sqliteBackend } from "./helpers.js";

const turn0 = { conversationId: "conv_resolve_code", turnIndex: 0 };

describe("resolve --failed --code with a code Dispatch-Once reads back (ERR-6)", () => {
  it("is refused as usage (exit 2, nothing written); the row stays unknown and no replay says the declined payment happened", async () => {
    const backend = await sqliteBackend();
    try {
      // The effect log: the bank declined the card, nothing moved.
      const payments: number[] = [];
      let runs = 0;
      const tool = defineTool({
        name: "send_payment",
        effect: "unkeyed_write",
        input: z.object({ amount: z.number() }),
        run: () => {
          runs++;
          throw new Error("socket hang up"); // the bank's answer was lost: outcome unknown
        },
      });
      const dispatcher = new Dispatcher({ tools: [tool], ledger: backend.ledger, pollMs: 1 });
      const dispatch = () =>
        dispatcher
          .turn(turn0)
          .dispatch({ name: "send_payment", input: { amount: 5 } })
          .then(
            () => new Error("answered with a result"),
            (e: unknown) => e,
          );
      const first = await dispatch();
      expect(isDispatchOnceError(first, "outcome_unknown")).toBe(true);
      const [row] = (await backend.ledger.listRows!({ state: "unknown" })).rows;
      expect(row).toBeDefined();
      const key = row!.key;
      const common = ["--retention", "24h", "--actor", "oncall", "--reason", "the bank says the card was declined", "--grace", "0s", "--expected-fence", String(row!.fence)];
      const resolved = await runBin(["resolve", key, ...backend.args, ...common, "--failed", "card declined", "--code", "result_not_storable"]);
      const after = await backend.ledger.lookup(key);
      const replay = await dispatch();
      const inspect = await runBin(["inspect", key, ...backend.args]);
      console.log(
        `resolve exit ${resolved.code} ${resolved.stderr.trim()}; row ${after?.state}${after?.state === "failed" ? `:${after.error.code}` : ""}; replay ${(replay as { code?: string }).code}/${effectOf(replay)}; payments ${payments.length}, runs ${runs}; inspect: ${inspect.stdout.split("\n").find((l) => l.startsWith("state:")) ?? ""}`,
      );
      expect(payments).toEqual([]);
      expect(runs).toBe(1);
      // Refused where the operator typed it, naming the option; nothing written.
      expect(resolved.code).toBe(EXIT_CODES.usage);
      expect(resolved.stderr).toContain("--code");
      expect(resolved.stderr).toContain("result_not_storable");
      expect(after).toMatchObject({ state: "unknown", fence: row!.fence });
      // Nothing says the declined payment happened.
      expect(effectOf(replay)).not.toBe("yes");
      expect(inspect.stdout).not.toContain("the effect happened");
      // The operator's own code still goes through.
      const own = await runBin(["resolve", key, ...backend.args, ...common, "--failed", "card declined", "--code", "card_declined"]);
      expect(own.code, own.stderr).toBe(0);
      const settled = await dispatch();
      expect(isDispatchOnceError(settled, "tool_failed")).toBe(true);
      expect(effectOf(settled)).toBe("no");
      expect(runs).toBe(1);
    } finally {
      await backend.cleanup();
    }
  });

  // ERR-6: any other code is the tool's (here the operator's) own, kept as given, one that shares a
  // reserved code's letters in another case included (a downstream's upper-case RESULT_NOT_STORABLE).
  it("a code that differs from a reserved one only in case is the downstream's own: kept as given", async () => {
    const backend = await sqliteBackend();
    try {
      const tool = defineTool({
        name: "send_payment",
        effect: "unkeyed_write",
        input: z.object({ amount: z.number() }),
        run: () => {
          throw new Error("socket hang up");
        },
      });
      const dispatcher = new Dispatcher({ tools: [tool], ledger: backend.ledger, pollMs: 1 });
      await dispatcher
        .turn({ conversationId: "conv_resolve_case", turnIndex: 0 })
        .dispatch({ name: "send_payment", input: { amount: 5 } })
        .catch(() => undefined);
      const [row] = (await backend.ledger.listRows!({ state: "unknown" })).rows;
      const r = await runBin(["resolve", row!.key, ...backend.args, "--retention", "24h", "--actor", "oncall", "--reason", "the bank says declined", "--grace", "0s", "--expected-fence", String(row!.fence), "--failed", "declined", "--code", "RESULT_NOT_STORABLE"]);
      expect(r.code, r.stderr).toBe(0);
      expect(await backend.ledger.lookup(row!.key)).toMatchObject({ state: "failed", error: { code: "RESULT_NOT_STORABLE" } });
    } finally {
      await backend.cleanup();
    }
  });

  it.each([...ToolError.reservedCodes])("--code %s is refused before the ledger is opened", async (code) => {
    const r = await runBin(["resolve", "0".repeat(32), "--ledger", "/nonexistent/ledger.db", "--retention", "24h", "--failed", "declined", "--code", code, "--reason", "r", "--expected-fence", "1"]);
    expect(r.code).toBe(EXIT_CODES.usage);
    expect(r.stderr).toContain(JSON.stringify(code));
  });
});
