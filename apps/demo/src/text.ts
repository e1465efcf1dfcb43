import type { ChaosProgress, ChaosResult } from "./chaos.js";
import { IN_WINDOW, POSITIONS } from "./positions.js";
import type { IncidentSide } from "./incident.js";
import { PROVIDER_API, type DemoProvider } from "./providers.js";
import type { DemoResult } from "./run.js";
import { oneIn } from "./stats.js";

const n = (x: number) => x.toLocaleString("en-US");
const pct = (x: number) => `${(x * 100).toFixed(x < 0.01 ? 2 : 1)} %`;
const ms = (x: number) => `${Math.round(x)} ms`;

/** Which provider, and so which API, each part ran on (results written before the option existed: anthropic). */
export function providerLine(incident: DemoProvider | undefined, chaos: DemoProvider | undefined): string {
  const named = (p: DemoProvider) => `${p}, the ${PROVIDER_API[p] ?? "unknown API"}`;
  const first = incident ?? "anthropic";
  return `${named(first)}${chaos !== undefined && chaos !== first ? ` (chaos run: ${named(chaos)})` : ""}`;
}

/** The human-readable report printed at the end of `pnpm demo`. */
export function renderText(result: DemoResult): string {
  const out: string[] = [];
  const { incident, chaos, ledger } = result;
  const ledgerName = { sqlite: "SQLite", postgres: "PostgreSQL", redis: "Redis" }[ledger.kind];
  out.push("Dispatch-Once demo: a payment made twice after a cut-off stream is retried, and the fix");
  out.push(`ledger: ${ledgerName} ${ledger.location}, ${ledger.durability}    seed: ${result.seed}    provider: ${providerLine(incident.provider, chaos.provider)}`);
  if (ledger.note !== undefined) out.push("", `!!! VOLATILE LEDGER: ${ledger.note}`, "");
  for (const w of ledger.warnings) out.push(`warning: ${w}`);
  out.push("");

  const scaleNote = incident.timeScale === 1 ? "" : ` (time scale ${incident.timeScale})`;
  out.push(
    `1. THE INCIDENT: send_payment takes ${ms(incident.paymentsMs)}, the provider's gap before ${incident.events.finish} is ${ms(incident.gapMs)}${scaleNote};`,
  );
  out.push(`   the connection resets ${ms(incident.resetAfterAcceptMs)} after the payment was accepted, before ${incident.events.finish}.`);
  out.push("");
  out.push(...sideTimeline(`Naive handler (runs every call it is handed; its Idempotency-Key is the ${incident.events.callIdPrefix} id)`, incident.naive));
  out.push(...sideTimeline(`Dispatch-Once (key from conversation, turn, tool, ordinal, arguments; claimed in the ${ledgerName} ledger first)`, incident.guarded));
  const w = incident.naive.window;
  if (w !== undefined) {
    out.push(
      `   The window (naive run): dispatch at ${w.dispatchMs} ms, payment accepted +${w.acceptedMs - w.dispatchMs} ms, ` +
        `reset +${w.resetMs - w.dispatchMs} ms; ${incident.events.finish} was due at +${Math.round(w.messageStopDueMs - w.dispatchMs)} ms ` +
        `(the provider's ${ms(incident.gapMs)} after the handler got the payment's answer at +${w.resolvedMs - w.dispatchMs} ms).`,
    );
    out.push("   A reset anywhere in there leaves a payment made and a turn that never happened, as far as the retry can tell.");
  }
  out.push("");
  out.push(...chaosText(chaos));
  out.push("");
  const usage = result.process;
  const cost = usage === undefined ? "" : ` (CPU ${((usage.cpuUserMs + usage.cpuSystemMs) / 1000).toFixed(1)} s, peak RSS ${Math.round(usage.maxRssKiB / 1024)} MiB)`;
  out.push(`Finished in ${(result.durationMs / 1000).toFixed(1)} s${cost}. Same --seed, same counts. --json for one JSON object, --report FILE for an HTML page.`);
  return out.join("\n");
}

function sideTimeline(title: string, side: IncidentSide): string[] {
  const out = [`   ${title}`, "        ms  attempt  what happened"];
  for (const e of side.timeline) {
    out.push(`   ${String(e.atMs).padStart(7)}  ${String(e.attempt).padStart(4)}     ${e.text}`);
  }
  const what =
    side.retryDispatch === "ran_again"
      ? "the retry's dispatch ran the tool again"
      : side.retryDispatch === "replayed_from_ledger"
        ? "the retry's dispatch was answered from the ledger"
        : "there was no retry dispatch";
  out.push(`   => the payments API's effect log shows ${side.payments} payment${side.payments === 1 ? "" : "s"} (${what}).`);
  out.push("");
  return out;
}

export function chaosText(chaos: ChaosResult): string[] {
  const out: string[] = [];
  out.push(
    `2. THE CHAOS RUN: ${n(chaos.turns)} payment messages per side over ${chaos.concurrency} concurrent conversations ` +
      `(${chaos.messagesPerConversation} messages each; every message is a payment turn and the model's confirmation)`,
  );
  out.push(
    `   faults: streams fail once on ${pct(chaos.failureRate)} of payment turns; the payments API loses its response ` +
      `to ${pct(chaos.dropRate)} of first POSTs (after it paid); ${pct(chaos.rewordRate)} of messages get their memo re-worded on a retry`,
  );
  out.push(
    `   time scale ${chaos.timeScale}: payments call ${chaos.paymentsMs.toFixed(1)} ms, provider gap ${chaos.gapMs.toFixed(1)} ms ` +
      `(the chapter's 820 ms and 240 ms x ${chaos.timeScale}); every fault is drawn per message from the seed.`,
  );
  out.push("");
  out.push("   stream failures by position         planned  measured");
  for (const p of POSITIONS) {
    const tag = IN_WINDOW.has(p) ? " (window)" : "";
    out.push(`     ${(p + tag).padEnd(36)}${String(chaos.plannedByPosition[p]).padStart(6)}${String(chaos.byPosition[p]).padStart(10)}`);
  }
  out.push(`     ${"total".padEnd(36)}${String(sum(chaos.plannedByPosition)).padStart(6)}${String(chaos.streamFailures).padStart(10)}`);
  out.push(
    `     inside the window: ${chaos.failuresInWindow} of ${chaos.streamFailures}` +
      (chaos.streamFailures > 0 ? ` (${pct(chaos.failuresInWindow / chaos.streamFailures)}; the chapter: 11 %)` : ""),
  );
  out.push(`     lost payments responses: ${chaos.planned.lostResponses} planned, ${chaos.guarded.lostResponses} measured`);
  out.push("");
  out.push("                                              naive    Dispatch-Once");
  const row = (label: string, a: string, b: string) => `     ${label.padEnd(38)}${a.padStart(8)}${b.padStart(15)}`;
  const { naive, guarded } = chaos;
  out.push(row("messages", n(naive.turns), n(guarded.turns)));
  out.push(row("payments made (effect log)", n(naive.payments), n(guarded.payments)));
  out.push(row("DUPLICATE payments", n(naive.duplicates), n(guarded.duplicates)));
  out.push(row("  after a cut stream", n(naive.duplicatesByCause.streamCut), n(guarded.duplicatesByCause.streamCut)));
  out.push(row("  after a lost payments response", n(naive.duplicatesByCause.lostResponse), n(guarded.duplicatesByCause.lostResponse)));
  out.push(row("MISREPORTED effects", n(naive.misreports), n(guarded.misreports)));
  out.push(row("told \"may have happened\" (truthful)", n(naive.mayHaveHappened), n(guarded.mayHaveHappened)));
  out.push(row("POSTs to the payments API", n(naive.posts), n(guarded.posts)));
  out.push(row("  answered from its Idempotency-Key", n(naive.downstreamReplays), n(guarded.downstreamReplays)));
  out.push(row("retries answered from the ledger", "-", n(guarded.replayedFromLedger)));
  out.push(row("re-worded retries sent as first asked", "-", n(guarded.requestDiffers)));
  out.push(row("lost responses settled by reconciliation", "-", n(guarded.reconciled)));
  out.push(row("model responses with a re-worded memo", n(naive.rewordedResponses), n(guarded.rewordedResponses)));
  out.push(row("messages failed for good", n(naive.failedTurns), n(guarded.failedTurns)));
  const reasons = Object.entries(naive.misreportReasons).filter(([, count]) => count > 0);
  if (reasons.length > 0) out.push(`     naive misreports by reason: ${reasons.map(([r, count]) => `${r} ${count}`).join(", ")}`);
  out.push(
    "     (misreported: what the conversation committed or the failed-turn record says disagrees with the effect log)",
  );
  out.push("");
  const r = chaos.naiveDuplicateRate;
  const c = chaos.chapter;
  const t = c.atThisFailureRate;
  out.push(
    `   naive duplicates after a cut stream: ${r.successes} / ${n(r.trials)} turns = ${oneIn(r.rate)}; 95 % interval (Wilson) ` +
      `${r.low === 0 ? "0" : oneIn(r.low)} .. ${oneIn(r.high)}`,
  );
  out.push(`   the chapter: 0.006 x 0.11 = ${c.duplicateRate.toFixed(5)}, about ${oneIn(c.duplicateRate)} turns`);
  if (chaos.failureRate !== c.failureRate) {
    out.push(`   at this run's failure rate: ${chaos.failureRate} x 0.11 = ${t.duplicateRate.toPrecision(3)}, about ${oneIn(t.duplicateRate)}`);
  }
  out.push(
    `   expected here: ${t.expectedDuplicates.toFixed(1)} duplicates; the estimate is ${t.insideInterval ? "INSIDE" : "OUTSIDE"} the measured interval` +
      (r.successes < 10
        ? ` (few events: for a tighter interval use --turns ${n(chaos.turns * 10)}` +
          (chaos.failureRate <= 0.1 ? ` or --failure-rate ${Number((chaos.failureRate * 10).toPrecision(3))})` : ")")
        : ""),
  );
  out.push("");
  out.push("   every replay route, counted the same way                   duplicates          misreported      may have happened");
  out.push("                                                  replays   naive  Dispatch-Once   naive  Dispatch-Once   naive  Dispatch-Once");
  const names: Record<string, string> = {
    automatic_retry: "automatic retry of the stream",
    client_resend: "client re-sends after a failed turn",
    queue_redelivery: "queue redelivers after a stalled worker",
  };
  const pair = (a: number, b: number) => `${n(a).padStart(8)}${n(b).padStart(15)}`;
  for (const route of chaos.routes) {
    out.push(
      `     ${names[route.name]!.padEnd(41)}${n(route.replays).padStart(10)}` +
        pair(route.naive.duplicates, route.guarded.duplicates) +
        pair(route.naive.misreports, route.guarded.misreports) +
        pair(route.naive.mayHaveHappened, route.guarded.mayHaveHappened),
    );
  }
  if (chaos.anomalies.length > 0) {
    out.push("");
    out.push(`   ANOMALIES (${chaos.anomalies.length}), please report:`);
    for (const a of chaos.anomalies.slice(0, 20)) out.push(`     ${a}`);
  }
  return out;
}

function sum(counts: Record<string, number>): number {
  return Object.values(counts).reduce((a, b) => a + b, 0);
}

/** A one-line progress display for stderr, redrawn in place. */
export class ProgressBar {
  private readonly state = new Map<string, ChaosProgress>();
  private last = 0;
  constructor(private readonly stream: NodeJS.WriteStream) {}

  update(progress: ChaosProgress): void {
    this.state.set(progress.side, progress);
    const now = Date.now();
    if (now - this.last < 80 && progress.done < progress.total) return;
    this.last = now;
    const parts = (["naive", "guarded"] as const).map((side) => {
      const p = this.state.get(side);
      if (p === undefined) return `${side} waiting`;
      const width = 16;
      const filled = p.total === 0 ? width : Math.round((p.done / p.total) * width);
      const phase = p.phase === "automatic_retry" ? "" : ` ${p.phase.replace("_", " ")}`;
      return `${side} [${"#".repeat(filled)}${".".repeat(width - filled)}] ${p.done}/${p.total}${phase} dup ${p.duplicates}`;
    });
    this.stream.write(`\r  ${parts.join("  |  ")}\u001b[K`);
  }

  done(): void {
    this.stream.write("\r\u001b[K");
  }
}
