#!/usr/bin/env node
import { parseArgs } from "node:util";
import { parseFaultRule } from "./faults.js";
import type { FaultRule } from "./types.js";
import { startMockProvider } from "./provider.js";
import type { PingMode } from "./render.js";

const USAGE = `usage: mock-provider [--port N] [--host H] [--seed S] [--gap-before-stop-ms N]
                     [--between-events-ms N] [--after-block-stop-ms N] [--first-event-ms N]
                     [--pings standard|none|every_event] [--api-key K] [--fault-rules JSON]

Serves POST /v1/messages (the Anthropic Messages API) with the default directive script, and the
/_control endpoints (requests, faults, timing, holds). Point the SDK at it with baseURL.`;

/** A bad command line: the message and the usage on stderr, exit 2 (as mock-payments). */
function fail(message: string): never {
  process.stderr.write(`mock-provider: ${message}\n${USAGE}\n`);
  process.exit(2);
}

function number(name: string, value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!Number.isFinite(n) || n < 0) fail(`--${name} must be a non-negative number, got ${JSON.stringify(value)}`);
  return n;
}

function faultRules(value: string | undefined): FaultRule[] {
  if (value === undefined || value === "") return [];
  let parsed: unknown;
  try {
    parsed = JSON.parse(value);
  } catch (error) {
    fail(`--fault-rules must be a JSON array of fault rules: ${(error as Error).message}`);
  }
  if (!Array.isArray(parsed)) fail("--fault-rules must be a JSON array of fault rules");
  try {
    return parsed.map(parseFaultRule);
  } catch (error) {
    fail(`--fault-rules: ${(error as Error).message}`);
  }
}

const PINGS: readonly string[] = ["standard", "none", "every_event"] satisfies PingMode[];

async function main(): Promise<void> {
  let parsed;
  try {
    parsed = parseArgs({
      args: process.argv.slice(2).filter((a) => a !== "--"),
      options: {
        port: { type: "string", default: "4020" },
        host: { type: "string", default: "127.0.0.1" },
        seed: { type: "string", default: "0" },
        "gap-before-stop-ms": { type: "string" },
        "between-events-ms": { type: "string" },
        "after-block-stop-ms": { type: "string" },
        "first-event-ms": { type: "string" },
        pings: { type: "string", default: "standard" },
        "api-key": { type: "string" },
        "fault-rules": { type: "string" },
        help: { type: "boolean", short: "h" },
      },
      strict: true,
    });
  } catch (error) {
    fail((error as Error).message);
  }
  const { values } = parsed;
  if (values.help) {
    process.stdout.write(`${USAGE}\n`);
    return;
  }
  const timing = {
    ...(values["gap-before-stop-ms"] !== undefined && { beforeMessageStopMs: number("gap-before-stop-ms", values["gap-before-stop-ms"]) }),
    ...(values["between-events-ms"] !== undefined && { betweenEventsMs: number("between-events-ms", values["between-events-ms"]) }),
    ...(values["after-block-stop-ms"] !== undefined && { afterBlockStopMs: number("after-block-stop-ms", values["after-block-stop-ms"]) }),
    ...(values["first-event-ms"] !== undefined && { firstEventMs: number("first-event-ms", values["first-event-ms"]) }),
  };
  const rules = faultRules(values["fault-rules"]);
  if (!PINGS.includes(values.pings)) fail(`--pings must be standard, none or every_event, got ${JSON.stringify(values.pings)}`);
  const provider = await startMockProvider({
    port: number("port", values.port) ?? 4020,
    host: values.host,
    seed: values.seed,
    timing,
    pings: values.pings as PingMode,
    faultRules: rules,
    // A long-running mock must not grow without bound; tests in-process keep the whole log.
    logLimit: 1000,
    ...(values["api-key"] !== undefined && { apiKey: values["api-key"] }),
  });
  process.stdout.write(`mock-provider listening on ${provider.url} (seed ${values.seed})\n`);
  const stop = () => {
    void provider.close().then(() => process.exit(0));
  };
  process.on("SIGINT", stop);
  process.on("SIGTERM", stop);
}

main().catch((e: unknown) => {
  process.stderr.write(`mock-provider: ${e instanceof Error ? e.message : String(e)}\n`);
  process.exit(1);
});
