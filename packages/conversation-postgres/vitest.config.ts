import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    // Files share one module graph per worker instead of re-importing it each (README, Quick start).
    isolate: false,
    // Most of this suite waits on PostgreSQL and on leases running out: files run two at a time, each
    // in schemas of its own.
    maxWorkers: 2,
    include: ["test/**/*.test.ts"],
    testTimeout: 60_000,
    hookTimeout: 60_000,
  },
});
