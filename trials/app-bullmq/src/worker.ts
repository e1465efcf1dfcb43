// One worker process: a BullMQ Worker whose processor answers one user message with the runner.
// The job's id is the runner's message id, and the web tier derives it from the client's message id
// (so a redelivered, retried or re-sent job is the same message to the runner: TURN-2).
// A retryable failed turn is thrown, so BullMQ's `attempts` re-run it (the same message id: TURN-12);
// every other reply is the job's return value, which the web tier hands to the client.
import { Worker, UnrecoverableError } from "bullmq";
import { openApp } from "./app.js";

const env = (name: string, fallback: string) => process.env[name] ?? fallback;
const owner = `worker-${process.pid}`;
const app = await openApp({
  databaseUrl: env("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test"),
  schema: env("APP_SCHEMA", "h_trialqueue"),
  redisUrl: env("REDIS_URL", "redis://127.0.0.1:6379"),
  ledgerPrefix: env("LEDGER_PREFIX", "h_trialqueue:ledger"),
  providerURL: env("PROVIDER_URL", "http://127.0.0.1:4000"),
  owner,
  unguarded: process.env.PLANT === "unguarded",
});
const url = new URL(env("REDIS_URL", "redis://127.0.0.1:6379"));
const worker = new Worker<{ conversationId: string; messageId: string; text: string }>(
  env("QUEUE", "h_trialqueue_messages"),
  async (job) => {
    console.error(`[${owner}] job ${job.id} attempt ${job.attemptsMade + 1} (${job.data.conversationId} ${job.data.messageId})`);
    const reply = await app.handle(job.data.conversationId, job.id!, job.data.text);
    console.error(`[${owner}] job ${job.id} ${reply.status}${reply.status === "answered" && reply.fromStore ? " (from store)" : ""}: ${JSON.stringify(reply.text)}`);
    // conversation_busy and the store's failures say "send the same message again": BullMQ does.
    // The thrown reply is what the client is told once the job fails for good (a busy reply: the
    // calls the ledger listed for the message at the last attempt).
    if ((reply.status === "failed" && reply.retryable) || reply.status === "busy" || reply.status === "error" || reply.status === "unsaved") throw new Error(JSON.stringify(reply));
    if (reply.status === "failed") throw new UnrecoverableError(JSON.stringify(reply));
    return reply;
  },
  {
    connection: { host: url.hostname, port: Number(url.port || 6379) },
    prefix: env("BULL_PREFIX", "h_trialqueue_bull"),
    concurrency: 1,
    // Short for the trial: a killed worker's job is stalled after 2 s, checked every second.
    lockDuration: Number(env("LOCK_MS", "2000")),
    stalledInterval: Number(env("STALLED_MS", "1000")),
    maxStalledCount: 2,
  },
);
worker.on("error", (e) => console.error(`[${owner}] worker error: ${e.message}`));
worker.on("failed", (job, e) => console.error(`[${owner}] job ${job?.id} failed: ${e.message.slice(0, 200)}`));
await worker.waitUntilReady();
console.log(`ready ${process.pid}`);
const stop = () => { void worker.close().then(() => app.close()).finally(() => process.exit(0)); };
process.on("SIGTERM", stop).on("SIGINT", stop);
