import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    // Files share one module graph per worker instead of re-importing it each (README, Quick start).
    isolate: false,
    // Most of this suite waits: on leases, windows and retentions running out in the kit's checks (its
    // CPU is under half its wall time). Files run three at a time; each certification has its own subject.
    maxWorkers: 3,
    include: ["test/**/*.test.ts"],
    globalSetup: ["test/global-setup.ts"],
    testTimeout: 60_000,
    hookTimeout: 60_000,
  },
});
