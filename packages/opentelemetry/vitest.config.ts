import { fileURLToPath } from "node:url";
import { defineConfig } from "vitest/config";

export default defineConfig({
  resolve: {
    // The README's example imports the package by name; resolve it to the source under test.
    alias: { "@dispatch-once/opentelemetry": fileURLToPath(new URL("./src/index.ts", import.meta.url)) },
  },
  test: {
    // Files share one module graph per worker instead of re-importing it each (README, Quick start).
    isolate: false,
    include: ["test/**/*.test.ts"],
  },
});
