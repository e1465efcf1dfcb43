// `dispatch-once reconcile` on an operator's machine whose clock is not the database's: a probe's
// "not performed" releases an unkeyed_write only once the row has been unknown for the grace on the
// ledger's clock (RESOLVE-6). The oracle is a counting downstream plus the row: a request still in
// transit lands after the probe looked, then the application replays the call.
import { fileURLToPath, pathToFileURL } from "node:url";
import { join } from "node:path";
import { Dispatcher, defineTool, ToolRegistry } from "@dispatch-once/core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { FIXTURES, postgresBackend, redisBackend, runBin, type Backend } from "./helpers.js";

const here = fileURLToPath(new URL(".", import.meta.url));
const skewed = pathToFileURL(join(FIXTURES, "skewed-clock.mjs")).href;
const request = { customer: "c_1", amount: 40, currency: "EUR" };

// SQLite measures leases on each process's clock (clock: "process"): every process sharing its file
// runs on one machine's clock, so a skewed operator clock is not a case there.
describe.each([
  ["postgres", postgresBackend],
  ["redis", redisBackend],
] as const)("reconcile --grace on the ledger's clock, %s", (_name, open) => {
  let backend: Backend;
  const effects: string[] = [];
  const tool = defineTool({
    name: "create_invoice",
    effect: "unkeyed_write",
    input: z.object({ customer: z.string(), amount: z.int().positive(), currency: z.string() }),
    run: (args) => {
      effects.push(`invoice ${args.amount}`);
      return { invoiceId: `inv_${effects.length}` };
    },
  });
  const turn = (n: number) => ({ conversationId: `conv-grace-${backend.name}`, turnIndex: n });
  const call = { name: "create_invoice", input: request };
  const reconcile = (key: string, skewMs: number, ...more: string[]) =>
    runBin(["reconcile", key, "--tools", "./fixtures/transit-tools.mjs", "--retention", "24h", "--json", ...more, ...backend.args], {
      cwd: here,
      env: { NODE_OPTIONS: `--import=${skewed}`, CLI_TEST_CLOCK_SKEW_MS: String(skewMs) },
    });

  async function unknownRow(dispatcher: Dispatcher, n: number): Promise<string> {
    const key = dispatcher.keyFor(call, turn(n));
    const claimed = await backend.ledger.claim({ key, toolName: "create_invoice", effect: "unkeyed_write", owner: "gone", leaseMs: 60_000, request: JSON.stringify(request), conversationId: turn(n).conversationId, turnIndex: n });
    if (claimed.outcome !== "claimed") throw new Error("not claimed");
    await backend.ledger.markUnknown(key, claimed.fence, "tool_error: socket hang up after send");
    return key;
  }

  beforeAll(async () => {
    backend = await open();
  });
  afterAll(async () => {
    await backend?.cleanup();
  });

  it("an operator clock 10 minutes ahead does not release a row unknown for a moment; the in-transit request lands and the replay pays nothing more", async () => {
    effects.length = 0;
    const dispatcher = new Dispatcher({ tools: new ToolRegistry([tool]), ledger: backend.ledger, logger: { warn: () => {} }, allowVolatileLedgerForUnkeyedWrites: backend.ledger.capabilities.durability === "volatile" });
    const key = await unknownRow(dispatcher, 0);
    const out = await reconcile(key, 10 * 60_000);
    effects.push("invoice 40 (the request that was in transit)");
    await dispatcher.dispatch(call, turn(0)).catch(() => undefined);
    expect(effects).toHaveLength(1);
    expect(await backend.ledger.lookup(key)).toMatchObject({ state: "unknown" });
    expect(out.code, out.stderr).toBe(4);
    expect(JSON.parse(out.stdout)).toMatchObject({ settled: false, before: "unknown", row: { state: "unknown" }, report: { verdict: "not_performed", settled: "none", detail: expect.stringContaining("ledger's clock") } });
  });

  it("an operator clock 10 minutes behind releases once the grace has passed on the ledger's clock; the replay pays once", async () => {
    effects.length = 0;
    const dispatcher = new Dispatcher({ tools: new ToolRegistry([tool]), ledger: backend.ledger, logger: { warn: () => {} }, allowVolatileLedgerForUnkeyedWrites: backend.ledger.capabilities.durability === "volatile" });
    const key = await unknownRow(dispatcher, 1);
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    const out = await reconcile(key, -10 * 60_000, "--grace", "1s");
    expect(out.code, out.stderr).toBe(0);
    expect(JSON.parse(out.stdout)).toMatchObject({ settled: true, row: { state: "released" }, report: { verdict: "not_performed", settled: "released" } });
    expect(await dispatcher.dispatch(call, turn(1))).toMatchObject({ replayed: false, result: { invoiceId: "inv_1" } });
    expect(effects).toEqual(["invoice 40"]);
  });
});
