// One process of the app: sends one message on a thread (MODE=send) or approves a pending one (MODE=approve),
// and prints what the user is told. Used by the SIGKILL and the approval situations.
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
  modelUrl: env("MODEL_URL"),
  plant: (process.env.PLANT ?? "none") as Plant,
  turns: (process.env.TURNS ?? "per-message") as Turns,
  owner: `worker-${process.pid}`,
  leaseMs: 3_000,
  waitMs: 8_000,
  approvals: process.env.APPROVALS === "1",
});
const result = process.env.MODE === "approve" ? await app.approve(env("THREAD"), env("MESSAGE_ID")) : await app.send(env("THREAD"), env("MESSAGE_ID"), env("TEXT"));
process.stdout.write(`${JSON.stringify({ told: result.told, answeredBefore: result.answeredBefore, attempts: result.attempts, pending: result.pending ?? false, error: result.error === undefined ? undefined : String(result.error) })}\n`);
await app.close();
