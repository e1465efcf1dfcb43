import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    // Files share one module graph per worker instead of re-importing it each (README, Quick start).
    isolate: false,
    // Much of this suite waits on the mock servers' timed faults and the runners' backoffs: its CPU
    // was 82 s in 935 s of wall time on a host at load 30, and nearer half its wall time on a quiet
    // one. Files run three at a time; each run starts its own servers.
    maxWorkers: 3,
    include: ["test/**/*.test.ts"],
    globalSetup: ["test/global-setup.ts"],
    testTimeout: 60_000,
    hookTimeout: 60_000,
  },
});
