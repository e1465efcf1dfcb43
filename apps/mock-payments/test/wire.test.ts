import { connect } from "node:net";
import { describe, expect, it } from "vitest";
import { ISO_4217_CURRENCIES, parseIdempotencyKey } from "../src/index.js";
import { http, payment, problemType, startServer, until } from "./helpers.js";

const PROBLEM_JSON = "application/problem+json; charset=utf-8";

/** Write raw bytes to the server and read the whole response (the server closes or answers once). */
function rawRequest(url: string, bytes: Buffer): Promise<{ statusLine: string; headers: Map<string, string>; body: string }> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = connect({ host: hostname, port: Number(port) });
    const chunks: Buffer[] = [];
    socket.on("data", (c: Buffer) => chunks.push(c));
    socket.on("error", reject);
    socket.on("end", () => {
      const text = Buffer.concat(chunks).toString("latin1");
      const split = text.indexOf("\r\n\r\n");
      if (split < 0) return reject(new Error(`no complete response: ${JSON.stringify(text)}`));
      const [statusLine, ...lines] = text.slice(0, split).split("\r\n");
      const headers = new Map<string, string>();
      for (const line of lines) {
        const colon = line.indexOf(":");
        headers.set(line.slice(0, colon).toLowerCase(), line.slice(colon + 1).trim());
      }
      resolve({ statusLine: statusLine!, headers, body: text.slice(split + 4) });
    });
    socket.write(bytes);
  });
}

function postPaymentBytes(keyLines: Buffer[]): Buffer {
  const body = JSON.stringify(payment());
  const head = Buffer.from(
    `POST /v1/payments HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer acct_test\r\nContent-Type: application/json\r\n` +
      `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n`,
    "latin1",
  );
  const keys = keyLines.map((k) => Buffer.concat([Buffer.from("Idempotency-Key: ", "latin1"), k, Buffer.from("\r\n", "latin1")]));
  return Buffer.concat([head, ...keys, Buffer.from("\r\n" + body, "latin1")]);
}

describe("Idempotency-Key whitespace", () => {
  it("strips only HTTP optional whitespace (space, tab), never U+00A0", () => {
    expect(parseIdempotencyKey(" \tk-1\t ")).toEqual({ ok: true, key: "k-1" });
    expect(parseIdempotencyKey("\u00a0k-1").ok).toBe(false);
    expect(parseIdempotencyKey("k-1\u00a0").ok).toBe(false);
    expect(parseIdempotencyKey('"k-1"\u00a0').ok).toBe(false);
  });

  it("answers 400 to a key sent with a trailing or leading 0xA0 byte, so it cannot share the plain key's record", async () => {
    const server = await startServer();
    const plain = await http(server, "POST", "/v1/payments", { key: "k-nbsp", body: payment() });
    expect(plain.status).toBe(201);
    for (const bytes of [Buffer.from("k-nbsp\xa0", "latin1"), Buffer.from("\xa0k-nbsp", "latin1")]) {
      const res = await rawRequest(server.url, postPaymentBytes([bytes]));
      expect(res.statusLine).toBe("HTTP/1.1 400 Bad Request");
      expect(JSON.parse(res.body)).toMatchObject({ type: problemType("idempotency-key-malformed") });
    }
    expect(server.effects()).toHaveLength(1);
  });
});

describe("two Idempotency-Key header lines", () => {
  it("are malformed even when Node's ', ' join would read as one valid sf-string", async () => {
    const server = await startServer();
    // `"a` + `b"` joined by Node is `"a, b"`: a well-formed sf-string naming the key `a, b`.
    const res = await rawRequest(server.url, postPaymentBytes([Buffer.from('"a'), Buffer.from('b"')]));
    expect(res.statusLine).toBe("HTTP/1.1 400 Bad Request");
    expect(JSON.parse(res.body)).toMatchObject({ type: problemType("idempotency-key-malformed") });
    const same = await rawRequest(server.url, postPaymentBytes([Buffer.from("k-2"), Buffer.from("k-2")]));
    expect(same.statusLine).toBe("HTTP/1.1 400 Bad Request");
    expect(server.effects()).toHaveLength(0);
  });
});

describe("response headers", () => {
  it("gives the in-flight 409 a Retry-After", async () => {
    const server = await startServer();
    const first = http(server, "POST", "/v1/payments", {
      key: "k-busy",
      body: payment(),
      headers: { "x-mock-fault": JSON.stringify({ latencyMs: 600_000 }) },
    });
    await until(() => server.inFlight().length === 1, "the first request to claim its key");
    const second = await http(server, "POST", "/v1/payments", { key: "k-busy", body: payment() });
    expect(second.status).toBe(409);
    expect(second.headers.get("retry-after")).toMatch(/^[1-9][0-9]*$/);
    server.releaseLatency();
    expect((await first).status).toBe(201);
  });

  it("gives 201 Created a Location naming the new payment, on the first answer and on a replay", async () => {
    const server = await startServer();
    const created = await http(server, "POST", "/v1/payments", { key: "k-loc", body: payment() });
    expect(created.status).toBe(201);
    const location = created.headers.get("location");
    expect(location).toBe(`/v1/payments/${created.body.id}`);
    const fetched = await http(server, "GET", location!);
    expect(fetched.status).toBe(200);
    expect(fetched.body.id).toBe(created.body.id);
    const replay = await http(server, "POST", "/v1/payments", { key: "k-loc", body: payment() });
    expect(replay.headers.get("location")).toBe(location);
  });

  it("gives a created invoice a Location that answers", async () => {
    const server = await startServer();
    const created = await http(server, "POST", "/v1/invoices", { body: { customer: "c-1", amount: 100, currency: "EUR" } });
    expect(created.status).toBe(201);
    const location = created.headers.get("location");
    expect(location).toBe(`/v1/invoices/${created.body.id}`);
    const fetched = await http(server, "GET", location!);
    expect(fetched.status).toBe(200);
    expect(fetched.body).toEqual(created.body);
  });
});

describe("requests Node's HTTP parser rejects", () => {
  it("get a problem+json 400, not a bare 400", async () => {
    const server = await startServer();
    const res = await rawRequest(server.url, Buffer.from("POST /v1/payments HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n", "latin1"));
    expect(res.statusLine).toMatch(/^HTTP\/1\.1 400 /);
    expect(res.headers.get("content-type")).toBe(PROBLEM_JSON);
    expect(JSON.parse(res.body)).toMatchObject({ type: problemType("malformed-request"), status: 400, code: "malformed_request" });
  });

  it("get a problem+json 431 when the header section is too large", async () => {
    const server = await startServer();
    const res = await rawRequest(server.url, Buffer.from(`GET /v1/payments HTTP/1.1\r\nHost: x\r\nX-Big: ${"a".repeat(20_000)}\r\n\r\n`, "latin1"));
    expect(res.statusLine).toMatch(/^HTTP\/1\.1 431 /);
    expect(res.headers.get("content-type")).toBe(PROBLEM_JSON);
    expect(JSON.parse(res.body)).toMatchObject({ type: problemType("request-header-fields-too-large"), status: 431 });
  });
});

describe("currency", () => {
  it("accepts ISO 4217 codes and rejects three upper-case letters that are not one", async () => {
    const server = await startServer();
    expect(ISO_4217_CURRENCIES.has("EUR")).toBe(true);
    expect(ISO_4217_CURRENCIES.has("JPY")).toBe(true);
    for (const currency of ["ABC", "EUX", "QQQ"]) {
      const res = await http(server, "POST", "/v1/payments", { key: `k-${currency}`, body: payment({ currency }) });
      expect(res.status).toBe(400);
      expect(res.contentType).toBe(PROBLEM_JSON);
      expect(res.body).toMatchObject({ type: problemType("invalid-request-body") });
      const inv = await http(server, "POST", "/v1/invoices", { body: { customer: "c", amount: 1, currency } });
      expect(inv.status).toBe(400);
    }
    expect((await http(server, "POST", "/v1/payments", { key: "k-jpy", body: payment({ currency: "JPY" }) })).status).toBe(201);
    expect(server.effects()).toHaveLength(1);
  });
});
