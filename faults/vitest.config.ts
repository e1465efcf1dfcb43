import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    // Files share one module graph per worker instead of re-importing it each (README, Quick start).
    isolate: false,
    include: ["test/**/*.test.ts"],
    // One store at a time: the suite forks worker processes and the machine has few cores.
    fileParallelism: false,
    testTimeout: 120_000,
    hookTimeout: 60_000,
  },
});
