import { mkdirSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { parseArgs } from "node:util";
import { startMockPayments } from "@dispatch-once/mock-payments";
import { startMockProvider } from "@dispatch-once/mock-provider";
import { createChatApp } from "./app.js";
import { createChatBackend } from "./backend.js";
import { chatModel } from "./model.js";

// `pnpm --filter @dispatch-once/example-chat start [--port 4030] [--db ./var/chat.db]`: the chat
// backend over the mock provider and mock payments, both in this process; faults through their
// control endpoints (printed below).
const { values } = parseArgs({
  options: { port: { type: "string", default: "4030" }, db: { type: "string", default: "./var/chat.db" } },
});
const databasePath = resolve(values.db);
mkdirSync(dirname(databasePath), { recursive: true });
const provider = await startMockProvider({ script: chatModel, timing: { betweenEventsMs: 40, beforeMessageStopMs: 240 } });
const payments = await startMockPayments({ requireIdempotencyKey: true, latencyMs: 300 });
const backend = createChatBackend({ anthropicBaseURL: provider.baseURL, anthropicApiKey: "mock", paymentsURL: payments.url, databasePath });
const server = createChatApp({ backend }).listen(Number(values.port), "127.0.0.1", () => {
  console.log(`chat:          http://127.0.0.1:${values.port}/`);
  console.log(`mock provider: ${provider.baseURL} (faults: POST ${provider.baseURL}/_control/faults)`);
  console.log(`mock payments: ${payments.url} (effect log: GET ${payments.url}/_control/effects)`);
});
const stop = () => {
  server.close();
  void Promise.all([provider.close(), payments.close(), backend.close()]).then(() => process.exit(0));
};
process.once("SIGINT", stop);
process.once("SIGTERM", stop);
