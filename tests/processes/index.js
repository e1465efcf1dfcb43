// Why: `node --import tsx` costs each child process about 2 s more CPU than plain node (the
// loader's hooks see every module the process resolves: 3.4 s against 1.4 s for a worker that
// loads the SDKs), and the suites start well over a hundred such processes on CI's two cores.
// esbuild compiles an entry in tens of milliseconds, so each test process compiles what it spawns
// once, afresh (never a stale copy), and renames the result into place (atomic when vitest's
// workers compile the same entry at once).
import { buildSync } from "esbuild";
import { renameSync } from "node:fs";
import { basename, dirname, join } from "node:path";

const compiled = new Map();

export function compiledEntry(entry) {
  const known = compiled.get(entry);
  if (known !== undefined) return known;
  if (!/\.[cm]?ts$/.test(entry)) throw new TypeError(`compiledEntry takes a TypeScript file, got ${JSON.stringify(entry)}`);
  // Beside the entry, so that paths it takes from import.meta.url still point where they did.
  const out = join(dirname(entry), basename(entry).replace(/\.[cm]?ts$/, ".compiled.mjs"));
  const partial = `${out}.${process.pid}.${compiled.size}.partial`;
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
  compiled.set(entry, out);
  return out;
}
