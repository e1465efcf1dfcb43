// What the root benches share: the payment call and tool of the benches that run the dispatcher
// (peers, dispatcher beside its ledger), their driver, and how a figure is printed.

/** A payment call's arguments, the `i`th of a run; `tag` keeps one bench's references apart from another's. */
export const pay = (i, tag) => ({ payee: "acme-supplies", amount: 12_500 + (i % 97), currency: "EUR", reference: `${tag}-${i}`, memo: "invoice 7" });

/** The payment tool the benches dispatch: it answers `result` at once. */
export function paymentTool(core, z, result) {
  return core.defineTool({
    name: "send_payment",
    effect: "keyed_write",
    input: z.object({ payee: z.string(), amount: z.number().int().positive(), currency: z.string().length(3), reference: z.string(), memo: z.string().optional() }),
    identity: ["payee", "amount", "currency", "reference"],
    async run() {
      return result;
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

/** A figure as the bench prints it: whole and grouped from 100 up, else to one decimal place ("-" for none). */
export function fmt(n) {
  if (typeof n !== "number" || !Number.isFinite(n)) return "-";
  return n >= 100 ? Math.round(n).toLocaleString("en-US") : String(Number(n.toFixed(1)));
}
