import { crc32 } from "node:zlib";
import { describe, expect, it } from "vitest";
import { cutPoints, eventStreamFrames, resolveCut, responseFate } from "./byte-cut-cases.js";
import type { ProxiedRequest } from "./byte-proxy.js";

/*
 * The byte-cut harness's reading of an AWS event-stream body, on a body built here (blind round Q):
 * where its frames lie (by each prelude's total length), which bytes of a frame a cut lands on,
 * and when a response counts as whole. The cases built on them pass whatever these get wrong in
 * the harness's favour: a laxer fate or fewer cut points is a weaker harness, not a failing one.
 */

/** One event-stream message: prelude (total, headers length, prelude CRC), a string header `:event-type`, the payload, the message CRC. */
function frame(eventType: string, payload: string): Buffer {
  const name = Buffer.from(":event-type");
  const value = Buffer.from(eventType);
  const headers = Buffer.concat([Buffer.from([name.length]), name, Buffer.from([7]), Buffer.from([value.length >> 8, value.length & 0xff]), value]);
  const body = Buffer.from(payload);
  const total = 12 + headers.length + body.length + 4;
  const prelude = Buffer.alloc(12);
  prelude.writeUInt32BE(total, 0);
  prelude.writeUInt32BE(headers.length, 4);
  prelude.writeUInt32BE(crc32(prelude.subarray(0, 8)), 8);
  const message = Buffer.concat([prelude, headers, body]);
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(crc32(message), 0);
  return Buffer.concat([message, crc]);
}

const body = Buffer.concat([
  frame("messageStart", '{"role":"assistant"}'),
  frame("contentBlockDelta", '{"contentBlockIndex":0,"delta":{"toolUse":{"input":"{\\"payee\\":\\"Café Zoë\\"}"}}}'),
  frame("contentBlockStop", '{"contentBlockIndex":0}'),
  frame("messageStop", '{"stopReason":"tool_use"}'),
]);

describe("the byte-cut harness over an event-stream body (STREAM-8)", () => {
  it("locates every frame by its prelude's total length, named by :event-type", () => {
    const frames = eventStreamFrames(body);
    expect(frames.map((f) => f.name)).toEqual(["messageStart", "contentBlockDelta", "contentBlockStop", "messageStop"]);
    expect(frames.at(-1)!.end).toBe(body.length);
    for (let i = 1; i < frames.length; i++) expect(frames[i]!.start).toBe(frames[i - 1]!.end);
    // A cut last frame is left out.
    expect(eventStreamFrames(body.subarray(0, body.length - 1)).map((f) => f.name)).toEqual(["messageStart", "contentBlockDelta", "contentBlockStop"]);
  });

  it("a region's edges are the whole prelude and the first header byte, the header/payload edge and the message CRC through the frame's end", () => {
    const stop = eventStreamFrames(body).find((f) => f.name === "contentBlockStop")!;
    const at = new Set(cutPoints(body, [{ type: "contentBlockStop", before: 0, edges: 0 }], { sample: 0, seed: 1, insideCharacters: false }).map((p) => resolveCut(body, p)));
    const want = new Set<number>();
    for (let i = stop.start; i <= stop.start + 12; i++) want.add(i);
    for (let i = stop.payloadStart - 1; i <= stop.payloadStart + 1; i++) want.add(i);
    for (let i = stop.crcStart - 1; i <= stop.end; i++) want.add(i);
    expect([...at].sort((a, b) => a! - b!)).toEqual([...want].sort((a, b) => a - b));
  });

  it("a response is whole only once the finishing frame's last byte (its message CRC) was written and a FIN followed", () => {
    const last = eventStreamFrames(body).at(-1)!;
    const fate = (sent: number, end: "fin" | "rst") => responseFate({ body, sent, end } as unknown as ProxiedRequest, "messageStop");
    for (const sent of [last.start, last.payloadStart, last.crcStart, last.end - 1]) expect(fate(sent, "fin"), `sent ${sent} of ${last.end}`).toBe("cut");
    expect(fate(last.end, "fin")).toBe("whole");
    expect(fate(last.end, "rst")).toBe("either");
  });
});
