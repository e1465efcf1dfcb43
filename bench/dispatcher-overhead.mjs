// Dispatcher CPU per call above its ledger: the same N payment calls once as bare
// MemoryLedger claim+complete, once through Dispatcher.dispatch on a MemoryLedger (a tool
// that returns at once). Measured as process CPU time (user+system) per call, so other
// jobs on the machine slow the wall clock but not this number much. A benchmark: asserts nothing.
import { execFileSync } from "node:child_process";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { paymentTool } from "./common.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const core = await import(pathToFileURL(join(root, "packages", "core", "dist", "index.js")).href);
// zod is core's peer; resolve it from core so the bench needs no dependency of its own.
const { z } = createRequire(join(root, "packages", "core", "package.json"))("zod");

const pay = (i) => ({ payee: "acme-supplies", amount: 12_500 + (i % 97), currency: "EUR", reference: `T-${i}`, memo: "invoice 7" });

/**
 * CPU µs per call of each body, measured in interleaved slices (a slice of one, then of the
 * other, `rounds` times), so that load from other jobs and the heap's growth fall on both alike.
 */
async function cpuPerCallInterleaved(calls, bodies, rounds = 10) {
  const slice = Math.max(1, Math.floor(calls / rounds));
  for (const body of bodies) for (let i = 0; i < Math.min(2_000, slice); i++) await body(-1 - i); // warm-up, own keys
  const used = bodies.map(() => 0);
  for (let round = 0; round < rounds; round++) {
    for (let b = 0; b < bodies.length; b++) {
      const before = process.cpuUsage();
      for (let i = round * slice; i < (round + 1) * slice; i++) await bodies[b](i);
      const delta = process.cpuUsage(before);
      used[b] += delta.user + delta.system;
    }
  }
  return used.map((us) => us / (slice * rounds));
}

/** A bare claim's request: the payment call's, as the dispatcher would store it. */
const bareClaim = (key, i) => ({ key, toolName: "send_payment", effect: "keyed_write", owner: "bench", leaseMs: 30_000, request: JSON.stringify(pay(i)) });

/** A bare claim+complete on a memory ledger of its own; `claimOf` makes each claim's request. */
function bareBody(run, tag, claimOf) {
  const ledger = new core.MemoryLedger();
  return async (i) => {
    const key = `${run}-${tag}-${i}`;
    const claim = await ledger.claim(claimOf(key, i));
    await ledger.complete(key, claim.fence, JSON.stringify({ paymentId: `pay_${i}`, status: "accepted" }));
  };
}

function makeBodies() {
  const run = `${process.pid}-${Date.now()}`;
  const ledgerBody = bareBody(run, "l", bareClaim);
  // The bare claim+complete again, given what the dispatcher's claims carry besides (a claim id,
  // the conversation and the turn): the ledger's own work on them, which the figure above the
  // plain bare body counts as the dispatcher's. Its claim id is a template string; the dispatcher
  // draws random bytes for its own, and that stays on the dispatcher's side. Written out, not
  // spread from bareClaim: V8 builds a spread followed by more members on a slow path, which
  // would count against the ledger here.
  const ledgerSameFieldsBody = bareBody(run, "f", (key, i) => ({
    key,
    toolName: "send_payment",
    effect: "keyed_write",
    owner: "bench",
    leaseMs: 30_000,
    request: JSON.stringify(pay(i)),
    claimId: `c${i}-bench-claim-id`,
    conversationId: `${run}-c-${i}`,
    turnIndex: 0,
  }));
  const tool = paymentTool(core, z, paymentAccepted);
  const dispatcher = new core.Dispatcher({ tools: [tool], ledger: new core.MemoryLedger() });
  const dispatchBody = (i) =>
    dispatcher.turn({ conversationId: `${run}-c-${i}`, turnIndex: 0 }).dispatch({ name: "send_payment", input: pay(i) });
  return { ledger: ledgerBody, ledgerSameFields: ledgerSameFieldsBody, dispatch: dispatchBody };
}

/** CPU µs per call of one body alone in this process, after a warm-up on keys of its own. */
async function cpuPerCallAlone(calls, body) {
  for (let i = 0; i < 2_000; i++) await body(-1 - i);
  const before = process.cpuUsage();
  for (let i = 0; i < calls; i++) await body(i);
  const delta = process.cpuUsage(before);
  return (delta.user + delta.system) / calls;
}

const median = (values) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];

/**
 * The number is taken with each body in a process of its own (`runs` alternating processes per
 * body, the median): in interleaved slices of one process, the collector's work falls on
 * whichever body is running when it starts, and the dispatcher, which allocates most, starts most
 * scavenges, including those that copy the bare ledger's rows. The interleaved figure is reported
 * beside it.
 */
/** What the payment tool of both dispatch bodies answers (this bench's and bench/dispatcher-ab.mjs's). */
export const paymentAccepted = (args) => ({ paymentId: `pay_${args.reference}`, status: "accepted" });

export async function benchDispatcherOverhead({ calls = 40_000, runs = 3 } = {}) {
  const self = fileURLToPath(import.meta.url);
  const alone = (body) => Number(execFileSync(process.execPath, [self, "--alone", body, String(calls)], { encoding: "utf8" }).trim());
  const ledgerRuns = [];
  const ledgerSameFieldsRuns = [];
  const dispatchRuns = [];
  for (let r = 0; r < runs; r++) {
    ledgerRuns.push(alone("ledger"));
    ledgerSameFieldsRuns.push(alone("ledgerSameFields"));
    dispatchRuns.push(alone("dispatch"));
  }
  const bodies = makeBodies();
  const [ledgerInterleaved, dispatchInterleaved] = await cpuPerCallInterleaved(calls, [bodies.ledger, bodies.dispatch]);
  const ledgerUs = median(ledgerRuns);
  const dispatchUs = median(dispatchRuns);
  return {
    calls,
    runs,
    ledgerCpuUsPerCall: ledgerUs,
    dispatchCpuUsPerCall: dispatchUs,
    overheadCpuUsPerCall: dispatchUs - ledgerUs,
    // Above the bare body given the claim id, conversation and turn as well: the dispatcher's own work.
    ledgerSameFieldsCpuUsPerCall: median(ledgerSameFieldsRuns),
    overheadAboveSameFieldsCpuUsPerCall: dispatchUs - median(ledgerSameFieldsRuns),
    perProcess: { ledger: ledgerRuns, ledgerSameFields: ledgerSameFieldsRuns, dispatch: dispatchRuns },
    interleavedOverheadCpuUsPerCall: dispatchInterleaved - ledgerInterleaved,
  };
}

const aloneIndex = process.argv.indexOf("--alone");
if (aloneIndex >= 0) {
  const body = process.argv[aloneIndex + 1];
  const calls = Number(process.argv[aloneIndex + 2]);
  const bodies = makeBodies();
  if (!(body in bodies) || !Number.isSafeInteger(calls) || calls < 1) throw new Error("usage: --alone ledger|ledgerSameFields|dispatch <calls>");
  process.stdout.write(`${await cpuPerCallAlone(calls, bodies[body])}\n`);
} else if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  console.log(JSON.stringify(await benchDispatcherOverhead()));
}
