import { defineConfig } from "tsup";

export default defineConfig({
  entry: { index: "src/index.ts", "internal/index": "src/internal/index.ts" },
  format: ["esm", "cjs"],
  sourcemap: true,
  clean: true,
  target: "node20",
});
