import { createServer, connect, type Server, type Socket } from "node:net";
import { DATABASE_URL } from "./helpers.js";

/**
 * A TCP proxy in front of the test server that reads the PostgreSQL wire protocol and cuts a
 * connection at a chosen statement, never on a timer. A rule names the exchange it waits for by
 * the prepared statements bound in it (the store names each statement `do_conv_<tag>_<name>`):
 * an explicit transaction is judged at its COMMIT, a statement outside one (autocommit) at its
 * Sync. Then:
 *
 * - `reply_lost`: the COMMIT (or Sync) reaches the server, which commits; its reply is dropped
 *   and the connection cut once the server says it is ready again. The write applied and the
 *   client never heard.
 * - `not_applied`: the COMMIT (or Sync) is dropped and the connection cut; the server rolls the
 *   transaction back. The client cannot tell this from `reply_lost`.
 * - `applied_late`: the COMMIT (or Sync) is held, and nothing answers (a paused server), until the
 *   client gives up and closes the connection; then it reaches the server, which commits, and the
 *   connection is cut. The write applied after the store reported it unknown (TURN-21).
 *
 * The shared server itself is never touched.
 */
export type CutMode = "reply_lost" | "not_applied" | "applied_late";

export interface CutRule {
  /** Short statement names (`insert_turn`, `grant`, ...): the exchange must have bound every one. */
  statements: string[];
  /** Short statement names the exchange must not have bound (addRecord is insert_record without insert_turn). */
  without?: string[];
  mode: CutMode;
  /** Matching exchanges let through before the one cut (0: the first). */
  skip?: number;
}

export interface CutProxy {
  /** DATABASE_URL with the proxy's port. */
  url: string;
  /** Arm one cut; resolves when it has happened (after the server replied, for `reply_lost`). */
  arm(rule: CutRule): Promise<void>;
  /** Whether the armed rule has fired. */
  fired(): boolean;
  disarm(): void;
  close(): Promise<void>;
}

interface Armed {
  rule: CutRule;
  seen: number;
  done: boolean;
  resolve: () => void;
}

/** Messages framed as the protocol frames them: a type byte and a length that counts itself. */
class Framer {
  private buffer = Buffer.alloc(0);
  constructor(private untypedFirst: boolean) {}
  push(chunk: Buffer): Array<{ type: string; body: Buffer; raw: Buffer }> {
    this.buffer = Buffer.concat([this.buffer, chunk]);
    const out: Array<{ type: string; body: Buffer; raw: Buffer }> = [];
    for (;;) {
      if (this.untypedFirst) {
        // The startup message has no type byte.
        if (this.buffer.length < 4) break;
        const length = this.buffer.readInt32BE(0);
        if (this.buffer.length < length) break;
        out.push({ type: "", body: this.buffer.subarray(4, length), raw: this.buffer.subarray(0, length) });
        this.buffer = this.buffer.subarray(length);
        this.untypedFirst = false;
        continue;
      }
      if (this.buffer.length < 5) break;
      const length = this.buffer.readInt32BE(1);
      if (this.buffer.length < 1 + length) break;
      out.push({ type: String.fromCharCode(this.buffer[0]!), body: this.buffer.subarray(5, 1 + length), raw: this.buffer.subarray(0, 1 + length) });
      this.buffer = this.buffer.subarray(1 + length);
    }
    return out;
  }
}

function cstrings(body: Buffer, count: number): string[] {
  const out: string[] = [];
  let at = 0;
  for (let i = 0; i < count; i++) {
    const end = body.indexOf(0, at);
    out.push(body.subarray(at, end).toString("utf8"));
    at = end + 1;
  }
  return out;
}

export async function cutProxy(): Promise<CutProxy> {
  const target = new URL(DATABASE_URL);
  const sockets = new Set<Socket>();
  let armed: Armed | undefined;

  const matches = (names: string[]): boolean => {
    if (armed === undefined || armed.done) return false;
    const has = (short: string) => names.some((n) => n.endsWith(`_${short}`));
    if (!armed.rule.statements.every(has)) return false;
    if ((armed.rule.without ?? []).some(has)) return false;
    if (armed.seen++ < (armed.rule.skip ?? 0)) return false;
    return true;
  };

  const server: Server = createServer((client) => {
    const upstream = connect({ host: target.hostname, port: Number(target.port || 5432) });
    sockets.add(client);
    sockets.add(upstream);
    // Messages are forwarded one by one: without this, Nagle and delayed ACKs stall each round trip.
    client.setNoDelay(true);
    upstream.setNoDelay(true);
    const fromClient = new Framer(true);
    const fromServer = new Framer(false);
    // Statements bound since BEGIN (null outside a transaction), and since the last Sync outside one.
    let transaction: string[] | null = null;
    let pending: string[] = [];
    // reply_lost: the server's replies are dropped until it is ready for the next query, then the cut.
    let swallowing: Armed | undefined;
    // applied_late: the COMMIT held until the client gives up on it.
    let held: { message: Buffer; firing: Armed } | undefined;
    let cut = false;
    const cutNow = () => {
      cut = true;
      client.destroy();
      upstream.destroy();
    };
    const fire = (message: Buffer) => {
      const firing = armed!;
      firing.done = true;
      if (firing.rule.mode === "not_applied") {
        cutNow();
        firing.resolve();
        return;
      }
      if (firing.rule.mode === "applied_late") {
        held = { message, firing };
        return;
      }
      swallowing = firing;
      upstream.write(message);
    };
    client.on("data", (chunk: Buffer) => {
      for (const message of fromClient.push(chunk)) {
        if (cut) return;
        // Nothing after the held COMMIT reaches the server before it (a Terminate would roll it back).
        if (held !== undefined) continue;
        if (message.type === "Q") {
          const text = cstrings(message.body, 1)[0]!.trim();
          if (/^BEGIN\b/i.test(text)) transaction = [];
          else if (/^COMMIT$/i.test(text) && transaction !== null) {
            const names = transaction;
            transaction = null;
            if (matches(names)) {
              fire(message.raw);
              continue;
            }
          } else if (/^ROLLBACK$/i.test(text)) transaction = null;
        } else if (message.type === "B") {
          (transaction ?? pending).push(cstrings(message.body, 2)[1]!);
        } else if (message.type === "S" && transaction === null) {
          const names = pending;
          pending = [];
          if (names.length > 0 && matches(names)) {
            fire(message.raw);
            continue;
          }
        }
        upstream.write(message.raw);
      }
    });
    upstream.on("data", (chunk: Buffer) => {
      for (const message of fromServer.push(chunk)) {
        if (cut) return;
        if (swallowing !== undefined) {
          if (message.type === "Z") {
            const done = swallowing;
            swallowing = undefined;
            cutNow();
            done.resolve();
          }
          continue;
        }
        client.write(message.raw);
      }
    });
    const drop = () => {
      if (held !== undefined && !cut) {
        // The client gave up: the held COMMIT reaches the server now, and is applied late.
        swallowing = held.firing;
        upstream.write(held.message);
        held = undefined;
        return;
      }
      sockets.delete(client);
      sockets.delete(upstream);
      client.destroy();
      upstream.destroy();
    };
    client.on("close", drop);
    upstream.on("close", drop);
    client.on("error", () => {});
    upstream.on("error", () => {});
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", () => resolve()));
  const address = server.address();
  if (address === null || typeof address === "string") throw new Error("proxy has no port");
  const url = new URL(DATABASE_URL);
  url.hostname = "127.0.0.1";
  url.port = String(address.port);
  return {
    url: url.toString(),
    arm: (rule) =>
      new Promise<void>((resolve) => {
        armed = { rule, seen: 0, done: false, resolve };
      }),
    fired: () => armed?.done === true,
    disarm: () => {
      armed = undefined;
    },
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
