#!/usr/bin/env node
// The blind rounds' sweep (round L, and round M with --round=m): every mutant of a round's
// mutants.json against our harnesses, cheapest first, stopping at the first check that catches it.
// `node faults/blind-l/run.mjs [--round=m] [--first] [L01 L02 ...]`; a round's files are in
// faults/blind-<round>/ (mutants.json, results.json), this script and its plugin in blind-l/.
//
// How a mutant is built, without writing src/: the mutated package's own tests load its source
// through a vite plugin that patches the file as it loads (mutant-plugin.mjs); everything else
// (other packages' tests, faults/ worker processes, conformance-e2e) loads the package from its
// dist, so dist/index.js is replaced for the mutant's run by mutatedEntry's bundle of the patched
// source (@dispatch-once/test-processes) and put back afterwards. A patch that does not occur
// exactly once, or that no test loaded, fails the sweep.
//
// Every catch is confirmed: the failing file fails again on the mutant and passes unmutated, or
// the failure is recorded as one by chance (`flaky`) and the chain goes on.
// --first runs each mutant only against the first catcher results.json recorded for it (the file
// that caught it); --only=TEXT only the catchers whose name contains TEXT (e.g. --only=conformance-e2e).
// Results go to faults/blind-<round>/results.json (merged per mutant). Needs PostgreSQL and Redis as
// the suites do; run it alone (it swaps dist files other runs would load).
import { spawn } from "node:child_process";
import { copyFileSync, cpSync, existsSync, mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { basename, join, relative, resolve } from "node:path";
import { mutatedEntry } from "@dispatch-once/test-processes";
import { createRequire } from "node:module";

const script = import.meta.dirname;
const repo = resolve(script, "../..");
const vitest = join(repo, "node_modules", "vitest", "vitest.mjs");
const args = process.argv.slice(2);
// --round=m: the round whose mutants run (faults/blind-m); round L by default.
const round = args.find((a) => a.startsWith("--round="))?.slice("--round=".length) ?? "l";
if (!/^[a-z]$/.test(round)) throw new Error(`--round takes one letter, got ${JSON.stringify(round)}`);
const here = join(script, "..", `blind-${round}`);
const tmp = join(here, ".tmp");
mkdirSync(tmp, { recursive: true });
const firstOnly = args.includes("--first");
const wanted = new Set(args.filter((a) => !a.startsWith("--")));
// --only=TEXT: run only the catchers whose name contains TEXT (results are then not recorded).
const only = args.find((a) => a.startsWith("--only="))?.slice("--only=".length);
/** @type {{ id: string; pkg: string; file: string; rule: string; area: string; cause: string; find: string; replace: string; chain?: string }[]} */
const mutants = JSON.parse(readFileSync(join(here, "mutants.json"), "utf8"));
const resultsFile = join(here, "results.json");
/** @type {Record<string, { caughtBy: string | null; test?: string; file?: string; escaped?: { harmless: boolean; resolution: string; catcher?: string; file?: string }; runs: { catcher: string; verdict: string; seconds: number }[] }>} */
const results = existsSync(resultsFile) ? JSON.parse(readFileSync(resultsFile, "utf8")) : {};

const env = {
  ...process.env,
  CI: "true",
  npm_config_nodedir: "/usr",
  DATABASE_URL: process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test",
  REDIS_URL: process.env.REDIS_URL ?? "redis://127.0.0.1:6379",
  // The end-to-end profiles at a sweep's size (CI: 200 / 30 / 30); enough to reach the stream cases.
  CONFORMANCE_E2E_REFERENCE_RUNS: process.env.CONFORMANCE_E2E_REFERENCE_RUNS ?? "40",
  CONFORMANCE_E2E_RUNS: process.env.CONFORMANCE_E2E_RUNS ?? "40",
  CONFORMANCE_E2E_OPENAI_RUNS: process.env.CONFORMANCE_E2E_OPENAI_RUNS ?? "30",
  CONFORMANCE_E2E_CHAT_RUNS: process.env.CONFORMANCE_E2E_CHAT_RUNS ?? "20",
  CONFORMANCE_E2E_AISDK_RUNS: process.env.CONFORMANCE_E2E_AISDK_RUNS ?? "20",
};

/** @typedef {{ name: string; dir: string; files?: string[]; grep?: string; own?: boolean; python?: string[]; disk?: boolean }} Catcher */
const pkgTests = (/** @type {string} */ pkg, own = false) => ({ name: `packages/${pkg} tests`, dir: `packages/${pkg}`, own });
const byteCut = (/** @type {string[]} */ sides) => ({ name: `faults byte-cut (${sides.join(", ")})`, dir: "faults", files: sides.map((s) => `test/byte-cut-${s}.test.ts`) });
const crash = { name: "faults crash", dir: "faults", files: ["test/crash.test.ts"] };
const e2e = { name: "conformance-e2e CONF-2 (memory ledger, Messages and Responses)", dir: "conformance-e2e", files: ["test/e2e.test.ts"], grep: "in-memory ledger performs" };
const e2eAiSdk = { name: "conformance-e2e AI SDK profile", dir: "conformance-e2e", files: ["test/e2e-ai-sdk.test.ts"] };
// Round N: the kit's planted tests whose control runs the real runner (or, `own`, whose oracle and draws are mutated).
const kit = (/** @type {string} */ name, /** @type {string[]} */ files, own = false) => ({ name: `conformance-e2e ${name}`, dir: "conformance-e2e", files, own });
/** The ledger kit's own tests (conformance/), `own` when the mutant is the kit's. */
const conformanceTests = (/** @type {string[]} */ files, own = false) => ({ name: `conformance tests (${files.map((f) => basename(f, ".test.ts")).join(", ")})${own ? ", mutated" : ""}`, dir: "conformance", files, own });
const deferredPlanted = kit("deferred-call planted (TURN-23)", ["test/e2e-deferred-call-planted.test.ts"]);
// Round S: the kit's relay-repeat planted test (STREAM-10's whole repeat), whose control runs the real runner.
const relayRepeatPlanted = kit("relay-repeat planted (STREAM-10)", ["test/e2e-relay-repeat-planted.test.ts"]);
/** @type {Record<string, Catcher[]>} */
const CHAINS = {
  runner: [pkgTests("runner", true), pkgTests("anthropic"), pkgTests("openai"), byteCut(["messages", "responses", "tool-runner"]), crash, e2e],
  anthropic: [pkgTests("anthropic", true), pkgTests("openai"), byteCut(["messages", "tool-runner"]), crash, e2e],
  openai: [pkgTests("openai", true), byteCut(["responses"]), e2e],
  "ai-sdk": [pkgTests("ai-sdk", true), e2eAiSdk],
  mcp: [pkgTests("mcp", true)],
  // The CLI's tests run its built bin (dist/cli.js) as well as its source: both are mutated (BINS).
  cli: [pkgTests("cli", true)],
  // core's internal row check (IDENT-4's audit and IDENT-10's guard): its own tests, then the CLI's.
  core: [pkgTests("core", true), pkgTests("cli")],
  // Round N (a mutant's `chain`, where its package's whole chain would cost more than it can tell):
  // TURN-23's carried calls, exercised by the runner, the Anthropic side's SDK tests, the kit's
  // deferred calls (its planted test's control runs the real runner) and CONF-2's profiles.
  "runner-carry": [pkgTests("runner", true), pkgTests("anthropic"), pkgTests("openai"), deferredPlanted, e2e],
  // core's { at } and IDENT-10 guard: its own tests, then the wrappers that dispatch through them.
  "core-guard": [pkgTests("core", true), pkgTests("runner"), pkgTests("anthropic"), pkgTests("ai-sdk"), deferredPlanted],
  // The Anthropic tool runner (ATR-*): its package's tests, then the byte-cut harness's tool-runner side.
  "tool-runner": [pkgTests("anthropic", true), byteCut(["tool-runner"])],
  // The kit's own oracle (TURN-23) and draws (AISDK-17): its planted tests (a laxer oracle passes a
  // planted runner) and its control profiles (a stricter one rejects the real runner).
  "kit-deferred": [
    kit("deferred-call planted (TURN-23), mutated", ["test/e2e-deferred-call-planted.test.ts"], true),
    kit("loop-faults, take-over release, unresolved entry planted, mutated", ["test/e2e-loopfaults-planted.test.ts", "test/e2e-takeover-release-planted.test.ts", "test/e2e-unresolved-entry-planted.test.ts"], true),
    { ...e2e, name: `${e2e.name}, mutated`, own: true },
  ],
  // Round O: TURN-23's slot after a resumed turn (finding 29), exercised by the runner, both stream
  // sides' tests and the kit's deferred calls (its planted test's control runs the real runner).
  "runner-slot": [pkgTests("runner", true), pkgTests("anthropic"), pkgTests("openai"), deferredPlanted],
  // Round O: the kit's deploy draw and its IDENT-10 / RECORD-10 / TURN-23 readings: its deploy and
  // deferred-call planted tests (a laxer oracle passes a planted runner), then CONF-2's profiles.
  "kit-deploy": [
    // Not `own`: it loads the draw (scenario.ts), never the oracle; the catchers after it check that a mutant was loaded.
    kit("deploy draws (IDENT-10, IDENT-11), mutated", ["test/deploy-draws.test.ts"]),
    kit("deploy planted (IDENT-10), mutated", ["test/e2e-deploy-planted.test.ts"], true),
    kit("deferred-call planted (TURN-23), mutated", ["test/e2e-deferred-call-planted.test.ts"], true),
    // The only planted test whose wrong stored request reaches a superseded-attempt record alone (O32).
    kit("superseded-attempt record planted (RECORD-10), mutated", ["test/e2e-superseded-record-planted.test.ts"], true),
    // A read-back key on a store without callKeys, excused only after a deploy (O35).
    kit("call-keys planted (TURN-24), mutated", ["test/e2e-call-keys-planted.test.ts"], true),
    { ...e2e, name: `${e2e.name}, mutated`, own: true },
  ],
  // Round P: the splice guard over Converse and Gemini and the provider tools (AISDK-15, AISDK-16):
  // ai-sdk's tests (its Converse and Gemini files run the mock provider's routes), then the kit's
  // AI SDK profile on the Responses API and over the cloud model APIs.
  "ai-sdk-guard": [pkgTests("ai-sdk", true), e2eAiSdk, kit("AI SDK profile over Converse and Gemini", ["test/e2e-ai-sdk-cloud.test.ts", "test/e2e-ai-sdk-cloud-planted.test.ts"])],
  // Round P: the memory ledger's resolve (RESOLVE-3, LEDGER-27): core's tests, the ledger kit's
  // vectors and checks over the memory ledger (it loads core's dist), then the CLI's.
  "core-resolve": [pkgTests("core", true), conformanceTests(["test/vectors.test.ts", "test/memory-ledger.test.ts", "test/broken-resolve-ledgers.test.ts"]), pkgTests("cli")],
  // Round P: the ledger kit's RESOLVE-1 check and vectors' runner: its own tests that run them
  // (planted broken ledgers and the memory ledger), source-loaded.
  conformance: [conformanceTests(["test/broken-resolve-ledgers.test.ts", "test/vectors.test.ts", "test/memory-ledger.test.ts", "test/broken-ledgers.test.ts"], true)],
  // Round P: the end-to-end kit's Anthropic platform draw: its draw and missing-SDK tests, the
  // platforms' planted tests, then CONF-2's profiles.
  "kit-platform": [
    kit("Anthropic platform draw and missing SDK, mutated", ["test/anthropic-platform-draw.test.ts", "test/anthropic-platform-missing.test.ts"], true),
    kit("platform planted (STREAM-8, CONF-2), mutated", ["test/e2e-platform-planted.test.ts"], true),
    { ...e2e, name: `${e2e.name}, mutated`, own: true },
  ],
  // Round P: the AI SDK profile over Converse and Gemini: its cloud tests and planted tests, then the splice planted tests.
  "kit-cloud": [
    // Always on (the cloud planted tests run only with their knobs set): splices drawn, the restart played with its start, the spliced call named.
    kit("AI SDK cloud splices (AISDK-16), mutated", ["test/e2e-ai-sdk-cloud-splices.test.ts"], true),
    kit("AI SDK cloud profile and planted (AISDK-16), mutated", ["test/e2e-ai-sdk-cloud.test.ts", "test/e2e-ai-sdk-cloud-planted.test.ts"], true),
    kit("AI SDK splice planted (AISDK-16), mutated", ["test/e2e-ai-sdk-splice-planted.test.ts", "test/e2e-ai-sdk-splice-dispatch-planted.test.ts"], true),
  ],
  // Round P: the mock provider's cloud routes, where a mock bug would hide a library bug: its own
  // tests, then ai-sdk's (Converse and Gemini files) and the kit's cloud profile (both load its dist).
  mock: [
    { name: "apps/mock-provider tests", dir: "apps/mock-provider", own: true },
    pkgTests("ai-sdk"),
    kit("AI SDK profile over Converse and Gemini", ["test/e2e-ai-sdk-cloud.test.ts", "test/e2e-ai-sdk-cloud-planted.test.ts"]),
    kit("Anthropic platform planted (Bedrock, Vertex)", ["test/e2e-platform-planted.test.ts"]),
  ],
  // Round P: the Python reference (spec/reference/ledger_ref.py), run on a patched copy of spec/:
  // every vector against it (the vectors were generated from it, so a mutant that changes an
  // answer meets the committed expectation).
  python: [{ name: "spec/reference python vectors", dir: "spec/reference", python: ["test_vectors.py"] }],
  // Round Q: Gemini on Vertex AI's streamed call arguments and Converse's delta kinds
  // (AISDK-16): ai-sdk's tests, the kit's AI SDK profiles (Vertex's own), the AI SDK byte cuts.
  "ai-sdk-vertex-guard": [
    pkgTests("ai-sdk", true),
    kit("AI SDK profile over Gemini on Vertex AI", ["test/e2e-ai-sdk-vertex.test.ts", "test/e2e-ai-sdk-vertex-planted.test.ts"]),
    kit("AI SDK profile over Converse and Gemini", ["test/e2e-ai-sdk-cloud.test.ts", "test/e2e-ai-sdk-cloud-planted.test.ts", "test/e2e-ai-sdk-cloud-splices.test.ts"]),
    byteCut(["converse", "gemini", "vertex"]),
  ],
  // Round Q: core's framework-loop example (its tests import it from examples/) and the README's copy
  // of it (read from disk by test/readme.test.ts: the patch is written to the file for the run).
  "core-example": [pkgTests("core", true)],
  "core-readme": [{ ...pkgTests("core"), name: "packages/core tests, README patched", disk: true }],
  // Round Q: the kit's gemini-vertex draws and gateway: its Vertex tests, then the cloud splices, source-loaded.
  "kit-vertex": [
    kit("AI SDK profile over Gemini on Vertex AI, mutated", ["test/e2e-ai-sdk-vertex.test.ts", "test/e2e-ai-sdk-vertex-planted.test.ts"], true),
    kit("AI SDK cloud profile and splices, mutated", ["test/e2e-ai-sdk-cloud.test.ts", "test/e2e-ai-sdk-cloud-splices.test.ts", "test/e2e-ai-sdk-chat.test.ts"], true),
  ],
  // Round Q: the mock's Vertex Gemini route: its own tests, ai-sdk's (google-vertex), the kit's Vertex profile, the Vertex byte cuts.
  "mock-vertex": [
    { name: "apps/mock-provider tests", dir: "apps/mock-provider", own: true },
    pkgTests("ai-sdk"),
    kit("AI SDK profile over Gemini on Vertex AI", ["test/e2e-ai-sdk-vertex.test.ts", "test/e2e-ai-sdk-vertex-planted.test.ts"]),
    byteCut(["vertex", "gemini"]),
  ],
  // Round Q: the byte-cut harness itself (faults/test's modules, loaded by vite): the files that use it.
  "faults-bytecut": [
    { name: "faults byte-cut (bedrock, converse, vertex, gemini), mutated", dir: "faults", own: true, files: ["test/byte-cut-bedrock.test.ts", "test/byte-cut-converse.test.ts", "test/byte-cut-vertex.test.ts", "test/byte-cut-gemini.test.ts"] },
    { name: "faults byte-cut (messages, tool-runner, ai-sdk, chat, responses), mutated", dir: "faults", own: true, files: ["test/byte-cut-messages.test.ts", "test/byte-cut-tool-runner.test.ts", "test/byte-cut-ai-sdk.test.ts", "test/byte-cut-chat.test.ts", "test/byte-cut-responses.test.ts"] },
  ],
  // Round Q: the runner's busy wait (TURN-10) behind a queue: its own tests, then the stream sides'.
  "runner-busy": [pkgTests("runner", true), pkgTests("anthropic"), pkgTests("openai")],
  // Round R: the LangGraph.js profile (LANGGRAPH-1..7) and the PostgreSQL thread lock (THREAD-1..6):
  // their own tests, source-loaded (no workspace package depends on either; the trials and
  // tests/pack-install install them from packed tarballs, too slow for a sweep).
  langgraph: [pkgTests("langgraph", true)],
  "thread-lock": [pkgTests("thread-lock-postgres", true)],
  // Round R: ERR-6's reserved codes in core: its own tests, then the wrappers that declare a tool's
  // failure (the anthropic package's declaredToolError) and read one (the MCP server's unguarded path).
  "core-err6": [pkgTests("core", true), pkgTests("anthropic"), pkgTests("mcp")],
  // Round T: the operator's side. The CLI's own chain (`cli` above: its tests, source-loaded and
  // through its built bin) and the OpenTelemetry package's own tests, source-loaded. No workspace
  // package depends on either; trials/* and tests/pack-install install them from packed tarballs.
  opentelemetry: [pkgTests("opentelemetry", true)],
  // Round S: STREAM-10's whole repeat (CallPhases.repeatedCall and the accumulators that call it),
  // the mocks' repeat_call fault and the kit's repeat draw: the stream sides' tests, the kit's
  // relay-repeat planted test (a plant without the check is rejected, the real runner passes the
  // same scenarios and meets the repeat) and CONF-2's profiles.
  "runner-repeat": [pkgTests("runner", true), pkgTests("anthropic"), pkgTests("openai"), relayRepeatPlanted, e2e],
  "anthropic-repeat": [pkgTests("anthropic", true), byteCut(["messages"]), relayRepeatPlanted, e2e],
  "mock-repeat": [{ name: "apps/mock-provider tests", dir: "apps/mock-provider", own: true }, pkgTests("anthropic"), relayRepeatPlanted, kit("Anthropic platform planted (Bedrock, Vertex)", ["test/e2e-platform-planted.test.ts"]), e2e],
  "mock-openai": [{ name: "apps/mock-openai tests", dir: "apps/mock-openai", own: true }, pkgTests("openai"), relayRepeatPlanted, e2e],
  "kit-repeat": [
    kit("splice draws and relay-repeat planted (STREAM-10, CONF-2), mutated", ["test/splice-draws.test.ts", "test/e2e-relay-repeat-planted.test.ts"], true),
    { ...e2e, name: `${e2e.name}, mutated`, own: true },
  ],
  "kit-tabs": [kit("AI SDK tabs planted (AISDK-17), mutated", ["test/e2e-ai-sdk-tabs-planted.test.ts"], true), { ...e2eAiSdk, name: `${e2eAiSdk.name}, mutated`, own: true }],
};

/** Where a mutant's package lives: packages/<pkg>, or the kit's own directory. */
const pkgDir = (/** @type {string} */ pkg) =>
  pkg === "conformance-e2e" || pkg === "conformance" || pkg === "faults"
    ? pkg
    : pkg === "mock-provider" || pkg === "mock-openai"
      ? `apps/${pkg}`
      : pkg === "spec-reference"
        ? "spec/reference"
        : pkg === "core-example" || pkg === "core-readme"
          ? "packages/core"
          : `packages/${pkg}`;
/**
 * Round P: packages whose mutants need no dist swapped: the ledger kit's (its own tests load its
 * source; its dist bundles the vectors at build time) and the Python reference's (run from a copy).
 */
const NO_DIST = new Set(["conformance", "spec-reference", "core-example", "core-readme", "faults"]);

/** Built entries besides dist/index.js that a package's tests run (a bin): swapped for the mutant's bundle too. */
const BINS = { cli: ["cli"], core: ["internal/index"] };
/**
 * Packages whose entries are one library (core's index and internal/index share its classes, as
 * its dist's shared chunk makes them): built together, split, so that an error class is one class.
 * Bundled apart, each had its own InvalidArgumentError, and a runner test that checks the class of
 * an error core/internal raised failed on every core mutant (round N's N16 and N21 were "caught" so).
 */
const SPLIT = new Set(["core"]);

/** The package's entries bundled together with the patch applied, code shared in chunks: [{ name, built }] and the chunks. */
async function splitMutant(/** @type {string} */ srcDir, /** @type {string[]} */ names, /** @type {string} */ id, /** @type {{ file: string; from: string; to: string }} */ patch) {
  const { build } = createRequire(join(repo, "tests", "processes", "index.js"))("esbuild");
  const outdir = join(tmp, `split-${id}`);
  rmSync(outdir, { recursive: true, force: true });
  const target = join(srcDir, patch.file);
  let applied = false;
  await build({
    entryPoints: Object.fromEntries(names.map((name) => [name, join(srcDir, `${name}.ts`)])),
    outdir,
    bundle: true,
    splitting: true,
    packages: "external",
    format: "esm",
    platform: "node",
    target: "node20",
    logLevel: "error",
    chunkNames: `mutant-${id}-[hash]`,
    plugins: [
      {
        name: "mutant",
        setup(b) {
          b.onLoad({ filter: /\.ts$/ }, (args) => {
            if (args.path !== target) return undefined;
            const text = readFileSync(args.path, "utf8");
            const at = text.indexOf(patch.from);
            if (at < 0 || text.indexOf(patch.from, at + 1) >= 0) throw new Error(`mutant ${id}: its patch occurs ${at < 0 ? "nowhere" : "more than once"} in ${args.path}`);
            applied = true;
            return { contents: text.slice(0, at) + patch.to + text.slice(at + patch.from.length), loader: "ts" };
          });
        },
      },
    ],
  });
  if (!applied) throw new Error(`mutant ${id}: ${target} is part of no entry of ${srcDir}`);
  const chunks = readdirSync(outdir).filter((f) => f.startsWith(`mutant-${id}-`) && f.endsWith(".js"));
  return { entries: names.map((name) => ({ name, built: join(outdir, `${name}.js`) })), chunks: chunks.map((f) => join(outdir, f)) };
}

/** The package's own vitest config with the mutant plugin added (its base config imported statically, so vite bundles it). */
function ownConfig(/** @type {string} */ dir) {
  const file = join(tmp, `vitest.${dir.replaceAll("/", "-")}.config.mjs`);
  writeFileSync(
    file,
    `import { mergeConfig } from "vitest/config";\nimport base from ${JSON.stringify(join(repo, dir, "vitest.config.ts"))};\nimport { mutantPlugin } from ${JSON.stringify(join(script, "mutant-plugin.mjs"))};\nexport default mergeConfig(base, { root: ${JSON.stringify(join(repo, dir))}, plugins: [mutantPlugin(JSON.parse(process.env.BLIND_L_MUTANT))] });\n`,
  );
  return file;
}

/** Runs one catcher; resolves to what it said. */
function runCatcher(/** @type {Catcher} */ catcher, /** @type {object | undefined} */ mutant) {
  if (catcher.disk === true && mutant !== undefined) return onDisk(catcher, /** @type {{ id: string; abs: string; find: string; replace: string; marker: string }} */ (mutant));
  if (catcher.python !== undefined) return runPython({ ...catcher, python: catcher.python }, /** @type {{ id: string; abs: string; find: string; replace: string; marker: string } | undefined} */ (mutant));
  const report = join(tmp, "report.json");
  rmSync(report, { force: true });
  const argv = [vitest, "run", "--bail=1", "--reporter=json", `--outputFile=${report}`];
  if (catcher.own) argv.push(`--config=${ownConfig(catcher.dir)}`);
  if (catcher.grep !== undefined) argv.push("-t", catcher.grep);
  argv.push(...(catcher.files ?? []));
  const started = Date.now();
  return new Promise((done) => {
    const child = spawn(process.execPath, argv, { cwd: join(repo, catcher.dir), env: { ...env, ...(mutant ? { BLIND_L_MUTANT: JSON.stringify(mutant) } : {}) }, stdio: ["ignore", "ignore", "pipe"], detached: true });
    let stderr = "";
    child.stderr.on("data", (d) => (stderr = (stderr + d).slice(-4000)));
    const limit = setTimeout(() => {
      try {
        process.kill(-child.pid, "SIGKILL");
      } catch {}
    }, 900_000);
    child.on("exit", (code, signal) => {
      clearTimeout(limit);
      const seconds = Math.round((Date.now() - started) / 100) / 10;
      if (signal !== null) return done({ verdict: "caught", test: `hung: killed after 900 s (${signal})`, seconds });
      if (code === 0) return done({ verdict: "passed", seconds });
      let where;
      let test = `exit ${code}: ${stderr.trim().split("\n").slice(-3).join(" | ")}`;
      try {
        const r = JSON.parse(readFileSync(report, "utf8"));
        for (const result of r.testResults) {
          const failed = result.assertionResults.find((a) => a.status === "failed");
          if (failed || result.status === "failed") {
            where = relative(join(repo, catcher.dir), result.name);
            test = failed
              ? `${relative(repo, result.name)} > ${failed.fullName} :: ${String(failed.failureMessages?.[0] ?? "").split("\n")[0].slice(0, 300)}`
              : `${relative(repo, result.name)} (file failed) :: ${String(result.message).split("\n")[0].slice(0, 300)}`;
            break;
          }
        }
      } catch {}
      done({ verdict: "caught", test, seconds, ...(where !== undefined ? { file: where } : {}) });
    });
  });
}

/**
 * A catcher whose tests read the mutated file from disk (round Q: a README): the patch is written to
 * the file for this run alone and the file put back after it (and on SIGINT).
 */
let diskOriginal;
async function onDisk(/** @type {Catcher} */ catcher, /** @type {{ id: string; abs: string; find: string; replace: string; marker: string }} */ mutant) {
  const text = readFileSync(mutant.abs, "utf8");
  const at = text.indexOf(mutant.find);
  if (at < 0 || text.indexOf(mutant.find, at + 1) >= 0) throw new Error(`mutant ${mutant.id}: its patch occurs ${at < 0 ? "nowhere" : "more than once"} in ${mutant.abs}`);
  diskOriginal = { file: mutant.abs, text };
  writeFileSync(mutant.abs, text.slice(0, at) + mutant.replace + text.slice(at + mutant.find.length));
  writeFileSync(mutant.marker, "applied\n");
  try {
    return await runCatcher({ ...catcher, disk: false }, undefined);
  } finally {
    writeFileSync(mutant.abs, text);
    diskOriginal = undefined;
  }
}

/**
 * A Python catcher (round P): spec/ copied, the mutant's patch applied to the copy (never to the
 * repository's file), each script run from the copy; unmutated, the copy is left as it is.
 */
function runPython(/** @type {Catcher & { python: string[] }} */ catcher, /** @type {{ id: string; abs: string; find: string; replace: string; marker: string } | undefined} */ mutant) {
  const copy = join(tmp, `spec-${mutant?.id ?? "unmutated"}`);
  rmSync(copy, { recursive: true, force: true });
  cpSync(join(repo, "spec"), copy, { recursive: true });
  if (mutant !== undefined) {
    const target = join(copy, relative(join(repo, "spec"), mutant.abs));
    const text = readFileSync(target, "utf8");
    const at = text.indexOf(mutant.find);
    if (at < 0 || text.indexOf(mutant.find, at + 1) >= 0) throw new Error(`mutant ${mutant.id}: its patch occurs ${at < 0 ? "nowhere" : "more than once"} in ${mutant.abs}`);
    writeFileSync(target, text.slice(0, at) + mutant.replace + text.slice(at + mutant.find.length));
    writeFileSync(mutant.marker, "applied\n");
  }
  const started = Date.now();
  return new Promise((done) => {
    const run = (/** @type {number} */ i) => {
      if (i === catcher.python.length) return done({ verdict: "passed", seconds: Math.round((Date.now() - started) / 100) / 10 });
      const script = catcher.python[i];
      const child = spawn("python3", [join(copy, relative("spec", catcher.dir), script)], { cwd: repo, stdio: ["ignore", "pipe", "pipe"] });
      let out = "";
      child.stdout.on("data", (d) => (out = (out + d).slice(-4000)));
      child.stderr.on("data", (d) => (out = (out + d).slice(-4000)));
      child.on("exit", (code) => {
        if (code === 0) return run(i + 1);
        const lines = out.trim().split("\n").filter((l) => l.trim() !== "");
        const failed = lines.find((l) => /FAIL|Error|assert/i.test(l)) ?? lines[lines.length - 1] ?? `exit ${code}`;
        done({ verdict: "caught", test: `${catcher.dir}/${script} :: ${failed.slice(0, 300)}`, seconds: Math.round((Date.now() - started) / 100) / 10, file: script });
      });
    };
    run(0);
  });
}

const swapped = [];
function restore() {
  // A mutant's chunk (SPLIT) has no original: removed.
  // The original is put back and its copy removed: a copy kept across runs would put back a stale
  // build after a rebuild (round P's --first, after a rebase, restored the builds of its first sweep).
  for (const { dist, backup } of swapped.splice(0)) {
    if (backup === undefined) rmSync(dist, { force: true });
    else if (existsSync(backup)) {
      copyFileSync(backup, dist);
      rmSync(backup);
    }
  }
}
process.on("SIGINT", () => {
  restore();
  if (diskOriginal !== undefined) writeFileSync(diskOriginal.file, diskOriginal.text);
  process.exit(130);
});

for (const m of mutants) {
  if (wanted.size > 0 && !wanted.has(m.id)) continue;
  const srcDir = join(repo, pkgDir(m.pkg), "src");
  const abs = join(repo, m.file);
  const marker = join(tmp, `${m.id}.applied`);
  rmSync(marker, { force: true });
  const patch = [{ file: abs.slice(srcDir.length + 1), from: m.find, to: m.replace }];
  // Each built entry of the package the mutated file is part of (a file the bin alone imports is not in index).
  const entries = [];
  /** @type {string[]} */
  let chunks = [];
  if (NO_DIST.has(m.pkg)) {
    // Nothing built to swap: the catchers load the source (or a patched copy of it).
  } else if (SPLIT.has(m.pkg)) {
    const split = await splitMutant(srcDir, ["index", ...(BINS[m.pkg] ?? [])], m.id.toLowerCase(), patch[0]);
    entries.push(...split.entries);
    chunks = split.chunks;
  }
  for (const name of SPLIT.has(m.pkg) || NO_DIST.has(m.pkg) ? [] : ["index", ...(BINS[m.pkg] ?? [])]) {
    try {
      entries.push({ name, built: await mutatedEntry(join(srcDir, `${name}.ts`), `${m.id.toLowerCase()}-${name.replaceAll("/", "-")}`, patch) });
    } catch (error) {
      if (!String(error?.message).includes("is not part of")) throw error;
    }
  }
  if (entries.length === 0 && !NO_DIST.has(m.pkg)) throw new Error(`mutant ${m.id}: ${m.file} is part of no built entry of ${pkgDir(m.pkg)}`);
  const swaps = entries.map(({ name, built }) => ({ built, dist: join(repo, pkgDir(m.pkg), "dist", `${name}.js`), backup: join(tmp, `${m.pkg}.${name.replaceAll("/", "-")}.js.orig`) }));
  for (const { built, dist, backup } of swaps) {
    if (!existsSync(backup)) copyFileSync(dist, backup);
    copyFileSync(built, dist);
    swapped.push({ dist, backup });
  }
  // The mutant's shared chunks beside its entries (the unmutated entries never import them).
  for (const chunk of chunks) {
    const dist = join(repo, pkgDir(m.pkg), "dist", basename(chunk));
    copyFileSync(chunk, dist);
    swapped.push({ dist, backup: undefined });
  }
  // --first: the recorded first catcher, narrowed to the file that caught the mutant.
  // An escape a new check now catches is run against that check (results' `escaped`).
  const known = results[m.id];
  const recorded = known?.caughtBy != null ? { catcher: known.caughtBy, file: known.file } : { catcher: known?.escaped?.catcher, file: known?.escaped?.file };
  const chain = firstOnly
    ? CHAINS[m.chain ?? m.pkg].filter((c) => c.name === recorded.catcher).map((c) => (recorded.file !== undefined ? { ...c, files: [recorded.file] } : c))
    : CHAINS[m.chain ?? m.pkg].filter((c) => only === undefined || c.name.includes(only));
  /** @type {{ caughtBy: string | null; test?: string; file?: string; flaky?: string[]; runs: { catcher: string; verdict: string; seconds: number }[] }} */
  const entry = { caughtBy: null, runs: [] };
  try {
    for (const catcher of chain) {
      const r = await runCatcher(catcher, { id: m.id, abs, find: m.find, replace: m.replace, marker });
      if ((catcher.own || catcher.python !== undefined || catcher.disk === true) && !existsSync(marker)) throw new Error(`mutant ${m.id}: no test of ${pkgDir(m.pkg)} loaded ${m.file}`);
      entry.runs.push({ catcher: catcher.name, verdict: r.verdict, seconds: r.seconds });
      console.log(`${m.id} ${catcher.name}: ${r.verdict} (${r.seconds} s)${r.test ? ` — ${r.test}` : ""}`);
      if (r.verdict === "caught" && !firstOnly && r.file !== undefined) {
        // A catch must be the mutant's doing: the failing file fails again on the mutant and passes
        // on the unmutated source (dist put back, no patch). Otherwise it failed by chance (a
        // loaded host), and the chain goes on. (Round L's first sweep counted one such failure as a catch.)
        const narrowed = { ...catcher, files: [r.file] };
        const again = await runCatcher(narrowed, { id: m.id, abs, find: m.find, replace: m.replace, marker });
        for (const { dist, backup } of swaps) copyFileSync(backup, dist);
        const unmutated = await runCatcher({ ...narrowed, own: false }, undefined);
        for (const { built, dist } of swaps) copyFileSync(built, dist);
        if (again.verdict !== "caught" || unmutated.verdict !== "passed") {
          const note = `${r.test} — not confirmed: on the mutant again ${again.verdict}, unmutated ${unmutated.verdict}`;
          (entry.flaky ??= []).push(note);
          entry.runs[entry.runs.length - 1].verdict = "failed by chance";
          console.log(`${m.id} ${catcher.name}: a failure by chance, going on (${note.slice(0, 200)})`);
          continue;
        }
      }
      if (r.verdict === "caught") {
        entry.caughtBy = catcher.name;
        entry.test = r.test;
        if (r.file !== undefined) entry.file = r.file;
        break;
      }
    }
  } finally {
    restore();
  }
  if (!firstOnly && only === undefined) {
    // A re-run keeps what was found out about an escape (its resolution) beside the new verdict.
    results[m.id] = { ...entry, ...(results[m.id]?.escaped !== undefined ? { escaped: results[m.id].escaped } : {}) };
    writeFileSync(resultsFile, JSON.stringify(results, null, 1) + "\n");
  } else if (entry.caughtBy === null) {
    console.log(`${m.id}: NOT caught by its recorded first catcher ${recorded.catcher} (${recorded.file})`);
    process.exitCode = 1;
  }
  console.log(`${m.id} => ${entry.caughtBy ?? "ESCAPED"}`);
}
