// @ts-check
/**
 * The adoption test: pack every published package with pnpm, install the tarballs with npm into
 * a fresh project OUTSIDE the workspace (a temp dir), type-check a small app under strict with
 * only the runtime dependencies a user would list, and run it as ESM and as CJS.
 *
 * Never skips: any failing step exits non-zero with the step's output.
 * Speed: npm's cache is reused (--prefer-offline); better-sqlite3's native addon is not compiled
 * again (npm install --ignore-scripts, then the addon built for the same version and Node by the
 * workspace install is copied in; a version mismatch fails loudly).
 */
import { execFileSync } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, "../..");
const PUBLISHED = [
  "packages/core",
  "packages/cli",
  "packages/runner",
  "packages/anthropic",
  "packages/conversation-postgres",
  "packages/thread-lock-postgres",
  "packages/langgraph",
  "packages/conversation-sqlite",
  "packages/ledger-postgres",
  "packages/ledger-redis",
  "packages/ledger-sqlite",
  "apps/mock-payments",
  "apps/mock-provider",
  "apps/mock-openai",
  "packages/openai",
  "packages/opentelemetry",
  "packages/mcp",
  "packages/ai-sdk",
  "conformance",
  "conformance-e2e",
];
// What a user's project lists besides our packages: the SDK, zod and the driver it uses.
// ioredis is listed as a user lists their driver, at the version the workspace tests: left to the
// ledger's peer range, npm installs the newest 6.x, and ioredis 6.1.0's own .d.ts fails this app's
// skipLibCheck: false (TS7016: redis-errors has no types; 6.0.0's declarations do not reach it).
const USER_DEPENDENCIES = { "@anthropic-ai/sdk": "1.14.0", openai: "6.49.0", "@opentelemetry/api": "1.9.1", "@modelcontextprotocol/sdk": "1.32.2", ai: "6.0.325", "@langchain/langgraph": "1.7.3", "@langchain/core": "1.4.0", zod: "4.6.7", "better-sqlite3": "12.11.1", ioredis: "6.0.0" };
const USER_DEV_DEPENDENCIES = { typescript: "5.9.3", "@types/node": "20.19.43" };

const started = Date.now();
const step = (what) => console.log(`[pack-install] ${((Date.now() - started) / 1000).toFixed(1)}s ${what}`);

/** Run a command; on failure print everything it said and exit non-zero. */
function run(cmd, args, cwd, env = {}) {
  try {
    return execFileSync(cmd, args, { cwd, env: { ...process.env, ...env }, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"], maxBuffer: 64 << 20 });
  } catch (error) {
    const e = /** @type {{ stdout?: string, stderr?: string, message: string }} */ (error);
    console.error(`[pack-install] FAILED: ${cmd} ${args.join(" ")} (in ${cwd})\n${e.stdout ?? ""}\n${e.stderr ?? ""}\n${e.message}`);
    process.exit(1);
  }
}

const work = mkdtempSync(join(tmpdir(), "dispatch-once-pack-"));
if (resolve(work).startsWith(root)) throw new Error(`temp dir ${work} is inside the workspace`);
const tarballs = join(work, "tarballs");
const app = join(work, "app");
mkdirSync(tarballs);
mkdirSync(app);

step(`packing ${PUBLISHED.length} packages into ${tarballs}`);
/** @type {Record<string, string>} */
const ours = {};
/** @type {Record<string, string>} */
const tarballOf = {};
for (const dir of PUBLISHED) {
  const pkg = JSON.parse(readFileSync(join(root, dir, "package.json"), "utf8"));
  for (const file of ["LICENSE", "README.md"]) {
    if (!existsSync(join(root, dir, file))) throw new Error(`${dir} has no ${file}`);
  }
  const before = new Set(readdirSync(tarballs));
  run("pnpm", ["pack", "--pack-destination", tarballs], join(root, dir));
  const made = readdirSync(tarballs).filter((f) => !before.has(f));
  if (made.length !== 1) throw new Error(`pnpm pack in ${dir} made ${made.length} tarballs`);
  ours[pkg.name] = `file:${join(tarballs, made[0])}`;
  tarballOf[pkg.name] = join(tarballs, made[0]);
}

writeFileSync(
  join(app, "package.json"),
  JSON.stringify({ name: "pack-install-app", private: true, version: "1.0.0", dependencies: { ...ours, ...USER_DEPENDENCIES }, devDependencies: USER_DEV_DEPENDENCIES }, null, 2),
);
// No install script runs: the native addon is copied below instead of compiled (speed).
step("npm install (tarballs + runtime dependencies)");
run("npm", ["install", "--prefer-offline", "--no-audit", "--no-fund", "--ignore-scripts", "--loglevel=error"], app);

const workspaceRequire = createRequire(join(root, "packages/ledger-sqlite/package.json"));
const builtSqlite = dirname(workspaceRequire.resolve("better-sqlite3/package.json"));
const appSqlite = join(app, "node_modules/better-sqlite3");
const versionOf = (dir) => JSON.parse(readFileSync(join(dir, "package.json"), "utf8")).version;
if (versionOf(builtSqlite) !== versionOf(appSqlite)) {
  throw new Error(`better-sqlite3 ${versionOf(appSqlite)} installed but the workspace built ${versionOf(builtSqlite)}`);
}
mkdirSync(join(appSqlite, "build/Release"), { recursive: true });
copyFileSync(join(builtSqlite, "build/Release/better_sqlite3.node"), join(appSqlite, "build/Release/better_sqlite3.node"));

// Exactly one copy of core, whatever depends on it.
const cores = run("npm", ["ls", "@dispatch-once/core", "--all", "--parseable"], app).trim().split("\n").filter(Boolean);
if (new Set(cores).size !== 1) throw new Error(`expected one installed @dispatch-once/core, found:\n${cores.join("\n")}`);

step("type-check and compile the app (strict, ESM and CJS)");
const source = readFileSync(join(here, "app/main.ts"), "utf8");
writeFileSync(join(app, "main.mts"), source);
writeFileSync(join(app, "main.cts"), source);
writeFileSync(
  join(app, "tsconfig.json"),
  JSON.stringify({
    compilerOptions: {
      strict: true,
      exactOptionalPropertyTypes: true,
      noUncheckedIndexedAccess: true,
      skipLibCheck: false,
      module: "nodenext",
      moduleResolution: "nodenext",
      target: "es2022",
      types: ["node"],
      outDir: "out",
    },
    files: ["main.mts", "main.cts"],
  }),
);
run(join(app, "node_modules/.bin/tsc"), ["-p", "tsconfig.json"], app);

for (const entry of ["out/main.mjs", "out/main.cjs"]) {
  step(`run ${entry}`);
  const out = run(process.execPath, [entry], app);
  const line = out.trim().split("\n").pop() ?? "";
  const result = JSON.parse(line);
  if (result.ok !== true || result.effects !== 1) throw new Error(`${entry} did not show exactly one effect: ${line}`);
  console.log(`[pack-install]   ${line}`);
}

// @dispatch-once/ai-sdk is loaded, not type-checked by the strict app: ai 6's own .d.ts fails
// exactOptionalPropertyTypes with skipLibCheck off (TS2344 in ai/dist/index.d.ts), which no
// package of ours can fix. Its ESM and CJS builds must still load from the installed tarball.
step("@dispatch-once/ai-sdk loads as ESM and CJS");
for (const [flag, code] of [
  ["--input-type=module", 'const m = await import("@dispatch-once/ai-sdk"); if (typeof m.createOnceTools !== "function") process.exit(1);'],
  ["--input-type=commonjs", 'const m = require("@dispatch-once/ai-sdk"); if (typeof m.createOnceTools !== "function") process.exit(1);'],
]) {
  run(process.execPath, [flag, "-e", code], app);
}

// @dispatch-once/langgraph likewise: @langchain/core 1.4's and @langchain/langgraph 1.7's own .d.ts fail
// exactOptionalPropertyTypes with skipLibCheck off (TS2420 in @langchain/core/dist/messages/ai.d.ts), so
// the strict app does not import it. Its ESM and CJS builds load, and as ESM its tools node runs a graph.
step("@dispatch-once/langgraph loads as ESM and CJS; its tools node pays two identical calls twice in a LangGraph graph");
const langgraphRun = `
import { z } from "zod";
import { AIMessage, HumanMessage, ToolMessage } from "@langchain/core/messages";
import { Annotation, END, MemorySaver, MessagesAnnotation, START, StateGraph } from "@langchain/langgraph";
import { Dispatcher, MemoryLedger, defineTool } from "@dispatch-once/core";
import { commitAssistantMessage, createOnceToolsNode, onceRetryOn, onceTurns } from "@dispatch-once/langgraph";
const paid = new Map();
const pay = defineTool({ name: "pay", effect: "keyed_write", input: z.object({ amount: z.number() }), async run(args, { idempotencyKey }) { if (!paid.has(idempotencyKey)) paid.set(idempotencyKey, args.amount); return { ok: true }; } });
const State = Annotation.Root({ ...MessagesAnnotation.spec, onceTurns });
const answer = (messages) => ToolMessage.isInstance(messages.at(-1))
  ? new AIMessage({ content: "done", additional_kwargs: { stop_reason: "end_turn" } })
  : new AIMessage({ content: "", tool_calls: [{ id: "c1", name: "pay", args: { amount: 5 } }, { id: "c2", name: "pay", args: { amount: 5 } }], additional_kwargs: { stop_reason: "tool_use" } });
const graph = new StateGraph(State)
  .addNode("agent", async (s) => commitAssistantMessage(s, answer(s.messages)), { retryPolicy: { retryOn: onceRetryOn } })
  .addNode("tools", createOnceToolsNode({ dispatcher: new Dispatcher({ tools: [pay], ledger: new MemoryLedger() }) }))
  .addEdge(START, "agent").addConditionalEdges("agent", (s) => (s.messages.at(-1).tool_calls?.length ? "tools" : END), ["tools", END]).addEdge("tools", "agent")
  .compile({ checkpointer: new MemorySaver() });
const state = await graph.invoke({ messages: [new HumanMessage("pay 5 twice")] }, { configurable: { thread_id: "t1" } });
if (paid.size !== 2 || state.onceTurns !== 2) { console.error(paid.size, state.onceTurns); process.exit(1); }`;
for (const [flag, code] of [
  ["--input-type=module", langgraphRun],
  ["--input-type=commonjs", 'const m = require("@dispatch-once/langgraph"); if (typeof m.createOnceToolsNode !== "function" || typeof m.onceTurns !== "object") process.exit(1);'],
]) {
  run(process.execPath, [flag, "-e", code], app);
}

step("the mocks' bin entries run outside the monorepo");
for (const bin of ["dispatch-once-mock-payments", "dispatch-once-mock-provider", "dispatch-once-mock-openai"]) {
  const help = run(join(app, "node_modules/.bin", bin), ["--help"], app);
  if (!/port/.test(help)) throw new Error(`${bin} --help printed no usage:\n${help}`);
}

step("the operator CLI's bin lists the SQLite ledger the installed adapter opens");
const ledgerFile = join(app, "cli-ledger.db");
run(process.execPath, ["--input-type=module", "-e", `import { createSqliteLedger } from "@dispatch-once/ledger-sqlite"; await createSqliteLedger(${JSON.stringify(ledgerFile)}).close();`], app);
const listed = run(join(app, "node_modules/.bin", "dispatch-once"), ["list", "--ledger", ledgerFile, "--json"], app);
if (listed !== "") throw new Error(`dispatch-once list on an empty ledger printed:\n${listed}`);

step("the conformance CLI loads the end-to-end level from the installed @dispatch-once/conformance-e2e");
writeFileSync(join(app, "subject.mjs"), 'import { memoryLedgerSubject } from "@dispatch-once/conformance/ledger";\nexport default memoryLedgerSubject("ledger-memory");\n');
const e2e = JSON.parse(run(join(app, "node_modules/.bin/dispatch-once-conformance"), ["--adapter", "subject.mjs", "--level", "e2e", "--e2e-runs", "2", "--seed", "1", "--json", "--quiet"], app));
if (e2e.conforms !== true || JSON.stringify(e2e.levels) !== '["e2e"]') throw new Error(`--level e2e did not certify the memory ledger: ${JSON.stringify(e2e).slice(0, 400)}`);

// An adapter author who wants the ledger checks installs @dispatch-once/conformance (and core, its
// peer) and nothing of the end-to-end level: no mocks, no express, no better-sqlite3, no SDK.
step("the ledger-level kit alone: installs without the mocks, and --level e2e says what to install");
const ledgerOnly = join(work, "ledger-only");
mkdirSync(ledgerOnly);
writeFileSync(
  join(ledgerOnly, "package.json"),
  JSON.stringify({ name: "ledger-adapter", private: true, version: "1.0.0", devDependencies: { "@dispatch-once/conformance": ours["@dispatch-once/conformance"], "@dispatch-once/core": ours["@dispatch-once/core"] } }, null, 2),
);
run("npm", ["install", "--prefer-offline", "--no-audit", "--no-fund", "--ignore-scripts", "--loglevel=error"], ledgerOnly);
step("npm ls");
const installed = run("npm", ["ls", "--all", "--parseable"], ledgerOnly).trim().split("\n").map((p) => p.slice(ledgerOnly.length + 1)).filter(Boolean);
// The kit, core with what core itself needs (its peers, which npm installs), fast-check with its one dependency.
const corePackage = JSON.parse(readFileSync(join(root, "packages/core/package.json"), "utf8"));
const expected = [
  "@dispatch-once/conformance",
  "@dispatch-once/core",
  ...Object.keys({ ...corePackage.dependencies, ...corePackage.peerDependencies }),
  "fast-check",
  "pure-rand",
].map((name) => `node_modules/${name}`);
const unexpected = installed.filter((p) => !expected.includes(p));
if (unexpected.length > 0) throw new Error(`installing @dispatch-once/conformance pulled in more than core and fast-check:\n${unexpected.join("\n")}`);
for (const absent of ["express", "better-sqlite3", "@anthropic-ai/sdk", "@dispatch-once/mock-payments", "@dispatch-once/mock-provider", "@dispatch-once/anthropic"]) {
  if (existsSync(join(ledgerOnly, "node_modules", absent))) throw new Error(`installing @dispatch-once/conformance installed ${absent}`);
}
writeFileSync(join(ledgerOnly, "subject.mjs"), 'import { memoryLedgerSubject } from "@dispatch-once/conformance/ledger";\nexport default memoryLedgerSubject("ledger-memory");\n');
const cliPath = join(ledgerOnly, "node_modules/.bin/dispatch-once-conformance");
/** The CLI's status and output, whatever the status. */
function cli(args) {
  try {
    return { code: 0, stdout: execFileSync(cliPath, args, { cwd: ledgerOnly, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] }), stderr: "" };
  } catch (error) {
    const e = /** @type {{ status: number, stdout: string, stderr: string }} */ (error);
    return { code: e.status, stdout: e.stdout, stderr: e.stderr };
  }
}
step("the CLI without the e2e package");
for (const level of ["e2e", "all"]) {
  const missing = cli(["--adapter", "subject.mjs", "--level", level]);
  if (missing.code !== 2 || !missing.stderr.includes("npm i -D @dispatch-once/conformance-e2e")) {
    throw new Error(`--level ${level} without @dispatch-once/conformance-e2e: expected exit 2 and what to install, got ${missing.code}:\n${missing.stderr}${missing.stdout}`);
  }
}
step("the CLI at the ledger level");
const ledger = cli(["--adapter", "subject.mjs", "--only", "LEDGER-1", "--json", "--quiet"]);
const report = ledger.code === 0 ? JSON.parse(ledger.stdout) : undefined;
if (report?.conforms !== true || JSON.stringify(report.levels) !== '["ledger"]') throw new Error(`the ledger level alone did not run: ${ledger.code}\n${ledger.stderr}${ledger.stdout.slice(0, 400)}`);
console.log(`[pack-install]   ${installed.length} packages installed for the ledger level; --level e2e exits 2 naming @dispatch-once/conformance-e2e`);

step("removing the temp dir");
rmSync(work, { recursive: true, force: true });
step("passed");
