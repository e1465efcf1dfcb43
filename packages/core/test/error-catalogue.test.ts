import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { ERROR_CATALOGUE, effectOf, ClaimReleasedError, OutcomeUnknownError, ResultNotStorableError } from "../src/index.js";

/** The spec's §11 table, read as data: code, rules, effect, re-send. */
function specTable(): Map<string, { rules: string[]; effect: string; resend: string }> {
  const text = readFileSync(join(__dirname, "..", "..", "..", "spec", "dispatch-once.md"), "utf8");
  const start = text.indexOf("## 11 Error codes");
  // §11 ends at the next top-level section (§12 has prose with `|` in it).
  const section = text.slice(start, text.indexOf("\n## ", start + 1));
  const rows = new Map<string, { rules: string[]; effect: string; resend: string }>();
  for (const line of section.split("\n")) {
    const cells = line.split("|").map((c) => c.trim());
    const code = /^`([a-z_]+)`$/.exec(cells[1] ?? "")?.[1];
    if (code === undefined) continue;
    rows.set(code, { rules: cells[3]!.split(", "), effect: cells[5]!, resend: cells[6]! });
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

  it("ERR-4 effectOf reads what an error knows about the effect", () => {
    expect(effectOf(new ResultNotStorableError("k", "too big"))).toBe("yes");
    expect(effectOf(new OutcomeUnknownError("k", "lease_expired"))).toBe("possibly");
    expect(effectOf(new ClaimReleasedError("k", false, new Error("503")))).toBe("no");
    expect(effectOf(new ClaimReleasedError("k", true, new Error("timeout")))).toBe("possibly");
    expect(effectOf(new Error("anything else"))).toBe("possibly");
  });
});
