// One process of the app: sends one message on a thread, prints what the user is told.
// Used by the SIGKILL situation: the scenario kills it inside the payment and starts another.
import { openApp, type Plant, type Turns } from "./app.js";

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
  turns: (process.env.TURNS ?? "carry") as Turns,
  owner: `worker-${process.pid}`,
  leaseMs: 3_000,
  waitMs: 8_000,
});
// After a restart the client sends its message again, under the same message id.
const result = await app.send(env("THREAD"), env("MESSAGE_ID"), env("TEXT"));
process.stdout.write(`${JSON.stringify({ told: result.told, answeredBefore: result.answeredBefore, attempts: result.attempts })}\n`);
await app.close();
