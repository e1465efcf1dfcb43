// The app a product team would write, compiled twice: as main.mts (ESM) and main.cts (CJS).
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { z } from "zod";
import { Dispatcher, defineTool, type DispatchOutcome } from "@dispatch-once/core";
import { createSqliteLedger } from "@dispatch-once/ledger-sqlite";
import { ConversationRunner, type RunnerEvent } from "@dispatch-once/anthropic";
import { startMockPayments } from "@dispatch-once/mock-payments";
import { startMockProvider } from "@dispatch-once/mock-provider";
import * as conversationSqlite from "@dispatch-once/conversation-sqlite";
import * as conversationPostgres from "@dispatch-once/conversation-postgres";
import { PostgresThreadLocks } from "@dispatch-once/thread-lock-postgres";
import * as ledgerPostgres from "@dispatch-once/ledger-postgres";
import * as ledgerRedis from "@dispatch-once/ledger-redis";
import * as conformance from "@dispatch-once/conformance";
import * as conformanceE2e from "@dispatch-once/conformance-e2e";
import * as openaiSide from "@dispatch-once/openai";
import * as telemetry from "@dispatch-once/opentelemetry";
import * as mockOpenai from "@dispatch-once/mock-openai";
import * as mcp from "@dispatch-once/mcp";

/** A UI's view of the runner's events: typed from the installed .d.ts only. */
export function describeEvent(event: RunnerEvent): string {
  return `${event.type} (attempt ${event.attempt})`;
}

async function main(): Promise<void> {
  const payments = await startMockPayments({ requireIdempotencyKey: true });
  try {
    const sendPayment = defineTool({
      name: "send_payment",
      effect: "keyed_write",
      input: z.object({ payee: z.string(), amount: z.number().int(), currency: z.string(), reference: z.string() }),
      async run(args, { idempotencyKey }) {
        const res = await fetch(`${payments.url}/v1/payments`, {
          method: "POST",
          headers: { "content-type": "application/json", authorization: "Bearer acct_pack", "idempotency-key": idempotencyKey },
          body: JSON.stringify(args),
        });
        if (res.status !== 201) throw new Error(`payments answered ${res.status}`);
        return (await res.json()) as { id: string };
      },
    });
    const dir = mkdtempSync(join(tmpdir(), "dispatch-once-pack-app-"));
    const ledger = createSqliteLedger(join(dir, "ledger.db"));
    const dispatcher = new Dispatcher({ tools: [sendPayment], ledger });
    const call = { name: "send_payment", input: { payee: "acme", amount: 1250, currency: "EUR", reference: "INV-1" } };
    const first: DispatchOutcome = await dispatcher.turn({ conversationId: "conv-pack", turnIndex: 0 }).dispatch(call);
    // The replayed attempt of the same turn: the ledger answers, the tool does not run again.
    const again: DispatchOutcome = await dispatcher.turn({ conversationId: "conv-pack", turnIndex: 0 }).dispatch(call);
    const effects = payments.effects();
    const loaded = [
      typeof ConversationRunner,
      typeof startMockProvider,
      Object.keys(conversationSqlite).length > 0,
      Object.keys(conversationPostgres).length > 0,
      Object.keys(ledgerPostgres).length > 0,
      Object.keys(ledgerRedis).length > 0,
      Object.keys(conformance).length > 0,
      typeof conformanceE2e.endToEndLevel.checks === "function",
      Object.keys(openaiSide).length > 0,
      Object.keys(telemetry).length > 0,
      Object.keys(mockOpenai).length > 0,
      typeof mcp.McpToolGuard,
      typeof PostgresThreadLocks,
    ];
    const ok =
      effects.length === 1 &&
      first.replayed === false &&
      again.replayed === true &&
      first.resultJson === again.resultJson &&
      loaded.every((x) => x === "function" || x === true);
    console.log(JSON.stringify({ ok, effects: effects.length, key: first.key, replayed: again.replayed, loaded }));
    await ledger.close();
    rmSync(dir, { recursive: true, force: true });
    if (!ok) process.exitCode = 1;
  } finally {
    await payments.close();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
