import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    // Files share one module graph per worker instead of re-importing it each (README, Quick start).
    isolate: false,
    // Most of this suite waits on child processes (the CLI under test) and on the stores: files run
    // three at a time. Each test makes its own ledger (temporary file, random schema or prefix).
    maxWorkers: 3,
    include: ["test/**/*.test.ts"],
    testTimeout: 60_000,
    hookTimeout: 60_000,
  },
});
