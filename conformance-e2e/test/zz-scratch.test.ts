import { it } from "vitest";
import { runEndToEnd } from "../src/index.js";
import { memory } from "./audit-mutants.js";
it.each(["anthropic", "openai"] as const)("scratch %s", async (provider) => {
  const seen: Record<string, number> = {};
  await runEndToEnd(memory, { provider, runs: 200, seed: 20261129, onStats: (s) => Object.assign(seen, s) });
  console.log(provider, JSON.stringify(Object.fromEntries(Object.entries(seen).filter(([k]) => /deploy|defer|carr|refus/.test(k)))));
}, 900_000);
