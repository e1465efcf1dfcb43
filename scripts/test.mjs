#!/usr/bin/env node
// `pnpm test`: builds every package (turbo, cached), then runs each workspace package's `test`
// script, the longest first, a few at a time.
//
// Why not `turbo run test`: turbo starts tasks in the order they become ready, so the quick
// builds and the long suites queue in one first-in, first-out line, and the suite that ends the
// run (the fault suite, which mostly waits on timers and leases) got a slot only minutes in and
// ran alone at the end. With every build done first and the longest suites started first, the
// slots stay full to the end (scripts/test-durations.json holds the measured lengths).
//
// Output is turbo's: each line prefixed with `<package>:test: `, and at the end a
// ` Failed:    <package>#test, ...` line, which .ci/failures reads. Every package's suite runs
// even when one fails (turbo's --continue); the exit code is 1 when any failed.
//
// Options: --concurrency=N (default 3: two cores, and much of the suites waits on PostgreSQL,
// Redis, timers and child processes); --filter=NAME (repeatable; a package's name, or a
// substring of it); --no-build.
import { spawn, spawnSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { createInterface } from "node:readline";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");

const args = process.argv.slice(2);
let concurrency = 3;
let build = true;
const filters = [];
for (const arg of args) {
  if (arg.startsWith("--concurrency=")) concurrency = Number(arg.slice("--concurrency=".length));
  else if (arg.startsWith("--filter=")) filters.push(arg.slice("--filter=".length));
  else if (arg === "--no-build") build = false;
  else {
    console.error(`scripts/test.mjs: unknown argument ${JSON.stringify(arg)} (known: --concurrency=N, --filter=NAME, --no-build)`);
    process.exit(2);
  }
}
if (!Number.isInteger(concurrency) || concurrency < 1) {
  console.error(`scripts/test.mjs: --concurrency must be a positive integer, got ${JSON.stringify(concurrency)}`);
  process.exit(2);
}

/** The workspace's packages with a `test` script, from pnpm-workspace.yaml's globs (one level, or an exact directory). */
function workspacePackages() {
  const yaml = readFileSync(join(root, "pnpm-workspace.yaml"), "utf8");
  const globs = [];
  let inPackages = false;
  for (const line of yaml.split("\n")) {
    if (/^packages:\s*$/.test(line)) inPackages = true;
    else if (/^\S/.test(line)) inPackages = false;
    else if (inPackages) {
      const m = /^\s*-\s*["']?([^"'#\s]+)["']?/.exec(line);
      if (m) globs.push(m[1]);
    }
  }
  const dirs = [];
  for (const glob of globs) {
    if (glob.endsWith("/*")) {
      const base = join(root, glob.slice(0, -2));
      if (!existsSync(base)) continue;
      const listed = spawnSync("ls", ["-1", base], { encoding: "utf8" }).stdout.split("\n").filter(Boolean);
      for (const name of listed) dirs.push(join(base, name));
    } else if (!glob.includes("*")) {
      dirs.push(join(root, glob));
    } else {
      throw new Error(`scripts/test.mjs: pnpm-workspace.yaml glob ${glob} is not one this script reads (dir/* or dir)`);
    }
  }
  const packages = [];
  for (const dir of dirs) {
    const file = join(dir, "package.json");
    if (!existsSync(file)) continue;
    const pkg = JSON.parse(readFileSync(file, "utf8"));
    if (pkg.scripts?.test) packages.push({ name: pkg.name, dir });
  }
  return packages;
}

const durations = JSON.parse(readFileSync(join(root, "scripts/test-durations.json"), "utf8")).seconds;
// A package not measured yet goes in the middle of the line: new suites are rarely the longest.
const unmeasured = 60;

let packages = workspacePackages();
if (filters.length > 0) {
  packages = packages.filter((p) => filters.some((f) => p.name === f || p.name.includes(f)));
  if (packages.length === 0) {
    console.error(`scripts/test.mjs: no package with a test script matches ${filters.join(", ")}`);
    process.exit(2);
  }
}
packages.sort((a, b) => (durations[b.name] ?? unmeasured) - (durations[a.name] ?? unmeasured) || a.name.localeCompare(b.name));

const started = Date.now();
if (build) {
  // Every build first (turbo's cache makes a built tree cost seconds); its output as turbo gives it.
  const filterArgs = filters.length > 0 ? packages.map((p) => `--filter=${p.name}...`) : [];
  const built = spawnSync("pnpm", ["exec", "turbo", "run", "build", ...filterArgs], { cwd: root, stdio: "inherit" });
  if (built.status !== 0) {
    console.error(`scripts/test.mjs: the build failed (exit ${built.status ?? built.signal}); no test ran`);
    process.exit(built.status ?? 1);
  }
}

const failed = [];
const finished = [];
const running = new Set();
// Stopped (CI's timeout, ^C): stop the suites too, rather than leave them running unowned.
for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"]) {
  process.on(signal, () => {
    for (const child of running) {
      try {
        process.kill(-child.pid, "SIGTERM");
      } catch {
        // Already gone.
      }
    }
    process.exit(signal === "SIGINT" ? 130 : 143);
  });
}

function runOne(pkg) {
  return new Promise((resolveRun) => {
    const prefix = `${pkg.name}:test: `;
    const t0 = Date.now();
    console.log(`${prefix}started (${relative(root, pkg.dir)}; measured ${durations[pkg.name] ?? "?"} s)`);
    // bash's `times` gives the CPU of the suite and every process it started (its second line),
    // on fd 3, so that the suite's CPU is reported beside its wall time.
    const child = spawn("bash", ["-c", 'pnpm run test; status=$?; times >&3; exit $status'], {
      cwd: pkg.dir,
      env: process.env,
      stdio: ["ignore", "pipe", "pipe", "pipe"],
      // Its own process group, so that a stop reaches vitest and its workers, not only bash.
      detached: true,
    });
    running.add(child);
    for (const stream of [child.stdout, child.stderr]) {
      createInterface({ input: stream, crlfDelay: Infinity }).on("line", (line) => process.stdout.write(`${prefix}${line}\n`));
    }
    let times = "";
    child.stdio[3].on("data", (chunk) => (times += chunk));
    child.on("close", (code, signal) => {
      running.delete(child);
      const seconds = Math.round((Date.now() - t0) / 1000);
      const cpu = cpuSeconds(times);
      const ok = code === 0;
      console.log(`${prefix}${ok ? "passed" : `FAILED (exit ${code ?? signal})`} in ${seconds} s${cpu === undefined ? "" : `, CPU ${cpu} s`}`);
      finished.push({ name: pkg.name, seconds, cpu, ok });
      if (!ok) failed.push(pkg.name);
      resolveRun();
    });
  });
}

/** User + system seconds of the children, from the second line of bash's `times` ("0m12.345s 0m1.234s"). */
function cpuSeconds(text) {
  const line = text.trim().split("\n")[1];
  const parts = line?.match(/(\d+)m([\d.]+)s/g);
  if (parts?.length !== 2) return undefined;
  let total = 0;
  for (const part of parts) {
    const [, m, s] = /(\d+)m([\d.]+)s/.exec(part);
    total += Number(m) * 60 + Number(s);
  }
  return Math.round(total);
}

const queue = [...packages];
async function slot() {
  for (let pkg = queue.shift(); pkg !== undefined; pkg = queue.shift()) await runOne(pkg);
}
await Promise.all(Array.from({ length: Math.min(concurrency, queue.length) }, slot));

const total = Math.round((Date.now() - started) / 1000);
console.log("");
console.log(" Wall / CPU (s): " + finished.map((f) => `${f.name.replace(/^@dispatch-once\//, "")} ${f.seconds}/${f.cpu ?? "?"}`).join(", "));
console.log(` Tasks:    ${packages.length - failed.length} successful, ${packages.length} total`);
if (failed.length > 0) console.log(` Failed:    ${failed.map((n) => `${n}#test`).join(", ")}`);
console.log(`  Time:    ${total}s`);
process.exit(failed.length > 0 ? 1 : 0);
