import { crc32 } from "node:zlib";
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
  if (isEventStream(body)) {
    const frame = eventStreamFrames(body).find((f) => f.name === type);
    return frame === undefined ? undefined : { start: frame.start, end: frame.end };
  }
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
 * One message of an AWS event-stream body (`application/vnd.amazon.eventstream`: Bedrock's
 * `invoke-with-response-stream` and Converse): where it lies, where its payload and message CRC
 * start, and its name. The name is the `:event-type` header (Converse: `contentBlockStop`,
 * `messageStop`, `metadata`), the `:exception-type` of an exception, and for a Bedrock `chunk` the
 * `type` of the Messages event its payload carries in base64 (`content_block_stop`, `message_stop`).
 */
export interface EventStreamFrame {
  start: number;
  /** Past the message CRC: the frame's last byte is `end - 1`. */
  end: number;
  payloadStart: number;
  /** Where the message CRC starts (`end - 4`). */
  crcStart: number;
  name: string;
  /** The payload as text: a `chunk`'s Messages event JSON decoded from its base64, else the payload's own. */
  text: string;
}

/** Whether a body is in the AWS event-stream framing: its first 12 bytes are a prelude whose CRC32 holds. */
export function isEventStream(body: Buffer): boolean {
  return body.length >= 16 && body.readUInt32BE(0) >= 16 && crc32(body.subarray(0, 8)) === body.readUInt32BE(8);
}

/** The value lengths of the event-stream header types other than bytes (6) and string (7), which carry a 2-byte length. */
const FIXED_HEADER_LENGTHS: Record<number, number> = { 0: 0, 1: 0, 2: 1, 3: 2, 4: 4, 5: 8, 8: 8, 9: 16 };

/** The whole messages of an event-stream body, by the total length each prelude gives (a cut last one is left out). */
export function eventStreamFrames(body: Buffer): EventStreamFrame[] {
  const frames: EventStreamFrame[] = [];
  for (let start = 0; start + 12 <= body.length; ) {
    const total = body.readUInt32BE(start);
    const headersLength = body.readUInt32BE(start + 4);
    if (total < 16 || start + total > body.length) break;
    const headers = new Map<string, string>();
    for (let at = start + 12; at < start + 12 + headersLength; ) {
      const nameLength = body[at]!;
      const name = body.toString("utf8", at + 1, at + 1 + nameLength);
      const kind = body[at + 1 + nameLength]!;
      at += 2 + nameLength;
      if (kind === 6 || kind === 7) {
        const length = body.readUInt16BE(at);
        if (kind === 7) headers.set(name, body.toString("utf8", at + 2, at + 2 + length));
        at += 2 + length;
      } else at += FIXED_HEADER_LENGTHS[kind] ?? Number.POSITIVE_INFINITY;
    }
    const payloadStart = start + 12 + headersLength;
    const crcStart = start + total - 4;
    let text = body.toString("utf8", payloadStart, crcStart);
    let name = headers.get(":exception-type") ?? headers.get(":event-type") ?? "";
    if (name === "chunk") {
      const bytes = (JSON.parse(text) as { bytes?: string }).bytes;
      text = bytes === undefined ? text : Buffer.from(bytes, "base64").toString("utf8");
      name = (JSON.parse(text) as { type?: string }).type ?? name;
    }
    frames.push({ start, end: start + total, payloadStart, crcStart, name, text });
    start += total;
  }
  return frames;
}

/** What a body says, as text: an event stream's payloads (a Bedrock chunk's decoded), else the body itself; to find the ids it names. */
export function bodyText(body: Buffer): string {
  return isEventStream(body) ? eventStreamFrames(body).map((f) => f.text).join("\n") : body.toString("utf8");
}

/** The region where a frame's structure sits: prelude (12 bytes) and the first header byte, the header/payload edge, and the message CRC. */
function frameEdges(frame: EventStreamFrame): number[] {
  const at = new Set<number>();
  for (let i = frame.start; i <= frame.start + 12; i++) at.add(i);
  for (let i = frame.payloadStart - 1; i <= frame.payloadStart + 1; i++) at.add(i);
  for (let i = frame.crcStart - 1; i <= frame.end; i++) at.add(i);
  return [...at].sort((a, b) => a - b);
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

/**
 * The offsets of the UTF-8 continuation bytes of what a body says, before `until`: in an SSE body
 * its own bytes; in an event stream only those of the payloads (prelude, lengths and CRCs are binary),
 * and in a Bedrock `chunk`, whose payload carries the event's JSON in base64, the base64 character
 * that holds the continuation byte's first bits (the cut leaves the character's first bytes encoded).
 */
function continuationOffsets(body: Buffer, until = body.length): number[] {
  const offsets: number[] = [];
  if (!isEventStream(body)) {
    for (let i = 0; i < until; i++) if (isContinuation(body[i]!)) offsets.push(i);
    return offsets;
  }
  for (const frame of eventStreamFrames(body)) {
    if (frame.start >= until) break;
    const payload = body.subarray(frame.payloadStart, frame.crcStart);
    const base64 = /^\{"bytes":"/.exec(payload.toString("latin1"));
    if (base64 === null) {
      for (let i = 0; i < payload.length; i++) if (isContinuation(payload[i]!)) offsets.push(frame.payloadStart + i);
      continue;
    }
    const decoded = Buffer.from(frame.text, "utf8");
    for (let k = 0; k < decoded.length; k++) if (isContinuation(decoded[k]!)) offsets.push(frame.payloadStart + base64[0].length + Math.floor(k / 3) * 4 + (k % 3) + 1);
  }
  return offsets;
}

export function resolveCut(body: Buffer, point: CutPoint): number | undefined {
  if (point.landmark === "fraction") return Math.floor(point.at * body.length);
  if (point.landmark === "event") {
    const range = eventRange(body, point.type);
    return range === undefined ? undefined : Math.min(body.length, Math.max(0, (point.fromEnd === true ? range.end : range.start) + point.delta));
  }
  const continuations = continuationOffsets(body);
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
  /**
   * An event-stream frame: cut at its structure's bytes (prelude, the header/payload edge, the
   * message CRC) and at `edges` seeded bytes elsewhere in it, instead of at every byte (all bytes
   * when BYTE_CUT_EXHAUSTIVE=1). Any byte inside a frame loses the whole frame to the decoder, so
   * the bytes between its edges differ only in how much of the frame the decoder holds.
   */
  edges?: number;
}

/** BYTE_CUT_EXHAUSTIVE=1: every byte of every region, whatever its `edges` sample says (not in CI: several hundred cases a side). */
export const EXHAUSTIVE = process.env.BYTE_CUT_EXHAUSTIVE === "1";

/**
 * Every byte of the events around the moments that matter (the call's completion, the stop
 * reason, the finish), every split inside a multi-byte UTF-8 character (before each continuation
 * byte; only ahead of the `nonAsciiBefore` event when given), and `sample` seeded offsets elsewhere.
 */
export function cutPoints(reference: Buffer, regions: readonly CutRegion[], options: { sample: number; seed: number; nonAsciiBefore?: string; insideCharacters?: boolean }): CutPoint[] {
  const points: CutPoint[] = [];
  const covered = new Set<number>();
  const pick = prng(options.seed + 7);
  for (const { type, before, head, tail, edges } of regions) {
    const range = eventRange(reference, type);
    if (range === undefined) throw new Error(`the reference response has no ${type} event`);
    let sampled: Set<number> | undefined;
    if (edges !== undefined && !EXHAUSTIVE) {
      const frame = eventStreamFrames(reference).find((f) => f.start === range.start)!;
      sampled = new Set(frameEdges(frame));
      for (let i = 0; i < before; i++) sampled.add(range.start - before + i);
      for (let i = 0; i < edges; i++) sampled.add(frame.start + 13 + Math.floor(pick() * (frame.crcStart - frame.start - 14)));
    }
    for (let delta = -before; range.start + delta <= range.end; delta++) {
      const at = range.start + delta;
      const inHead = head === undefined || at < range.start + head;
      const inTail = tail !== undefined && at > range.end - tail;
      if (at < 0 || covered.has(at) || !(inHead || inTail) || (sampled !== undefined && !sampled.has(at))) continue;
      covered.add(at);
      // A last byte is named from the event's end, so it is a last byte of every response's event.
      points.push(inHead ? { landmark: "event", type, delta } : { landmark: "event", type, delta: at - range.end, fromEnd: true });
    }
  }
  // The arguments as they stream (a provider may repeat them whole in later events).
  const until = options.nonAsciiBefore === undefined ? reference.length : (eventRange(reference, options.nonAsciiBefore)?.start ?? reference.length);
  if (options.insideCharacters !== false) continuationOffsets(reference, until).forEach((_, nth) => points.push({ landmark: "inside_character", nth }));
  const random = prng(options.seed);
  for (let i = 0; i < options.sample; i++) points.push({ landmark: "fraction", at: random() });
  return points;
}

/**
 * The body with CRLF line endings (SSE allows them; the JSON of a data line holds no raw newline).
 * A body that has them already (mock-provider's Gemini routes send CRLF) stays as it is: a `\r\r\n`
 * would be two line ends, a blank line the body never had.
 */
export const crlf = (body: Buffer) => Buffer.from(body.toString("latin1").replace(/\r?\n/g, "\r\n"), "latin1");

/** The body with LF line endings: for a provider that sends CRLF, the other way a proxy may pass it on. */
export const lf = (body: Buffer) => Buffer.from(body.toString("latin1").replace(/\r\n/g, "\n"), "latin1");

/** The body with the line endings it does not have: LF for a CRLF body, else CRLF. */
export const otherLineEndings = (body: Buffer) => (body.includes("\r\n") ? lf(body) : crlf(body));

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
  // An event stream is binary: a frame is whole once its last byte (the message CRC) was written.
  const crlfBody = !isEventStream(request.body) && request.body.includes("\r\n");
  if (request.sent < range.end - (crlfBody ? 1 : 0)) return "cut";
  return request.end === "fin" && request.sent >= range.end ? "whole" : "either";
}

/**
 * The same cut planned on the first 3 targeted responses of each case (the attempts of the first
 * send), then the user's re-send: the requests a case made say at which attempt its turn committed,
 * and that attempt must not have been cut before its finish. A cut at a fraction of the body falls
 * where it falls in each attempt's own rendering, and renderings differ in length, so a later
 * attempt may arrive whole and commit; and where an event follows the finish (Converse's
 * `metadata`), an attempt whole to its finish may still fail. `perAttempt` is how many requests an
 * attempt makes (2 where the target is the answer after the payment); the attempt that commits
 * makes 2 (its targeted response, then the answer; the re-send likewise). Returns how many cases
 * failed their first send, for the caller to require that most did.
 */
export function expectRequestsByFate(cases: readonly ByteCase[], requests: readonly ProxiedRequest[], options: { finishType: string; isTarget?: (request: ProxiedRequest) => boolean; perAttempt?: number }): number {
  const perAttempt = options.perAttempt ?? 1;
  let failedSends = 0;
  for (const c of cases) {
    const made = requests.filter((r) => r.caseId === c.id).sort((a, b) => a.number - b.number);
    const fates = made.filter(options.isTarget ?? (() => true)).slice(0, 3).map((r) => responseFate(r, options.finishType));
    // Attempts 1 to 3, or 4 for the re-send: every attempt before it made perAttempt requests.
    const committedAt = (made.length - 2) / perAttempt + 1;
    expect([1, 2, 3, 4], `${c.label}: ${made.length} requests (attempts of the first send: ${fates.join(", ")}) fit no attempt that committed`).toContain(committedAt);
    if (committedAt === 4) failedSends++;
    else expect(fates[committedAt - 1], `${c.label}: the turn committed at attempt ${committedAt}, whose response was cut before its finish`).not.toBe("cut");
  }
  return failedSends;
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
export function cutCases(prefix: string, points: readonly CutPoint[], options: { rstEvery?: number; crlf?: boolean; otherLineEndings?: boolean; requests?: readonly number[] } = {}): ByteCase[] {
  const transform = options.otherLineEndings === true ? otherLineEndings : options.crlf === true ? crlf : (b: Buffer) => b;
  const cut = options.requests ?? [1];
  const one = (point: CutPoint, end: ConnectionEnd, i: number): ByteCase => ({
    id: `${prefix}-${end}-${i}`,
    label: `cut ${describeCut(point)} then ${end.toUpperCase()}${options.crlf === true ? " (CRLF)" : options.otherLineEndings === true ? " (other line endings)" : ""}${cut.length > 1 ? ` in requests ${cut.join(", ")}` : ""}`,
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
export function rechunkCases(prefix: string, seed: number, splits: number, options: { crlf?: boolean; otherLineEndings?: boolean } = {}): ByteCase[] {
  const second = options.otherLineEndings === true ? otherLineEndings : crlf;
  const ways: [string, (body: Buffer) => Delivery][] = [["1 byte a write", (b) => rechunked(b, "bytes")]];
  for (let i = 0; i < splits; i++) ways.push([`seeded splits ${seed + i}`, (b) => rechunked(b, { seed: seed + i })]);
  return ways.flatMap(([label, way], i) => [
    { id: `${prefix}-lf-${i}`, label, plan: (n: number, body: Buffer) => (n === 1 ? way(body) : undefined) },
    // An event stream is binary: no line endings to rewrite.
    ...(options.crlf === false ? [] : [{ id: `${prefix}-crlf-${i}`, label: `${label}, ${options.otherLineEndings === true ? "other line endings" : "CRLF"}`, plan: (n: number, body: Buffer) => (n === 1 ? way(second(body)) : undefined) }]),
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
