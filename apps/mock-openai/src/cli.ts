#!/usr/bin/env node
import { parseArgs } from "node:util";
import { parseFault, startMockOpenAI } from "./provider.js";
import { call, respond, say, scriptFromPlans } from "./script.js";
import type { ChatDialect } from "./types.js";

const USAGE = `usage: dispatch-once-mock-openai [--port N] [--host H] [--seed S] [--before-completed-ms N] [--chat-dialect D] [--fault JSON]

Serves POST /v1/responses (the OpenAI Responses API, streaming and not) with a small plan script
("pay acme" makes a send_payment call, "hello" answers text), and /_control/{requests,faults,reset}.
POST /v1/chat/completions answers in --chat-dialect: openai (default), azure, gemini, vllm,
deepseek, sglang or mistral (a request's x-mock-chat-dialect header overrides it).`;

async function main(): Promise<void> {
  const { values } = parseArgs({
    args: process.argv.slice(2).filter((a) => a !== "--"),
    options: {
      port: { type: "string", default: "4030" },
      host: { type: "string", default: "127.0.0.1" },
      seed: { type: "string", default: "0" },
      "before-completed-ms": { type: "string", default: "0" },
      fault: { type: "string" },
      "chat-dialect": { type: "string", default: "openai" },
      help: { type: "boolean", short: "h" },
    },
    strict: true,
  });
  if (values.help) {
    process.stdout.write(`${USAGE}\n`);
    return;
  }
  const gap = Number(values["before-completed-ms"]);
  if (!Number.isFinite(gap) || gap < 0) throw new Error(`--before-completed-ms must be a non-negative number\n${USAGE}`);
  const provider = await startMockOpenAI({
    port: Number(values.port),
    host: values.host,
    seed: values.seed,
    timing: { beforeCompletedMs: gap },
    chatDialect: values["chat-dialect"] as ChatDialect,
    script: scriptFromPlans({
      "pay acme": respond(call("send_payment", { payee: "acme", amount: 125_000, currency: "EUR", reference: "INV-1042", memo: "Invoice 1042" }, { reword: ["memo"] })),
      hello: say("Hi."),
    }),
  });
  if (values.fault !== undefined) provider.queueFault(parseFault(JSON.parse(values.fault)));
  process.stdout.write(`mock-openai listening on ${provider.url} (seed ${values.seed})\n`);
  const stop = () => void provider.close().then(() => process.exit(0));
  process.on("SIGINT", stop);
  process.on("SIGTERM", stop);
}

main().catch((e: unknown) => {
  process.stderr.write(`mock-openai: ${e instanceof Error ? e.message : String(e)}\n`);
  process.exit(1);
});
