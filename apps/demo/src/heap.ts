import type { ResourceLimits } from "node:worker_threads";

/**
 * Heap caps of a thread that runs one side of `turns` chaos turns. Uncapped, V8 let each
 * thread's heap grow to several times what it kept live (a 20,000-turn run peaked at 1.19 GB
 * of RSS). The old generation gets a floor for the modules and the servers plus room for what
 * the run keeps per turn (its counters and indexes, well under 1 KB a turn). (With a 96 MB old
 * generation, GC had been 14 % against 6 %: the old generation is not the knob.)
 *
 * The young generation is 12 MB, V8's usual being 48: each side's new space is then 8 MB of
 * physical pages instead of 16 (24 MB). Peak RSS at 20,000 turns, four runs of each, alternating
 * on one host: 273,280-284,136 KiB (280-291 MB) at 12 against 293,904-315,988 KiB (301-324 MB)
 * at 24; 16 read the same as 24 (297,832-307,300 KiB).
 * The cost is more scavenges: GC 15.7-15.8 % of each side's samples against 11.6-11.8 % at 24
 * (4,000 turns, --cpu-prof), about 4.5 % more CPU, which the demo's time target (missed by about
 * 2x, bounded by the SDK over HTTP) cannot use and its memory target (300 MB) can.
 */
export function sideHeapLimits(turns: number): ResourceLimits {
  return { maxOldGenerationSizeMb: 128 + Math.ceil(turns / 1_000), maxYoungGenerationSizeMb: 12 };
}
