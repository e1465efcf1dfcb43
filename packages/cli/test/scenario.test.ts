// The done-when scenario of issue #15, on each durable store: an unkeyed call ends unknown after a
// lost response; `dispatch-once list --state unknown` shows it; `dispatch-once reconcile` settles it
// from the downstream; the next replay answers from the ledger; `inspect` shows the audit trail.
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Dispatcher, isDispatchOnceError, type AuditEntry, type LedgerRow } from "@dispatch-once/core";
import { startMockPayments, type MockPaymentsServer } from "@dispatch-once/mock-payments";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createInvoiceTools } from "./fixtures/invoice-tools.mjs";
import { FIXTURES, jsonLines, postgresBackend, randomKey, redisBackend, runBin, runBinProcess, sqliteBackend, type Backend } from "./helpers.js";
// Child processes for every command that loads a --tools module (runBinProcess): those modules read
// their settings (the payments URL, the probe's plan) from the environment the command is given, as
// they would in production. The commands that load none (list, inspect, and reconcile refused for a
// bad --timeout before its module is loaded) run through the bin's entry in this process (runBin,
// helpers.ts), as in the other files: a child process costs about 0.4 s of CPU each.

const TOOLS = join(FIXTURES, "invoice-tools.mjs");

// Every ledger the CLI opens. Redis is volatile, so the dispatcher refuses unkeyed writes on it
// (LEDGER-14) unless told otherwise: the scenario opts in there, since what it tests is the
// operator's path (list, reconcile, replay, audit), not the store's durability.
describe.each([
  ["sqlite", sqliteBackend],
  ["postgres", postgresBackend],
  ["redis", redisBackend],
] as const)("operator scenario on %s (RECON-9, RESOLVE-6, RESOLVE-7)", (_name, open) => {
  let backend: Backend;
  let payments: MockPaymentsServer;

  beforeAll(async () => {
    backend = await open();
    payments = await startMockPayments();
  });
  afterAll(async () => {
    await payments?.close();
    await backend?.cleanup();
  });

  it("lost response -> unknown -> listed -> reconciled from the downstream -> replayed from the ledger, audited", async () => {
    const dispatcher = new Dispatcher({
      tools: createInvoiceTools(payments.url),
      ledger: backend.ledger,
      logger: { warn: () => {} },
      allowVolatileLedgerForUnkeyedWrites: backend.ledger.capabilities.durability === "volatile",
    });
    const call = { name: "create_invoice", input: { customer: "acme", amount: 4200, currency: "EUR" } };
    const turn = { conversationId: `conv-scenario-${backend.name}`, turnIndex: 2 };
    const key = dispatcher.keyFor(call, turn);

    // The invoice is created but its response is lost, and the automatic probe cannot reach the
    // invoices list either: the outcome is unknown, and the unkeyed call must never run again.
    payments.injectFault({ outcome: "drop_after_accept", operations: ["create_invoice"] });
    payments.setGlobalFault({ outcome: "fail_before_accept", operations: ["list_invoices"] });
    const first = await dispatcher.dispatch(call, turn).then(
      () => undefined,
      (error: unknown) => error,
    );
    payments.setGlobalFault(null);
    expect(isDispatchOnceError(first, "outcome_unknown"), String(first)).toBe(true);
    expect(payments.invoices("acct_cli_test")).toHaveLength(1);
    const invoiceId = payments.invoices("acct_cli_test")[0]?.id;

    const listed = await runBin(["list", "--state", "unknown", "--json", ...backend.args]);
    expect(listed.code, listed.stderr).toBe(0);
    expect((jsonLines(listed.stdout) as LedgerRow[]).map((r) => [r.key, r.toolName, r.conversationId, r.turnIndex])).toEqual([
      [key, "create_invoice", turn.conversationId, 2],
    ]);

    const reconciled = await runBinProcess(["reconcile", key, "--tools", TOOLS, "--retention", "24h", "--actor", "carol", ...backend.args], { env: { CLI_TEST_PAYMENTS_URL: payments.url } });
    expect(reconciled.code, reconciled.stderr).toBe(0);
    expect(reconciled.stdout).toMatch(/^verdict:\s+performed$/m);
    expect(reconciled.stdout).toMatch(/^state:\s+unknown -> completed \(fence \d+\)$/m);

    // The replay answers from the ledger: the tool does not run, no second invoice.
    const replay = await dispatcher.dispatch(call, turn);
    expect(replay.replayed).toBe(true);
    expect(replay.result).toEqual({ invoiceId, customer: "acme", amount: 4200, currency: "EUR" });
    expect(payments.invoices("acct_cli_test")).toHaveLength(1);

    const nothingLeft = await runBin(["list", "--state", "unknown", "--json", ...backend.args]);
    expect(nothingLeft.stdout).toBe("");

    const inspected = await runBin(["inspect", key, "--json", ...backend.args]);
    expect(inspected.code, inspected.stderr).toBe(0);
    const { row, audit } = JSON.parse(inspected.stdout) as { row: LedgerRow; audit: AuditEntry[] };
    expect(row).toMatchObject({ state: "completed", conversationId: turn.conversationId, turnIndex: 2 });
    expect(audit.map((e) => [e.action, e.fromState, e.toState])).toEqual([
      ["marked_unknown", "in_flight", "unknown"],
      ["reconciled", "unknown", "completed"],
    ]);
    // The person who asked is in the audit trail (RESOLVE-7), not the tool.
    expect(audit.at(-1)).toMatchObject({ actor: "carol", outcome: "completed" });
    const human = await runBin(["inspect", key, ...backend.args]);
    expect(human.stdout).toMatch(/reconciled:completed\s+unknown\s+completed\s+\d+\s+carol/);

    // Reconciling again settles nothing: the row is no longer open (exit 4).
    const again = await runBinProcess(["reconcile", key, "--tools", TOOLS, "--retention", "24h", ...backend.args], { env: { CLI_TEST_PAYMENTS_URL: payments.url } });
    expect(again.code).toBe(4);
    expect(again.stderr).toContain("only an unknown row is reconciled");
  });

  it("reconcile settles nothing (exit 4) for a tool the module does not register, and exits 3 for a key without a row", async () => {
    const key = randomKey();
    const claim = await backend.ledger.claim({ key, toolName: "send_fax", effect: "unkeyed_write", owner: "test", leaseMs: 60_000, request: "{}" });
    if (claim.outcome !== "claimed") throw new Error("not claimed");
    await backend.ledger.markUnknown(key, claim.fence, "tool_error");
    const env = { CLI_TEST_PAYMENTS_URL: payments.url };
    const unregistered = await runBinProcess(["reconcile", key, "--tools", TOOLS, "--retention", "24h", ...backend.args], { env });
    expect(unregistered.code).toBe(4);
    expect(unregistered.stdout).toMatch(/^verdict:\s+none \(tool send_fax is not registered with this dispatcher\)$/m);
    expect(await backend.ledger.lookup(key)).toMatchObject({ state: "unknown", fence: claim.fence });
    const absent = await runBinProcess(["reconcile", randomKey(), "--tools", TOOLS, "--retention", "24h", ...backend.args], { env });
    expect(absent.code).toBe(3);
  });
});

describe.each([
  ["sqlite", sqliteBackend],
  ["postgres", postgresBackend],
  ["redis", redisBackend],
] as const)("reconcile while someone else settles the row, on %s (RESOLVE-6, RESOLVE-8)", (_name, open) => {
  let backend: Backend;
  let dir: string;
  beforeAll(async () => {
    backend = await open();
    dir = mkdtempSync(join(tmpdir(), "dispatch-once-cli-gate-"));
  });
  afterAll(async () => {
    await backend?.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });

  it.each(["unknown", "performed"])(
    "a row another operator resolves while the probe asks is not reported as settled by this reconcile (probe answers %s): exit 4, theirs stands",
    async (verdict) => {
      const key = randomKey();
      const claim = await backend.ledger.claim({ key, toolName: "create_invoice", effect: "unkeyed_write", owner: "app", leaseMs: 60_000, request: JSON.stringify({ customer: "acme", amount: 1, currency: "EUR" }) });
      if (claim.outcome !== "claimed") throw new Error("not claimed");
      await backend.ledger.markUnknown(key, claim.fence, "tool_error");
      const gate = join(dir, key);
      const running = runBinProcess(["reconcile", key, "--tools", join(FIXTURES, "gated-probe-tools.mjs"), "--retention", "24h", "--json", ...backend.args], { env: { CLI_TEST_PROBE_GATE: gate } });
      while (!existsSync(`${gate}.started`)) await new Promise((resolve) => setTimeout(resolve, 10));
      // Another operator settles it while the probe is asking.
      await backend.ledger.resolve!({ key, resolution: { outcome: "failed", error: { name: "OperatorResolvedFailure", message: "declined" } }, actor: "erin", reason: "bank log" });
      writeFileSync(`${gate}.go`, verdict);
      const result = await running;
      expect(result.code, result.stderr).toBe(4);
      const out = JSON.parse(result.stdout) as { report: { settled: string; detail?: string }; settled: boolean; row: LedgerRow };
      expect(out.settled).toBe(false);
      expect(out.report.settled).toBe("none");
      expect(result.stderr).toContain("reconcile settled nothing");
      // Erin's resolution stands, and the audit trail names her, not this reconcile.
      expect(await backend.ledger.lookup(key)).toMatchObject({ state: "failed", error: { message: "declined" } });
      const audit = await backend.ledger.auditTrail!(key);
      expect(audit.map((e) => [e.action, e.actor])).toEqual([
        ["marked_unknown", "app"],
        ["resolved", "erin"],
      ]);
    },
  );
});

describe.each([
  ["sqlite", sqliteBackend],
  ["postgres", postgresBackend],
  ["redis", redisBackend],
] as const)("reconcile --timeout: a hung probe is given up on and nothing is written, on %s", (_name, open) => {
  let backend: Backend;
  let dir: string;

  beforeAll(async () => {
    backend = await open();
    dir = mkdtempSync(join(tmpdir(), "dispatch-once-cli-hung-"));
  });
  afterAll(async () => {
    await backend?.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });

  it.each(["heeds", "ignores"])("a probe that %s its signal: aborted at --timeout, exit 4, the row and its audit trail as they were", async (mode) => {
    const key = randomKey();
    const claim = await backend.ledger.claim({ key, toolName: "create_invoice", effect: "unkeyed_write", owner: "app", leaseMs: 60_000, request: JSON.stringify({ customer: "acme", amount: 1, currency: "EUR" }) });
    if (claim.outcome !== "claimed") throw new Error("not claimed");
    await backend.ledger.markUnknown(key, claim.fence, "tool_error");
    const log = join(dir, key);
    const started = Date.now();
    // --timeout bounds the whole reconcile, and a signal that aborted before the probe was asked
    // asks none (core's reconcile): the heeding probe is given 2s, so that on a loaded host the
    // ledger's reads before it cannot use up its budget (500ms did once, in CI: no .aborted file).
    const timeout = mode === "heeds" ? "2s" : "500ms";
    const result = await runBinProcess(["reconcile", key, "--tools", join(FIXTURES, "hung-probe-tools.mjs"), "--timeout", timeout, "--retention", "24h", "--json", ...backend.args], {
      env: { CLI_TEST_PROBE_MODE: mode, CLI_TEST_PROBE_LOG: log },
    });
    expect(result.code, result.stderr).toBe(4);
    expect(Date.now() - started).toBeLessThan(15_000);
    const out = JSON.parse(result.stdout) as { report: { verdict: string; settled: string; detail?: string }; settled: boolean };
    expect(out).toMatchObject({ settled: false, report: { verdict: "error", settled: "none" } });
    expect(result.stderr).toContain("reconcile settled nothing");
    expect(result.stderr).toContain(`the probe did not answer within ${timeout} (--timeout)`);
    if (mode === "heeds") expect(existsSync(`${log}.aborted`), "the probe's signal aborted").toBe(true);
    // The late "performed" of the heeding probe is not written either.
    await new Promise((r) => setTimeout(r, 100));
    expect(await backend.ledger.lookup(key)).toMatchObject({ state: "unknown", fence: claim.fence });
    expect((await backend.ledger.auditTrail!(key)).map((e) => e.action)).toEqual(["marked_unknown"]);
  });

  it("--timeout takes a duration above 0 and at most 24d; anything else is a usage error (exit 2), nothing probed", async () => {
    for (const bad of ["0s", "30", "25d", "soon"]) {
      const result = await runBin(["reconcile", randomKey(), "--tools", join(FIXTURES, "hung-probe-tools.mjs"), "--timeout", bad, "--retention", "24h", ...backend.args]);
      expect(result.code, `${bad}: ${result.stderr}`).toBe(2);
      expect(result.stderr).toContain("--timeout");
    }
  });
});
