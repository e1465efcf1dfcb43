// Two builds of core side by side in ONE process: the dispatch body of bench/dispatcher-overhead.mjs
// (a payment call through Dispatcher.dispatch on a MemoryLedger) for this checkout's build and for
// another build's, plus the bare MemoryLedger claim+complete of this build, in alternating slices
// (the two builds swap places every round, the ledger's slice last), as CPU µs per call (process.cpuUsage). For judging a
// change to the dispatcher back to back on a busy host: load falls on both builds alike. A
// benchmark: asserts nothing.
//
//   node bench/dispatcher-ab.mjs <other build's packages/core/dist/index.js> [calls per slice] [rounds]
//
// The other build needs its own zod beside it (a checkout with node_modules, or a copy of its
// packages/core with a node_modules link).
import { createRequire } from "node:module";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { paymentAccepted } from "./dispatcher-overhead.mjs";
import { paymentTool } from "./common.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const [otherIndex, sliceArg = "4000", roundsArg = "20"] = process.argv.slice(2);
if (otherIndex === undefined) throw new Error("usage: node bench/dispatcher-ab.mjs <other build's index.js> [calls per slice] [rounds]");
const slice = Number(sliceArg);
const rounds = Number(roundsArg);

const pay = (i) => ({ payee: "acme-supplies", amount: 12_500 + (i % 97), currency: "EUR", reference: `T-${i}`, memo: "invoice 7" });

/** The dispatch body of bench/dispatcher-overhead.mjs on the build whose index.js is `index`. */
async function dispatchBody(index, tag) {
  const core = await import(pathToFileURL(resolve(index)).href);
  // zod is core's peer: each build gets a schema from the zod beside it.
  const { z } = createRequire(join(dirname(resolve(index)), "..", "package.json"))("zod");
  const tool = paymentTool(core, z, paymentAccepted);
  const run = `${process.pid}-${tag}`;
  return {
    core,
    make() {
      const dispatcher = new core.Dispatcher({ tools: [tool], ledger: new core.MemoryLedger() });
      return (i) => dispatcher.turn({ conversationId: `${run}-c-${i}`, turnIndex: 0 }).dispatch({ name: "send_payment", input: pay(i) });
    },
  };
}

const here = await dispatchBody(join(root, "packages", "core", "dist", "index.js"), "this");
const other = await dispatchBody(otherIndex, "other");
function makeLedgerBody() {
  const ledger = new here.core.MemoryLedger();
  return async (i) => {
    const key = `${process.pid}-l-${i}`;
    const claim = await ledger.claim({ key, toolName: "send_payment", effect: "keyed_write", owner: "bench", leaseMs: 30_000, request: JSON.stringify(pay(i)) });
    await ledger.complete(key, claim.fence, JSON.stringify({ paymentId: `pay_${i}`, status: "accepted" }));
  };
}
const makers = { other: other.make, this: here.make, ledger: makeLedgerBody };
const names = Object.keys(makers);
for (const name of names) {
  const body = makers[name]();
  for (let i = 0; i < 5_000; i++) await body(-1 - i); // warm-up, own keys
}
const used = Object.fromEntries(names.map((n) => [n, 0]));
/** Per round, this build's CPU over the other's: the median is robust to a collection that lands on one slice. */
const ratios = [];
/** Per body, the wall time per call of each slice: a slice no other process interrupted reads lowest. */
const walls = Object.fromEntries(names.map((n) => [n, []]));
let next = 0;
for (let round = 0; round < rounds; round++) {
  // The two builds swap places every round; the bare ledger runs last.
  const order = round % 2 === 0 ? ["other", "this", "ledger"] : ["this", "other", "ledger"];
  const spent = {};
  const wall = {};
  // A fresh ledger (and dispatcher) for every body each round: the rows kept stay a round's, so
  // the old generation's collections stay small and fall on the slices evenly.
  const bodies = Object.fromEntries(names.map((n) => [n, makers[n]()]));
  for (const name of order) {
    const before = process.cpuUsage();
    const started = process.hrtime.bigint();
    for (let i = next; i < next + slice; i++) await bodies[name](i);
    const delta = process.cpuUsage(before);
    wall[name] = Number(process.hrtime.bigint() - started) / 1_000 / slice;
    spent[name] = delta.user + delta.system;
    walls[name].push(wall[name]);
    used[name] += spent[name];
  }
  ratios.push(spent.this / spent.other);
  next += slice;
}
const us = Object.fromEntries(names.map((n) => [n, used[n] / (slice * rounds)]));
const quantile = (values, q) => [...values].sort((a, b) => a - b)[Math.floor(q * values.length)];
const sorted = [...ratios].sort((a, b) => a - b);
const at = (q) => Number(sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))].toFixed(4));
console.log(
  JSON.stringify({
    calls: slice * rounds,
    cpuUsPerCall: Object.fromEntries(names.map((n) => [n, Number(us[n].toFixed(3))])),
    thisToOther: Number((us.this / us.other).toFixed(4)),
    thisToOtherByRound: { median: at(0.5), q1: at(0.25), q3: at(0.75) },
    // Wall µs per call, a low quantile of the slices (the least disturbed by other processes).
    wallUsPerCallP10: Object.fromEntries(names.map((n) => [n, Number(quantile(walls[n], 0.1).toFixed(3))])),
    wallP10ThisToOther: Number((quantile(walls.this, 0.1) / quantile(walls.other, 0.1)).toFixed(4)),
    savedUsPerCall: Number((us.other - us.this).toFixed(3)),
    aboveLedger: { other: Number((us.other - us.ledger).toFixed(3)), this: Number((us.this - us.ledger).toFixed(3)) },
  }),
);
