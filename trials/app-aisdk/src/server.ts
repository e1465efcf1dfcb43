// The chat backend under trial: one process, node:http, POST /api/chat with the useChat body
// ({ id, messages, trigger, messageId }). Built from packages/ai-sdk/README.md's "A chat route".
// Env: PORT (0), PROVIDER_URL, PAYMENTS_URL, REDIS_URL, LEDGER_PREFIX. Prints "listening <port>".
import { createServer } from "node:http";
import { createAnthropic } from "@ai-sdk/anthropic";
import { ToolError, isDispatchOnceError } from "@dispatch-once/core";
import { createOnceTools, dispatchOnceOf, providerToolsGuard, spliceGuard, boundedFetch } from "@dispatch-once/ai-sdk";
import { createRedisLedger } from "@dispatch-once/ledger-redis";
import { createUIMessageStream, pipeUIMessageStreamToResponse, convertToModelMessages, stepCountIs, streamText, tool, wrapLanguageModel, type UIMessage } from "ai";
import { z } from "zod";

const env = (name: string): string => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};
const paymentsUrl = env("PAYMENTS_URL");

// A client of our own with our options was refused, with a message that says what to do (FRICTION 2):
// the ledger makes its own client from the url.
const ledger = await createRedisLedger({ url: env("REDIS_URL"), prefix: env("LEDGER_PREFIX") });

const model = wrapLanguageModel({
  model: createAnthropic({ baseURL: `${env("PROVIDER_URL")}/v1`, apiKey: "test", fetch: boundedFetch({ idleMs: 20_000 }) })("claude-sonnet-4-5"),
  middleware: [providerToolsGuard(), spliceGuard()],
});

async function pay({ payee, amount }: { payee: string; amount: number }, options: unknown) {
  const key = dispatchOnceOf(options as never)!.idempotencyKey;
  const res = await fetch(`${paymentsUrl}/v1/payments`, {
    method: "POST",
    headers: { authorization: "Bearer acct_trialai", "content-type": "application/json", "idempotency-key": `"${key}"` },
    body: JSON.stringify({ payee, amount, currency: "EUR", reference: "agent" }),
  });
  if (res.status === 422) throw new ToolError("the key holds another payment", { disposition: "request_mismatch" });
  if (res.status >= 400 && res.status < 500 && res.status !== 409 && res.status !== 429) throw new ToolError(`payment refused (${res.status})`, { disposition: "definite" });
  if (!res.ok) throw new ToolError(`payments API ${res.status}`, { disposition: "unknown" });
  return (await res.json()) as { id: string; amount: number; payee: string };
}

/** What the user is told of an error: a Dispatch-Once error's code and message say whether the payment may have happened. */
const describe = (error: unknown): string => (isDispatchOnceError(error) ? `${error.code}: ${error.message}` : error instanceof Error ? error.message : String(error));

const input = z.object({ payee: z.string(), amount: z.number().int() });
const once = createOnceTools({
  tools: {
    send_payment: tool({ description: "Pay a payee", inputSchema: input, execute: pay }),
    send_large_payment: tool({ description: "Pay a payee (needs the user's approval)", inputSchema: input, needsApproval: true, execute: pay }),
  },
  effects: { send_payment: "keyed_write", send_large_payment: "keyed_write" },
  ledger,
  // Short leases so a claim whose holder died is taken over within seconds (core README: leaseMs 30 000 by default).
  // DEFAULT_LEASES=1 keeps core's defaults (leaseMs 30 000, waitMs 10 000).
  dispatcher: process.env.DEFAULT_LEASES === "1" ? {} : { leaseMs: 3_000, waitMs: 8_000 },
});

const server = createServer(async (req, res) => {
  if (req.method !== "POST" || req.url !== "/api/chat") {
    res.writeHead(404).end();
    return;
  }
  let body: { id: string; messages: UIMessage[] };
  try {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    body = JSON.parse(Buffer.concat(chunks).toString("utf8"));
  } catch {
    res.writeHead(400).end();
    return;
  }
  let turn: ReturnType<typeof once.forTurn>;
  try {
    turn = once.forTurn({ conversationId: body.id, messages: body.messages, dispatchAt: "tool-call" });
  } catch (error) {
    res.writeHead(400, { "content-type": "application/json" }).end(JSON.stringify({ error: String(error) }));
    return;
  }
  const stream = createUIMessageStream({
    originalMessages: body.messages,
    execute: async ({ writer }) => {
      const result = streamText({
        model,
        messages: await convertToModelMessages(body.messages),
        tools: turn.tools,
        onChunk: turn.onChunk,
        stopWhen: stepCountIs(5),
      });
      // FRICTION 5: without onError the AI SDK tells the client "An error occurred." for every tool
      // error, so outcome_unknown ("the payment may have happened") reads like "nothing happened".
      writer.merge(result.toUIMessageStream({ sendFinish: false, onError: describe }));
      await result.consumeStream();
      // AISDK-14 / AISDK-12: before the answer is kept or shown, tell the user what the ledger knows.
      try {
        const { calls } = await turn.unansweredCalls();
        if (calls.length > 0) writer.write({ type: "data-unanswered", data: calls.map((c) => ({ name: c.name, effect: c.effect, summary: c.summary, result: c.result, key: c.key })) });
        const denials = await turn.claimedDenials();
        if (denials.length > 0) writer.write({ type: "data-denied-but-done", data: denials.map((d) => ({ toolCallId: d.toolCallId, state: d.row.state, result: d.row.state === "completed" ? d.row.result : undefined })) });
      } catch (error) {
        writer.write({ type: "data-ledger", data: { error: isDispatchOnceError(error) ? error.code : String(error) } });
      }
      writer.write({ type: "finish" });
    },
    onError: describe,
  });
  pipeUIMessageStreamToResponse({ response: res, stream });
});
server.listen(Number(process.env.PORT ?? 0), "127.0.0.1", () => {
  const address = server.address();
  console.log(`listening ${typeof address === "object" && address ? address.port : "?"}`);
});
