// CPU cost per claim+complete, client side (process.cpuUsage) and server side (/proc/<pid>/stat),
// on a PRIVATE redis-server this script starts on a unix socket (port 0) and stops.
// Explains the throughput ratio: on a loaded machine, throughput follows total CPU per operation.
//   node bench/cpu.mjs
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Redis } from "ioredis";
import { LEDGER_REDIS_OPTIONS, RedisLedger } from "../dist/index.js";
// A typical stored request (LEDGER-21): the JCS text of a payment call's arguments, 55 bytes.
const REQUEST = '{"amount":4200,"currency":"eur","to":"acct_0123456789"}';

const dir = mkdtempSync(join(tmpdir(), "ledger-redis-cpu-"));
const path = join(dir, "redis.sock");
const server = spawn("redis-server", ["--port", "0", "--unixsocket", path, "--save", "", "--appendonly", "no", "--dir", dir], { stdio: "ignore" });
try {
  const admin = new Redis({ path, retryStrategy: (n) => (n > 50 ? null : 100) });
  admin.on("error", () => {}); // the socket appears a moment after spawn
  const pid = (await admin.info("server")).match(/process_id:(\d+)/)[1];
  const serverCpu = () => {
    const f = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ");
    return (Number(f[11]) + Number(f[12])) * 10_000; // clock ticks (100 Hz) -> µs
  };
  const floor = new Redis({ path });
  const ledgerClient = new Redis({ path, ...LEDGER_REDIS_OPTIONS });
  const ledger = new RedisLedger({ client: ledgerClient, prefix: "cpu", retentionMs: 60_000, allowShortRetentionForTests: true });
  const result = '{"payment_id":"pay_0123456789","status":"succeeded","amount":4200,"currency":"eur"}';
  let n = 0;
  const ops = {
    "floor (SET NX + SET XX)": async () => {
      const k = `f{${n++}}`;
      await floor.set(k, "in_flight", "NX");
      await floor.set(k, result, "PX", 60_000, "XX");
    },
    "ledger (claim + complete)": async () => {
      const k = `k${n++}`;
      const c = await ledger.claim({ key: k, toolName: "send_payment", effect: "keyed_write", owner: "bench", leaseMs: 30_000, request: REQUEST });
      await ledger.complete(k, fenceOf(c), result);
    },
  };
  const N = 30_000;
  const ROUNDS = 3;
  const acc = {};
  for (let round = 0; round < ROUNDS; round++) {
    for (const [name, op] of Object.entries(ops)) {
      const c0 = process.cpuUsage();
      const s0 = serverCpu();
      let i = 0;
      await Promise.all(Array.from({ length: 16 }, async () => { while (i++ < N) await op(); }));
      const c = process.cpuUsage(c0);
      acc[name] ??= { clientUs: 0, serverUs: 0 };
      acc[name].clientUs += (c.user + c.system) / N / ROUNDS;
      acc[name].serverUs += (serverCpu() - s0) / N / ROUNDS;
      await admin.flushdb(); // this script's own private server
    }
  }
  for (const [name, v] of Object.entries(acc)) {
    console.log(`${name.padEnd(26)} client ${v.clientUs.toFixed(1).padStart(5)} µs  server ${v.serverUs.toFixed(1).padStart(5)} µs`);
  }
  admin.disconnect();
  floor.disconnect();
  await ledger.close();
  ledgerClient.disconnect();
} finally {
  server.kill("SIGTERM");
  rmSync(dir, { recursive: true, force: true });
}

/** The fence of a fresh claim: every bench key is new, so any other outcome is a bench bug. */
function fenceOf(claim) {
  if (claim.outcome !== "claimed") throw new Error(`expected a fresh claim, got ${claim.outcome}`);
  return claim.fence;
}
