// One delivery of a queued message: `node dist/worker.js <conversationId> <messageId> <text>`.
// A queue consumer would call handle() per delivery; a process per delivery makes "the worker
// restarted in between" literal. Prints one JSON line: what the user is told.
import { openApp } from "./app.js";

const [conversationId, messageId, text] = process.argv.slice(2);
if (conversationId === undefined || messageId === undefined || text === undefined) {
  console.error("usage: worker <conversationId> <messageId> <text>");
  process.exit(2);
}
const app = await openApp({
  databaseUrl: process.env.APP_DATABASE_URL ?? process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test",
  schema: process.env.APP_SCHEMA ?? "app_trial",
  openaiBaseURL: process.env.OPENAI_BASE_URL ?? "http://127.0.0.1:4030/v1",
  owner: `worker-${process.pid}`,
  ...(process.env.APP_REDIS_PREFIX ? { redis: { url: process.env.REDIS_URL ?? "redis://127.0.0.1:6379", prefix: process.env.APP_REDIS_PREFIX } } : {}),
});
try {
  const reply = await app.handle(conversationId, messageId, text);
  console.log(JSON.stringify(reply));
} finally {
  await app.close().catch((e: unknown) => console.warn("close:", (e as Error).message));
}
