#!/usr/bin/env node
/**
 * node dist/cli.js --port N [--host H] [--require-key] [--sqlite PATH] [--latency-ms N]
 *                  [--retention-ms N] [--seed N --p-fail P --p-drop P --p-crash P]
 *
 * Prints one line `mock-payments listening on <url>` when ready. A crash_after_accept fault
 * exits the process with code 70 (EX_SOFTWARE) right after the effect is committed.
 */
import { parseArgs } from "node:util";
import { startMockPayments, type MockPaymentsOptions } from "./server.js";
import type { FaultPlan } from "./schemas.js";

export const CRASH_EXIT_CODE = 70;

const USAGE =
  "usage: mock-payments --port N [--host H] [--require-key] [--sqlite PATH] [--latency-ms N] [--retention-ms N] [--seed N --p-fail P --p-drop P --p-crash P]";

function fail(message: string): never {
  process.stderr.write(`mock-payments: ${message}\n${USAGE}\n`);
  process.exit(2);
}

function integer(name: string, value: string | undefined, min: number, max: number): number | undefined {
  if (value === undefined) return undefined;
  if (!/^\d+$/.test(value)) fail(`--${name} must be an integer, got ${JSON.stringify(value)}`);
  const n = Number(value);
  if (n < min || n > max) fail(`--${name} must be between ${min} and ${max}`);
  return n;
}

function probability(name: string, value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (value.trim() === "" || !Number.isFinite(n) || n < 0 || n > 1) fail(`--${name} must be a number between 0 and 1`);
  return n;
}

async function main(): Promise<void> {
  let values;
  try {
    ({ values } = parseArgs({
      args: process.argv.slice(2).filter((a) => a !== "--"),
      options: {
        port: { type: "string" },
        host: { type: "string" },
        "require-key": { type: "boolean" },
        sqlite: { type: "string" },
        "latency-ms": { type: "string" },
        "retention-ms": { type: "string" },
        seed: { type: "string" },
        "p-fail": { type: "string" },
        "p-drop": { type: "string" },
        "p-crash": { type: "string" },
        help: { type: "boolean", short: "h" },
      },
      strict: true,
    }));
  } catch (error) {
    fail((error as Error).message);
  }
  if (values.help === true) {
    process.stdout.write(`${USAGE}\n`);
    return;
  }
  const options: MockPaymentsOptions = {
    port: integer("port", values.port, 0, 65535) ?? 4010,
    host: values.host ?? "127.0.0.1",
    requireIdempotencyKey: values["require-key"] === true,
    onCrash: () => {
      process.stderr.write("mock-payments: crash_after_accept: exiting\n");
      process.exit(CRASH_EXIT_CODE);
    },
  };
  if (values.sqlite !== undefined) options.storage = { kind: "sqlite", path: values.sqlite };
  const latencyMs = integer("latency-ms", values["latency-ms"], 0, 600_000);
  if (latencyMs !== undefined) options.latencyMs = latencyMs;
  const retentionMs = integer("retention-ms", values["retention-ms"], 1, Number.MAX_SAFE_INTEGER);
  if (retentionMs !== undefined) options.retentionMs = retentionMs;
  const seed = integer("seed", values.seed, 0, 0xffffffff);
  const pFail = probability("p-fail", values["p-fail"]);
  const pDrop = probability("p-drop", values["p-drop"]);
  const pCrash = probability("p-crash", values["p-crash"]);
  if (seed === undefined && (pFail ?? pDrop ?? pCrash) !== undefined) fail("--p-fail/--p-drop/--p-crash need --seed");
  if (seed !== undefined) {
    const plan: FaultPlan = { seed, probabilities: {} };
    if (pFail !== undefined) plan.probabilities!.fail_before_accept = pFail;
    if (pDrop !== undefined) plan.probabilities!.drop_after_accept = pDrop;
    if (pCrash !== undefined) plan.probabilities!.crash_after_accept = pCrash;
    options.faultPlan = plan;
  }

  let server;
  try {
    server = await startMockPayments(options);
  } catch (error) {
    process.stderr.write(`mock-payments: cannot start: ${(error as Error).message}\n`);
    process.exit(1);
  }
  process.stdout.write(`mock-payments listening on ${server.url}\n`);
  const shutdown = () => {
    void server.close().then(() => process.exit(0));
  };
  process.once("SIGINT", shutdown);
  process.once("SIGTERM", shutdown);
}

void main();
