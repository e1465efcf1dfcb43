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
];
// What a user's project lists besides our packages: the SDK, zod and the driver it uses.
const USER_DEPENDENCIES = { "@anthropic-ai/sdk": "1.14.0", openai: "6.49.0", "@opentelemetry/api": "1.9.1", "@modelcontextprotocol/sdk": "1.32.2", ai: "6.0.325", zod: "4.6.7", "better-sqlite3": "12.11.1" };
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

rmSync(work, { recursive: true, force: true });
step("passed");
