#!/usr/bin/env node
// `pnpm bench`: every ledger adapter's benchmark, each beside its store's raw-primitive floor
// measured in the same run, so the table shows the adapter's cost as a ratio to that floor.
// A benchmark, not a test: it asserts nothing and prints numbers.
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const args = process.argv.slice(2);
const json = args.includes("--json");
const durationArg = args.find((a) => a.startsWith("--duration-ms="));
const durationMs = durationArg ? Number(durationArg.split("=")[1]) : 3000;
const only = args.find((a) => a.startsWith("--only="))?.split("=")[1];

const adapters = ["ledger-sqlite", "ledger-postgres", "ledger-redis"].filter((a) => !only || a.includes(only));
const rows = [];
const failures = [];
for (const adapter of adapters) {
  const file = join(root, "packages", adapter, "bench", "bench.mjs");
  if (!existsSync(file)) {
    failures.push({ adapter, error: "no bench/bench.mjs" });
    continue;
  }
  if (!json) process.stderr.write(`benchmarking ${adapter} ...\n`);
  try {
    const mod = await import(pathToFileURL(file).href);
    rows.push(...(await mod.bench({ durationMs })));
  } catch (error) {
    failures.push({ adapter, error: String(error?.stack ?? error) });
  }
}

// Dispatcher CPU per call above a memory ledger (no store, no network: the dispatcher's own cost).
let dispatcherOverhead = null;
try {
  const { benchDispatcherOverhead } = await import("./dispatcher-overhead.mjs");
  dispatcherOverhead = await benchDispatcherOverhead();
} catch (error) {
  failures.push({ adapter: "dispatcher-overhead", error: String(error?.stack ?? error) });
}

if (json) {
  process.stdout.write(`${JSON.stringify({ durationMs, rows, dispatcherOverhead, failures })}\n`);
} else {
  const header = ["adapter", "workload", "conc", "ops/s", "p50 µs", "p99 µs", "floor ops/s", "ratio"];
  const body = rows.map((r) => [
    r.adapter,
    r.workload,
    String(r.concurrency),
    fmt(r.opsPerSec),
    fmt(r.p50us),
    fmt(r.p99us),
    r.floorOpsPerSec == null ? "-" : fmt(r.floorOpsPerSec),
    r.ratio == null ? "-" : `${r.ratio.toFixed(2)}x`,
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...body.map((b) => b[i].length)));
  const line = (cells) => cells.map((c, i) => (i < 2 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join("  ");
  console.log(line(header));
  console.log(widths.map((w) => "-".repeat(w)).join("  "));
  for (const b of body) console.log(line(b));
  if (dispatcherOverhead) {
    const d = dispatcherOverhead;
    console.log(
      `\ndispatcher overhead: ${d.overheadCpuUsPerCall.toFixed(1)} µs CPU per call above the ledger ` +
        `(dispatch ${d.dispatchCpuUsPerCall.toFixed(1)} µs, MemoryLedger claim+complete ${d.ledgerCpuUsPerCall.toFixed(1)} µs, ${d.calls} calls)`,
    );
  }
  for (const f of failures) console.log(`\n${f.adapter}: FAILED\n${f.error}`);
}
process.exitCode = failures.length > 0 ? 1 : 0;

function fmt(n) {
  if (typeof n !== "number" || !Number.isFinite(n)) return "-";
  return n >= 100 ? Math.round(n).toLocaleString("en-US") : n.toFixed(1);
}
