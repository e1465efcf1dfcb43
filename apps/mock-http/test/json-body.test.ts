// jsonBody must answer every request exactly as express.json() does: the fast path for the SDKs'
// requests and the fallback for the rest. Each request below goes to two servers, one with each
// parser, and the answers (status, parsed body, error type and message) must be the same.
import { request as httpRequest, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { gzipSync } from "node:zlib";
import express, { type NextFunction, type Request, type RequestHandler, type Response } from "express";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { jsonBody } from "../src/index.js";

const LIMIT = 1024;

function serve(parser: RequestHandler): Promise<Server> {
  const app = express();
  app.use(parser);
  app.post("/echo", (req: Request, res: Response) => {
    res.json({ has: "body" in req, body: req.body === undefined ? "(undefined)" : req.body });
  });
  app.use((error: Error & { status?: number; type?: string }, _req: Request, res: Response, _next: NextFunction) => {
    res.status(error.status ?? 500).json({ type: error.type, name: error.name, message: error.message });
  });
  return new Promise((resolve) => {
    const server = app.listen(0, "127.0.0.1", () => resolve(server));
  });
}

interface Sent {
  headers: Record<string, string>;
  body: Buffer | string | (Buffer | string)[];
}

function send(server: Server, sent: Sent): Promise<{ status: number; body: unknown }> {
  const { port } = server.address() as AddressInfo;
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: "127.0.0.1", port, method: "POST", path: "/echo", headers: sent.headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(Buffer.concat(chunks).toString("utf8")) as unknown }));
      res.on("error", reject);
    });
    req.on("error", reject);
    const parts = Array.isArray(sent.body) ? sent.body : [sent.body];
    for (const part of parts) req.write(part);
    req.end();
  });
}

/** A request with an exact Content-Length, as fetch and the SDKs send it. */
function json(text: string | Buffer, type = "application/json", extra: Record<string, string> = {}): Sent {
  const bytes = typeof text === "string" ? Buffer.from(text, "utf8") : text;
  return { headers: { "content-type": type, "content-length": String(bytes.length), ...extra }, body: bytes };
}

let lean: Server;
let reference: Server;

beforeAll(async () => {
  lean = await serve(jsonBody({ limitBytes: LIMIT }));
  reference = await serve(express.json({ limit: LIMIT }));
});

afterAll(async () => {
  await Promise.all([lean, reference].map((s) => new Promise<void>((resolve) => s.close(() => resolve()))));
});

const CASES: Array<[string, Sent]> = [
  ["an object", json('{"model":"m","messages":[{"role":"user","content":"hi"}]}')],
  ["an object with charset=utf-8", json('{"a":1}', "application/json; charset=utf-8")],
  ["an array", json("[1,2,3]")],
  ["leading whitespace", json(' \n\t{"a":[true,null]}')],
  ["a byte order mark", json("\ufeff{\"a\":1}")],
  ["non-ASCII text split across writes", { headers: { "content-type": "application/json", "content-length": String(Buffer.byteLength('{"t":"żółć €𝄞"}')) }, body: [Buffer.from('{"t":"żółć €𝄞"}').subarray(0, 9), Buffer.from('{"t":"żółć €𝄞"}').subarray(9)] }],
  ["a number (strict mode)", json("42")],
  ["a string (strict mode)", json('"text"')],
  ["whitespace only", json("   ")],
  ["true after whitespace (strict mode)", json("  true")],
  ["malformed JSON", json('{"a":')],
  ["a trailing comma", json('{"a":1,}')],
  ["a lone high surrogate escape", json('{"a":"\\ud800"}')],
  ["exactly the limit", json(`{"p":"${"x".repeat(LIMIT - 8)}"}`)],
  ["one byte over the limit", json(`{"p":"${"x".repeat(LIMIT - 7)}"}`)],
  ["an empty body", json("")],
  ["a Latin-1 charset", json('{"a":1}', "application/json; charset=latin1")],
  ["an upper-case media type", json('{"a":1}', "Application/JSON")],
  ["another media type", json('{"a":1}', "text/plain")],
  ["a +json media type", json('{"a":1}', "application/vnd.api+json")],
  ["a gzip body", json(gzipSync('{"zipped":true}'), "application/json", { "content-encoding": "gzip" })],
  ["a chunked body without Content-Length", { headers: { "content-type": "application/json", "transfer-encoding": "chunked" }, body: ['{"a"', ":1}"] }],
  ["an identity Content-Encoding", json('{"a":1}', "application/json", { "content-encoding": "identity" })],
];

describe("jsonBody answers as express.json()", () => {
  it.each(CASES)("%s", async (_label, sent) => {
    const [ours, theirs] = await Promise.all([send(lean, sent), send(reference, sent)]);
    expect(ours).toEqual(theirs);
  });

  it("for any JSON object or array a client sends (property)", async () => {
    await fc.assert(
      fc.asyncProperty(fc.oneof(fc.object({ maxDepth: 2, maxKeys: 4 }), fc.array(fc.jsonValue({ maxDepth: 2 }), { maxLength: 4 })), fc.constantFrom("application/json", "application/json; charset=utf-8"), async (value, type) => {
        const text = JSON.stringify(value);
        // Within the limit: a 413 is a case of its own above.
        fc.pre(Buffer.byteLength(text) <= LIMIT);
        const sent = json(text, type);
        const [ours, theirs] = await Promise.all([send(lean, sent), send(reference, sent)]);
        expect(ours).toEqual(theirs);
        expect(ours.status).toBe(200);
      }),
      { numRuns: 100 },
    );
  });

  it("parses the SDKs' request shape itself and hands every other shape to body-parser", async () => {
    const reachedFallback: string[] = [];
    const reference = express.json({ limit: LIMIT });
    const server = await serve(
      jsonBody({
        limitBytes: LIMIT,
        fallback: (req, res, next) => {
          reachedFallback.push(String(req.headers["x-case"]));
          return reference(req, res, next);
        },
      }),
    );
    try {
      for (const [label, sent] of CASES) await send(server, { ...sent, headers: { ...sent.headers, "x-case": label } });
      const fast = ["an object", "an object with charset=utf-8", "an array", "leading whitespace", "a byte order mark", "non-ASCII text split across writes", "a number (strict mode)", "a string (strict mode)", "whitespace only", "true after whitespace (strict mode)", "malformed JSON", "a trailing comma", "a lone high surrogate escape", "exactly the limit"];
      expect(reachedFallback).toEqual(CASES.map(([label]) => label).filter((label) => !fast.includes(label)));
    } finally {
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });

  it("refuses a limit that is not a positive integer", () => {
    for (const bad of [0, -1, 1.5, Number.NaN]) expect(() => jsonBody({ limitBytes: bad })).toThrow(TypeError);
  });
});
