import { afterEach, describe, expect, it } from "vitest";
import { runEndToEnd } from "../src/index.js";
import { platformImports } from "../src/provider.js";
import { memory } from "./audit-mutants.js";

// An install without the optional peer @anthropic-ai/bedrock-sdk: importing it fails as Node fails
// a missing package. Stood in at the kit's import seam, with the process's cache of loaded SDKs
// emptied: another test file in this worker may have imported the real one (isolate: false).
const realImport = platformImports.bedrock;
const loaded = platformImports.loaded.bedrock;
afterEach(() => {
  platformImports.bedrock = realImport;
  if (loaded !== undefined) platformImports.loaded.bedrock = loaded;
});

describe("provider anthropic without @anthropic-ai/bedrock-sdk installed", () => {
  it("a scenario that draws bedrock runs over the Messages API and onStats says so; a forced bedrock fails naming the package", async () => {
    platformImports.bedrock = () => Promise.reject(Object.assign(new Error("Cannot find package '@anthropic-ai/bedrock-sdk'"), { code: "ERR_MODULE_NOT_FOUND" }));
    delete platformImports.loaded.bedrock;
    let seen: Record<string, number> = {};
    // Seed 11's first 12 scenarios draw bedrock twice.
    await runEndToEnd(memory, { runs: 12, seed: 11, onStats: (stats) => (seen = stats) });
    expect(seen.anthropic_platform_bedrock_not_installed ?? 0, "seed 11").toBeGreaterThan(0);
    expect(seen.anthropic_platform_bedrock ?? 0).toBe(0);
    expect(seen.anthropic_requests_bedrock ?? 0).toBe(0);
    expect(seen.anthropic_platform_messages ?? 0).toBeGreaterThanOrEqual(seen.anthropic_platform_bedrock_not_installed!);
    await expect(runEndToEnd(memory, { runs: 1, seed: 11, anthropicPlatform: "bedrock" })).rejects.toThrow(/platform bedrock needs @anthropic-ai\/bedrock-sdk, which is not installed/);
  });
});
