import { mkdtempSync, rmSync } from "node:fs";
import type { Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startMockPayments } from "@dispatch-once/mock-payments";
import { startMockProvider } from "@dispatch-once/mock-provider";
import { createChatApp } from "../src/app.js";
import { createChatBackend, type ChatBackend } from "../src/backend.js";
import { chatModel } from "../src/model.js";

export const ACCOUNT = "acct_chat_test";
export const TENANT = "demo";

/** The whole example on loopback: mock provider, mock payments, backend on a SQLite file, HTTP. */
export async function startWorld() {
  const dir = mkdtempSync(join(tmpdir(), "chat-example-"));
  const provider = await startMockProvider({ script: chatModel, seed: `chat-${process.pid}` });
  const payments = await startMockPayments({ requireIdempotencyKey: true });
  const databasePath = join(dir, "chat.db");
  const open = (): ChatBackend =>
    createChatBackend({
      anthropicBaseURL: provider.baseURL,
      anthropicApiKey: "test",
      paymentsURL: payments.url,
      paymentsToken: ACCOUNT,
      databasePath,
      attempts: 3,
      backoffMs: () => 10,
    });
  let backend = open();
  const listen = (port: number): Promise<Server> =>
    new Promise((resolve) => {
      const s = createChatApp({ backend, tenant: TENANT }).listen(port, "127.0.0.1", () => resolve(s));
    });
  let server = await listen(0);
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const stop = async () => {
    server.closeAllConnections();
    await new Promise<void>((r) => server.close(() => r()));
    await backend.close();
  };
  return {
    dir,
    provider,
    payments,
    get backend() {
      return backend;
    },
    databasePath,
    url,
    /** A process restart: new backend instances over the same SQLite file, same port; nothing kept in memory. */
    async restart() {
      const port = (server.address() as AddressInfo).port;
      await stop();
      backend = open();
      server = await listen(port);
    },
    /** Payments the mock performed for this reference (the effect log, the oracle). */
    paymentsFor(reference: string) {
      return payments.effects({ account: ACCOUNT, kind: "payment_created" }).filter((e) => e.payload["reference"] === reference);
    },
    async close() {
      await stop();
      await provider.close();
      await payments.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

export type World = Awaited<ReturnType<typeof startWorld>>;
