/**
 * A long random exploration of the chaos suite (not part of CI): CHAOS_SEED=<first> CHAOS_RUNS=<k>
 * CHAOS_PARALLEL=<p> npx tsx test/chaos-explore.ts. Prints one line per scenario and every violation.
 */
import { runScenario, scenarioOf } from "./chaos-harness.js";

const first = Number(process.env.CHAOS_SEED ?? 1000);
const runs = Number(process.env.CHAOS_RUNS ?? 20);
const parallel = Number(process.env.CHAOS_PARALLEL ?? 2);
let next = first;
let failed = 0;
async function lane(): Promise<void> {
  while (next < first + runs) {
    const seed = next++;
    const started = Date.now();
    try {
      const v = await runScenario(scenarioOf(seed));
      console.log(`[chaos] ${v.scenario}; first runner ${v.first}; ${v.violations.length === 0 ? "ok" : "VIOLATED"} (${Date.now() - started} ms)`);
      if (v.violations.length > 0) {
        failed++;
        for (const line of v.violations) console.log(`  ${line}`);
      }
    } catch (error) {
      failed++;
      console.log(`[chaos] seed ${seed}: harness error ${String(error)}`);
    }
  }
}
await Promise.all(Array.from({ length: parallel }, lane));
console.log(`[chaos] ${runs} scenarios from seed ${first}: ${failed} violated`);
process.exit(failed > 0 ? 1 : 0);
