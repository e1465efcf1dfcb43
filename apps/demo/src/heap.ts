import type { ResourceLimits } from "node:worker_threads";

/**
 * Heap caps of a thread that runs one side of `turns` chaos turns. Uncapped, V8 let each
 * thread's heap grow to several times what it kept live (a 20,000-turn run peaked at 1.19 GB
 * of RSS). The old generation gets a floor for the modules and the servers plus room for what
 * the run keeps per turn (its counters and indexes, well under 1 KB a turn). The young
 * generation is 24 MB: against V8's usual 48 it took 36-40 MB off the run's peak RSS (two
 * threads) for about 3 % more CPU in GC (13.4-13.8 % of each thread's samples against
 * 11.8-11.9 %, 5,000 turns); 16 MB saved nothing more. (With a 96 MB old generation, GC had
 * been 14 % against 6 %: the old generation is not the knob.)
 */
export function sideHeapLimits(turns: number): ResourceLimits {
  return { maxOldGenerationSizeMb: 128 + Math.ceil(turns / 1_000), maxYoungGenerationSizeMb: 24 };
}
