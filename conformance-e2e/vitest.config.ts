import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    // Files share one module graph per worker instead of re-importing it each (README, Quick start).
    isolate: false,
    // Most of this suite waits on the mock servers' timed faults and the runners' backoffs (its CPU is
    // about a tenth of its wall time). Files run three at a time; each run starts its own servers.
    maxWorkers: 3,
    include: ["test/**/*.test.ts"],
    globalSetup: ["test/global-setup.ts"],
    testTimeout: 60_000,
    hookTimeout: 60_000,
  },
});
