#!/usr/bin/env node
// The demo's main job at scale (`pnpm bench --demo-scale[=5000,20000]`): `pnpm demo` run for each
// number of turns, one after the other in this run, each in a process of its own, so the times,
// CPU and peak memory of the targets (20,000 turns in 60 s and 300 MB on 2 cores; 20,000
// turns at most 4.8x the time of 5,000) are read in the same run as the rest of the bench. The
// numbers are the demo's own (`--json`'s `process`: process.resourceUsage() at the end, every
// thread counted), with the run's correctness counts beside them: a fast run that paid twice or
// misreported is not a result. A benchmark: it asserts nothing.
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const CLI = join(root, "apps", "demo", "dist", "cli.js");

/** The numbers of turns run when `--demo-scale` names none. */
export const DEFAULT_DEMO_SCALE_TURNS = [5_000, 20_000];

/**
 * Runs the demo once per entry of `turns` (in order; same seed, SQLite ledger, the demo's
 * defaults otherwise) and reports each run's wall time, CPU, peak RSS and correctness counts,
 * and the wall-time ratio of each run to the first.
 */
export async function benchDemoScale({ turns = DEFAULT_DEMO_SCALE_TURNS, seed = "bench", log = (/** @type {string} */ _message) => {} } = {}) {
  if (!existsSync(CLI)) throw new Error(`${CLI} is missing: build the demo first (pnpm turbo run build --filter=@dispatch-once/demo...)`);
  const runs = [];
  for (const n of turns) {
    log(`running the demo for ${n.toLocaleString("en-US")} turns ...`);
    const result = await runDemo(["--turns", String(n), "--seed", seed, "--json", "--no-progress"]);
    const usage = result.process;
    const routes = result.chaos.routes;
    const sum = (side, field) => routes.reduce((s, r) => s + r[side][field], 0);
    runs.push({
      turns: n,
      wallSeconds: round(usage.wallMs / 1000, 1),
      cpuSeconds: round((usage.cpuUserMs + usage.cpuSystemMs) / 1000, 1),
      cpuMsPerTurn: round((usage.cpuUserMs + usage.cpuSystemMs) / n, 2),
      maxRssKiB: usage.maxRssKiB,
      maxRssMiB: round(usage.maxRssKiB / 1024, 1),
      guarded: {
        duplicates: sum("guarded", "duplicates"),
        misreports: sum("guarded", "misreports"),
        mayHaveHappened: sum("guarded", "mayHaveHappened"),
        posts: result.chaos.guarded.posts,
      },
      naive: { duplicates: sum("naive", "duplicates"), misreports: sum("naive", "misreports") },
    });
  }
  const first = runs[0];
  return { ledger: "sqlite", seed, runs: runs.map((run) => ({ ...run, wallRatioToFirst: round(run.wallSeconds / first.wallSeconds, 2) })) };
}

function runDemo(args) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, ...args], { cwd: root, stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    let err = "";
    child.stdout.setEncoding("utf8").on("data", (c) => (out += c));
    child.stderr.setEncoding("utf8").on("data", (c) => (err += c));
    child.on("error", reject);
    child.on("close", (code) => {
      if (code !== 0) return reject(new Error(`the demo exited with ${code}: ${err.trim().slice(-2000)}`));
      try {
        resolve(JSON.parse(out));
      } catch (error) {
        reject(new Error(`the demo printed no JSON object: ${String(error)}; stderr: ${err.trim().slice(-2000)}`));
      }
    });
  });
}

const round = (n, digits) => Number(n.toFixed(digits));

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const turns = process.argv.slice(2).map(Number);
  const result = await benchDemoScale({ ...(turns.length > 0 ? { turns } : {}), log: (m) => process.stderr.write(`${m}\n`) });
  process.stdout.write(`${JSON.stringify(result, null, 2)}\n`);
}
