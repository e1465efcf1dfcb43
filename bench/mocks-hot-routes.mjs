// The mocks' hot routes alone: `node bench/mocks-hot-routes.mjs <repo dir> [turns]` loads that
// checkout's built mock-provider and mock-payments (apps/*/dist), runs the demo's two streamed
// Messages requests (bench/demo-floor-shapes.json) and its payments POST per "turn" from a node:http
// client (keep-alive, 16 in flight) in the same process, and prints CPU ms per turn (client and
// servers; one side of a demo turn's mock work). Two checkouts alternated back to back compare
// (the round of 2026-12-05 in bench/HISTORY.md); one reading alone does not.
import http from "node:http";
import fs from "node:fs";
import path from "node:path";

const [dir, turnsArg] = process.argv.slice(2);
if (dir === undefined) throw new Error("usage: node bench/mocks-hot-routes.mjs <repo dir> [turns]");
const turns = Number(turnsArg ?? 2000);
const mp = await import(path.resolve(dir, "apps/mock-provider/dist/index.js"));
const mpay = await import(path.resolve(dir, "apps/mock-payments/dist/index.js"));
const shapes = JSON.parse(fs.readFileSync(new URL("./demo-floor-shapes.json", import.meta.url), "utf8"));

// The demo's model: a send_payment call for the first request, a text answer for the tool result.
const script = (request) =>
  request.messages.length === 1
    ? mp.turn(mp.toolUse("send_payment", JSON.parse(request.messages[0].content.slice("pay ".length))))
    : mp.turn(mp.say("Paid: the payment went through."));
const provider = await mp.startMockProvider({ script, seed: "hot-routes", logLimit: 64, attemptsLimit: 4096 });
const payments = await mpay.startMockPayments({ retentionMs: 60_000, memoryLimit: 1024 });
const agent = new http.Agent({ keepAlive: true, maxSockets: 16 });

function post(url, route, headers, body) {
  return new Promise((resolve, reject) => {
    const text = JSON.stringify(body);
    const req = http.request(url + route, { method: "POST", agent, headers: { ...headers, "content-length": Buffer.byteLength(text) } }, (res) => {
      res.on("data", () => {});
      res.on("end", () => (res.statusCode < 300 ? resolve() : reject(new Error(`HTTP ${res.statusCode}`))));
    });
    req.on("error", reject);
    req.end(text);
  });
}

const messagesHeaders = { "content-type": "application/json", "x-api-key": "bench", "anthropic-version": "2023-06-01" };
async function turn(i) {
  // A body of its own per turn: the provider counts attempts per body.
  const tool = structuredClone(shapes.toolRequest);
  tool.stream = true;
  tool.messages[0].content = tool.messages[0].content.replace("T-0", `T-${i}`);
  const done = structuredClone(shapes.doneRequest);
  done.stream = true;
  done.messages[0].content += ` ${i}`;
  await post(provider.url, "/v1/messages", messagesHeaders, tool);
  await post(payments.url, "/v1/payments", { ...shapes.paymentHeaders, "idempotency-key": `k-${i}` }, shapes.paymentRequest);
  await post(provider.url, "/v1/messages", messagesHeaders, done);
}
async function run(count) {
  let next = 0;
  await Promise.all(Array.from({ length: 16 }, async () => { while (next < count) await turn(next++); }));
}

await run(300); // warm-up
const before = process.cpuUsage();
await run(turns);
const used = process.cpuUsage(before);
console.log(((used.user + used.system) / 1000 / turns).toFixed(4));
agent.destroy();
await provider.close();
await payments.close();
