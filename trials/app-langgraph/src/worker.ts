// One process of the app: runs a message on a thread (or resumes the thread), prints what the user is told.
// Used by the SIGKILL situation: the scenario kills it after the payment and starts another.
import { openApp, tellError, type Plant, type Told } from "./app.js";

const env = (name: string) => {
  const value = process.env[name];
  if (value === undefined) throw new Error(`${name} is not set`);
  return value;
};

const app = await openApp({
  databaseUrl: env("DATABASE_URL"),
  schema: env("TRIAL_SCHEMA"),
  paymentsUrl: env("PAYMENTS_URL"),
  providerUrl: env("PROVIDER_URL"),
  plant: (process.env.PLANT ?? "none") as Plant,
  owner: `worker-${process.pid}`,
  durability: (process.env.DURABILITY ?? "async") as "async" | "sync" | "exit",
  // CORE_LEASES=1: core's default lease and wait (30 s, 10 s); otherwise the trial's 3 s and 8 s.
  ...(process.env.CORE_LEASES === "1" ? {} : { leaseMs: 3_000, waitMs: 8_000 }),
  threadLeaseMs: 3_000, // the thread lock: a stopped holder loses it after 3 s; a sender waits up to 20 s
  threadWaitMs: 20_000,
});
const config = { configurable: { thread_id: env("THREAD") } };
let told: Told[] = [];
let answeredBefore = false;
let error: { status: string; text: string } | undefined;
try {
  // After a restart the client sends its message again, under the same message id.
  const result = await app.send(env("THREAD"), env("MESSAGE_ID"), env("TEXT"));
  told = result.told;
  answeredBefore = result.answeredBefore;
} catch (e) {
  error = tellError(e);
}
const snapshot = await app.graph.getState(config);
process.stdout.write(`${JSON.stringify({ told, error, answeredBefore, next: snapshot.next })}\n`);
await app.close();
