import net from "node:net";
import { setImmediate as tick } from "node:timers/promises";

/**
 * A fault harness as a team outside this repository would build one: a TCP proxy between the real
 * SDK and a mock provider that delivers each response body in the byte-sized writes a plan says,
 * and ends the connection with a FIN or a RST after the last of them. The mocks themselves cut and
 * hold only between SSE events; here a cut falls on any byte (inside a line, inside a multi-byte
 * UTF-8 character, between `\r` and `\n`), and a whole body can arrive one byte per write.
 *
 * The proxy answers every request with a chunked body (one chunk per write), one request per
 * connection. `fin` ends the body cleanly (the last chunk, `Connection: close`, then a FIN: what a
 * proxy that lost its upstream and closes the response sends; the SDK raises nothing); `rst`
 * resets the connection mid-body on a keep-alive response, and the SDK raises. (On a response that
 * says `Connection: close`, undici takes a RST, or a FIN mid-chunk, for the end of the body and the
 * SDK raises nothing either: there the runner's own check for the finishing event is all there is.)
 */

export type ConnectionEnd = "fin" | "rst";

/** How one response body reaches the client. */
export interface Delivery {
  /** The body to send (the upstream's, or a rewrite of it such as CRLF line endings). */
  body: Buffer;
  /** The sizes of the writes, in order; their sum is how many bytes of `body` are sent (a cut when less). */
  writes: number[];
  end: ConnectionEnd;
}

export interface ProxiedRequest {
  /** 1-based, per case (the `x-byte-case` request header), in arrival order. */
  number: number;
  caseId: string;
  path: string;
  requestBody: unknown;
  status: number;
  /** The body as the upstream sent it. */
  upstreamBody: Buffer;
  /** The body as the plan delivers it (the upstream's, or its rewrite), of which `sent` bytes were written. */
  body: Buffer;
  /** How many body bytes were written before the end (the whole body's length when not cut). */
  sent: number;
  end: ConnectionEnd;
}

/** Decides, per request of a case, how its response is delivered; undefined sends it whole, ended cleanly. */
export type DeliveryPlan = (request: { caseId: string; number: number; path: string; requestBody: unknown }, body: Buffer) => Delivery | undefined;

export interface ByteProxy {
  readonly baseURL: string;
  readonly requests: ProxiedRequest[];
  /** The plan of one case (requests carry the case as the `x-byte-case` header). */
  plan(caseId: string, plan: DeliveryPlan): void;
  close(): Promise<void>;
}

const HEAD_END = Buffer.from("\r\n\r\n");
// Framing the proxy writes itself; the upstream's would contradict a close-delimited body.
const HOP_HEADERS = new Set(["content-length", "transfer-encoding", "connection", "keep-alive", "date"]);

/** Reads one HTTP/1.1 request (head, then a Content-Length body) from the socket. */
function readRequest(socket: net.Socket): Promise<{ method: string; path: string; headers: [string, string][]; body: Buffer }> {
  return new Promise((resolve, reject) => {
    let buffered = Buffer.alloc(0);
    const onData = (chunk: Buffer) => {
      buffered = Buffer.concat([buffered, chunk]);
      const headEnd = buffered.indexOf(HEAD_END);
      if (headEnd < 0) return;
      const [requestLine, ...lines] = buffered.subarray(0, headEnd).toString("latin1").split("\r\n");
      const [method, path] = requestLine!.split(" ");
      const headers = lines.map((line): [string, string] => {
        const colon = line.indexOf(":");
        return [line.slice(0, colon).trim().toLowerCase(), line.slice(colon + 1).trim()];
      });
      if (headers.some(([name]) => name === "transfer-encoding")) {
        cleanup();
        reject(new Error("the byte proxy reads only Content-Length request bodies"));
        return;
      }
      const length = Number(headers.find(([name]) => name === "content-length")?.[1] ?? "0");
      const body = buffered.subarray(headEnd + HEAD_END.length);
      if (body.length < length) return;
      cleanup();
      resolve({ method: method!, path: path!, headers, body: body.subarray(0, length) });
    };
    const onEnd = () => {
      cleanup();
      reject(new Error("the client closed before its request was whole"));
    };
    const cleanup = () => {
      socket.off("data", onData);
      socket.off("end", onEnd);
      socket.off("error", onEnd);
    };
    socket.on("data", onData);
    socket.on("end", onEnd);
    socket.on("error", onEnd);
  });
}

/** Resolves once the bytes were handed to the kernel. */
function write(socket: net.Socket, bytes: Buffer | string): Promise<void> {
  return new Promise((resolve, reject) => socket.write(bytes, (error) => (error ? reject(error) : resolve())));
}

export async function startByteProxy(upstreamBaseURL: string): Promise<ByteProxy> {
  const upstream = new URL(upstreamBaseURL);
  const requests: ProxiedRequest[] = [];
  const plans = new Map<string, DeliveryPlan>();
  const counts = new Map<string, number>();
  const sockets = new Set<net.Socket>();
  const failures: unknown[] = [];

  const serve = async (socket: net.Socket) => {
    const request = await readRequest(socket);
    const caseId = request.headers.find(([name]) => name === "x-byte-case")?.[1] ?? "";
    const number = (counts.get(caseId) ?? 0) + 1;
    counts.set(caseId, number);
    const headers = request.headers.filter(([name]) => name !== "host" && name !== "content-length" && name !== "connection");
    const response = await fetch(new URL(request.path, upstream), {
      method: request.method,
      headers,
      ...(request.body.length > 0 ? { body: request.body } : {}),
    });
    const upstreamBody = Buffer.from(await response.arrayBuffer());
    let requestBody: unknown;
    try {
      requestBody = JSON.parse(request.body.toString("utf8"));
    } catch {
      requestBody = undefined;
    }
    const delivery = (response.ok ? plans.get(caseId)?.({ caseId, number, path: request.path, requestBody }, upstreamBody) : undefined) ?? {
      body: upstreamBody,
      writes: [upstreamBody.length],
      end: "fin" as const,
    };
    const head = [`HTTP/1.1 ${response.status} ${response.statusText || "OK"}`];
    response.headers.forEach((value, name) => {
      if (!HOP_HEADERS.has(name)) head.push(`${name}: ${value}`);
    });
    head.push("transfer-encoding: chunked", delivery.end === "fin" ? "connection: close" : "connection: keep-alive", "", "");
    await write(socket, head.join("\r\n"));
    let offset = 0;
    for (const size of delivery.writes) {
      if (size > 0) await write(socket, Buffer.concat([Buffer.from(`${size.toString(16)}\r\n`), delivery.body.subarray(offset, offset + size), Buffer.from("\r\n")]));
      offset += size;
      // A turn of the event loop between writes, so the client reads each as its own chunk.
      if (delivery.writes.length > 1) await tick();
    }
    requests.push({ number, caseId, path: request.path, requestBody, status: response.status, upstreamBody, body: delivery.body, sent: offset, end: delivery.end });
    if (delivery.end === "rst") socket.resetAndDestroy();
    else socket.end("0\r\n\r\n");
  };

  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
    // A client that gave up (its SDK aborted) resets us: nothing to report.
    socket.on("error", () => {});
    serve(socket).catch((error: unknown) => {
      if (!socket.destroyed) {
        failures.push(error);
        socket.destroy();
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as net.AddressInfo;
  return {
    baseURL: `http://127.0.0.1:${port}${upstream.pathname.replace(/\/$/, "")}`,
    requests,
    plan(caseId, plan) {
      plans.set(caseId, plan);
    },
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      if (failures.length > 0) throw new Error(`the byte proxy failed to serve ${failures.length} request(s): ${String(failures[0])}`);
    },
  };
}
