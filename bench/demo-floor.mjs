#!/usr/bin/env node
// The floor under the demo's main job (`pnpm demo`): the CPU that the HTTP exchanges of one turn
// cost on their own, with the simplest possible servers. A demo turn, per side, is two streamed model
// responses (the tool_use step and the tool_result step, through the real @anthropic-ai/sdk over
// fetch, as the demo must keep) and one payments POST; there are two sides (naive and guarded).
// The request and response shapes are the demo's own, captured from a run
// (demo-floor-shapes.json). Client and server share one process and one thread, as in the demo.
// Measured as process CPU (user + system) per exchange at concurrency 16, in alternating slices,
// and reported as the median over the slices. A benchmark: it asserts nothing.
import { readFileSync } from "node:fs";
import http from "node:http";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, "..");
const shapes = JSON.parse(readFileSync(join(here, "demo-floor-shapes.json"), "utf8"));
const SSE_HEADERS = { "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache" };

/** A minimal model server: parses the body, answers with the captured stream of the step asked for, in one write. */
function startModelServer() {
  return listen((request, res) => {
    const toolResultStep = request.messages.length > 1;
    res.writeHead(200, SSE_HEADERS);
    res.end(toolResultStep ? shapes.doneResponse : shapes.toolResponse);
  });
}

/** A minimal payments server: parses the body, answers 201 with the captured payment. */
function startPaymentsServer() {
  return listen((_request, res) => {
    res.writeHead(201, { "content-type": "application/json; charset=utf-8", location: shapes.paymentLocation, "content-length": Buffer.byteLength(shapes.paymentResponse) });
    res.end(shapes.paymentResponse);
  });
}

/** A node:http server that reads and parses each JSON body, then answers with `respond(body, res)`. */
async function listen(respond) {
  const server = http.createServer((req, res) => {
    let body = "";
    req.setEncoding("utf8");
    req.on("data", (chunk) => (body += chunk));
    req.on("end", () => respond(JSON.parse(body), res));
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve(undefined)));
  const address = /** @type {import("node:net").AddressInfo} */ (server.address());
  return { server, url: `http://127.0.0.1:${address.port}` };
}

/** The exchanges measured, each a function that runs one to completion. */
async function startExchanges() {
  const requireFromAnthropic = createRequire(join(root, "packages", "anthropic", "package.json"));
  const sdk = requireFromAnthropic("@anthropic-ai/sdk");
  const Anthropic = sdk.default ?? sdk;
  const model = await startModelServer();
  const payments = await startPaymentsServer();
  const client = new Anthropic({ apiKey: "demo-key", baseURL: model.url, maxRetries: 0 });
  const stream = (request) => async () => {
    const events = await client.messages.create(request);
    for await (const _event of events) {
      // drained, as the runner drains it
    }
  };
  const paymentURL = `${payments.url}/v1/payments`;
  const paymentBody = () => JSON.stringify(shapes.paymentRequest);
  const agent = new http.Agent({ keepAlive: true });
  const exchanges = {
    sdkToolUseStream: stream(shapes.toolRequest),
    sdkToolResultStream: stream(shapes.doneRequest),
    fetchPayment: async () => {
      const response = await fetch(paymentURL, { method: "POST", headers: shapes.paymentHeaders, body: paymentBody() });
      JSON.parse(await response.text());
    },
    keepAliveHttpPayment: () =>
      new Promise((resolve, reject) => {
        const request = http.request(paymentURL, { method: "POST", agent, headers: shapes.paymentHeaders }, (response) => {
          let text = "";
          response.setEncoding("utf8");
          response.on("data", (chunk) => (text += chunk));
          response.on("end", () => resolve(JSON.parse(text)));
          response.on("error", reject);
        });
        request.on("error", reject);
        request.end(paymentBody());
      }),
  };
  const close = async () => {
    agent.destroy();
    for (const { server } of [model, payments]) server.closeAllConnections();
    await Promise.all([model, payments].map(({ server }) => new Promise((resolve) => server.close(resolve))));
  };
  return { exchanges, close };
}

async function cpuPerExchange(run, count, concurrency) {
  let started = 0;
  const before = process.cpuUsage();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (started++ < count) await run();
    }),
  );
  const used = process.cpuUsage(before);
  return (used.user + used.system) / count / 1000;
}

const median = (values) => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
};

/**
 * CPU ms per exchange (median of `rounds` alternating slices of `perSlice` exchanges each) and the
 * per-turn floor they imply: 2 sides x (two SDK streams + one payments POST).
 */
export async function benchDemoFloor({ perSlice = 1_000, rounds = 7, concurrency = 16, warmup = 1_000 } = {}) {
  const { exchanges, close } = await startExchanges();
  try {
    const names = Object.keys(exchanges);
    for (const name of names) for (let i = 0; i < warmup; i++) await exchanges[name]();
    const samples = Object.fromEntries(names.map((n) => [n, []]));
    for (let round = 0; round < rounds; round++) {
      // Alternate the order too, so a drift in load does not favour whichever runs first.
      const order = round % 2 === 0 ? names : [...names].reverse();
      for (const name of order) samples[name].push(await cpuPerExchange(exchanges[name], perSlice, concurrency));
    }
    const cpuMsPerExchange = Object.fromEntries(names.map((n) => [n, round3(median(samples[n]))]));
    const streams = cpuMsPerExchange.sdkToolUseStream + cpuMsPerExchange.sdkToolResultStream;
    const perTurnWithFetch = 2 * (streams + cpuMsPerExchange.fetchPayment);
    const perTurnWithAgent = 2 * (streams + cpuMsPerExchange.keepAliveHttpPayment);
    return {
      concurrency,
      perSlice,
      rounds,
      cpuMsPerExchange,
      samples: Object.fromEntries(names.map((n) => [n, samples[n].map(round3)])),
      // Both sides, two streams and one payments POST each; servers included, nothing else of the demo.
      perTurnCpuMs: { paymentsOverFetch: round3(perTurnWithFetch), paymentsOverKeepAliveAgent: round3(perTurnWithAgent) },
      // Wall time of 20,000 turns if both cores did nothing else.
      wallSecondsFor20000TurnsOn2Cores: {
        paymentsOverFetch: round3((perTurnWithFetch * 20_000) / 2 / 1000),
        paymentsOverKeepAliveAgent: round3((perTurnWithAgent * 20_000) / 2 / 1000),
      },
    };
  } finally {
    await close();
  }
}

const round3 = (n) => Math.round(n * 1000) / 1000;

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1]) {
  const result = await benchDemoFloor();
  process.stdout.write(`${JSON.stringify(result, null, 2)}\n`);
}
