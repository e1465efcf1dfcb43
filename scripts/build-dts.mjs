// @ts-check
/**
 * A package's declarations, run by its `build` script after `tsup` (which builds the JavaScript
 * only): `node ../../scripts/build-dts.mjs [name=]src/entry.ts ...` in the package's directory.
 *
 * One TypeScript program over the entries (the package's tsconfig.json, its dependencies read from
 * their builds) is type-checked as `tsc` does (any error fails the build, as tsup's declaration
 * build did with noEmitOnError) and its declarations are written unbundled beside the JavaScript:
 * `dist/<path>.d.ts` for `import`, and a copy of each as `dist/<path>.d.cts` for `require`, whose
 * relative specifiers end in `.cjs` (a `.d.cts` naming `./x.js` would get `x.d.ts`, which a
 * `"type": "module"` package makes ESM: TS1479 under `module: nodenext`). An entry built by tsup
 * under another name (`ledger=src/ledger/index.ts` gives `dist/ledger.js`) gets a `dist/ledger.d.ts`
 * and `.d.cts` re-exporting its tree, so each `types` in the package's `exports` names a file.
 *
 * One program and no bundling: about half the CPU of tsup's `dts` (rollup-plugin-dts), which the
 * build's critical path (core, then every dependent) waits for.
 *
 * BUILD_DTS_NO_CHECK=1 (set by `.ci/run`) writes the same declarations without the type-check
 * (TypeScript's `noCheck`: only syntax and options errors, and the declaration emitter's own, fail
 * the build). CI type-checks every file these programs check in `pnpm lint:sources`, one program
 * with the same compiler options and noUnused* over the sources, so the check here repeated it:
 * 27-48 s of a CI run's CPU (the 20 packages' declarations took 127-155 s checked, 100-107 s not,
 * on a loaded 2-core host). The 558 declaration files written were byte-identical either way.
 */
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import ts from "typescript";

const cwd = process.cwd();
const entries = process.argv.slice(2).map((arg) => {
  const at = arg.indexOf("=");
  return at === -1 ? { name: undefined, file: resolve(cwd, arg) } : { name: arg.slice(0, at), file: resolve(cwd, arg.slice(at + 1)) };
});
if (entries.length === 0) {
  console.error("usage: node build-dts.mjs [name=]src/entry.ts ...");
  process.exit(2);
}

const host = ts.createCompilerHost({});
const formatHost = { getCanonicalFileName: (f) => f, getCurrentDirectory: () => cwd, getNewLine: () => "\n" };
const fail = (diagnostics) => {
  const format = process.stderr.isTTY ? ts.formatDiagnosticsWithColorAndContext : ts.formatDiagnostics;
  console.error(format(diagnostics, formatHost));
  process.exit(1);
};

const configPath = join(cwd, "tsconfig.json");
const parsed = ts.getParsedCommandLineOfConfigFile(
  configPath,
  { noEmit: false, declaration: true, emitDeclarationOnly: true, declarationMap: false, sourceMap: false, outDir: join(cwd, "dist"), rootDir: join(cwd, "src") },
  { ...ts.sys, onUnRecoverableConfigFileDiagnostic: (d) => fail([d]) },
);
if (parsed === undefined) process.exit(1);
if (parsed.errors.length > 0) fail(parsed.errors);

const noCheck = process.env.BUILD_DTS_NO_CHECK === "1";
const program = ts.createProgram({ rootNames: entries.map((e) => e.file), options: noCheck ? { ...parsed.options, noCheck: true } : parsed.options, host });
const diagnostics = noCheck
  ? [...program.getConfigFileParsingDiagnostics(), ...program.getOptionsDiagnostics(), ...program.getGlobalDiagnostics(), ...program.getSyntacticDiagnostics()]
  : ts.getPreEmitDiagnostics(program);
if (diagnostics.some((d) => d.category === ts.DiagnosticCategory.Error)) fail(diagnostics);

/** `./x.js` and `../y.js` (import, export, import()) become `./x.cjs` and `../y.cjs`. */
const toCjs = (text) => text.replace(/((?:from|import)\s*\(?\s*)(["'])(\.\.?\/[^"']*)\.js\2/g, "$1$2$3.cjs$2");

/** A `.d.cts` must name no relative `.js` file (TS1479 under node16/node18, and TypeScript before 5.8). */
const cjsText = (text, file) => {
  const cjs = toCjs(text);
  const left = /["']\.\.?\/[^"']*\.js["']/.exec(cjs);
  if (left !== null) throw new Error(`${file}: ${left[0]} is left pointing at an ESM declaration`);
  return cjs;
};
const write = (file, text) => {
  mkdirSync(dirname(file), { recursive: true });
  writeFileSync(file, text);
};
/** @type {Set<string>} */
const emitted = new Set();
const result = program.emit(undefined, (file, text) => {
  if (!file.endsWith(".d.ts")) throw new Error(`unexpected output ${file}`);
  write(file, text);
  write(file.replace(/\.d\.ts$/, ".d.cts"), cjsText(text, file));
  emitted.add(file);
});
if (result.emitSkipped || result.diagnostics.length > 0) fail(result.diagnostics);

const srcDir = join(cwd, "src");
for (const { name, file } of entries) {
  const path = relative(srcDir, file).replace(/\.ts$/, "");
  if (name === undefined || name === path) continue;
  const target = join(cwd, "dist", `${path}.d.ts`);
  if (!emitted.has(target)) throw new Error(`${file} emitted no ${target}`);
  const stub = join(cwd, "dist", `${name}.d.ts`);
  if (emitted.has(stub)) throw new Error(`${stub} was emitted: entry ${name} would overwrite it`);
  let specifier = relative(dirname(stub), join(cwd, "dist", path)).split("\\").join("/");
  if (!specifier.startsWith(".")) specifier = `./${specifier}`;
  const hasDefault = /^export default |^export \{[^}]*\bdefault\b/m.test(readFileSync(target, "utf8"));
  const text = `export * from "${specifier}.js";\n${hasDefault ? `export { default } from "${specifier}.js";\n` : ""}`;
  write(stub, text);
  write(stub.replace(/\.d\.ts$/, ".d.cts"), cjsText(text, stub));
}
