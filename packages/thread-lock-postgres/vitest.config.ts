import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    // The suite waits on leases running out (1-2 s each) against PostgreSQL.
    testTimeout: 30_000,
    hookTimeout: 30_000,
  },
});
