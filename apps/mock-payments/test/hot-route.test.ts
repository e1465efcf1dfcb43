import { connect } from "node:net";
import { describe, expect, it } from "vitest";
import { startServer, payment } from "./helpers.js";

// POST /v1/payments is served by a plain node:http handler before express (the demo's hot
// route). Express routes "/v1/payments/" (a trailing slash) to the same handler through its
// router; these tests send the same raw requests both ways to two servers of the same clock and
// compare the bytes that come back (the new payment ids are random: masked).

interface Shape {
  name: string;
  headers?: Record<string, string>;
  /** The body as sent; an object is sent as JSON. */
  body?: unknown;
  /** The connection is dropped before any byte of a response (a planned fault). */
  noAnswer?: boolean;
}

const auth = { authorization: "Bearer acct_hot", "content-type": "application/json" };
const shapes: Shape[] = [
  { name: "created, no key", headers: auth, body: payment() },
  { name: "created under a key", headers: { ...auth, "idempotency-key": "k-1" }, body: payment({ memo: "naïve café ☕" }) },
  { name: "replayed under the key", headers: { ...auth, "idempotency-key": "k-1" }, body: payment({ memo: "naïve café ☕" }) },
  { name: "the key reused for another body", headers: { ...auth, "idempotency-key": "k-1" }, body: payment({ amount: 1 }) },
  { name: "charset in the type", headers: { ...auth, "content-type": "application/json; charset=utf-8" }, body: payment() },
  { name: "no authorization", headers: { "content-type": "application/json" }, body: payment() },
  { name: "not a bearer token", headers: { ...auth, authorization: "Basic eDp5" }, body: payment() },
  { name: "malformed JSON", headers: auth, body: '{"payee": ' },
  { name: "a JSON string (strict)", headers: auth, body: '"text"' },
  { name: "another media type (body-parser)", headers: { ...auth, "content-type": "text/plain" }, body: JSON.stringify(payment()) },
  { name: "a +json media type (body-parser)", headers: { ...auth, "content-type": "application/merge-patch+json" }, body: payment() },
  { name: "too large (body-parser)", headers: auth, body: payment({ memo: "x".repeat(200 * 1024) }) },
  { name: "an invalid body", headers: auth, body: { ...payment(), amount: -5, extra: true } },
  { name: "a malformed key", headers: { ...auth, "idempotency-key": "" }, body: payment() },
  { name: "the key sent twice", headers: { ...auth, "idempotency-key": "k-2", "Idempotency-Key": "k-3" }, body: payment() },
  { name: "refused before accept", headers: { ...auth, "idempotency-key": "k-4", "x-mock-fault": "fail_before_accept" }, body: payment() },
  { name: "a bad fault header", headers: { ...auth, "x-mock-fault": "{nope" }, body: payment() },
  { name: "the response lost", headers: { ...auth, "idempotency-key": "k-5", "x-mock-fault": "drop_after_accept" }, body: payment(), noAnswer: true },
  { name: "the lost one's replay", headers: { ...auth, "idempotency-key": "k-5" }, body: payment() },
];

function rawRequest(port: number, path: string, shape: Shape): Promise<string> {
  const text = shape.body === undefined ? "" : typeof shape.body === "string" ? shape.body : JSON.stringify(shape.body);
  const bytes = Buffer.from(text, "utf8");
  const head = [`POST ${path} HTTP/1.1`, "host: 127.0.0.1", "connection: close", `content-length: ${bytes.length}`];
  for (const [k, v] of Object.entries(shape.headers ?? {})) head.push(`${k}: ${v}`);
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    const socket = connect(port, "127.0.0.1", () => socket.write(Buffer.concat([Buffer.from(head.join("\r\n") + "\r\n\r\n"), bytes])));
    socket.on("data", (c: Buffer) => chunks.push(c));
    socket.on("error", (e: NodeJS.ErrnoException) => (e.code === "ECONNRESET" ? resolve(Buffer.concat(chunks).toString("latin1") + "<reset>") : reject(e)));
    socket.on("close", () => resolve(Buffer.concat(chunks).toString("latin1")));
  });
}

const masked = (text: string) => text.replace(/\r\nDate: [^\r]*/, "\r\nDate: <date>").replaceAll(/pay_[0-9a-f]{24}/g, "pay_<id>");

describe("POST /v1/payments on the plain server and through express", () => {
  it("answers every request shape with the same bytes both ways", async () => {
    const now = () => Date.parse("2026-12-05T00:00:00Z");
    const hot = await startServer({ now });
    const viaExpress = await startServer({ now });
    for (const shape of shapes) {
      const fromHot = await rawRequest(hot.port, "/v1/payments", shape);
      const fromExpress = await rawRequest(viaExpress.port, "/v1/payments/", shape);
      if (shape.noAnswer) expect(fromHot, shape.name).toBe("");
      else expect(fromHot, shape.name).toMatch(/^HTTP\/1\.1 [1-5]\d\d /);
      expect(masked(fromHot), shape.name).toBe(masked(fromExpress));
    }
    // The same effects, in the same order, on both servers.
    const view = (server: typeof hot) => server.effects().map((e) => ({ ...e, resourceId: e.resourceId.replace(/^pay_.*/, "pay_<id>") }));
    expect(view(hot)).toEqual(view(viaExpress));
    expect(view(hot).length).toBe(5);
  });

  it("leaves every other route to express", async () => {
    const server = await startServer();
    const other = await rawRequest(server.port, "/v1/payments/pay_0/void", { name: "void", headers: { authorization: "Bearer acct_hot", "content-type": "application/json" }, body: {} });
    expect(other).toMatch(/^HTTP\/1\.1 404 /);
    expect(other).toContain('"code":"payment_not_found"');
    const withQuery = await rawRequest(server.port, "/v1/payments?x=1", { name: "query", headers: { authorization: "Bearer acct_hot", "content-type": "application/json" }, body: payment() });
    expect(withQuery).toMatch(/^HTTP\/1\.1 201 /); // express's router: the path without its query
  });
});
