// What the root benches share: the payment call and tool of the benches that run the dispatcher
// (peers, dispatcher beside its ledger), their driver, and how a figure is printed.
import { createHash } from "node:crypto";

/** A payment call's arguments, the `i`th of a run; `tag` keeps one bench's references apart from another's. */
export const pay = (i, tag) => ({ payee: "acme-supplies", amount: 12_500 + (i % 97), currency: "EUR", reference: `${tag}-${i}`, memo: "invoice 7" });

/**
 * The payment tool the benches dispatch, on a given build of core and its zod: it answers `result`
 * at once, or, when `result` is a function, what it makes of the call's arguments (a new object per
 * call, as the dispatcher-overhead bodies have always measured).
 */
export function paymentTool(core, z, result) {
  return core.defineTool({
    name: "send_payment",
    effect: "keyed_write",
    input: z.object({ payee: z.string(), amount: z.number().int().positive(), currency: z.string().length(3), reference: z.string(), memo: z.string().optional() }),
    identity: ["payee", "amount", "currency", "reference"],
    async run(args) {
      return typeof result === "function" ? result(args) : result;
    },
  });
}

/** `concurrency` loops of `op` for `ms`: calls made, wall time, and the process CPU time they took. */
export async function drive(concurrency, ms, op) {
  const end = performance.now() + ms;
  const started = performance.now();
  const cpu = process.cpuUsage();
  let ops = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (performance.now() < end) {
        await op();
        ops++;
      }
    }),
  );
  const used = process.cpuUsage(cpu);
  return { ops, elapsedMs: performance.now() - started, cpuUs: used.user + used.system };
}

/**
 * Orders in which to run `sides` in a bench's rounds, so that each side runs in each position,
 * and after each other side, equally often: what a slice leaves behind (its garbage, a store's
 * state) then falls on every side alike. Every permutation once, or `rounds` (a multiple of
 * their number) cycling through them.
 */
export function balancedOrders(sides, rounds) {
  const permutations = (items) =>
    items.length <= 1 ? [items] : items.flatMap((item, i) => permutations([...items.slice(0, i), ...items.slice(i + 1)]).map((rest) => [item, ...rest]));
  const all = permutations(sides);
  const n = rounds ?? all.length;
  if (n % all.length !== 0) throw new Error(`${n} rounds do not run each of the ${all.length} orders of ${sides.length} sides equally often`);
  return Array.from({ length: n }, (_, i) => all[i % all.length]);
}

/**
 * How far `top`'s rate runs from `bottom`'s over the rounds of one bench: slice i of each list
 * was taken in round i (as `drive` gives them), so each round's ratio is of slices side by side.
 */
export function ratioByRound(top, bottom) {
  return spread(top.map((part, i) => part.ops / part.elapsedMs / (bottom[i].ops / bottom[i].elapsedMs)));
}

/** The least, median and greatest of some ratios, to two decimal places. */
export function spread(values) {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  const median = sorted.length % 2 === 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
  const two = (x) => Number(x.toFixed(2));
  return { min: two(sorted[0]), median: two(median), max: two(sorted[sorted.length - 1]), rounds: sorted.length };
}

/** What referenceUs times, as the report names it. */
export const REFERENCE_WORKLOAD = "SHA-256 of a payment's arguments as JSON, and the JSON parsed back";

/**
 * CPU-bound work with no I/O, timed on this host (µs a call, the median of 5 samples of 20,000).
 * Hosts of one kind, and one host over an hour, run the same code at speeds up to 2x apart; a
 * run that records this beside its figures says which speed they were taken at.
 */
export function referenceUs() {
  const samples = [];
  for (let s = 0; s < 5; s++) {
    const started = process.hrtime.bigint();
    for (let i = 0; i < 20_000; i++) {
      const text = JSON.stringify(pay(i, "R"));
      // The results are used, so that the compiler cannot drop the work.
      if (createHash("sha256").update(text).digest("base64url").length !== 43 || JSON.parse(text).amount < 0) throw new Error("unreachable");
    }
    samples.push(Number(process.hrtime.bigint() - started) / 1e3 / 20_000);
  }
  return Number(samples.sort((a, b) => a - b)[2].toFixed(2));
}

/** A figure as the bench prints it: whole and grouped from 100 up, else to one decimal place ("-" for none). */
export function fmt(n) {
  if (typeof n !== "number" || !Number.isFinite(n)) return "-";
  return n >= 100 ? Math.round(n).toLocaleString("en-US") : String(Number(n.toFixed(1)));
}
