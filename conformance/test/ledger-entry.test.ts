import { describe, expect, it } from "vitest";
import { existsSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { LevelNotInstalledError, loadEndToEndLevel } from "../src/index.js";

/**
 * An adapter author who wants only the ledger checks installs core and fast-check, nothing of the
 * end-to-end level (its mocks pull express and better-sqlite3). These tests walk the import graph
 * of the ledger entry, in the sources and in the built bundle that ships, and fail on anything else.
 */
const root = join(import.meta.dirname, "..");
// Node's own modules are allowed (esbuild writes node:util as util in the bundle); no other package is.
// node:net is the SilenceProxy's (LEDGER-12's silent-store checks put it in front of the store).
const ALLOWED = new Set(["@dispatch-once/core", "fast-check", "node:crypto", "node:util", "node:net", "crypto", "util", "net"]);

const SPECIFIER = /(?:^|[^\w.])(?:import|export)\s+(?:type\s+)?(?:[\w*{}\s,$]+\s+from\s+)?["']([^"']+)["']|import\(\s*["']([^"']+)["']\s*\)|require\(\s*["']([^"']+)["']\s*\)/g;

function specifiers(text: string): string[] {
  return [...text.matchAll(SPECIFIER)].map((m) => m[1] ?? m[2] ?? m[3]!);
}

/** Every file reachable from `entry` through relative imports, and every bare specifier they import. */
function walk(entry: string, resolveRelative: (from: string, spec: string) => string): { files: string[]; bare: Map<string, string[]> } {
  const files: string[] = [];
  const bare = new Map<string, string[]>();
  const queue = [entry];
  while (queue.length > 0) {
    const file = queue.pop()!;
    if (files.includes(file)) continue;
    files.push(file);
    if (file.endsWith(".json")) continue;
    for (const spec of specifiers(readFileSync(file, "utf8"))) {
      if (spec.startsWith(".")) queue.push(resolveRelative(file, spec));
      else bare.set(spec, [...(bare.get(spec) ?? []), relative(root, file)]);
    }
  }
  return { files, bare };
}

describe("the ledger level depends on @dispatch-once/core and fast-check only", () => {
  it("in the sources: src/ledger/index.ts and everything it imports", () => {
    const { files, bare } = walk(join(root, "src/ledger/index.ts"), (from, spec) => {
      const target = resolve(dirname(from), spec);
      const ts = target.replace(/\.js$/, ".ts");
      return existsSync(ts) ? ts : target;
    });
    const outside = [...bare].filter(([spec]) => !ALLOWED.has(spec));
    expect(outside, `imports outside ${[...ALLOWED].join(", ")}`).toEqual([]);
    const levels = files.map((f) => relative(root, f)).filter((f) => /^src\/(e2e|conversation)\//.test(f));
    expect(levels, "the ledger entry reaches another level's files").toEqual([]);
    // The walk itself works: it found the checks and core.
    expect(files.some((f) => f.endsWith("checks/liveness.ts"))).toBe(true);
    expect(bare.has("@dispatch-once/core")).toBe(true);
  });

  for (const entry of ["dist/ledger.js", "dist/ledger.cjs"]) {
    it(`in the built bundle that ships: ${entry} and its chunks`, () => {
      const { files, bare } = walk(join(root, entry), (from, spec) => resolve(dirname(from), spec));
      const outside = [...bare].filter(([spec]) => !ALLOWED.has(spec));
      expect(outside, `the bundle imports outside ${[...ALLOWED].join(", ")}`).toEqual([]);
      for (const file of files) {
        // Bundled code of another level would show by its packages' names even when inlined.
        expect(readFileSync(file, "utf8"), file).not.toMatch(/@dispatch-once\/(anthropic|mock-provider|mock-payments)|@anthropic-ai\/sdk|\bexpress\b|better-sqlite3/);
      }
    });
  }

  it("package.json exports the ledger level as its own subpath", () => {
    const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as { exports: Record<string, { import: { default: string }; require: { default: string } }> };
    expect(pkg.exports["./ledger"]).toEqual({
      import: { types: "./dist/ledger.d.ts", default: "./dist/ledger.js" },
      require: { types: "./dist/ledger.d.cts", default: "./dist/ledger.cjs" },
    });
    for (const file of [pkg.exports["./ledger"]!.import.default, pkg.exports["./ledger"]!.require.default]) expect(existsSync(join(root, file)), file).toBe(true);
  });
});

describe("the end-to-end level is a separate package (@dispatch-once/conformance-e2e)", () => {
  it("this package depends on core (peer) and fast-check only: no mocks, no SDK, no express or better-sqlite3", () => {
    const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as { dependencies: Record<string, string>; peerDependencies: Record<string, string> };
    expect(Object.keys(pkg.dependencies)).toEqual(["fast-check"]);
    expect(Object.keys(pkg.peerDependencies)).toEqual(["@dispatch-once/core"]);
  });

  it("a level whose package is missing is a LevelNotInstalledError naming what to install", async () => {
    const error = await loadEndToEndLevel({ packageName: "@dispatch-once/conformance-e2e-not-here", from: [root] }).catch((e: unknown) => e);
    expect(LevelNotInstalledError.isInstance(error)).toBe(true);
    expect(error).toMatchObject({ code: "level_not_installed", level: "e2e", packageName: "@dispatch-once/conformance-e2e-not-here" });
    expect((error as Error).message).toContain("npm i -D @dispatch-once/conformance-e2e-not-here");
    expect((error as Error).message).toContain("--level ledger");
  });
});
