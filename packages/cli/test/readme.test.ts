import { readFileSync } from "node:fs";
import { join } from "node:path";
import { ToolError, type ToolRegistry } from "@dispatch-once/core";
import { startMockPayments, type MockPaymentsServer } from "@dispatch-once/mock-payments";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { COMMANDS, EXIT_CODES, loadToolsModule, mainHelp } from "../src/index.js";

describe("README", () => {
  const readme = readFileSync(join(__dirname, "..", "README.md"), "utf8");
  let payments: MockPaymentsServer;
  // examples/tools.mjs reads BILLING_URL when first imported, so the mock starts before any test loads it.
  beforeAll(async () => {
    payments = await startMockPayments();
    process.env.BILLING_URL = payments.url;
    process.env.BILLING_TOKEN = "acct_readme";
  });
  afterAll(async () => {
    delete process.env.BILLING_URL;
    delete process.env.BILLING_TOKEN;
    await payments.close();
  });

  it("shows `dispatch-once --help` as the bin prints it", () => {
    expect(readme).toContain(mainHelp().trimEnd());
  });

  it("shows examples/tools.mjs verbatim, and that module is a loadable tools module", async () => {
    expect(readme).toContain(readFileSync(join(__dirname, "..", "examples", "tools.mjs"), "utf8").trim());
    const registry = await loadToolsModule(join(__dirname, "..", "examples", "tools.mjs"));
    expect(registry.list().map((t) => [t.name, t.effect, typeof t.reconcile])).toEqual([["create_invoice", "unkeyed_write", "function"]]);
  });

  it("documents the --json output of every command that has one", () => {
    const section = readme.slice(readme.indexOf("## JSON output"), readme.indexOf("## Exit codes"));
    expect(section.length).toBeGreaterThan(0);
    for (const command of COMMANDS.filter((c) => "json" in c.options)) expect(section).toMatch(new RegExp(`^\\| \`${command.name}\` \\|`, "m"));
  });

  it("documents every exit code", () => {
    for (const code of Object.values(EXIT_CODES)) expect(readme).toMatch(new RegExp(`^\\| ${code} \\|`, "m"));
  });

  it("the tools.mjs example authenticates, and tells the dispatcher what each failure means", async () => {
    const registry: ToolRegistry = await loadToolsModule(join(__dirname, "..", "examples", "tools.mjs"));
    const tool = registry.get("create_invoice");
    let n = 0;
    const context = () => ({ idempotencyKey: `${++n}`.padStart(32, "0"), conversationId: "c", turnIndex: 0, ordinal: 0, toolName: "create_invoice", signal: new AbortController().signal });
    const disposition = (args: unknown, ctx = context()) =>
      Promise.resolve(tool.run(args as never, ctx)).then(
        () => "ok",
        (error: unknown) => (error instanceof ToolError ? error.disposition : `not a ToolError: ${String(error)}`),
      );
    const invoice = { customer: "acme", amount: 12_500, currency: "EUR" };

    // Authorized: the invoice is created in the token's account, and the probe finds it.
    const first = context();
    const created = await tool.run(invoice as never, first);
    expect(payments.invoices("acct_readme")).toHaveLength(1);
    const verdict = await tool.reconcile!(invoice as never, { idempotencyKey: first.idempotencyKey, toolName: "create_invoice", cause: "on_demand", signal: first.signal });
    expect(verdict).toEqual({ outcome: "performed", result: created });

    // A 400 (EUX has an ISO 4217 shape but is not a currency): refused, nothing done, fails again.
    expect(await disposition({ ...invoice, currency: "EUX" })).toBe("definite");
    // A 503 before acceptance: nothing done, a re-run may succeed.
    payments.injectFault({ outcome: "fail_before_accept" }, { times: 1 });
    expect(await disposition(invoice)).toBe("not_performed");
    // The response is lost after the invoice was created: may have happened.
    payments.injectFault({ outcome: "drop_after_accept" }, { times: 1 });
    expect(await disposition(invoice)).toBe("unknown");
    expect(payments.invoices("acct_readme")).toHaveLength(2);
  });
});
