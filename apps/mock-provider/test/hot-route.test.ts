import { createServer, type Server } from "node:http";
import { connect, type AddressInfo } from "node:net";
import express from "express";
import { afterEach, describe, expect, it } from "vitest";
import { startMockProvider } from "../src/index.js";
import { body, invoice, payment } from "./helpers.js";

// POST /v1/messages is served by a plain node:http handler before express (the demo's hot
// route); every other request goes to the express app. These tests send the same raw requests
// to a provider's own server and to a plain server over its express app (a second provider of
// the same seed), and compare the bytes that come back.

interface Shape {
  name: string;
  method?: string;
  path?: string;
  headers?: Record<string, string>;
  /** The body as sent; an object is sent as JSON. */
  body?: unknown;
  /** Answered with a request id from Math.random (express's error handler), masked before comparing. */
  randomId?: boolean;
  /** The connection is reset before any byte of a response (a planned fault). */
  noAnswer?: boolean;
}

const sdkHeaders = { "content-type": "application/json", "x-api-key": "sk-test", "anthropic-version": "2023-06-01" };
const fault = (f: unknown) => ({ ...sdkHeaders, "x-mock-fault": JSON.stringify(f) });
const callPayment = `call send_payment ${JSON.stringify(payment)}`;

const shapes: Shape[] = [
  { name: "streamed text", headers: sdkHeaders, body: { ...body("hello there"), stream: true } },
  { name: "streamed tool use", headers: sdkHeaders, body: { ...body(callPayment), stream: true } },
  { name: "the same body again (attempt 2)", headers: sdkHeaders, body: { ...body(callPayment), stream: true } },
  { name: "whole tool use", headers: sdkHeaders, body: body(`call create_invoice ${JSON.stringify(invoice)}`) },
  { name: "whole text, charset in the type", headers: { ...sdkHeaders, "content-type": "application/json; charset=utf-8" }, body: body("naïve café ☕") },
  { name: "bearer key", headers: { "content-type": "application/json", authorization: "Bearer sk-test", "anthropic-version": "2023-06-01" }, body: body("hi") },
  { name: "no key", headers: { "content-type": "application/json", "anthropic-version": "2023-06-01" }, body: body("hi") },
  { name: "no version", headers: { "content-type": "application/json", "x-api-key": "sk-test" }, body: body("hi") },
  { name: "invalid request", headers: sdkHeaders, body: { model: "m", messages: [] } },
  { name: "an array body", headers: sdkHeaders, body: [1, 2] },
  { name: "malformed JSON", headers: sdkHeaders, body: '{"model": ', randomId: true },
  { name: "a JSON string body (strict)", headers: sdkHeaders, body: '"text"', randomId: true },
  { name: "another media type (body-parser)", headers: { ...sdkHeaders, "content-type": "text/plain" }, body: JSON.stringify(body("hi")) },
  { name: "a gzip encoding that is not (body-parser)", headers: { ...sdkHeaders, "content-encoding": "gzip" }, body: body("hi"), randomId: true },
  { name: "a bad directive (script error)", headers: sdkHeaders, body: body("call send_payment {nope") },
  { name: "status fault", headers: fault({ kind: "status", status: 529, retryAfterMs: 250, shouldRetry: true }), body: { ...body("hi"), stream: true } },
  { name: "fault header not JSON", headers: { ...sdkHeaders, "x-mock-fault": "{nope" }, body: body("hi") },
  { name: "reset mid arguments", headers: fault({ kind: "reset", at: { toolUse: 0, afterFragment: 1 } }), body: { ...body(callPayment), stream: true } },
  { name: "clean close before message_stop", headers: fault({ kind: "clean_close", at: { beforeMessageStop: true } }), body: { ...body(callPayment), stream: true } },
  { name: "error event", headers: fault({ kind: "error_event", at: { afterBlockStop: 0 } }), body: { ...body("hello"), stream: true } },
  { name: "reset of a whole response", headers: fault({ kind: "reset", at: { event: 0 } }), body: body("hello"), noAnswer: true },
  { name: "thread without its beta", headers: sdkHeaders, body: { ...body("hi"), thread: { type: "create" } } },
  { name: "a query string (express's route)", path: "/v1/messages?beta=true", headers: sdkHeaders, body: { ...body("hi"), stream: true } },
  { name: "a trailing slash (express's route)", path: "/v1/messages/", headers: sdkHeaders, body: body("hi") },
  { name: "GET (not found)", method: "GET", headers: { "x-api-key": "sk-test" }, randomId: true },
  { name: "control health", method: "GET", path: "/_control/health" },
];

function rawRequest(port: number, shape: Shape): Promise<string> {
  const text = shape.body === undefined ? "" : typeof shape.body === "string" ? shape.body : JSON.stringify(shape.body);
  const bytes = Buffer.from(text, "utf8");
  const head = [`${shape.method ?? "POST"} ${shape.path ?? "/v1/messages"} HTTP/1.1`, "host: 127.0.0.1", "connection: close"];
  for (const [k, v] of Object.entries(shape.headers ?? {})) head.push(`${k}: ${v}`);
  if (shape.method === undefined || bytes.length > 0) head.push(`content-length: ${bytes.length}`);
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    const socket = connect(port, "127.0.0.1", () => socket.write(Buffer.concat([Buffer.from(head.join("\r\n") + "\r\n\r\n"), bytes])));
    socket.on("data", (c: Buffer) => chunks.push(c));
    socket.on("error", (e: NodeJS.ErrnoException) => (e.code === "ECONNRESET" ? resolve(Buffer.concat(chunks).toString("latin1") + "<reset>") : reject(e)));
    socket.on("close", () => resolve(Buffer.concat(chunks).toString("latin1")));
  });
}

const masked = (text: string, shape: Shape) => {
  let out = text.replace(/\r\ndate: [^\r]*/i, "\r\ndate: <date>");
  if (shape.randomId) out = out.replaceAll(/req_011C[0-9A-Za-z]{22}/g, "req_011C<random>");
  return out;
};

const servers: Server[] = [];
const providers: Array<{ close(): Promise<void> }> = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => new Promise<void>((resolve) => s.close(() => resolve()))));
  await Promise.all(providers.splice(0).map((p) => p.close()));
});

describe("POST /v1/messages on the plain server and through express", () => {
  it("answers every request shape with the same bytes both ways", async () => {
    const hot = await startMockProvider({ seed: "bytes" });
    const viaExpress = await startMockProvider({ seed: "bytes" });
    providers.push(hot, viaExpress);
    const expressServer = createServer(viaExpress.app);
    servers.push(expressServer);
    await new Promise<void>((resolve) => expressServer.listen(0, "127.0.0.1", resolve));
    const expressPort = (expressServer.address() as AddressInfo).port;

    // Both ways now share the JSON writer; express's own res.json is the reference for its bytes:
    // every JSON answer is written again by express from its status, headers and value.
    const reference = express();
    reference.disable("x-powered-by");
    reference.disable("etag");
    reference.use(express.json());
    reference.post("/json", (req, res) => {
      const { status, headers, value } = req.body as { status: number; headers: Array<[string, string]>; value: unknown };
      res.status(status);
      for (const [k, v] of headers) res.setHeader(k, v);
      res.json(value);
    });
    const referenceServer = createServer(reference);
    servers.push(referenceServer);
    await new Promise<void>((resolve) => referenceServer.listen(0, "127.0.0.1", resolve));
    const referencePort = (referenceServer.address() as AddressInfo).port;
    let jsonAnswers = 0;

    for (const shape of shapes) {
      const fromHot = await rawRequest(hot.port, shape);
      const fromExpress = await rawRequest(expressPort, shape);
      const [head, text] = fromHot.split("\r\n\r\n") as [string, string];
      if (/\r\nContent-Type: application\/json; charset=utf-8\r\n/.test(head)) {
        jsonAnswers += 1;
        const lines = head.split("\r\n");
        const status = Number(lines[0]!.split(" ")[1]);
        const before = lines.slice(1, lines.findIndex((l) => l.startsWith("Content-Type:"))).map((l) => l.split(": ", 2) as [string, string]);
        const value: unknown = JSON.parse(Buffer.from(text, "latin1").toString("utf8"));
        const replay = { status, headers: before, value };
        const fromReference = await rawRequest(referencePort, { name: "replay", path: "/json", headers: { "content-type": "application/json" }, body: replay });
        expect(masked(fromHot, shape), `${shape.name}: express's res.json`).toBe(masked(fromReference, shape));
      }
      if (shape.noAnswer) expect(fromHot, shape.name).toBe("");
      else expect(fromHot, shape.name).toMatch(/^HTTP\/1\.1 [1-5]\d\d /);
      expect(masked(fromHot, shape), shape.name).toBe(masked(fromExpress, shape));
    }
    expect(jsonAnswers).toBeGreaterThan(10);
    // Both saw the same requests the same way: the log records (path, outcome, ids) agree.
    const view = (r: (typeof hot.requests)[number]) => ({ ...r, receivedAt: 0, endedAt: 0, events: r.events.map((e) => ({ ...e, atMs: 0 })) });
    expect(hot.requests.map(view)).toEqual(viaExpress.requests.map(view));
    expect(hot.requests.find((r) => r.path === "/v1/messages" && r.outcome === "complete")).toBeDefined();
  });

  it("still routes everything else to the express app", async () => {
    const provider = await startMockProvider({ seed: "bytes" });
    providers.push(provider);
    const health = await rawRequest(provider.port, { name: "health", method: "GET", path: "/_control/health" });
    expect(health).toMatch(/^HTTP\/1\.1 200 OK\r\n/);
    expect(health.endsWith('{"ok":true,"requests":0}')).toBe(true);
    const wrongMethod = await rawRequest(provider.port, { name: "put", method: "PUT", headers: sdkHeaders, body: body("hi") });
    expect(wrongMethod).toMatch(/^HTTP\/1\.1 404 Not Found\r\n/);
    expect(wrongMethod).toContain('"message":"Not found: PUT /v1/messages"');
  });
});
