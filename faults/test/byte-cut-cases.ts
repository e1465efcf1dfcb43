import { expect } from "vitest";
import type { ConnectionEnd, Delivery, ProxiedRequest } from "./byte-proxy.js";

/**
 * The cases of the byte-level harness, shared by the stream sides: where a response body is cut
 * and how a whole one is re-chunked, and the checks every case ends with.
 */

/** The payment the model asks for: every string carries multi-byte UTF-8 (2, 3 and 4 bytes). */
export const PAY_ZOE = { payee: "Café Zoë 💳", amount: 4_250, currency: "EUR", reference: "INV-Ω-7", memo: "Für Zoë — 🧾 ✓" };

/** A small seeded generator (mulberry32), so a failing case can be named by its seed and replayed. */
import { prng } from "@dispatch-once/test-processes";

export { prng };

export const SEED = Number(process.env.BYTE_CUT_SEED ?? Math.floor(Math.random() * 2 ** 31));

/** What names an event of a stream whose events have no `event:` line (Chat Completions' chunks): text its data line holds. */
const DATA_EVENT = "data~";

/**
 * The `type` of an event named by text of its data line, for a stream without `event:` lines
 * (Chat Completions: `dataEvent('"finish_reason":"tool_calls"')`, `dataEvent("[DONE]")`): its first
 * event whose data holds the text, wherever `type` is taken (eventRange, CutRegion, responseFate).
 */
export const dataEvent = (text: string): string => `${DATA_EVENT}${text}`;

/**
 * The byte range of the first SSE event of `type` (its `event:` line through its blank line; for
 * a `dataEvent`, its data line through its blank line), in a body with LF or CRLF line endings.
 */
export function eventRange(body: Buffer, type: string): { start: number; end: number } | undefined {
  const eol = body.includes("\r\n") ? "\r\n" : "\n";
  const start = type.startsWith(DATA_EVENT) ? dataEventStart(body, type.slice(DATA_EVENT.length), eol) : body.indexOf(`event: ${type}${eol}`);
  if (start < 0) return undefined;
  const blank = body.indexOf(eol + eol, start);
  return { start, end: blank < 0 ? body.length : blank + 2 * eol.length };
}

/** Where the event holding `text` starts: after the blank line before it, or at the body's start. */
function dataEventStart(body: Buffer, text: string, eol: string): number {
  const at = body.indexOf(text);
  if (at < 0) return -1;
  const blank = body.lastIndexOf(eol + eol, at);
  return blank < 0 ? 0 : blank + 2 * eol.length;
}

/**
 * A cut named so that it lands on the same byte of any response of the same shape: `delta` bytes
 * from the start of a landmark (an event, the n-th byte of a multi-byte character) or a fraction
 * of the body. The responses of one conversation differ (ids, argument fragments), so an offset
 * taken from one body would land elsewhere in the next.
 */
export type CutPoint =
  /** `delta` bytes from the event's start, or (`fromEnd`) from the end of its blank line: the responses of one turn differ in length inside an event too. */
  | { landmark: "event"; type: string; delta: number; fromEnd?: boolean }
  /** Before the `nth` UTF-8 continuation byte: a split inside a multi-byte character. */
  | { landmark: "inside_character"; nth: number }
  | { landmark: "fraction"; at: number };

const isContinuation = (byte: number) => byte >= 0x80 && byte < 0xc0;

export function resolveCut(body: Buffer, point: CutPoint): number | undefined {
  if (point.landmark === "fraction") return Math.floor(point.at * body.length);
  if (point.landmark === "event") {
    const range = eventRange(body, point.type);
    return range === undefined ? undefined : Math.min(body.length, Math.max(0, (point.fromEnd === true ? range.end : range.start) + point.delta));
  }
  const continuations: number[] = [];
  for (let i = 0; i < body.length; i++) if (isContinuation(body[i]!)) continuations.push(i);
  // A body with fewer: on Chat Completions the arguments stream once, and a rendering that split a
  // 4-byte character between two fragments sends each half escaped (\ud83d: JSON of a lone UTF-16
  // half), so it has 3 continuation bytes less than the reference; the count wraps around there.
  return continuations.length === 0 ? undefined : continuations[point.nth % continuations.length];
}

export function describeCut(point: CutPoint): string {
  if (point.landmark === "fraction") return `at ${(point.at * 100).toFixed(2)}% of the body`;
  if (point.landmark === "event") return `${point.type.startsWith(DATA_EVENT) ? `the chunk holding ${point.type.slice(DATA_EVENT.length)}` : point.type}${point.fromEnd === true ? " end" : ""}${point.delta >= 0 ? "+" : ""}${point.delta}`;
  return `inside a character, before UTF-8 continuation byte ${point.nth}`;
}

/** An event whose bytes are all cut at (from `before` bytes ahead of it), or only its first `head` and last `tail` bytes. */
export interface CutRegion {
  type: string;
  before: number;
  head?: number;
  tail?: number;
}

/**
 * Every byte of the events around the moments that matter (the call's completion, the stop
 * reason, the finish), every split inside a multi-byte UTF-8 character (before each continuation
 * byte; only ahead of the `nonAsciiBefore` event when given), and `sample` seeded offsets elsewhere.
 */
export function cutPoints(reference: Buffer, regions: readonly CutRegion[], options: { sample: number; seed: number; nonAsciiBefore?: string; insideCharacters?: boolean }): CutPoint[] {
  const points: CutPoint[] = [];
  const covered = new Set<number>();
  for (const { type, before, head, tail } of regions) {
    const range = eventRange(reference, type);
    if (range === undefined) throw new Error(`the reference response has no ${type} event`);
    for (let delta = -before; range.start + delta <= range.end; delta++) {
      const at = range.start + delta;
      const inHead = head === undefined || at < range.start + head;
      const inTail = tail !== undefined && at > range.end - tail;
      if (at < 0 || covered.has(at) || !(inHead || inTail)) continue;
      covered.add(at);
      // A last byte is named from the event's end, so it is a last byte of every response's event.
      points.push(inHead ? { landmark: "event", type, delta } : { landmark: "event", type, delta: at - range.end, fromEnd: true });
    }
  }
  // The arguments as they stream (a provider may repeat them whole in later events).
  const until = options.nonAsciiBefore === undefined ? reference.length : (eventRange(reference, options.nonAsciiBefore)?.start ?? reference.length);
  let continuation = 0;
  for (let i = 0; options.insideCharacters !== false && i < until; i++) if (isContinuation(reference[i]!)) points.push({ landmark: "inside_character", nth: continuation++ });
  const random = prng(options.seed);
  for (let i = 0; i < options.sample; i++) points.push({ landmark: "fraction", at: random() });
  return points;
}

/** The body with CRLF line endings (SSE allows them; the JSON of a data line holds no raw newline). */
export const crlf = (body: Buffer) => Buffer.from(body.toString("latin1").replace(/\n/g, "\r\n"), "latin1");

export function cutDelivery(body: Buffer, at: number, end: ConnectionEnd): Delivery {
  return { body, writes: [at], end };
}

/** The whole body in writes of 1 byte, or of seeded random sizes (1 to 64 bytes). */
export function rechunked(body: Buffer, how: "bytes" | { seed: number }): Delivery {
  const writes: number[] = [];
  const random = how === "bytes" ? undefined : prng(how.seed);
  for (let left = body.length; left > 0; ) {
    const size = random === undefined ? 1 : Math.min(left, 1 + Math.floor(random() * 64));
    writes.push(size);
    left -= size;
  }
  return { body, writes, end: "fin" };
}

/**
 * Whether a response reached the client whole: its finishing event's blank line was written and
 * the connection ended with a FIN. A RST right after the last byte may still lose bytes the
 * client had not read, and with CRLF a body cut between the last `\r` and `\n` has its blank line
 * by the SSE rules (a lone CR ends a line) though a parser may wait for the `\n`: such a response
 * is counted neither as cut nor as whole.
 */
export function responseFate(request: ProxiedRequest, finishType: string): "whole" | "cut" | "either" {
  const range = eventRange(request.body, finishType);
  if (range === undefined) return "cut";
  const crlfBody = request.body.includes("\r\n");
  if (request.sent < range.end - (crlfBody ? 1 : 0)) return "cut";
  return request.end === "fin" && request.sent >= range.end ? "whole" : "either";
}

/** Everything in a JSON-like value that is an object with `key` and `effect`, with where it sits. */
export function statedEffects(value: unknown, path = "$"): { path: string; key: string; effect: string }[] {
  if (value === null || typeof value !== "object") return [];
  if (Array.isArray(value)) return value.flatMap((v, i) => statedEffects(v, `${path}[${i}]`));
  const own = value as Record<string, unknown>;
  const found = typeof own.key === "string" && typeof own.effect === "string" ? [{ path, key: own.key, effect: own.effect }] : [];
  return [...found, ...Object.entries(own).flatMap(([k, v]) => statedEffects(v, `${path}.${k}`))];
}

/**
 * RECORD-2/RECORD-8: what the records say of each key matches the payments' effect log: never
 * `not_happened` for the key that paid, never `happened` for a key that did not.
 */
export function expectTruthfulRecords(records: unknown[], paidKeys: readonly string[], label: string): void {
  for (const stated of statedEffects(records)) {
    if (paidKeys.includes(stated.key)) expect(stated.effect, `${label}: ${stated.path} says ${stated.effect} of the key that paid (RECORD-2, RECORD-8)`).not.toBe("not_happened");
    else expect(stated.effect, `${label}: ${stated.path} says ${stated.effect} of a key that never paid`).not.toBe("happened");
  }
}

/** Runs `task` over `items` with at most `width` at once, in order of the items. */
export async function pool<T>(items: readonly T[], width: number, task: (item: T, index: number) => Promise<void>): Promise<void> {
  let next = 0;
  const workers = Array.from({ length: Math.min(width, items.length) }, async () => {
    while (next < items.length) {
      const i = next++;
      await task(items[i]!, i);
    }
  });
  await Promise.all(workers);
}

/** One case: how the proxy delivers each response of a fresh conversation (undefined: whole). */
export interface ByteCase {
  id: string;
  label: string;
  plan: (number: number, body: Buffer) => Delivery | undefined;
}

/**
 * The paying response (request 1, or each of `requests`) cut at each point with a FIN, and at every `rstEvery`-th point
 * with a RST as well: a RST discards what the client had not read yet, so its exact byte matters
 * less than a FIN's, whose every byte the parser sees.
 */
export function cutCases(prefix: string, points: readonly CutPoint[], options: { rstEvery?: number; crlf?: boolean; requests?: readonly number[] } = {}): ByteCase[] {
  const transform = options.crlf === true ? crlf : (b: Buffer) => b;
  const cut = options.requests ?? [1];
  const one = (point: CutPoint, end: ConnectionEnd, i: number): ByteCase => ({
    id: `${prefix}-${end}-${i}`,
    label: `cut ${describeCut(point)} then ${end.toUpperCase()}${options.crlf === true ? " (CRLF)" : ""}${cut.length > 1 ? ` in requests ${cut.join(", ")}` : ""}`,
    plan: (number, body) => {
      if (!cut.includes(number)) return undefined;
      const delivered = transform(body);
      const at = resolveCut(delivered, point);
      if (at === undefined) throw new Error(`no ${describeCut(point)} in the response`);
      return cutDelivery(delivered, at, end);
    },
  });
  const rstEvery = options.rstEvery ?? 3;
  return points.flatMap((point, i) => [one(point, "fin", i), ...(i % rstEvery === 0 ? [one(point, "rst", i)] : [])]);
}

/**
 * The paying response (request 1) whole, re-chunked: 1 byte a write and `splits` seeded random
 * splits, each with LF and with CRLF. (1 byte a write costs a turn of the event loop a byte, about
 * 0.1-0.4 s of CPU a response, so the answer after the payment goes whole.)
 */
export function rechunkCases(prefix: string, seed: number, splits: number): ByteCase[] {
  const ways: [string, (body: Buffer) => Delivery][] = [["1 byte a write", (b) => rechunked(b, "bytes")]];
  for (let i = 0; i < splits; i++) ways.push([`seeded splits ${seed + i}`, (b) => rechunked(b, { seed: seed + i })]);
  return ways.flatMap(([label, way], i) => [
    { id: `${prefix}-lf-${i}`, label, plan: (n: number, body: Buffer) => (n === 1 ? way(body) : undefined) },
    { id: `${prefix}-crlf-${i}`, label: `${label}, CRLF`, plan: (n: number, body: Buffer) => (n === 1 ? way(crlf(body)) : undefined) },
  ]);
}

/** Runs every case (four at a time: they wait on sockets, not only on the CPU); fails naming each failed case, the seed and how to replay it. */
export async function runAll(cases: readonly ByteCase[], run: (c: ByteCase) => Promise<string | undefined>): Promise<void> {
  const failures: string[] = [];
  const cpu0 = process.cpuUsage();
  await pool(cases, 4, async (c) => {
    const failure = await run(c).catch((error: unknown) => `threw ${String(error)}`);
    if (failure !== undefined) failures.push(`${c.label}: ${failure}`);
  });
  // What the cases cost this process (the CI budget is CPU on a shared host): BYTE_CUT_CPU=1 prints it.
  if (process.env.BYTE_CUT_CPU === "1") {
    const cpu = process.cpuUsage(cpu0);
    console.log(`[byte-cut] ${cases.length} cases: ${Math.round((cpu.user + cpu.system) / 1000)} ms of CPU`);
  }
  expect(failures, `${failures.length} of ${cases.length} cases failed (BYTE_CUT_SEED=${SEED} replays the sample):\n${failures.slice(0, 12).join("\n")}`).toEqual([]);
}
