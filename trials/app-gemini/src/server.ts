// The assistant's endpoint: `POST /conversations/<id>/messages` with `{ "id": "<message id>", "text": "..." }`
// (the client mints the message id and re-sends it unchanged), answered with the Reply as JSON.
// Prints `listening <port>` once ready.
import http from "node:http";
import { openApp } from "./app.js";

const app = await openApp({
  databaseUrl: process.env.APP_DATABASE_URL ?? process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test",
  schema: process.env.APP_SCHEMA ?? "gemini_trial",
  ...(process.env.GEMINI_BASE_URL ? { geminiBaseURL: process.env.GEMINI_BASE_URL } : {}),
  thoughts: process.env.THOUGHTS === "1",
  unguarded: process.env.PLANT === "unguarded",
  owner: `gemini-${process.pid}`,
  sdkAttempts: Number(process.env.SDK_ATTEMPTS ?? 3),
});

const server = http.createServer((req, res) => {
  const m = /^\/conversations\/([^/]+)\/messages$/.exec(req.url ?? "");
  if (req.method !== "POST" || m === null) { res.writeHead(404).end(); return; }
  let body = "";
  req.on("data", (d) => (body += d));
  req.on("end", () => {
    let parsed: { id?: unknown; text?: unknown };
    try { parsed = JSON.parse(body) as typeof parsed; } catch { res.writeHead(400).end("body is not JSON"); return; }
    if (typeof parsed.id !== "string" || typeof parsed.text !== "string") { res.writeHead(400).end("id and text are strings"); return; }
    app.handle(decodeURIComponent(m[1]!), parsed.id, parsed.text).then(
      (reply) => res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(reply)),
      (error: unknown) => res.writeHead(500, { "content-type": "application/json" }).end(JSON.stringify({ status: "crashed", text: String((error as Error).stack ?? error) })),
    );
  });
});
server.listen(Number(process.env.PORT ?? 0), "127.0.0.1", () => console.log(`listening ${(server.address() as { port: number }).port}`));
const stop = () => { server.close(); void app.close().finally(() => process.exit(0)); };
process.on("SIGTERM", stop).on("SIGINT", stop);
