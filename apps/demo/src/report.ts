import { IN_WINDOW, POSITIONS } from "./positions.js";
import type { IncidentResult, IncidentSide, TimelineEntry } from "./incident.js";
import type { DemoResult } from "./run.js";
import { oneIn } from "./stats.js";
import { providerLine } from "./text.js";

/*
 * The --report page: one self-contained HTML file (inline CSS and SVG, no scripts, no external
 * assets), so it opens offline and renders the same in any browser.
 */

const esc = (text: string | number) =>
  String(text).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]!);
const num = (x: number) => x.toLocaleString("en-US");
const fix = (x: number, d = 1) => x.toFixed(d);

const COLORS = {
  naive: "#c0392b",
  guarded: "#1e8449",
  window: "#f5cba7",
  stream: "#5d6d7e",
  pre: "#85929e",
  axis: "#34495e",
  replay: "#2e86c1",
};

export function renderReport(result: DemoResult): string {
  const { incident, chaos } = result;
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Dispatch-Once demo: the cut-off stream, replayed and measured</title>
<style>
  body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1c2833; margin: 0; background: #fbfcfc; }
  main { max-width: 1100px; margin: 0 auto; padding: 24px 32px 48px; }
  h1 { font-size: 24px; margin: 0 0 4px; }
  h2 { font-size: 19px; margin: 32px 0 8px; border-bottom: 1px solid #d5d8dc; padding-bottom: 4px; }
  .meta { color: #566573; font-size: 13px; }
  .cards { display: flex; gap: 16px; flex-wrap: wrap; margin: 16px 0; }
  .card { background: #fff; border: 1px solid #d5d8dc; border-radius: 8px; padding: 12px 16px; min-width: 220px; }
  .card .big { font-size: 30px; font-weight: 700; }
  .naive { color: ${COLORS.naive}; } .guarded { color: ${COLORS.guarded}; }
  table { border-collapse: collapse; margin: 8px 0 16px; background: #fff; }
  th, td { border: 1px solid #d5d8dc; padding: 4px 10px; text-align: right; font-variant-numeric: tabular-nums; }
  th:first-child, td:first-child { text-align: left; }
  svg { background: #fff; border: 1px solid #d5d8dc; border-radius: 6px; display: block; margin: 8px 0; }
  svg text { font: 12px system-ui, sans-serif; fill: #1c2833; }
  .note { color: #566573; font-size: 13px; max-width: 900px; }
  code { background: #f2f3f4; padding: 1px 4px; border-radius: 3px; }
</style>
</head>
<body>
<main>
<h1>Dispatch-Once: a payment made twice after a cut-off stream is retried, and the fix</h1>
<p class="meta">seed ${esc(result.seed)} · provider ${esc(providerLine(incident.provider, chaos.provider))} · ledger ${esc(result.ledger.kind)} (${esc(result.ledger.durability)}) · chaos time scale ${esc(chaos.timeScale)} · incident time scale ${esc(incident.timeScale)}</p>
<div class="cards">
  <div class="card" id="card-incident-naive"><div>Incident, naive handler</div><div class="big naive">${incident.naive.payments} payments</div></div>
  <div class="card" id="card-incident-guarded"><div>Incident, Dispatch-Once</div><div class="big guarded">${incident.guarded.payments} payment${incident.guarded.payments === 1 ? "" : "s"}</div></div>
  <div class="card" id="card-chaos-naive"><div>Chaos run, naive: duplicates in ${num(chaos.turns)} turns</div><div class="big naive">${num(chaos.naive.duplicates)}</div></div>
  <div class="card" id="card-chaos-guarded"><div>Chaos run, Dispatch-Once</div><div class="big guarded">${num(chaos.guarded.duplicates)}</div></div>
  <div class="card" id="card-misreports"><div>Misreported effects, naive / Dispatch-Once</div><div class="big"><span class="naive">${num(sumRoutes(result, "naive"))}</span> / <span class="guarded">${num(sumRoutes(result, "guarded"))}</span></div></div>
</div>

<h2>1. The incident: the window between the side effect and the end of the stream</h2>
<p class="note">The payments call takes ${fix(incident.paymentsMs, 0)} ms and the provider's gap before <code>${esc(incident.events.finish)}</code> is ${fix(incident.gapMs, 0)} ms;
the connection resets ${fix(incident.resetAfterAcceptMs, 0)} ms after the payment was accepted. The retry re-sends the conversation as it stood before the turn,
and the model makes the same call again with a new <code>${esc(incident.events.callIdPrefix)}</code> id.</p>
${windowSvg(incident.naive, incident.gapMs, incident.events)}
${timelineSvg(incident.naive, incident.guarded, incident.events.finish)}
${timelineTable("Naive handler", incident.naive)}
${timelineTable("Dispatch-Once", incident.guarded)}

<h2>2. The chaos run</h2>
<p class="note">${num(chaos.turns)} payment messages per side over ${chaos.concurrency} concurrent conversations of ${chaos.messagesPerConversation}
messages (each a payment turn and the model's confirmation); a stream fails once on
${fix(chaos.failureRate * 100, 2)} % of payment turns, ${fix(chaos.split.preDispatch * 100, 0)} % of them before any dispatch and the rest inside the window;
the payments API loses its response to ${fix(chaos.dropRate * 100, 2)} % of first POSTs after paying; ${fix(chaos.rewordRate * 100, 0)} % of messages
get their memo re-worded by a retried response. Every fault is placed by a seeded generator per message.
Timings scaled by ${esc(chaos.timeScale)} (payments ${fix(chaos.paymentsMs)} ms, gap ${fix(chaos.gapMs)} ms).</p>
${positionsSvg(result)}
${routesSvg(result)}
${rateSvg(result)}
<table id="chaos-table">
<tr><th></th><th>naive</th><th>Dispatch-Once</th></tr>
<tr><td>turns</td><td>${num(chaos.naive.turns)}</td><td>${num(chaos.guarded.turns)}</td></tr>
<tr><td>stream failures</td><td>${num(chaos.naive.streamFailures)}</td><td>${num(chaos.guarded.streamFailures)}</td></tr>
<tr><td>payments made (effect log)</td><td>${num(chaos.naive.payments)}</td><td>${num(chaos.guarded.payments)}</td></tr>
<tr><td>duplicate payments</td><td class="naive">${num(chaos.naive.duplicates)}</td><td class="guarded">${num(chaos.guarded.duplicates)}</td></tr>
<tr><td>&nbsp;&nbsp;after a cut stream</td><td>${num(chaos.naive.duplicatesByCause.streamCut)}</td><td>${num(chaos.guarded.duplicatesByCause.streamCut)}</td></tr>
<tr><td>&nbsp;&nbsp;after a lost payments response</td><td>${num(chaos.naive.duplicatesByCause.lostResponse)}</td><td>${num(chaos.guarded.duplicatesByCause.lostResponse)}</td></tr>
<tr><td>misreported effects</td><td class="naive">${num(chaos.naive.misreports)}</td><td class="guarded">${num(chaos.guarded.misreports)}</td></tr>
<tr><td>told "may have happened" (truthful)</td><td>${num(chaos.naive.mayHaveHappened)}</td><td>${num(chaos.guarded.mayHaveHappened)}</td></tr>
<tr><td>POSTs to the payments API</td><td>${num(chaos.naive.posts)}</td><td>${num(chaos.guarded.posts)}</td></tr>
<tr><td>&nbsp;&nbsp;answered from its Idempotency-Key</td><td>${num(chaos.naive.downstreamReplays)}</td><td>${num(chaos.guarded.downstreamReplays)}</td></tr>
<tr><td>retries answered from the ledger</td><td>–</td><td>${num(chaos.guarded.replayedFromLedger)}</td></tr>
<tr><td>re-worded retries sent as first asked (LEDGER-21)</td><td>–</td><td>${num(chaos.guarded.requestDiffers)}</td></tr>
<tr><td>lost responses settled by reconciliation</td><td>–</td><td>${num(chaos.guarded.reconciled)}</td></tr>
</table>
<table id="routes-table">
<tr><th>replay route</th><th>replays</th><th>naive duplicates</th><th>Dispatch-Once duplicates</th><th>naive misreported</th><th>Dispatch-Once misreported</th><th>naive "may have happened"</th><th>Dispatch-Once "may have happened"</th></tr>
${chaos.routes
  .map(
    (r) =>
      `<tr><td>${esc(r.description)}</td><td>${num(r.replays)}</td><td class="naive">${num(r.naive.duplicates)}</td><td class="guarded">${num(r.guarded.duplicates)}</td>` +
      `<td class="naive">${num(r.naive.misreports)}</td><td class="guarded">${num(r.guarded.misreports)}</td><td>${num(r.naive.mayHaveHappened)}</td><td>${num(r.guarded.mayHaveHappened)}</td></tr>`,
  )
  .join("\n")}
</table>
<p class="note">Misreported: a message whose committed turns or failed-turn records disagree with the payments API's effect log (an error or
"not happened" for a payment that exists, a success naming a payment that does not, two payments where one was said). "May have happened"
is the truthful answer when nobody can tell; it is counted apart.</p>
<p class="note">The chapter's arithmetic: streams fail on 0.006 of turns, 0.11 of those failures land after dispatch;
0.006 × 0.11 = ${fix(chaos.chapter.duplicateRate, 5)}, one turn in about ${num(chaos.chapter.oneIn)}.
At this run's failure rate: ${esc(chaos.failureRate)} × 0.11 = ${chaos.chapter.atThisFailureRate.duplicateRate.toPrecision(3)} (${esc(oneIn(chaos.chapter.atThisFailureRate.duplicateRate))}).
Measured (naive, duplicates after a cut stream): ${chaos.naiveDuplicateRate.successes} / ${num(chaos.turns)}, 95 % Wilson interval
${fix(chaos.naiveDuplicateRate.low * 10_000, 2)} to ${fix(chaos.naiveDuplicateRate.high * 10_000, 2)} per 10,000 turns:
the estimate is <strong>${chaos.chapter.atThisFailureRate.insideInterval ? "inside" : "outside"}</strong> it.</p>
</main>
</body>
</html>
`;
}

function sumRoutes(result: DemoResult, side: "naive" | "guarded"): number {
  return result.chaos.routes.reduce((sum, r) => sum + r[side].misreports, 0);
}

/** The window on a time axis: dispatch, payment accepted, reset, the finishing event due. */
function windowSvg(side: IncidentSide, gapMs: number, events: IncidentResult["events"]): string {
  const w = side.window;
  if (w === undefined) return `<p id="incident-window-missing">The incident's window was not observed.</p>`;
  const width = 1000;
  const left = 60;
  const right = 40;
  const t0 = w.dispatchMs - Math.max(40, (w.messageStopDueMs - w.dispatchMs) * 0.1);
  const t1 = w.messageStopDueMs + Math.max(40, (w.messageStopDueMs - w.dispatchMs) * 0.1);
  const x = (t: number) => left + ((t - t0) / (t1 - t0)) * (width - left - right);
  const axisY = 150;
  const marks: Array<{ t: number; label: string; color: string; row: number }> = [
    { t: w.dispatchMs, label: `dispatch (${events.callDone})`, color: COLORS.axis, row: 0 },
    { t: w.acceptedMs, label: "payment accepted", color: COLORS.naive, row: 1 },
    { t: w.resetMs, label: "connection reset", color: "#000", row: 2 },
    { t: w.messageStopDueMs, label: `${events.finish} due`, color: COLORS.stream, row: 3 },
  ];
  const ticks = niceTicks(t0 - w.dispatchMs, t1 - w.dispatchMs, 8);
  const top = 40;
  const label = (m: (typeof marks)[number]) => {
    const y = top + 14 + m.row * 17;
    const flip = x(m.t) > width * 0.62;
    return `<g class="mark"><line x1="${x(m.t)}" y1="${y - 4}" x2="${x(m.t)}" y2="${axisY}" stroke="${m.color}" stroke-width="2.5"/><circle cx="${x(m.t)}" cy="${axisY}" r="4.5" fill="${m.color}"/><text x="${x(m.t) + (flip ? -6 : 6)}" y="${y}" text-anchor="${flip ? "end" : "start"}" fill="${m.color}">${esc(m.label)} (+${Math.round(m.t - w.dispatchMs)} ms)</text></g>`;
  };
  return `<svg id="incident-window" role="img" aria-label="The incident's window on a time axis" width="${width}" height="230" viewBox="0 0 ${width} 230" xmlns="http://www.w3.org/2000/svg">
  <text x="20" y="22" font-weight="bold">The window (naive run, attempt 1): a side effect has happened and the stream can still fail</text>
  <rect class="window" x="${x(w.dispatchMs)}" y="${top}" width="${x(w.messageStopDueMs) - x(w.dispatchMs)}" height="${axisY - top}" fill="${COLORS.window}" opacity="0.7"/>
  <rect class="effect-done" x="${x(w.acceptedMs)}" y="${top}" width="${x(w.messageStopDueMs) - x(w.acceptedMs)}" height="${axisY - top}" fill="${COLORS.naive}" opacity="0.18"/>
  <line x1="${left}" y1="${axisY}" x2="${width - right}" y2="${axisY}" stroke="${COLORS.axis}" stroke-width="1.5"/>
  ${ticks
    .map(
      (t) =>
        `<line x1="${x(w.dispatchMs + t)}" y1="${axisY}" x2="${x(w.dispatchMs + t)}" y2="${axisY + 6}" stroke="${COLORS.axis}"/><text x="${x(w.dispatchMs + t)}" y="${axisY + 20}" text-anchor="middle">${t >= 0 ? "+" : ""}${t} ms</text>`,
    )
    .join("\n  ")}
  ${marks.map(label).join("\n  ")}
  <text x="${(x(w.dispatchMs) + x(w.messageStopDueMs)) / 2}" y="${axisY + 40}" text-anchor="middle">the window: the payments call, then the provider's ${fix(gapMs, 0)} ms before ${esc(events.finish)}</text>
  <text x="${left}" y="222">ms after dispatch; shaded red: the payment exists but the turn is not committed</text>
</svg>`;
}

/** Both sides' attempts on one axis: streams, payments, the retry's dispatch. */
function timelineSvg(naive: IncidentSide, guarded: IncidentSide, finish: string): string {
  const width = 1000;
  const left = 130;
  const right = 175;
  const end = Math.max(...naive.timeline.map((e) => e.atMs), ...guarded.timeline.map((e) => e.atMs), 1);
  const x = (t: number) => left + (t / end) * (width - left - right);
  const lane = (side: IncidentSide, y: number, label: string, color: string) => {
    const parts: string[] = [`<text x="10" y="${y + 4}" font-weight="bold" fill="${color}">${esc(label)}</text>`];
    const starts = side.timeline.filter((e) => e.kind === "attempt_started" && !e.text.includes("confirms"));
    for (const start of starts) {
      const endEvent = side.timeline.find(
        (e) => e.attempt === start.attempt && e.atMs >= start.atMs && (e.kind === "stream_reset" || e.kind === "turn_committed"),
      );
      const stop = endEvent?.atMs ?? start.atMs;
      const cutOff = endEvent?.kind === "stream_reset";
      parts.push(
        `<rect class="stream" x="${x(start.atMs)}" y="${y - 8 + (start.attempt - 1) * 18}" width="${Math.max(2, x(stop) - x(start.atMs))}" height="12" fill="${COLORS.stream}" opacity="0.35"/>` +
          `<text x="${x(stop) + 4}" y="${y + 3 + (start.attempt - 1) * 18}">attempt ${start.attempt}${cutOff ? ": reset" : `: ${esc(finish)}`}</text>`,
      );
    }
    for (const e of side.timeline) {
      const row = y + (e.attempt - 1) * 18 - 2;
      if (e.kind === "payment_accepted") parts.push(`<circle class="payment" cx="${x(e.atMs)}" cy="${row}" r="7" fill="${COLORS.naive}"><title>${esc(e.text)}</title></circle>`);
      if (e.kind === "replayed_from_ledger") parts.push(`<rect class="replay" x="${x(e.atMs) - 6}" y="${row - 6}" width="12" height="12" fill="${COLORS.replay}"><title>${esc(e.text)}</title></rect>`);
      if (e.kind === "dispatched") parts.push(`<line class="dispatch" x1="${x(e.atMs)}" y1="${row - 9}" x2="${x(e.atMs)}" y2="${row + 9}" stroke="${COLORS.axis}" stroke-width="2"/>`);
      if (e.kind === "stream_reset") parts.push(`<text x="${x(e.atMs) - 4}" y="${row + 5}" font-size="16" font-weight="bold">✕</text>`);
    }
    return parts.join("\n  ");
  };
  const ticks = niceTicks(0, end, 8);
  return `<svg id="incident-timeline" role="img" aria-label="Both runs of the incident" width="${width}" height="210" viewBox="0 0 ${width} 210" xmlns="http://www.w3.org/2000/svg">
  ${lane(naive, 40, `naive: ${naive.payments} payments`, COLORS.naive)}
  ${lane(guarded, 110, `guarded: ${guarded.payments} payment${guarded.payments === 1 ? "" : "s"}`, COLORS.guarded)}
  <line x1="${left}" y1="170" x2="${width - right}" y2="170" stroke="${COLORS.axis}"/>
  ${ticks.map((t) => `<text x="${x(t)}" y="186" text-anchor="middle">${t} ms</text>`).join("")}
  <circle cx="${left}" cy="200" r="5" fill="${COLORS.naive}"/><text x="${left + 10}" y="204">payment accepted by the payments API</text>
  <rect x="${left + 260}" y="194" width="10" height="10" fill="${COLORS.replay}"/><text x="${left + 276}" y="204">result replayed from the ledger (no payments call)</text>
  <line x1="${left + 600}" y1="193" x2="${left + 600}" y2="207" stroke="${COLORS.axis}" stroke-width="2"/><text x="${left + 608}" y="204">dispatch</text>
</svg>`;
}

function timelineTable(title: string, side: IncidentSide): string {
  const row = (e: TimelineEntry) => `<tr><td>${e.atMs}</td><td>${e.attempt}</td><td style="text-align:left">${esc(e.text)}</td></tr>`;
  return `<table class="timeline"><tr><th colspan="3" style="text-align:left">${esc(title)}: ${side.payments} payment${side.payments === 1 ? "" : "s"} in the effect log</th></tr>
<tr><th>ms</th><th>attempt</th><th style="text-align:left">what happened</th></tr>
${side.timeline.map(row).join("\n")}
</table>`;
}

/** Stream failures by position, window positions highlighted. */
function positionsSvg(result: DemoResult): string {
  const { chaos } = result;
  const width = 1000;
  const height = 240;
  const left = 240;
  const max = Math.max(1, ...POSITIONS.map((p) => chaos.byPosition[p]));
  const barW = (v: number) => (v / max) * (width - left - 80);
  const bars = POSITIONS.map((p, i) => {
    const y = 50 + i * 42;
    const color = IN_WINDOW.has(p) ? COLORS.naive : COLORS.pre;
    return `<text x="${left - 10}" y="${y + 17}" text-anchor="end">${esc(p)}${IN_WINDOW.has(p) ? " (window)" : ""}</text>
  <rect class="bar position" data-position="${p}" x="${left}" y="${y}" width="${Math.max(1, barW(chaos.byPosition[p]))}" height="26" fill="${color}"/>
  <text x="${left + barW(chaos.byPosition[p]) + 8}" y="${y + 17}">${num(chaos.byPosition[p])}</text>`;
  }).join("\n  ");
  return `<svg id="chart-positions" role="img" aria-label="Stream failures by position" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" xmlns="http://www.w3.org/2000/svg">
  <text x="20" y="24" font-weight="bold">Stream failures by position (${num(chaos.streamFailures)} in ${num(chaos.turns)} turns; ${chaos.failuresInWindow} inside the window)</text>
  ${bars}
</svg>`;
}

/** Duplicates per replay route, naive vs guarded. */
function routesSvg(result: DemoResult): string {
  const { chaos } = result;
  const width = 1000;
  const height = 260;
  const base = 210;
  const max = Math.max(1, ...chaos.routes.map((r) => r.naive.duplicates));
  const h = (v: number) => (v / max) * 150;
  const names: Record<string, string> = {
    automatic_retry: "automatic retry",
    client_resend: "client re-send",
    queue_redelivery: "queue redelivery",
  };
  const groups = chaos.routes.map((r, i) => {
    const gx = 120 + i * 290;
    return `<g class="route" data-route="${r.name}">
    <rect class="bar naive" x="${gx}" y="${base - h(r.naive.duplicates)}" width="70" height="${Math.max(1, h(r.naive.duplicates))}" fill="${COLORS.naive}"/>
    <text x="${gx + 35}" y="${base - h(r.naive.duplicates) - 6}" text-anchor="middle">${num(r.naive.duplicates)}</text>
    <rect class="bar guarded" x="${gx + 80}" y="${base - h(r.guarded.duplicates)}" width="70" height="${Math.max(1, h(r.guarded.duplicates))}" fill="${COLORS.guarded}"/>
    <text x="${gx + 115}" y="${base - h(r.guarded.duplicates) - 6}" text-anchor="middle">${num(r.guarded.duplicates)}</text>
    <text x="${gx + 75}" y="${base + 20}" text-anchor="middle">${esc(names[r.name] ?? r.name)} (${num(r.replays)} replays)</text>
  </g>`;
  }).join("\n  ");
  return `<svg id="chart-routes" role="img" aria-label="Duplicate payments per replay route" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" xmlns="http://www.w3.org/2000/svg">
  <text x="20" y="24" font-weight="bold">Duplicate payments per replay route</text>
  <rect x="700" y="12" width="12" height="12" fill="${COLORS.naive}"/><text x="718" y="23">naive</text>
  <rect x="780" y="12" width="12" height="12" fill="${COLORS.guarded}"/><text x="798" y="23">Dispatch-Once</text>
  <line x1="100" y1="${base}" x2="${width - 40}" y2="${base}" stroke="${COLORS.axis}"/>
  ${groups}
</svg>`;
}

/** The measured naive duplicate rate with its interval, beside the chapter's estimate. */
function rateSvg(result: DemoResult): string {
  const { chaos } = result;
  const r = chaos.naiveDuplicateRate;
  const expected = chaos.chapter.atThisFailureRate.duplicateRate;
  const width = 1000;
  const left = 80;
  const right = 60;
  const top = Math.max(r.high, expected, chaos.chapter.duplicateRate) * 1.25 || 1e-3;
  const x = (v: number) => left + (v / top) * (width - left - right);
  const per10k = (v: number) => fix(v * 10_000, 2);
  const ticks = niceTicks(0, top * 10_000, 6);
  return `<svg id="chart-rate" role="img" aria-label="Naive duplicate rate with its 95 % interval and the chapter's estimate" width="${width}" height="200" viewBox="0 0 ${width} 200" xmlns="http://www.w3.org/2000/svg">
  <text x="20" y="24" font-weight="bold">Naive duplicates after a cut stream per 10,000 turns: measured (95 % Wilson interval) vs the chapter's arithmetic</text>
  <line x1="${left}" y1="150" x2="${width - right}" y2="150" stroke="${COLORS.axis}"/>
  ${ticks.map((t) => `<line x1="${x(t / 10_000)}" y1="150" x2="${x(t / 10_000)}" y2="156" stroke="${COLORS.axis}"/><text x="${x(t / 10_000)}" y="170" text-anchor="middle">${t}</text>`).join("")}
  <rect class="interval" x="${x(r.low)}" y="80" width="${Math.max(2, x(r.high) - x(r.low))}" height="24" fill="${COLORS.naive}" opacity="0.25"/>
  <circle class="measured" cx="${x(r.rate)}" cy="92" r="6" fill="${COLORS.naive}"/>
  <text x="${x(r.rate)}" y="72" text-anchor="middle" fill="${COLORS.naive}">measured ${per10k(r.rate)} (${per10k(r.low)} to ${per10k(r.high)})</text>
  <line class="expected" x1="${x(expected)}" y1="50" x2="${x(expected)}" y2="150" stroke="#000" stroke-dasharray="5 4" stroke-width="2"/>
  <text x="${x(expected) + 6}" y="130">${esc(chaos.failureRate)} × 0.11 = ${per10k(expected)}</text>
  ${
    chaos.failureRate !== chaos.chapter.failureRate
      ? `<line x1="${x(chaos.chapter.duplicateRate)}" y1="110" x2="${x(chaos.chapter.duplicateRate)}" y2="150" stroke="${COLORS.stream}" stroke-width="2"/><text x="${x(chaos.chapter.duplicateRate) + 6}" y="146" fill="${COLORS.stream}">chapter 0.006 × 0.11</text>`
      : ""
  }
  <text x="${left}" y="192">duplicates per 10,000 turns</text>
</svg>`;
}

function niceTicks(from: number, to: number, count: number): number[] {
  const span = Math.max(1e-9, to - from);
  const raw = span / count;
  const magnitude = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * magnitude).find((s) => s >= raw) ?? raw;
  const ticks: number[] = [];
  for (let t = Math.ceil(from / step) * step; t <= to + 1e-9; t += step) ticks.push(Number(t.toPrecision(6)));
  return ticks;
}
