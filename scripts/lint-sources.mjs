#!/usr/bin/env node
// `pnpm lint:sources`: the type check of tsconfig.lint.json (tsc's diagnostics, noUnused* on) and
// eslint's typed rules (eslint.config.mjs) over ONE TypeScript program, then the options' docs.
// typescript-eslint accepts a program made elsewhere (parserOptions.programs): given tsc's, whose
// checker has already answered every type the diagnostics needed, its rules read types from that
// checker's caches instead of building and checking the whole workspace a second time (the two
// programs took about 70 s and 55 s of CPU; see the commit that made this script).
import { spawnSync } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { ESLint } from "eslint";
import ts from "typescript";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const configPath = join(root, "tsconfig.lint.json");

// What `tsc -p tsconfig.lint.json` does: read the config, build the program, print every diagnostic.
const host = { ...ts.sys, onUnRecoverableConfigFileDiagnostic: (d) => report([d]) };
const parsed = ts.getParsedCommandLineOfConfigFile(configPath, {}, host);
if (parsed === undefined) process.exit(2);
const program = ts.createProgram({ rootNames: parsed.fileNames, options: parsed.options, projectReferences: parsed.projectReferences, configFileParsingDiagnostics: parsed.errors });
const diagnostics = ts.sortAndDeduplicateDiagnostics(ts.getPreEmitDiagnostics(program));
function report(list) {
  if (list.length === 0) return;
  const format = { getCanonicalFileName: (f) => f, getCurrentDirectory: () => root, getNewLine: () => "\n" };
  process.stdout.write(process.stdout.isTTY ? ts.formatDiagnosticsWithColorAndContext(list, format) : ts.formatDiagnostics(list, format));
}
report(diagnostics);
if (diagnostics.length > 0) {
  console.error(`tsc (tsconfig.lint.json): ${diagnostics.length} error(s)`);
  process.exit(1);
}

// eslint.config.mjs as it is, its typed files (the block that names tsconfig.lint.json) read through the
// program above: the same files, so that nothing else is linted than `eslint .` lints.
const config = (await import(join(root, "eslint.config.mjs"))).default;
const typed = config.filter((block) => block.languageOptions?.parserOptions?.project !== undefined);
if (typed.length === 0) throw new Error("eslint.config.mjs has no block with parserOptions.project");
const eslint = new ESLint({
  cwd: root,
  overrideConfig: typed.map((block) => ({ files: block.files, languageOptions: { parserOptions: { project: null, programs: [program] } } })),
});
const results = await eslint.lintFiles(["."]);
const formatter = await eslint.loadFormatter("stylish");
const text = await formatter.format(results);
if (text) process.stdout.write(text);
if (results.some((r) => r.errorCount > 0 || r.fatalErrorCount > 0)) process.exit(1);

// Every exported option's @default and @example.
const docs = spawnSync(process.execPath, [join(root, "scripts", "check-option-docs.mjs")], { stdio: "inherit" });
process.exit(docs.status ?? 1);
