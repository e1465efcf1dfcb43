import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, expectTypeOf, it } from "vitest";
import * as core from "../src/index.js";
import {
  ERROR_CATALOGUE,
  effectOf,
  retryableOf,
  ClaimReleasedError,
  ConversationBusyError,
  DispatchOnceError,
  InFlightElsewhereError,
  OutcomeUnknownError,
  ResultNotStorableError,
  StaleClaimError,
  UnknownToolError,
} from "../src/index.js";

/** The spec's §11 table, read as data: code, rules, effect, re-send. */
function specTable(): Map<string, { rules: string[]; effect: string; resend: string; carries: string }> {
  const text = readFileSync(join(__dirname, "..", "..", "..", "spec", "dispatch-once.md"), "utf8");
  const start = text.indexOf("## 11 Error codes");
  // §11 ends at the next top-level section (§12 has prose with `|` in it).
  const section = text.slice(start, text.indexOf("\n## ", start + 1));
  const rows = new Map<string, { rules: string[]; effect: string; resend: string; carries: string }>();
  for (const line of section.split("\n")) {
    const cells = line.split("|").map((c) => c.trim());
    const code = /^`([a-z_]+)`$/.exec(cells[1] ?? "")?.[1];
    if (code === undefined) continue;
    rows.set(code, { rules: cells[3]!.split(", "), effect: cells[5]!, resend: cells[6]!, carries: cells[4]! });
  }
  return rows;
}

describe("the error catalogue (ERR-1, ERR-4)", () => {
  it("ERR-4 the spec's §11 table and ERROR_CATALOGUE list the same codes with the same rules, effect and re-send answer", () => {
    const table = specTable();
    expect([...table.keys()].sort()).toEqual(ERROR_CATALOGUE.map((e) => e.code).sort());
    for (const entry of ERROR_CATALOGUE) {
      const row = table.get(entry.code)!;
      expect(row.rules, entry.code).toEqual([...entry.rules]);
      expect(row.effect, entry.code).toBe(entry.effect);
      expect(row.resend.startsWith(entry.retryable === "no" ? "no" : "yes"), entry.code).toBe(true);
    }
  });

  it("ERR-4 the spec's §11 table names every field ERROR_CATALOGUE says an error carries (a reader of the spec learns of conversation_busy's inProgress there)", () => {
    const table = specTable();
    for (const entry of ERROR_CATALOGUE) {
      const named = (table.get(entry.code)!.carries.match(/`[A-Za-z]+`/g) ?? []).map((f) => f.slice(1, -1));
      expect(entry.carries.filter((field) => !named.includes(field)), entry.code).toEqual([]);
    }
  });

  it("ERR-4 a refusal code's rules are the rules that raise it: each one listed names the code, and every rule that names it is listed", () => {
    // The rules column is what a reviewer follows from a code to its definition; a rule listed that
    // never names the code (invalid_ledger_input once pointed at LEDGER-12, which is about
    // ledger_unavailable) sends them to the wrong paragraph, and one left out hides where it is raised.
    // ERR-* rules are about every code, so they are neither required nor counted.
    const text = readFileSync(join(__dirname, "..", "..", "..", "spec", "dispatch-once.md"), "utf8");
    const rules = new Map<string, string>();
    for (const match of text.matchAll(/^<a id="([A-Z]+-\d+)"><\/a>\*\*[A-Z]+-\d+\*\* (.+)$/gm)) rules.set(match[1]!, match[2]!);
    const refusals = ["invalid_key_input", "invalid_argument", "invalid_tool_definition", "invalid_ledger_input", "invalid_store_input", "ledger_corrupt", "store_corrupt"];
    const wrong: Record<string, { listedSilent: string[]; namingUnlisted: string[] }> = {};
    for (const code of refusals) {
      const entry = ERROR_CATALOGUE.find((e) => e.code === code)!;
      const listed = entry.rules.filter((id) => !id.startsWith("ERR-"));
      const naming = [...rules].filter(([id, rule]) => !id.startsWith("ERR-") && rule.includes(`\`${code}\``)).map(([id]) => id);
      const listedSilent = listed.filter((id) => !naming.includes(id));
      const namingUnlisted = naming.filter((id) => !listed.includes(id));
      if (listedSilent.length > 0 || namingUnlisted.length > 0) wrong[code] = { listedSilent, namingUnlisted };
    }
    expect(wrong).toEqual({});
  });

  it("ERR-4 effectOf reads what an error knows about the effect", () => {
    expect(effectOf(new ResultNotStorableError("k", "too big"))).toBe("yes");
    expect(effectOf(new OutcomeUnknownError("k", "lease_expired"))).toBe("possibly");
    expect(effectOf(new ClaimReleasedError("k", false, new Error("503")))).toBe("no");
    expect(effectOf(new ClaimReleasedError("k", true, new Error("timeout")))).toBe("possibly");
    expect(effectOf(new Error("anything else"))).toBe("possibly");
  });

  it("ERR-4 retryableOf: never a re-send for an effect known to have happened (a stale_claim after the run performed it: its row may have been released, and the re-send would perform it again)", () => {
    expect(retryableOf(new StaleClaimError("k", 1))).toBe("same_message");
    expect(retryableOf(new StaleClaimError("k", 1, "claim is no longer held", { effectHappened: true }))).toBe("no");
    expect(retryableOf(new ClaimReleasedError("k", true, new Error("timeout")))).toBe("same_message");
    expect(retryableOf(new OutcomeUnknownError("k", "lease_expired"))).toBe("no");
    expect(retryableOf(new ResultNotStorableError("k", "too big"))).toBe("no");
    expect(retryableOf(new Error("anything else"))).toBe("no");
  });

  it("ERR-4 retryableOf: a turn_failed whose failed-turn record says it is not retryable is not one a re-send can help (past the re-send window, a later message bound, a permanent model refusal, an unknown effect)", () => {
    // TurnFailedError lives in @dispatch-once/runner; any copy is recognised by its brand and code.
    const turnFailed = (retryable: boolean) =>
      Object.defineProperty({ code: "turn_failed", message: "turn 0 failed", record: { kind: "failed_turn", retryable } }, Symbol.for("dispatch-once.error"), { value: true });
    expect(retryableOf(turnFailed(true))).toBe("same_message");
    expect(retryableOf(turnFailed(false))).toBe("no");
  });

  it("ERR-4 effectOf: a conversation_busy whose message is in progress under another holder may have had effects; a queued one had none", () => {
    expect(effectOf(new ConversationBusyError("c", "m1", 10))).toBe("no");
    expect(effectOf(new ConversationBusyError("c", "m1", 10, { inProgress: true }))).toBe("possibly");
    expect(retryableOf(new ConversationBusyError("c", "m1", 10, { inProgress: true }))).toBe("same_message");
  });
});

describe("ERR-3 a subclass's isInstance recognises its own code only", () => {
  it("InFlightElsewhereError.isInstance is true for its errors (any copy: brand and code) and false for another code", () => {
    const own = new InFlightElsewhereError("k", 10);
    const other = new UnknownToolError("nope");
    expect(InFlightElsewhereError.isInstance(own)).toBe(true);
    expect(InFlightElsewhereError.isInstance(other)).toBe(false);
    expect(UnknownToolError.isInstance(own)).toBe(false);
    const copy = Object.defineProperty({ code: "in_flight_elsewhere", key: "k", waitedMs: 10 }, Symbol.for("dispatch-once.error"), { value: true });
    expect(InFlightElsewhereError.isInstance(copy)).toBe(true);
    // The base recognises every code, or the one asked for.
    expect(DispatchOnceError.isInstance(other)).toBe(true);
    expect(DispatchOnceError.isInstance(other, "unknown_tool")).toBe(true);
    expect(DispatchOnceError.isInstance(other, "in_flight_elsewhere")).toBe(false);
  });

  it("narrows to the subclass, so its fields read without a cast", () => {
    const error: unknown = new InFlightElsewhereError("k", 10);
    if (InFlightElsewhereError.isInstance(error)) {
      expectTypeOf(error).toEqualTypeOf<InFlightElsewhereError>();
      expect(error.waitedMs).toBe(10);
    } else {
      throw new Error("not recognised");
    }
  });

  it("every error class core exports names its code statically, a code of the catalogue", () => {
    for (const [name, value] of Object.entries(core)) {
      if (typeof value !== "function" || !(value.prototype instanceof DispatchOnceError)) continue;
      const code = (value as unknown as { code?: string }).code;
      expect(ERROR_CATALOGUE.map((e) => e.code), `${name}.code`).toContain(code);
    }
  });
});
