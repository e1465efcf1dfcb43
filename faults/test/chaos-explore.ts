/**
 * A long random exploration of the chaos suite (not part of CI): CHAOS_SEED=<first> CHAOS_RUNS=<k>
 * CHAOS_PARALLEL=<p> [CHAOS_FAMILY=host] npx tsx test/chaos-explore.ts. Prints one line per scenario and every violation.
 */
import { runScenario, scenarioOf, type Family, type Scenario } from "./chaos-harness.js";

const first = Number(process.env.CHAOS_SEED ?? 1000);
const runs = Number(process.env.CHAOS_RUNS ?? 20);
const parallel = Number(process.env.CHAOS_PARALLEL ?? 2);
/** CHAOS_FAMILY=host: a SQLite conversation store, one runner partitioned, faulted SQLite and Redis ledgers. */
const family = (process.env.CHAOS_FAMILY ?? "server") as Family;
/** CHAOS_SCENARIO='<Scenario as JSON>' plays one scenario written by hand (README: host scenario 9001, a runner hung on a COMMIT). */
if (process.env.CHAOS_SCENARIO !== undefined) {
  const v = await runScenario(JSON.parse(process.env.CHAOS_SCENARIO) as Scenario);
  console.log(`[chaos] ${v.scenario}; first runner ${v.first}; ${v.violations.length === 0 ? "ok" : "VIOLATED"}`);
  for (const line of v.violations) console.log(`  ${line}`);
  process.exit(v.violations.length > 0 ? 1 : 0);
}
let next = first;
let failed = 0;
async function lane(): Promise<void> {
  while (next < first + runs) {
    const seed = next++;
    const started = Date.now();
    try {
      const { model, ...planned } = scenarioOf(seed, family);
      // CHAOS_MODEL=planned: the scenario without its provider dimension, as seeds drawn before it ran.
      const v = await runScenario(process.env.CHAOS_MODEL === "planned" || model === undefined ? planned : { ...planned, model });
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
