import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { pathToFileURL } from "node:url";
import { LevelNotInstalledError } from "./errors/level-not-installed.js";
import type { ConformanceLevel } from "./types.js";

/** The package that holds the end-to-end level. */
export const END_TO_END_PACKAGE = "@dispatch-once/conformance-e2e";

/**
 * True when `error` says the package itself cannot be found — not a file inside it (an unbuilt
 * dist) nor one of its own dependencies, which are reported as they are.
 */
function isNotFound(error: unknown, packageName: string): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  const message = error instanceof Error ? error.message : "";
  return (code === "ERR_MODULE_NOT_FOUND" || code === "MODULE_NOT_FOUND") && (message.includes(`'${packageName}'`) || message.includes(`'${packageName}/`));
}

/**
 * The ESM entry of `packageName` as seen from the project in `directory` (its node_modules, or the
 * package itself). From the user's project, not only from this file: under pnpm's isolated layout
 * a package sees only what it depends on, and this one must not depend on the end-to-end level.
 */
function resolveFrom(directory: string, packageName: string): string | undefined {
  let manifest: string;
  try {
    manifest = createRequire(join(directory, "noop.js")).resolve(`${packageName}/package.json`);
  } catch (error) {
    if (isNotFound(error, packageName)) return undefined;
    throw error;
  }
  const pkg = JSON.parse(readFileSync(manifest, "utf8")) as { exports?: { ".": { import: { default: string } } } };
  const entry = pkg.exports?.["."]?.import.default;
  if (entry === undefined) throw new Error(`${manifest} has no ESM entry`);
  return pathToFileURL(join(dirname(manifest), entry)).href;
}

/**
 * Loads `endToEndLevel` from `@dispatch-once/conformance-e2e`: first as this module sees it (npm's
 * flat node_modules), then from each of `from` (the working directory, the adapter module's
 * directory). When none has it, a LevelNotInstalledError says what to install. An installed
 * package that fails to load is reported as it failed, never as "not installed".
 */
export async function loadEndToEndLevel(options: { packageName?: string; from?: readonly string[] } = {}): Promise<ConformanceLevel> {
  const packageName = options.packageName ?? END_TO_END_PACKAGE;
  let mod: { endToEndLevel?: ConformanceLevel } | undefined;
  try {
    mod = (await import(packageName)) as { endToEndLevel?: ConformanceLevel };
  } catch (error) {
    if (!isNotFound(error, packageName)) throw error;
  }
  for (const directory of mod === undefined ? (options.from ?? []) : []) {
    const url = resolveFrom(directory, packageName);
    if (url !== undefined) {
      mod = (await import(url)) as { endToEndLevel?: ConformanceLevel };
      break;
    }
  }
  if (mod === undefined) throw new LevelNotInstalledError("e2e", packageName);
  if (typeof mod.endToEndLevel?.checks !== "function") {
    throw new Error(`${packageName} does not export endToEndLevel: install a version that matches @dispatch-once/conformance`);
  }
  return mod.endToEndLevel;
}
