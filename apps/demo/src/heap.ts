import type { ResourceLimits } from "node:worker_threads";

/**
 * Heap caps of a thread that runs one side of `turns` chaos turns. Uncapped, V8 let each
 * thread's heap grow to several times what it kept live (a 20,000-turn run peaked at 1.19 GB
 * of RSS). The old generation gets a floor for the modules and the servers plus room for what
 * the run keeps per turn (its counters and indexes, well under 1 KB a turn). The young
 * generation is kept at V8's usual 48 MB (three 16 MB semi-spaces): V8 shrinks it along with a
 * small old generation, and a small one promotes request garbage that then costs full
 * collections (GC went from 6 % to 14 % of the CPU with a 96 MB old generation alone; 32 MB
 * cost about 5 % more CPU than 48 for 9 MB less RSS).
 */
export function sideHeapLimits(turns: number): ResourceLimits {
  return { maxOldGenerationSizeMb: 128 + Math.ceil(turns / 1_000), maxYoungGenerationSizeMb: 48 };
}
