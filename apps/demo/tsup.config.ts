import { defineConfig } from "tsup";

export default defineConfig({
  // chaos-worker runs the naive side of the chaos run in a worker thread; demo-thread runs the
  // whole demo in one (its heap capped), off the CLI's main thread.
  entry: ["src/index.ts", "src/cli.ts", "src/chaos-worker.ts", "src/demo-thread.ts"],
  format: ["esm", "cjs"],
  shims: true,
  sourcemap: true,
  clean: true,
  target: "node20",
});
