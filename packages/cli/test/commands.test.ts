// Every ledger command driven through the built bin, as a user runs it, on each real store.
import type { Ledger, LedgerRow } from "@dispatch-once/core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createSqliteLedger } from "@dispatch-once/ledger-sqlite";
import Database from "better-sqlite3";
import { BACKENDS, jsonLines, randomKey, runBin, sqliteBackend, type Backend, type BinResult } from "./helpers.js";

type Seeded = { key: string; fence: number };

async function seed(
  ledger: Ledger,
  state: "unknown" | "completed" | "failed" | "in_flight",
  options: { toolName?: string; conversationId?: string; turnIndex?: number; request?: unknown; leaseMs?: number } = {},
): Promise<Seeded> {
  const key = randomKey();
  const claim = await ledger.claim({
    key,
    toolName: options.toolName ?? "create_invoice",
    effect: "unkeyed_write",
    owner: "test-worker",
    // Ten minutes: a suite slowed by a loaded host must still find these leases live (one minute ran
    // out before the inspect test in a CI run whose suite took 350 s).
    leaseMs: options.leaseMs ?? 600_000,
    request: JSON.stringify(options.request ?? { customer: "acme", amount: 4200, currency: "EUR" }),
    conversationId: options.conversationId ?? "conv-default",
    turnIndex: options.turnIndex ?? 0,
  });
  if (claim.outcome !== "claimed") throw new Error("seed claim not claimed");
  if (state === "unknown") await ledger.markUnknown(key, claim.fence, "tool_error");
  if (state === "completed") await ledger.complete(key, claim.fence, '{"invoiceId":"inv_seed"}');
  if (state === "failed") await ledger.fail(key, claim.fence, { name: "ToolError", message: "card declined", code: "card_declined" });
  return { key, fence: claim.fence };
}

/**
 * An adapter that does not (yet) offer an OPTIONAL method: the CLI must refuse with exit 4 and
 * name the operation, never crash or print an empty listing as if there were no rows.
 */
function expectUnsupported(result: BinResult, operation: string): void {
  expect(result.code, result.stderr).toBe(4);
  expect(result.stderr).toContain(`does not support ${operation}`);
}

describe.each(BACKENDS)("dispatch-once on %s", (_name, open) => {
  /** Whether the adapter declares the OPTIONAL method (capabilities.supports); the CLI is tested either way. */
  const supports = (feature: "listRows" | "resolve" | "auditTrail") => backend.ledger.capabilities.supports?.[feature] === true;
  let backend: Backend;
  let run: (...args: string[]) => ReturnType<typeof runBin>;
  let unknownRow: Seeded;
  let completedRow: Seeded;
  let inFlightRow: Seeded;

  beforeAll(async () => {
    backend = await open();
    // resolve finishes rows, so it needs the application's retention (here the adapters' 24 h).
    run = (...args) => runBin([...args, ...backend.args, ...(args[0] === "resolve" ? ["--retention", "24h", ...(args.includes("--expected-fence") ? [] : ["--current-fence"])] : [])]);
    unknownRow = await seed(backend.ledger, "unknown", { conversationId: "conv-cli-a", turnIndex: 3 });
    completedRow = await seed(backend.ledger, "completed", { toolName: "send_payment", conversationId: "conv-cli-b" });
    inFlightRow = await seed(backend.ledger, "in_flight", { toolName: "send_payment", conversationId: "conv-cli-b" });
  });
  afterAll(async () => {
    await backend?.cleanup();
  });

  it("list --state unknown --json prints exactly the unknown row as a JSON line", async () => {
    const result = await run("list", "--state", "unknown", "--json");
    expect(supports("listRows"), "every ledger lists rows").toBe(true);
    expect(result.code, result.stderr).toBe(0);
    const rows = jsonLines(result.stdout) as LedgerRow[];
    expect(rows.map((r) => r.key)).toEqual([unknownRow.key]);
    expect(rows[0]).toMatchObject({ state: "unknown", toolName: "create_invoice", conversationId: "conv-cli-a", turnIndex: 3 });
  });

  it("list filters by tool and by conversation, and takes several states", async () => {
    const byTool = await run("list", "--tool", "send_payment", "--json");
    expect(supports("listRows"), "every ledger lists rows").toBe(true);
    expect(new Set((jsonLines(byTool.stdout) as LedgerRow[]).map((r) => r.key))).toEqual(new Set([completedRow.key, inFlightRow.key]));
    const byConversation = await run("list", "--conversation", "conv-cli-a", "--json");
    expect((jsonLines(byConversation.stdout) as LedgerRow[]).map((r) => r.key)).toEqual([unknownRow.key]);
    const twoStates = await run("list", "--state", "unknown,in_flight", "--json");
    expect(new Set((jsonLines(twoStates.stdout) as LedgerRow[]).map((r) => r.key))).toEqual(new Set([unknownRow.key, inFlightRow.key]));
  });

  it("list pages through the ledger's cursor until every row is printed", async () => {
    const result = await run("list", "--limit", "0", "--page-size", "1", "--json");
    expect(supports("listRows"), "every ledger lists rows").toBe(true);
    expect(result.code, result.stderr).toBe(0);
    const keys = (jsonLines(result.stdout) as LedgerRow[]).map((r) => r.key);
    expect(keys).toHaveLength(3);
    expect(new Set(keys)).toEqual(new Set([unknownRow.key, completedRow.key, inFlightRow.key]));
  });

  it("list --limit stops early and says more may match; --older-than excludes fresh rows", async () => {
    const limited = await run("list", "--limit", "2", "--json");
    expect(supports("listRows"), "every ledger lists rows").toBe(true);
    expect(jsonLines(limited.stdout)).toHaveLength(2);
    expect(limited.stderr).toContain("more rows may match");
    const old = await run("list", "--older-than", "1h", "--json");
    expect(old.code, old.stderr).toBe(0);
    expect(old.stdout).toBe("");
  });

  it("list prints a table with the full key by default", async () => {
    const result = await run("list", "--state", "unknown");
    expect(supports("listRows"), "every ledger lists rows").toBe(true);
    expect(result.code, result.stderr).toBe(0);
    const [header, line] = result.stdout.trimEnd().split("\n");
    expect(header).toMatch(/^KEY\s+STATE\s+TOOL\s+FENCE\s+CONVERSATION\s+TURN\s+AGE$/);
    expect(line?.split(/\s+/).slice(0, 6)).toEqual([unknownRow.key, "unknown", "create_invoice", String(unknownRow.fence), "conv-cli-a", "3"]);
    expect(result.stderr).toBe("1 row\n");
  });

  it("list's table tells a live in-flight claim from one whose lease expired (an abandoned claim)", async () => {
    const live = await run("list", "--state", "in_flight", "--conversation", "conv-cli-b");
    expect(live.code, live.stderr).toBe(0);
    expect(live.stdout).toMatch(new RegExp(`^${inFlightRow.key}\\s+in_flight \\(lease \\d+\\w* left\\)\\s+send_payment\\s`, "m"));
    const abandoned = await seed(backend.ledger, "in_flight", { conversationId: "conv-cli-expired", leaseMs: 1 });
    await new Promise((r) => setTimeout(r, 1100));
    const expired = await run("list", "--conversation", "conv-cli-expired");
    expect(expired.code, expired.stderr).toBe(0);
    const [header, line] = expired.stdout.trimEnd().split("\n");
    expect(header).toMatch(/^KEY\s+STATE\s+TOOL\s+FENCE\s+CONVERSATION\s+TURN\s+AGE$/);
    expect(line).toMatch(new RegExp(`^${abandoned.key}\\s+in_flight \\(lease expired [1-9]\\d*s ago\\)\\s+create_invoice\\s+${abandoned.fence}\\s+conv-cli-expired\\s+0\\s`));
    // --json is the row as the ledger returns it, lease expiry included.
    const [row] = jsonLines((await run("list", "--conversation", "conv-cli-expired", "--json")).stdout) as LedgerRow[];
    expect(row).toMatchObject({ key: abandoned.key, state: "in_flight" });
    expect((row as LedgerRow & { leaseExpiresAt: number }).leaseExpiresAt).toBeLessThan(Date.now());
  });

  it("list and inspect tell a failed row whose effect happened (result_not_storable) from a definite failure", async () => {
    const declined = await seed(backend.ledger, "failed", { conversationId: "conv-cli-notstorable" });
    const happened = await seed(backend.ledger, "in_flight", { conversationId: "conv-cli-notstorable" });
    // What the dispatcher writes when the effect happened and its result cannot be kept (LEDGER-10).
    await backend.ledger.fail(happened.key, happened.fence, { name: "ResultNotStorableError", message: "result of 2000000 bytes exceeds 1048576", code: "result_not_storable" });
    const listed = await run("list", "--conversation", "conv-cli-notstorable");
    expect(listed.code, listed.stderr).toBe(0);
    expect(listed.stdout).toMatch(new RegExp(`^${happened.key}\\s+failed \\(the effect happened; result not stored\\)\\s+create_invoice\\s`, "m"));
    expect(listed.stdout).toMatch(new RegExp(`^${declined.key}\\s+failed\\s+create_invoice\\s`, "m"));
    const inspected = await run("inspect", happened.key);
    expect(inspected.code, inspected.stderr).toBe(0);
    expect(inspected.stdout).toMatch(/^state:\s+failed \(the effect happened; result not stored\)$/m);
    expect((await run("inspect", declined.key)).stdout).toMatch(/^state:\s+failed$/m);
  });

  it("inspect shows the row: state, reason, request, conversation and turn", async () => {
    const text = await run("inspect", unknownRow.key);
    expect(text.code, text.stderr).toBe(0);
    expect(text.stdout).toMatch(/^state:\s+unknown$/m);
    expect(text.stdout).toMatch(/^reason:\s+tool_error$/m);
    // Every ledger stores the claim's conversation and turn (LIST-3).
    expect(text.stdout).toMatch(/^conversation:\s+conv-cli-a$/m);
    expect(text.stdout).toContain('"customer": "acme"');
    const inFlight = await run("inspect", inFlightRow.key, "--json");
    const { row } = JSON.parse(inFlight.stdout) as { row: LedgerRow };
    expect(row).toMatchObject({ key: inFlightRow.key, state: "in_flight", owner: "test-worker", fence: inFlightRow.fence });
    const human = await run("inspect", inFlightRow.key);
    expect(human.stdout).toMatch(/^owner:\s+test-worker$/m);
    expect(human.stdout).toMatch(/^lease:\s+\S+ \(\d+\w* left\)$/m);
  });

  it("inspect and resolve of a key without a row exit 3", async () => {
    const key = randomKey();
    const inspect = await run("inspect", key);
    expect(inspect.code).toBe(3);
    expect(inspect.stderr).toContain(`no ledger row for key ${key}`);
    const resolve = await run("resolve", key, "--not-performed", "--reason", "checked");
    if (!supports("resolve")) return expectUnsupported(resolve, "resolve");
    expect(resolve.code).toBe(3);
  });

  it("an empty key is refused (exit 2) on every store; a key not of the derived shape that has no row says so (exit 3)", async () => {
    for (const args of [["inspect", ""], ["resolve", "", "--not-performed", "--reason", "x"], ["reconcile", "", "--tools", "x.mjs"]]) {
      const empty = await run(...args);
      expect(empty.code, `${args[0]}: ${empty.stderr}`).toBe(2);
      expect(empty.stderr).toContain("the key is empty");
    }
    // An abbreviated key, as in a ticket or the README; upper case; a control character.
    for (const key of ["9b0e...78", unknownRow.key.toUpperCase(), `${unknownRow.key.slice(0, 16)}\u0007`]) {
      const result = await run("inspect", key);
      expect(result.code, result.stderr).toBe(3);
      expect(result.stderr).toContain(`no ledger row for key ${JSON.stringify(key)} (a derived key is 32 lowercase hex digits; this one is not: copied in full?)`);
      expect(result.stderr).not.toContain("\u0007");
    }
  });

  it("resolve --completed stores the result bytes, and inspect shows who, when and why", async () => {
    const row = await seed(backend.ledger, "unknown");
    const result = await run("resolve", row.key, "--completed", '{"invoiceId": "inv_77"}', "--reason", "found inv_77 in billing", "--actor", "alice");
    if (!supports("resolve")) {
      expectUnsupported(result, "resolve");
      expect(await backend.ledger.lookup(row.key)).toMatchObject({ state: "unknown", fence: row.fence });
      expect((await run("inspect", row.key)).stdout).toContain("audit trail:  (this ledger keeps none)");
      return;
    }    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toMatch(new RegExp(`^resolved ${row.key}: unknown at fence \\d+ -> completed \\(fence \\d+\\) by alice$`, "m"));
    const stored = await backend.ledger.lookup(row.key);
    expect(stored).toMatchObject({ state: "completed", result: '{"invoiceId": "inv_77"}' });
    const inspect = await run("inspect", row.key, "--json");
    const { audit } = JSON.parse(inspect.stdout) as { audit: { actor: string; action: string; fromState: string; toState: string; reason: string }[] };
    expect(audit.at(-1)).toMatchObject({ actor: "alice", action: "resolved", fromState: "unknown", toState: "completed", reason: "found inv_77 in billing" });
    const human = await run("inspect", row.key);
    expect(human.stdout).toMatch(/resolved:completed\s+unknown\s+completed\s+\d+\s+alice\s+found inv_77 in billing/);
  });

  it("resolve --failed stores the message and code; --not-performed releases the row", async () => {
    const failed = await seed(backend.ledger, "unknown");
    const f = await run("resolve", failed.key, "--failed", "the bank rejected it", "--code", "bank_rejected", "--reason", "bank statement", "--actor", "bob", "--grace", "0s");
    if (!supports("resolve")) return expectUnsupported(f, "resolve");
    expect(f.code, f.stderr).toBe(0);
    expect(await backend.ledger.lookup(failed.key)).toMatchObject({ state: "failed", error: { message: "the bank rejected it", code: "bank_rejected" } });
    const released = await seed(backend.ledger, "unknown");
    const r = await run("resolve", released.key, "--not-performed", "--reason", "no trace downstream", "--grace", "0s", "--json");
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ key: released.key, state: "released" });
  });

  it("resolve is refused (exit 4) on a completed row and on a live in-flight row, which stay as they were", async () => {
    const completed = await run("resolve", completedRow.key, "--not-performed", "--reason", "oops");
    if (!supports("resolve")) return expectUnsupported(completed, "resolve");
    expect(completed.code).toBe(4);
    expect(completed.stderr).toContain("[resolution_refused]");
    expect(await backend.ledger.lookup(completedRow.key)).toMatchObject({ state: "completed", fence: completedRow.fence });
    const live = await run("resolve", inFlightRow.key, "--not-performed", "--reason", "oops");
    expect(live.code).toBe(4);
    expect(await backend.ledger.lookup(inFlightRow.key)).toMatchObject({ state: "in_flight", fence: inFlightRow.fence });
  });

  it("resolve --expected-fence refuses (exit 4) when the fence moved, and resolves when it matches", async () => {
    const row = await seed(backend.ledger, "unknown");
    const stale = await run("resolve", row.key, "--not-performed", "--reason", "checked", "--grace", "0s", "--expected-fence", String(row.fence + 1));
    if (!supports("resolve")) return expectUnsupported(stale, "resolve");
    expect(stale.code).toBe(4);
    expect(stale.stderr).toContain(`you decided on fence ${row.fence + 1}, and the row has moved to fence ${row.fence}`);
    expect(await backend.ledger.lookup(row.key)).toMatchObject({ state: "unknown" });
    const ok = await run("resolve", row.key, "--not-performed", "--reason", "checked", "--grace", "0s", "--expected-fence", String(row.fence));
    expect(ok.code, ok.stderr).toBe(0);
  });

  it("resolve refuses a result that is not JSON before touching the ledger (exit 2)", async () => {
    const row = await seed(backend.ledger, "unknown");
    const result = await run("resolve", row.key, "--completed", "{invoiceId: inv_1}", "--reason", "found");
    expect(result.code).toBe(2);
    expect(result.stderr).toContain("--completed must be the result as JSON");
    expect(await backend.ledger.lookup(row.key)).toMatchObject({ state: "unknown" });
  });

  it("sweep prints how many rows it deleted", async () => {
    const result = await run("sweep", "--json");
    expect(result.code, result.stderr).toBe(0);
    const { swept } = JSON.parse(result.stdout) as { swept: number };
    expect(Number.isInteger(swept)).toBe(true);
    // Nothing here is past its 24 h retention: every seeded row is still there.
    expect(await backend.ledger.lookup(completedRow.key)).toBeDefined();
    const human = await run("sweep");
    expect(human.stdout).toMatch(/^swept \d+ rows?\n$/);
  });
});

/** The keys a SQLite ledger file holds, read directly (raw hook). */
function storedKeys(path: string): string[] {
  const db = new Database(path, { readonly: true });
  try {
    return (db.prepare("SELECT key FROM dispatch_once_ledger ORDER BY key").all() as { key: string }[]).map((r) => r.key);
  } finally {
    db.close();
  }
}

describe("dispatch-once sweep --retention on a SQLite file (LEDGER-13)", () => {
  it("judges retention by the application's setting: nothing goes at the 24 h default, both rows at 1 ms", async () => {
    const backend = await sqliteBackend();
    // The application's ledger keeps finished rows for 1 ms (each row carries the expiry its writer gave it).
    const app = createSqliteLedger({ path: backend.args[1] as string, retentionMs: 1 });
    try {
      const first = await seed(app, "completed");
      const second = await seed(app, "failed");
      const kept = await runBin(["sweep", "--json", ...backend.args]);
      expect(kept.code, kept.stderr).toBe(0);
      expect(JSON.parse(kept.stdout)).toEqual({ swept: 0 });
      // lookup() already hides rows past their expiry; the file still holds them until a sweep.
      expect(storedKeys(backend.args[1] as string)).toEqual([first.key, second.key].sort());
      await new Promise((resolve) => setTimeout(resolve, 5));
      const swept = await runBin(["sweep", "--retention", "1ms", ...backend.args]);
      expect(swept.code, swept.stderr).toBe(0);
      expect(swept.stdout).toBe("swept 2 rows\n");
      expect(storedKeys(backend.args[1] as string)).toEqual([]);
    } finally {
      await app.close();
      await backend.cleanup();
    }
  });

  it("never deletes a row before the deadline it was finished with, however short --retention is", async () => {
    const backend = await sqliteBackend();
    const app = createSqliteLedger({ path: backend.args[1] as string }); // the application's 24 h
    try {
      const row = await seed(app, "completed");
      await new Promise((resolve) => setTimeout(resolve, 5));
      const swept = await runBin(["sweep", "--retention", "1ms", "--json", ...backend.args]);
      expect(swept.code, swept.stderr).toBe(0);
      expect(JSON.parse(swept.stdout)).toEqual({ swept: 0 });
      expect(storedKeys(backend.args[1] as string)).toEqual([row.key]);
    } finally {
      await app.close();
      await backend.cleanup();
    }
  });
});
