// What the root benches that run the dispatcher share (peers, dispatcher beside its ledger).

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
