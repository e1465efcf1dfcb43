// The web tier: `POST /conversations/:id/messages {id, text}` enqueues one BullMQ job whose id is
// derived from the message id, and waits for its result through QueueEvents; after `waitMs` it
// answers 202 and the client re-sends the same message id. PLANT=randomjobid gives each request a
// random job id instead (the plant the trial's oracle must catch).
import http from "node:http";
import { randomUUID } from "node:crypto";
import { Queue, QueueEvents, Job } from "bullmq";
import type { Reply } from "./app.js";

export async function startWeb(options: { redisUrl: string; queue: string; prefix: string; waitMs: number; plant?: string }) {
  const url = new URL(options.redisUrl);
  const connection = { host: url.hostname, port: Number(url.port || 6379) };
  const queue = new Queue(options.queue, { connection, prefix: options.prefix });
  const events = new QueueEvents(options.queue, { connection, prefix: options.prefix });
  await events.waitUntilReady();
  const jobId = (conversationId: string, messageId: string) =>
    options.plant === "randomjobid" ? randomUUID() : `${encodeURIComponent(conversationId)}.${encodeURIComponent(messageId)}`;

  async function enqueue(conversationId: string, messageId: string, text: string): Promise<{ http: number; reply?: Reply | { status: "failed_job"; text: string } }> {
    const job = await queue.add("message", { conversationId, messageId, text }, {
      jobId: jobId(conversationId, messageId),
      attempts: 3,
      backoff: { type: "exponential", delay: 500 },
      removeOnComplete: true, // a late re-send becomes a new job (situation 5)
      removeOnFail: { age: 3600 },
    });
    // The job id deduplicates while the job is kept, and a failed job is kept (removeOnFail): the
    // client's re-send of a message whose job failed for good would be answered with the old failure
    // for ever. The re-send is the user asking again: run the kept job again.
    if ((await job.getState()) === "failed") await job.retry("failed");
    try {
      return { http: 200, reply: (await job.waitUntilFinished(events, options.waitMs)) as Reply };
    } catch (error) {
      const message = (error as Error).message;
      if (/timed out/i.test(message)) return { http: 202 };
      // A job that failed for good: the worker threw the failed turn's reply as JSON.
      try { return { http: 200, reply: JSON.parse(message) as Reply }; } catch { return { http: 200, reply: { status: "failed_job", text: message } }; }
    }
  }

  const server = http.createServer((req, res) => {
    const m = /^\/conversations\/([^/]+)\/messages$/.exec(req.url ?? "");
    if (req.method !== "POST" || m === null) { res.writeHead(404).end(); return; }
    let body = "";
    req.on("data", (d) => (body += d));
    req.on("end", () => {
      let parsed: { id?: unknown; text?: unknown };
      try { parsed = JSON.parse(body) as typeof parsed; } catch { res.writeHead(400).end("body is not JSON"); return; }
      if (typeof parsed.id !== "string" || typeof parsed.text !== "string") { res.writeHead(400).end("id and text are strings"); return; }
      enqueue(decodeURIComponent(m[1]!), parsed.id, parsed.text).then(
        (r) => res.writeHead(r.http, { "content-type": "application/json" }).end(JSON.stringify(r.reply ?? { status: "accepted" })),
        (error: unknown) => res.writeHead(500).end(String(error)),
      );
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as { port: number }).port;
  return {
    url: `http://127.0.0.1:${port}`,
    queue,
    async job(id: string) { return Job.fromId(queue, id); },
    async close() { server.close(); await events.close(); await queue.obliterate({ force: true }).catch(() => {}); await queue.close(); },
  };
}
