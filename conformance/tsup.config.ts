import { defineConfig } from "tsup";

export default defineConfig({
  // "ledger" is the ledger level alone ("@dispatch-once/conformance/ledger"): core and fast-check only.
  entry: { index: "src/index.ts", cli: "src/cli.ts", ledger: "src/ledger/index.ts" },
  format: ["esm", "cjs"],
  sourcemap: true,
  clean: true,
  target: "node20",
});
