// Why: `node --import tsx` costs each child process about 2 s more CPU than plain node (the
// loader's hooks see every module the process resolves: 3.4 s against 1.4 s for a worker that
// loads the SDKs), and the suites start well over a hundred such processes on CI's two cores.
// esbuild compiles an entry in a few milliseconds, so every spawn compiles it afresh (never a
// stale copy, in watch mode too) and renames the result into place (atomic when vitest's workers
// compile the same entry at once: a process starting meanwhile reads one whole copy or the other).
import { buildSync } from "esbuild";
import { renameSync } from "node:fs";
import { basename, dirname, join } from "node:path";

let written = 0;

export function compiledEntry(entry) {
  if (!/\.[cm]?ts$/.test(entry)) throw new TypeError(`compiledEntry takes a TypeScript file, got ${JSON.stringify(entry)}`);
  // Beside the entry, so that paths it takes from import.meta.url still point where they did.
  const out = join(dirname(entry), basename(entry).replace(/\.[cm]?ts$/, ".compiled.mjs"));
  const partial = `${out}.${process.pid}.${written++}.partial`;
  buildSync({
    entryPoints: [entry],
    outfile: partial,
    bundle: true,
    packages: "external",
    format: "esm",
    platform: "node",
    target: "node20",
    logLevel: "error",
  });
  renameSync(partial, out);
  return out;
}
