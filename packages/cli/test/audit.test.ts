// `dispatch-once audit <tools module>`: which tools can double-fire and how each is guarded.
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { Dispatcher, MemoryLedger, ToolRegistry, defineTool, type Ledger } from "@dispatch-once/core";
import { z } from "zod";
import { auditTools, checkRowKeys, type ToolGuardReport } from "../src/index.js";
import { FIXTURES, REDIS_URL, runBin, sqliteBackend } from "./helpers.js";

const MIXED = join(FIXTURES, "mixed-tools.mjs");

describe("dispatch-once audit", () => {
  it("reports every tool's effect, double-fire and guards, and flags the unkeyed write without a probe", async () => {
    const result = await runBin(["audit", MIXED, "--json"]);
    expect(result.code, result.stderr).toBe(0);
    const reports = JSON.parse(result.stdout) as ToolGuardReport[];
    const byName = Object.fromEntries(reports.map((r) => [r.name, r]));
    expect(byName["get_balance"]).toMatchObject({ effect: "read", canDoubleFire: false, guards: ["none needed"] });
    expect(byName["get_balance"]?.risk).toBeUndefined();
    expect(byName["send_payment"]).toMatchObject({ effect: "keyed_write", canDoubleFire: true, guards: ["keyed downstream", "ledger claim", "reconcile probe"], identity: ["to", "amount"] });
    expect(byName["send_payment"]?.risk).toBeUndefined();
    expect(byName["send_sms"]).toMatchObject({ effect: "unkeyed_write", canDoubleFire: true, guards: ["ledger only"] });
    expect(byName["send_sms"]?.risk).toContain("add a reconcile probe");
    expect(byName["book_table"]).toMatchObject({ guards: ["ledger only", "reconcile probe"] });
    expect(byName["book_table"]?.risk).toBeUndefined();
    expect(result.stderr).toBe("4 tools, 1 flagged\n");
  });

  it("--strict exits 5 when a tool is flagged; the table names it", async () => {
    const result = await runBin(["audit", MIXED, "--strict"]);
    expect(result.code).toBe(5);
    expect(result.stdout).toMatch(/^send_sms\s+unkeyed_write\s+possible\s+ledger only\s+all arguments\s+RISKY$/m);
    expect(result.stdout).toContain("RISKY send_sms: nothing downstream catches a repeat");
  });

  it("with a volatile --ledger, unkeyed writes are reported as refused by the dispatcher", async () => {
    const prefix = `do-test-cli-audit-${process.pid}`;
    const result = await runBin(["audit", MIXED, "--json", "--ledger", REDIS_URL, "--prefix", prefix]);
    expect(result.code, result.stderr).toBe(0);
    const reports = JSON.parse(result.stdout) as ToolGuardReport[];
    const bookTable = reports.find((r) => r.name === "book_table");
    expect(bookTable?.guards).toContain("volatile ledger refusal");
    expect(bookTable?.risk).toContain("refuses this tool on this ledger");
    // A durable SQLite ledger: the probe-guarded unkeyed write is fine.
    const sqlite = await sqliteBackend();
    try {
      const durable = await runBin(["audit", MIXED, "--json", ...sqlite.args]);
      const reports2 = JSON.parse(durable.stdout) as ToolGuardReport[];
      expect(reports2.find((r) => r.name === "book_table")?.risk).toBeUndefined();
    } finally {
      await sqlite.cleanup();
    }
  });

  it("with --ledger, flags a tool whose rows within retention were keyed under another identity (IDENT-4: a deploy changed it)", async () => {
    const { Dispatcher } = await import("@dispatch-once/core");
    const v1 = (await import(join(FIXTURES, "identity-v1.mjs"))) as { tools: import("@dispatch-once/core").ToolRegistry };
    const sqlite = await sqliteBackend();
    try {
      // Two rows made by the running release: a completed payment, and the 2nd identical call of a turn (ordinal 1).
      const dispatcher = new Dispatcher({ tools: v1.tools, ledger: sqlite.ledger });
      const call = { name: "send_payment", input: { payee: "acme", amount: 1200, memo: "Invoice 1042" } };
      await dispatcher.dispatch(call, { conversationId: "conv-deploy", turnIndex: 3 });
      await dispatcher.dispatch(call, { conversationId: "conv-deploy", turnIndex: 3, ordinal: 1 });
      // The same release's module finds every row's key again: nothing to flag.
      const same = await runBin(["audit", join(FIXTURES, "identity-v1.mjs"), "--json", ...sqlite.args]);
      expect(same.code, same.stderr).toBe(0);
      const sameReports = JSON.parse(same.stdout) as ToolGuardReport[];
      expect(sameReports.find((r) => r.name === "send_payment")?.risk).toBeUndefined();
      expect(same.stderr).toBe("2 tools, 0 flagged\n");
      // The deploy's module derives other keys for those rows' calls: a resumed turn would pay again.
      const changed = await runBin(["audit", join(FIXTURES, "identity-v2.mjs"), "--strict", ...sqlite.args]);
      expect(changed.code, changed.stderr).toBe(5);
      expect(changed.stdout).toMatch(/^send_payment\s+keyed_write\s+possible\s+.*RISKY$/m);
      expect(changed.stdout).toContain("RISKY send_payment: 2 of its 2 ledger rows were keyed under another definition");
      expect(changed.stdout).toContain("conv-deploy");
      const json = await runBin(["audit", join(FIXTURES, "identity-v2.mjs"), "--json", ...sqlite.args]);
      const report = (JSON.parse(json.stdout) as ToolGuardReport[]).find((r) => r.name === "send_payment");
      expect(report?.rowsKeyedElsewhere).toMatchObject({ checked: 2, mismatched: 2 });
      expect(report?.rowsKeyedElsewhere?.examples[0]).toMatchObject({ conversationId: "conv-deploy", turnIndex: 3 });
    } finally {
      await sqlite.cleanup();
    }
  });

  it("a module without a registry, or that is missing, exits 2", async () => {
    const wrong = await runBin(["audit", join(FIXTURES, "not-tools.mjs")]);
    expect(wrong.code).toBe(2);
    expect(wrong.stderr).toContain("is not a ToolRegistry, an array of tool definitions, or a function returning one");
    const missing = await runBin(["audit", "./nope.mjs"]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain("no such file");
  });

  it("accepts a default export that is a factory", async () => {
    const result = await runBin(["audit", join(FIXTURES, "invoice-tools.mjs"), "--json"]);
    expect(result.code, result.stderr).toBe(0);
    expect((JSON.parse(result.stdout) as ToolGuardReport[]).map((r) => r.name)).toEqual(["create_invoice", "look_up_customer"]);
  });
});

describe("checkRowKeys: every write row is keyed again from the module's definition (IDENT-4)", () => {
  const payment = (input: z.ZodType<Record<string, unknown>>, identity: readonly string[]) =>
    new ToolRegistry([defineTool({ name: "send_payment", effect: "keyed_write", input, identity, run: () => ({ ok: true }) })]);
  const v1 = payment(z.object({ payee: z.string(), amount: z.int(), memo: z.string() }), ["payee", "amount"]);
  /** `n` completed payments of the running release (v1), one per turn. */
  async function paid(n: number): Promise<MemoryLedger> {
    const ledger = new MemoryLedger();
    const dispatcher = new Dispatcher({ tools: v1, ledger });
    for (let i = 0; i < n; i++) await dispatcher.dispatch({ name: "send_payment", input: { payee: "acme", amount: 100 + i, memo: `Invoice ${i}` } }, { conversationId: "conv-deploy", turnIndex: i });
    return ledger;
  }

  it("IDENT-4 a deploy whose schema refuses the stored requests (a new required field) flags every row, saying why", async () => {
    // A re-sent message of those turns is re-run by a model writing the new schema's arguments:
    // another key, no row, a second payment. That the old requests cannot be replayed as they are
    // does not make the rows safe; they are rows the new definition cannot key.
    const v2 = payment(z.object({ payee: z.string(), amount: z.int(), memo: z.string(), currency: z.string() }), ["payee", "amount", "currency"]);
    const checks = await checkRowKeys(v2, await paid(2));
    expect(checks.get("send_payment")).toMatchObject({ checked: 2, mismatched: 2 });
    expect(checks.get("send_payment")?.examples[0]?.why).toMatch(/^its stored request is refused by the definition now: /);
  });

  it("IDENT-11 rows of a tool's former name are checked under the tool that lists it: covered (a re-run finds them), unless its schema refuses their stored request", async () => {
    const ledger = new MemoryLedger();
    const pay = new ToolRegistry([defineTool({ name: "pay", effect: "keyed_write", input: z.object({ payee: z.string(), amount: z.int(), memo: z.string() }), identity: ["payee", "amount"], run: () => ({ ok: true }) })]);
    const old = new Dispatcher({ tools: pay, ledger });
    for (let i = 0; i < 3; i++) await old.dispatch({ name: "pay", input: { payee: "acme", amount: 100 + i, memo: `Invoice ${i}` } }, { conversationId: "conv-deploy", turnIndex: i });
    const renamed = (input: z.ZodType<Record<string, unknown>>) =>
      new ToolRegistry([defineTool({ name: "send_payment", formerNames: ["pay"], effect: "keyed_write", input, identity: ["payee", "amount"], run: () => ({ ok: true }) })]);
    const covered = await checkRowKeys(renamed(z.object({ payee: z.string(), amount: z.int(), memo: z.string() })), ledger);
    expect(covered).toEqual(new Map([["send_payment", expect.objectContaining({ checked: 3, mismatched: 0, formerNameRows: 3 })]]));
    expect(auditTools(renamed(z.object({ payee: z.string(), amount: z.int(), memo: z.string() })), undefined, covered)[0]?.risk).toBeUndefined();
    const refused = await checkRowKeys(renamed(z.object({ payee: z.string(), amount: z.int(), memo: z.string(), currency: z.string() })), ledger);
    expect(refused.get("send_payment")).toMatchObject({ checked: 3, mismatched: 3, formerNameRows: 3 });
    // Without formerNames the old name's rows are of no tool of the module: not checked, as before.
    expect(await checkRowKeys(payment(z.object({ payee: z.string(), amount: z.int(), memo: z.string() }), ["payee", "amount"]), ledger)).toEqual(new Map());
  });

  it("IDENT-4 every page of the listing is read: a ledger whose pages are shorter than the limit asked for still has all its rows checked", async () => {
    // A ledger may answer fewer rows than the limit with a cursor (LIST-1); a scan that stopped at
    // the first page would report a changed tool's later rows as clean.
    const ledger = await paid(5);
    const shortPages = Object.assign(Object.create(ledger) as Ledger, { listRows: (query: Parameters<MemoryLedger["listRows"]>[0]) => ledger.listRows({ ...query, limit: 2 }) });
    const v2 = payment(z.object({ payee: z.string(), amount: z.int(), memo: z.string() }), ["payee", "amount", "memo"]);
    expect(await checkRowKeys(v2, shortPages)).toEqual(new Map([["send_payment", expect.objectContaining({ checked: 5, mismatched: 5, truncated: false })]]));
    expect(await checkRowKeys(v1, shortPages)).toEqual(new Map([["send_payment", expect.objectContaining({ checked: 5, mismatched: 0 })]]));
  });
});
