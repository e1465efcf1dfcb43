import { randomBytes } from "node:crypto";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { setTimeout as sleep } from "node:timers/promises";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createServer, type Socket } from "node:net";
import {
  ConversationBusyError,
  ConversationLeaseLostError,
  InvalidArgumentError,
  StoreUnavailableError,
  UnsafeStoreConfigError,
  effectOf,
  retryableOf,
} from "@dispatch-once/core";
import { PostgresThreadLocks, type PostgresThreadLocksOptions } from "../src/index.js";
import { testSeams } from "../src/thread-locks.js";
import { compiledEntry } from "@dispatch-once/test-processes";

/** The test server; connecting fails loudly when it is missing: these tests are never skipped. */
const DATABASE_URL = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test";
const tag = randomBytes(4).toString("hex");
/** Every session this file opens is named so, to count what is left behind. */
const APP = `h_threadlock_test_${tag}`;
const table = `h_threadlock_${tag}`;

let admin: pg.Pool;
beforeAll(async () => {
  admin = new pg.Pool({ connectionString: DATABASE_URL, max: 3 });
  admin.on("error", () => {});
  await admin.query(`CREATE TABLE ${table} (thread text NOT NULL, who text NOT NULL)`);
});
afterAll(async () => {
  await admin.query(`DROP TABLE IF EXISTS ${table}`);
  await admin.end();
});

function locks(options: Partial<PostgresThreadLocksOptions> & { [testSeams]?: unknown } = {}): PostgresThreadLocks {
  return new PostgresThreadLocks({
    connectionString: DATABASE_URL,
    applicationName: APP,
    namespace: `ns_${tag}`,
    leaseMs: 1_000,
    waitMs: 5_000,
    ...options,
  } as PostgresThreadLocksOptions);
}
const thread = () => `t-${randomBytes(4).toString("hex")}`;
/** Holds `threadId` on a session of its own until `release()`; resolves once the lock is held (rejects if taking it fails). */
async function holdThread(threadId: string): Promise<{ holder: Promise<void>; release: () => void }> {
  let held!: () => void;
  const heldNow = new Promise<void>((r) => (held = r));
  let release!: () => void;
  const holder = locks().withThread(threadId, async () => {
    held();
    await new Promise<void>((r) => (release = r));
  });
  // A holder that fails before it holds the lock fails the test with its error, not a timeout.
  await Promise.race([heldNow, holder]);
  return { holder, release: () => release() };
}
const rowsOf = async (threadId: string) =>
  (await admin.query<{ who: string }>(`SELECT who FROM ${table} WHERE thread = $1 ORDER BY who`, [threadId])).rows.map((r) => r.who);
const sessionsLeft = async () =>
  Number((await admin.query(`SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = $1`, [APP])).rows[0].n);

describe("withThread", () => {
  it("THREAD-1: runs a thread's sends one at a time, and two threads at once", async () => {
    const l = locks();
    const a = thread();
    const b = thread();
    // Both threads at once is shown by a handshake, not by timing: thread a's first send and b1 each
    // wait inside their work for the other to be inside its own. Each send opens a session of its
    // own, and on a loaded host one opens hundreds of ms after another: spans of a fixed sleep need
    // not overlap then. Were both threads one lock, b1 would wait out waitMs and be told busy.
    let bIn!: () => void;
    const bInside = new Promise<void>((r) => (bIn = r));
    let aIn!: () => void;
    const aInside = new Promise<void>((r) => (aIn = r));
    const settled = (p: Promise<unknown>) => p.then(() => {}, () => {});
    let inA = 0;
    let mostInA = 0;
    let firstOfA = true;
    const order: string[] = [];
    const sendA = (name: string) =>
      l.withThread(a, async () => {
        mostInA = Math.max(mostInA, ++inA);
        order.push(`${name} in`);
        if (firstOfA) {
          firstOfA = false;
          aIn();
          await Promise.race([bInside, settled(b1)]);
        }
        // Long enough that a second send of thread a let in meanwhile would be inside with it.
        await sleep(300);
        order.push(`${name} out`);
        inA--;
      });
    const a1 = sendA("a1");
    const a2 = sendA("a2");
    const b1: Promise<void> = l.withThread(b, async () => {
      bIn();
      const sawA = await Promise.race([aInside.then(() => true), settled(a1).then(() => false), settled(a2).then(() => false)]);
      if (sawA) order.push("b1 saw a inside");
    });
    await Promise.all([a1, a2, b1]);
    // One of thread a's sends at a time: the second entered after the first left.
    expect(mostInA).toBe(1);
    expect(order.filter((e) => e.startsWith("a"))).toEqual(order.indexOf("a1 in") < order.indexOf("a2 in") ? ["a1 in", "a1 out", "a2 in", "a2 out"] : ["a2 in", "a2 out", "a1 in", "a1 out"]);
    expect(order).toContain("b1 saw a inside");
    expect(await sessionsLeft()).toBe(0);
  });

  it("THREAD-4: a waiter past waitMs gets ConversationBusyError; the holder is unaffected", async () => {
    const l = locks();
    const t = thread();
    let release!: () => void;
    let held!: () => void;
    const heldNow = new Promise<void>((r) => (held = r));
    const holder = l.withThread(t, async ({ client }) => {
      held();
      await new Promise<void>((r) => (release = r));
      await client.query(`INSERT INTO ${table} VALUES ($1, 'holder')`, [t]);
      return "holder done";
    });
    await heldNow;
    const waiter = locks({ waitMs: 300 });
    let ran = false;
    const error = await waiter
      .withThread(t, async () => void (ran = true), { messageId: "m-2" })
      .catch((e: unknown) => e);
    expect(ran).toBe(false);
    expect(ConversationBusyError.isInstance(error)).toBe(true);
    const busy = error as ConversationBusyError;
    expect([busy.conversationId, busy.messageId, busy.inProgress]).toEqual([t, "m-2", false]);
    expect(busy.waitedMs).toBeGreaterThanOrEqual(250);
    expect([effectOf(busy), retryableOf(busy)]).toEqual(["no", "same_message"]);
    // waitMs 0: does not wait at all.
    const noWait = await locks({ waitMs: 0 }).withThread(t, async () => void (ran = true)).catch((e: unknown) => e);
    expect(ConversationBusyError.isInstance(noWait)).toBe(true);
    expect(ran).toBe(false);
    release();
    expect(await holder).toBe("holder done");
    expect(await rowsOf(t)).toEqual(["holder"]);
    expect(await sessionsLeft()).toBe(0);
  });

  it("THREAD-4: a role's statement_timeout shorter than waitMs neither cuts the wait short nor leaks into work", async () => {
    const t = thread();
    const { holder, release } = await holdThread(t);
    // As a role or database default would (ALTER ROLE ... SET statement_timeout): the session starts with it.
    const withTimeout = (statementTimeoutMs: number) =>
      new PostgresThreadLocks({
        client: () => new pg.Client({ connectionString: DATABASE_URL, application_name: APP, options: `-c statement_timeout=${statementTimeoutMs}` }),
        namespace: `ns_${tag}`,
        leaseMs: 1_000,
        waitMs: 600,
      });
    const error = await withTimeout(150).withThread(t, async () => "ran").catch((e: unknown) => e);
    expect(ConversationBusyError.isInstance(error)).toBe(true);
    expect((error as ConversationBusyError).waitedMs).toBeGreaterThanOrEqual(550);
    release();
    await holder;
    // Once held, the session's own settings are back: the role's statement_timeout applies to work.
    const inWork = await withTimeout(150).withThread(t, async ({ client }) =>
      Promise.all([client.query("SHOW statement_timeout"), client.query("SHOW lock_timeout")]).then((r) => r.map((x) => x.rows[0])),
    );
    expect(inWork).toEqual([{ statement_timeout: "150ms" }, { lock_timeout: "0" }]);
  });

  it("THREAD-2: a live holder idle in JS for longer than leaseMs keeps its thread (the heartbeat)", async () => {
    const l = locks();
    const t = thread();
    let held!: () => void;
    const heldNow = new Promise<void>((r) => (held = r));
    const holder = l.withThread(t, async ({ client, signal }) => {
      held();
      await sleep(1_600);
      expect(signal.aborted).toBe(false);
      await client.query(`INSERT INTO ${table} VALUES ($1, 'holder')`, [t]);
    });
    await heldNow;
    const waiter = await locks({ waitMs: 200 }).withThread(t, async () => "ran").catch((e: unknown) => e);
    expect(ConversationBusyError.isInstance(waiter)).toBe(true);
    await holder;
    expect(await rowsOf(t)).toEqual(["holder"]);
  });

  it("THREAD-3: a heartbeat refused inside work's failed transaction does not tell a live holder its thread is lost", async () => {
    const t = thread();
    const seen = await locks().withThread(t, async ({ client, signal }) => {
      await client.query("BEGIN");
      await client.query("SELECT 1/0").catch(() => {});
      // The transaction is aborted: the heartbeats sent meanwhile are refused (25P02), the session is fine.
      await sleep(800);
      const aborted = signal.aborted;
      await client.query("ROLLBACK");
      await client.query(`INSERT INTO ${table} VALUES ($1, 'after-rollback')`, [t]);
      return aborted;
    });
    expect(seen).toBe(false);
    expect(await rowsOf(t)).toEqual(["after-rollback"]);
  });

  it("THREAD-2, THREAD-3: a stopped holder loses its thread after leaseMs: the waiter gets it, and the holder's later writes fail and do not land", async () => {
    // The holder's heartbeat is suppressed, as in a SIGSTOPped process: its session goes idle.
    const stopped = locks({ [testSeams]: { heartbeat: false } });
    const t = thread();
    let held!: () => void;
    const heldNow = new Promise<void>((r) => (held = r));
    let resume!: () => void;
    const resumed = new Promise<void>((r) => (resume = r));
    const outcomes: string[] = [];
    let holderSignal: AbortSignal | undefined;
    const holder = stopped.withThread(t, async ({ client, pool, signal }) => {
      holderSignal = signal;
      held();
      await resumed;
      for (const [name, write] of [
        ["client", () => client.query(`INSERT INTO ${table} VALUES ($1, 'stopped-client')`, [t])],
        ["pool", () => pool.query(`INSERT INTO ${table} VALUES ($1, 'stopped-pool')`, [t])],
      ] as const) {
        await write().then(
          () => outcomes.push(`${name} landed`),
          () => outcomes.push(`${name} failed`),
        );
      }
    });
    await heldNow;
    const started = performance.now();
    await locks().withThread(t, async ({ client }) => {
      await client.query(`INSERT INTO ${table} VALUES ($1, 'waiter')`, [t]);
      // The stopped holder wakes while the waiter holds the thread.
      resume();
      await holder;
    });
    expect(performance.now() - started).toBeGreaterThanOrEqual(900);
    expect(outcomes).toEqual(["client failed", "pool failed"]);
    expect(await rowsOf(t)).toEqual(["waiter"]);
    expect(holderSignal?.aborted).toBe(true);
    expect(ConversationLeaseLostError.isInstance(holderSignal?.reason)).toBe(true);
    expect(await sessionsLeft()).toBe(0);
  });

  it("THREAD-2, THREAD-3: a holder process SIGSTOPped while holding loses its thread; resumed, its writes fail and do not land", async () => {
    const t = thread();
    const entry = compiledEntry(fileURLToPath(new URL("./stopped-holder.ts", import.meta.url)));
    const child = spawn(process.execPath, [entry, DATABASE_URL, t, table, APP, `ns_${tag}`], { stdio: ["ignore", "pipe", "inherit"] });
    // Listened for from the start: the child may exit while the test still reads the table, and an
    // "exit" already emitted is never emitted again to a later once().
    const exited = once(child, "exit");
    try {
      const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
      expect((await lines.next()).value).toBe("held");
      child.kill("SIGSTOP");
      let report: unknown;
      await locks().withThread(t, async ({ client }) => {
        await client.query(`INSERT INTO ${table} VALUES ($1, 'waiter')`, [t]);
        child.kill("SIGCONT");
        report = JSON.parse((await lines.next()).value as string);
        // Written while the waiter still holds the thread: the resumed holder's writes had their chance.
      });
      expect(report).toEqual({ outcomes: ["client failed", "pool failed"], aborted: true });
      expect(await rowsOf(t)).toEqual(["waiter"]);
      const [code] = await exited;
      expect(code).toBe(0);
    } finally {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill("SIGCONT");
        child.kill("SIGKILL");
      }
    }
    expect(await sessionsLeft()).toBe(0);
  });

  it("THREAD-3: a transaction through held.pool (BEGIN ... COMMIT, as PostgresSaver) lands while held, and not after the lease ran out", async () => {
    const t = thread();
    await locks().withThread(t, async ({ pool }) => {
      const c = await pool.connect();
      try {
        await c.query("BEGIN");
        await c.query(`INSERT INTO ${table} VALUES ($1, 'held-tx')`, [t]);
        await c.query("COMMIT");
      } finally {
        c.release();
      }
    });
    expect(await rowsOf(t)).toEqual(["held-tx"]);
    // A holder stopped inside its transaction (idle in transaction past leaseMs): its COMMIT fails.
    let commit = "";
    await locks({ [testSeams]: { heartbeat: false } }).withThread(t, async ({ pool }) => {
      const c = await pool.connect();
      try {
        await c.query("BEGIN");
        await c.query(`INSERT INTO ${table} VALUES ($1, 'stopped-tx')`, [t]);
        await sleep(1_500);
        commit = await c.query("COMMIT").then(
          () => "committed",
          () => "failed",
        );
      } finally {
        c.release();
      }
    });
    expect(commit).toBe("failed");
    expect(await rowsOf(t)).toEqual(["held-tx"]);
  });

  it("THREAD-3: held.pool hands the session to one caller at a time: another caller's write waits for a transaction's end and is not rolled back with it", async () => {
    const t = thread();
    await locks().withThread(t, async ({ pool }) => {
      const c = await pool.connect();
      try {
        await c.query("BEGIN");
        await c.query(`INSERT INTO ${table} VALUES ($1, 'rolled-back')`, [t]);
        // A second library's write on the same pool while the first's transaction is open: on the one
        // session it would run inside that transaction and be rolled back with it (blind round R, R23).
        const other = pool.query(`INSERT INTO ${table} VALUES ($1, 'other')`, [t]);
        await sleep(50);
        await c.query("ROLLBACK");
        c.release();
        await other;
      } finally {
        c.release();
      }
    });
    expect(await rowsOf(t)).toEqual(["other"]);
  });

  it("THREAD-5: withThread settles only once the lock's session has ended, so the thread's next send finds it free", async () => {
    const t = thread();
    let ended = false;
    const l = locks({
      connectionString: undefined,
      client: () => {
        const c = new pg.Client({ connectionString: DATABASE_URL, application_name: APP });
        const end = c.end.bind(c) as () => Promise<void>;
        // Told when the session's end (the lock's release) has completed, not when it was asked for.
        (c as unknown as { end: () => Promise<void> }).end = async () => {
          await end();
          ended = true;
        };
        return c;
      },
    });
    expect(await l.withThread(t, async () => "done")).toBe("done");
    // Settled before the session ended, the send would return holding the lock: its own thread's
    // next send (waitMs 0, a queue's next job) would be told busy by it (blind round R, R22).
    expect(ended).toBe(true);
    expect(await locks({ waitMs: 0 }).withThread(t, async () => "next")).toBe("next");
  });

  it("THREAD-5: work that throws releases the thread, its error passes through unchanged, and no session is left", async () => {
    const l = locks();
    const t = thread();
    const thrown = new Error("the model failed");
    const error = await l.withThread(t, async () => {
      throw thrown;
    }).catch((e: unknown) => e);
    expect(error).toBe(thrown);
    expect(await locks({ waitMs: 0 }).withThread(t, async () => "next")).toBe("next");
    expect(await sessionsLeft()).toBe(0);
  });
});

describe("THREAD-4: failures before work runs are store_unavailable", () => {
  const expectUnavailable = (error: unknown) => {
    expect(StoreUnavailableError.isInstance(error)).toBe(true);
    expect((error as Error).cause).toBeDefined();
    // Nothing of work ran: the sender may send the same message again.
    expect(retryableOf(error)).toBe("same_message");
  };

  it("a port nothing listens on", async () => {
    let ran = false;
    const l = locks({ connectionString: "postgres://postgres@127.0.0.1:1/test" });
    const error = await l.withThread(thread(), async () => void (ran = true)).catch((e: unknown) => e);
    expectUnavailable(error);
    expect(((error as Error).cause as { code?: string }).code).toBe("ECONNREFUSED");
    expect(ran).toBe(false);
  });

  it("a server that accepts and never answers: connect bounded by connectTimeoutMs", async () => {
    const sockets: Socket[] = [];
    const silent = createServer((socket) => void sockets.push(socket));
    await new Promise<void>((r) => silent.listen(0, "127.0.0.1", r));
    const port = (silent.address() as { port: number }).port;
    try {
      const l = locks({ connectionString: `postgres://postgres@127.0.0.1:${port}/test`, connectTimeoutMs: 300 } as never);
      const started = performance.now();
      const error = await Promise.race([
        l.withThread(thread(), async () => "ran").catch((e: unknown) => e),
        sleep(3_000).then(() => "still connecting after 3 s"),
      ]);
      expectUnavailable(error);
      expect(performance.now() - started).toBeLessThan(2_000);
    } finally {
      for (const s of sockets) s.destroy();
      silent.close();
    }
  });

  it("a client factory whose connect rejects", async () => {
    const refused = new Error("TLS handshake refused");
    let ended = false;
    const failing = {
      on() {},
      async connect() {
        throw refused;
      },
      async end() {
        ended = true;
      },
    };
    const l = new PostgresThreadLocks({ client: () => failing as unknown as pg.Client });
    const error = await l.withThread("t", async () => "ran").catch((e: unknown) => e);
    expectUnavailable(error);
    expect((error as Error).cause).toBe(refused);
    expect(ended).toBe(true);
  });

  it("the backend terminated while the send waits for the lock", async () => {
    const t = thread();
    const { holder, release } = await holdThread(t);
    const waiterApp = `${APP}_w`;
    let ran = false;
    let waiterSettled = false;
    const waiter = locks({ applicationName: waiterApp })
      .withThread(t, async () => void (ran = true))
      .catch((e: unknown) => e)
      .finally(() => (waiterSettled = true));
    // Wait until the waiter's session waits on the advisory lock, then kill it from outside. Bounded by
    // the waiter itself (waitMs), not by a count of polls: on a loaded host its session opens late.
    for (;;) {
      const r = await admin.query(`SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`, [waiterApp]);
      if (r.rows.length > 0) {
        await admin.query("SELECT pg_terminate_backend($1)", [r.rows[0].pid]);
        break;
      }
      if (waiterSettled) throw new Error(`the waiter never waited on the lock: it settled with ${String(await waiter)}`);
      await sleep(20);
    }
    const error = await waiter;
    expectUnavailable(error);
    expect(ran).toBe(false);
    release();
    await holder;
    expect(await sessionsLeft()).toBe(0);
    expect(Number((await admin.query(`SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = $1`, [waiterApp])).rows[0].n)).toBe(0);
  });
});

describe("nesting", () => {
  it("THREAD-6: withThread on the thread the same async context holds is refused at once, not a wait for itself", async () => {
    const t = thread();
    // "At once" is read from the sessions opened, not from a clock (on a loaded host the outer's own
    // session may take a second to open): the inner send is refused before it opens one, so it
    // cannot have waited on the lock.
    let sessions = 0;
    const counted = () =>
      locks({
        connectionString: undefined,
        waitMs: 3_000,
        client: () => {
          sessions++;
          return new pg.Client({ connectionString: DATABASE_URL, application_name: APP });
        },
      });
    const inner = await counted().withThread(t, async () => counted().withThread(t, async () => "inner ran").catch((e: unknown) => e));
    expect(sessions).toBe(1);
    expect(InvalidArgumentError.isInstance(inner)).toBe(true);
    expect((inner as InvalidArgumentError).field).toBe("threadId");
    expect((inner as Error).message).toMatch(/nested/);
    // Another thread inside work is fine, and once work settled the thread is free in that context again.
    const l = locks();
    expect(await l.withThread(t, async () => l.withThread(thread(), async () => "other"))).toBe("other");
    expect(await sessionsLeft()).toBe(0);
  });

  it("THREAD-1: two concurrent sends of one thread (not nested) still wait for each other", async () => {
    const l = locks();
    const t = thread();
    const spans: [number, number][] = [];
    const send = () =>
      l.withThread(t, async () => {
        const start = performance.now();
        await sleep(200);
        spans.push([start, performance.now()]);
      });
    await Promise.all([send(), send()]);
    expect(spans[1]![0]).toBeGreaterThanOrEqual(spans[0]![1]);
  });
});

describe("THREAD-2: the heartbeat", () => {
  it("never overlaps a query of work's on held.client (pg would queue it and warn)", async () => {
    let inFlight = 0;
    let most = 0;
    const counted = () => {
      const c = new pg.Client({ connectionString: DATABASE_URL, application_name: APP });
      const query = c.query.bind(c) as (...args: unknown[]) => unknown;
      (c as unknown as { query: unknown }).query = (...args: unknown[]) => {
        inFlight++;
        most = Math.max(most, inFlight);
        const r = query(...args) as Promise<unknown>;
        return r.finally(() => inFlight--);
      };
      return c;
    };
    const l = new PostgresThreadLocks({ client: counted, namespace: `ns_${tag}`, leaseMs: 1_000, waitMs: 5_000 });
    await l.withThread(thread(), async ({ client }) => {
      most = 0;
      // Three heartbeat periods inside one query of work's.
      await client.query("SELECT pg_sleep(1.1)");
    });
    expect(most).toBe(1);
  });
});

describe("THREAD-6: bad input", () => {
  it.each<[string, unknown, string]>([
    ["no server", { namespace: "x" }, "options.connectionString"],
    ["both", { connectionString: DATABASE_URL, client: () => new pg.Client() }, "options.connectionString"],
    ["empty url", { connectionString: "" }, "options.connectionString"],
    ["url not a string", { connectionString: 5432 }, "options.connectionString"],
    ["client not a function", { client: new pg.Client() }, "options.client"],
    ["lease too short", { connectionString: DATABASE_URL, leaseMs: 999 }, "options.leaseMs"],
    ["lease not an integer", { connectionString: DATABASE_URL, leaseMs: 1500.5 }, "options.leaseMs"],
    ["lease a string", { connectionString: DATABASE_URL, leaseMs: "30000" }, "options.leaseMs"],
    ["lease past 32 bits", { connectionString: DATABASE_URL, leaseMs: 2 ** 31 }, "options.leaseMs"],
    ["negative wait", { connectionString: DATABASE_URL, waitMs: -1 }, "options.waitMs"],
    ["infinite wait", { connectionString: DATABASE_URL, waitMs: Infinity }, "options.waitMs"],
    ["empty namespace", { connectionString: DATABASE_URL, namespace: "" }, "options.namespace"],
    ["NUL in application name", { connectionString: DATABASE_URL, applicationName: "a\0b" }, "options.applicationName"],
    ["connect timeout 0", { connectionString: DATABASE_URL, connectTimeoutMs: 0 }, "options.connectTimeoutMs"],
    ["connect timeout fractional", { connectionString: DATABASE_URL, connectTimeoutMs: 10.5 }, "options.connectTimeoutMs"],
    ["connect timeout with a client factory", { client: () => new pg.Client(), connectTimeoutMs: 1000 }, "options.connectTimeoutMs"],
    ["misspelt option", { connectionString: DATABASE_URL, leaseMS: 5000 }, "options.leaseMS"],
    ["not an object", "postgres://x", "options"],
    ["null", null, "options"],
  ])("options: %s", (_, options, field) => {
    let error: unknown;
    try {
      new PostgresThreadLocks(options as PostgresThreadLocksOptions);
    } catch (e) {
      error = e;
    }
    expect(InvalidArgumentError.isInstance(error)).toBe(true);
    expect((error as InvalidArgumentError).field).toBe(field);
  });

  it.each<[string, unknown]>([
    ["empty", ""],
    ["a number", 42],
    ["undefined", undefined],
    ["NUL", "a\0b"],
    ["too long", "x".repeat(1_025)],
  ])("thread id: %s", async (_, threadId) => {
    let opened = false;
    const l = new PostgresThreadLocks({ client: () => ((opened = true), new pg.Client(DATABASE_URL)) });
    const error = await l.withThread(threadId as string, async () => "ran").catch((e: unknown) => e);
    expect(InvalidArgumentError.isInstance(error)).toBe(true);
    expect((error as InvalidArgumentError).field).toBe("threadId");
    expect(opened).toBe(false);
  });

  it("work not a function, and an empty message id", async () => {
    const l = locks();
    const notWork = await l.withThread("t", "work" as never).catch((e: unknown) => e);
    expect((notWork as InvalidArgumentError).field).toBe("work");
    const noId = await l.withThread("t", async () => 1, { messageId: "" }).catch((e: unknown) => e);
    expect((noId as InvalidArgumentError).field).toBe("options.messageId");
  });

  it("THREAD-2: refuses a server below PostgreSQL 14 (no idle_session_timeout): UnsafeStoreConfigError, work not run, session ended", async () => {
    let ended = false;
    const old = {
      on() {},
      async connect() {},
      async query() {
        return { rows: [{ v: "130012", pid: 7 }] };
      },
      async end() {
        ended = true;
      },
    };
    let ran = false;
    const l = new PostgresThreadLocks({ client: () => old as unknown as pg.Client });
    const error = await l.withThread("t", async () => void (ran = true)).catch((e: unknown) => e);
    expect(UnsafeStoreConfigError.isInstance(error)).toBe(true);
    expect((error as UnsafeStoreConfigError).setting).toBe("server_version_num");
    expect((error as UnsafeStoreConfigError).value).toBe("130012");
    expect([ran, ended]).toEqual([false, true]);
  });
});
