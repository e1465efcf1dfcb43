import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LedgerUnavailableError, type Ledger } from "@dispatch-once/core";
import { connect, type Socket } from "node:net";
import { bindLedgerCheck, ledgerChecks, silentStoreAfterConnecting, silentStoreBeforeConnecting, startSilenceProxy, type LedgerSubject, type StoreAddress } from "../src/ledger/index.js";
import { conversationStoreChecks, silentConversationStoreAfterConnecting, silentConversationStoreBeforeConnecting } from "../src/index.js";
import { gatedConversationSubject, type ConversationGateBugs } from "./fixtures/gated-conversation-store.js";
import { gatedSubject, startEchoStore, type GateBugs } from "./fixtures/gated-ledger.js";

/**
 * LEDGER-12's silent-store checks and the kit's SilenceProxy. A correct ledger behind a TCP hop
 * passes both checks; each planted ledger without a whole bound of its own fails the one that
 * can see it, with its message. No timing is asserted: the checks' own deadlines are verdicts.
 */
let echo: Awaited<ReturnType<typeof startEchoStore>>;
beforeAll(async () => {
  echo = await startEchoStore();
});
afterAll(async () => {
  await echo.close();
});

/** Resolves at the first turn of the event loop where `condition` holds. */
async function until(condition: () => boolean): Promise<void> {
  while (!condition()) await new Promise((resolve) => setImmediate(resolve));
}

function client(address: StoreAddress): { socket: Socket; received: () => string; connected: Promise<void> } {
  let text = "";
  const socket = connect(address.port, address.host);
  socket.on("data", (chunk) => (text += chunk.toString("utf8")));
  socket.on("error", () => {});
  return { socket, received: () => text, connected: new Promise((resolve) => socket.once("connect", () => resolve())) };
}

describe("the kit's SilenceProxy", () => {
  it("holds bytes both ways on established and new connections while silent, delivers them in order at heal, and closes every socket", async () => {
    const proxy = await startSilenceProxy(echo.address);
    const a = client(proxy.address);
    a.socket.write("one\n");
    await until(() => a.received() === "one\n");
    proxy.silence();
    a.socket.write("two\n");
    const b = client(proxy.address);
    await b.connected; // a new connection is accepted (a paused server's kernel still accepts)
    b.socket.write("hello\n");
    await until(() => proxy.held() === "two\nhello\n".length);
    expect(a.received()).toBe("one\n");
    expect(b.received()).toBe("");
    proxy.heal();
    await until(() => a.received() === "one\ntwo\n" && b.received() === "hello\n");
    expect(proxy.held()).toBe(0);
    a.socket.destroy();
    await until(() => proxy.open() === 1);
    await proxy.close();
    await proxy.close(); // idempotent
    expect(proxy.open()).toBe(0);
    expect(b.socket.destroyed || (await new Promise((resolve) => b.socket.once("close", () => resolve(true))))).toBe(true);
    const refused = connect(proxy.address.port, proxy.address.host);
    await expect(new Promise((_, reject) => refused.once("error", reject))).rejects.toThrow(/ECONNREFUSED/);
  });

  it("refuses a target that is not { host, port }", async () => {
    await expect(startSilenceProxy({ host: "127.0.0.1", port: 0 })).rejects.toThrow(TypeError);
  });
});

const PLANTED: Array<{ bug: keyof GateBugs; what: string; fails: typeof silentStoreAfterConnecting; passes?: typeof silentStoreAfterConnecting; message: RegExp }> = [
  { bug: "noBound", what: "no bound of its own: each operation waits for the store as long as it takes", fails: silentStoreAfterConnecting, message: /claim did not settle within 1220 ms \(the declared operationBoundMs 200/ },
  { bug: "boundsConnectOnly", what: "the bound covers connecting only, not a reply on an established connection", fails: silentStoreAfterConnecting, passes: silentStoreBeforeConnecting, message: /after the instance connected.*\n {2}- claim did not settle within/ },
  { bug: "boundsRepliesOnly", what: "the bound covers replies only, not connecting", fails: silentStoreBeforeConnecting, passes: silentStoreAfterConnecting, message: /before the instance's first connection.*\n {2}- claim did not settle within/ },
  { bug: "runsOnTimeout", what: "at the bound the operation runs anyway (no answer read as go ahead)", fails: silentStoreAfterConnecting, message: /claim answered \{ outcome: 'claimed'/ },
  // close() is a ledger operation too: run on its own once the others settled, still silent.
  { bug: "closeUnbounded", what: "close says goodbye and waits for the answer as long as it takes", fails: silentStoreBeforeConnecting, message: /1 of \d+ operations \(close included\) broke LEDGER-12's bound:\n {2}- close \(once the others had settled, the store still silent\) did not settle within 1220 ms/ },
  // The proxy holds a half-close as a paused store does: answering it with its own FIN would pass this close.
  { bug: "closeAwaitsPeerClose", what: "close half-closes its connection and waits for the store to close its side", fails: silentStoreAfterConnecting, message: /1 of \d+ operations \(close included\) broke LEDGER-12's bound:\n {2}- close \(once the others had settled, the store still silent\) did not settle within 1220 ms/ },
  { bug: "closeRejectsUntyped", what: "close gives up at the bound with a plain Error", fails: silentStoreAfterConnecting, message: /- close \(once the others had settled, the store still silent\) rejected with Error: close: no goodbye from the store after \d+ ms: it must resolve, or reject with ledger_unavailable/ },
];

describe("LEDGER-12 silent-store checks", () => {
  it("a ledger whose one deadline covers connecting and replying passes both, and the level lists them", async () => {
    const subject = gatedSubject(echo.address);
    for (const spec of [silentStoreAfterConnecting, silentStoreBeforeConnecting]) await bindLedgerCheck(spec, subject, { seed: 7 }).run();
    const listed = ledgerChecks(subject, { seed: 7, runs: 1 }).filter((c) => /store silent/.test(c.name));
    expect(listed.map((c) => [c.rule, c.applicable])).toEqual([
      ["LEDGER-12", true],
      ["LEDGER-12", true],
    ]);
  });

  // Side by side: each waits out its deadline, so together they take about one.
  describe.concurrent("planted ledgers", () => {
  for (const planted of PLANTED) {
    it(`rejects ${planted.bug}: ${planted.what}`, async ({ expect }) => {
      const subject = gatedSubject(echo.address, { [planted.bug]: true }, `gated ${planted.bug}`);
      await expect(bindLedgerCheck(planted.fails, subject, { seed: 7 }).run()).rejects.toThrow(planted.message);
      // The other check cannot see this bug: both are needed. (Concurrent tests use their own expect.)
      if (planted.passes !== undefined) await bindLedgerCheck(planted.passes, subject, { seed: 7 }).run();
    });
  }
  });

  // The state made before the silence meets a slow store (a loaded host): that judges nothing of the
  // window, so the check starts again on a fresh fixture; an unavailable store every time is reported.
  it("starts again on a fresh fixture when its preparation, before the silence, meets ledger_unavailable", async () => {
    const flaky = (failures: number): LedgerSubject => {
      const subject = gatedSubject(echo.address);
      let left = failures;
      return {
        ...subject,
        async create(options) {
          const fixture = await subject.create(options);
          const openVia = fixture.raw.openVia!.bind(fixture.raw);
          return {
            ...fixture,
            raw: {
              ...fixture.raw,
              async openVia(via: StoreAddress) {
                const ledger = await openVia(via);
                if (left-- <= 0) return ledger;
                const claim = ledger.claim.bind(ledger);
                let first = true;
                return Object.assign(Object.create(ledger) as Ledger, {
                  capabilities: ledger.capabilities,
                  close: () => ledger.close(),
                  claim: (request: Parameters<Ledger["claim"]>[0]) => {
                    if (!first) return claim(request);
                    first = false;
                    return Promise.reject(new LedgerUnavailableError("no reply within 200 ms (a loaded host)"));
                  },
                });
              },
            },
          };
        },
      };
    };
    await bindLedgerCheck(silentStoreAfterConnecting, flaky(2), { seed: 7 }).run();
    await expect(bindLedgerCheck(silentStoreAfterConnecting, flaky(3), { seed: 7 }).run()).rejects.toThrow(/no reply within 200 ms \(a loaded host\)/);
  });

  it("is not applicable without the capability, and a subject declaring it without a bound is refused", () => {
    const subject = gatedSubject(echo.address);
    const without = { ...subject, capabilities: { ...subject.capabilities, silentStore: false } };
    const listed = ledgerChecks(without, { seed: 7, runs: 1 }).filter((c) => /store silent/.test(c.name));
    expect(listed.map((c) => c.reasonNotApplicable)).toEqual([expect.stringMatching(/^needs silentStore \(raw.storeAddress and raw.openVia/), expect.stringMatching(/^needs silentStore/)]);
    expect(() => ledgerChecks({ ...subject, limits: {} }, { seed: 7, runs: 1 })).toThrow(/capabilities.silentStore needs limits.operationBoundMs/);
  });
});

describe("TURN-21 silent-store checks (the conversation level, the same proxy and slack)", () => {
  const checks = [silentConversationStoreAfterConnecting, silentConversationStoreBeforeConnecting];

  it("a store whose one deadline covers connecting and replying passes both, and the level lists them", async () => {
    const subject = gatedConversationSubject(echo.address);
    for (const check of checks) await check.run(subject);
    const listed = conversationStoreChecks(subject, { seed: 7, runs: 1 }).filter((c) => c.rule === "TURN-21");
    expect(listed.map((c) => [c.name, c.applicable])).toEqual(checks.map((c) => [c.name, true]));
  });

  describe.concurrent("planted stores", () => {
    const planted: Array<{ bug: keyof ConversationGateBugs; fails: (typeof checks)[number]; passes?: (typeof checks)[number]; message: RegExp }> = [
      { bug: "noBound", fails: silentConversationStoreAfterConnecting, message: /broke TURN-21's bound:\n {2}- message did not settle within 1220 ms \(the declared operationBoundMs 200/ },
      { bug: "boundsConnectOnly", fails: silentConversationStoreAfterConnecting, passes: silentConversationStoreBeforeConnecting, message: /after the instance connected.*\n {2}- message did not settle within/ },
      { bug: "boundsRepliesOnly", fails: silentConversationStoreBeforeConnecting, passes: silentConversationStoreAfterConnecting, message: /before the instance's first connection.*\n {2}- message did not settle within/ },
      { bug: "closeUnbounded", fails: silentConversationStoreAfterConnecting, message: /1 of \d+ methods \(close included\) broke TURN-21's bound:\n {2}- close \(once the others had settled, the store still silent\) did not settle within 1220 ms/ },
      { bug: "runsOnTimeout", fails: silentConversationStoreAfterConnecting, message: /- message answered \{ id: 'm-read'.*though the store answered nothing: it must reject with store_unavailable/ },
      // Every method rejects in time; what is stored after heal tells the bug.
      { bug: "recordsFailureUnanswered", fails: silentConversationStoreAfterConnecting, message: /after heal, failMessage that rejected left the message [\s\S]*state: 'in_progress'[\s\S]* and records \[ \{ kind: 'silenced', late: true \} \]: only the message in progress with no record/ },
    ];
    for (const p of planted) {
      it(`rejects ${p.bug}`, async ({ expect }) => {
        const subject = gatedConversationSubject(echo.address, { [p.bug]: true }, `gated ${p.bug}`);
        await expect(p.fails.run(subject)).rejects.toThrow(p.message);
        if (p.passes !== undefined) await p.passes.run(subject);
      });
    }
  });

  it("is not applicable without the capability, and a subject declaring it without a bound is refused", () => {
    const subject = gatedConversationSubject(echo.address);
    const without = { ...subject, capabilities: { ...subject.capabilities, silentStore: false } };
    const listed = conversationStoreChecks(without, { seed: 7, runs: 1 }).filter((c) => c.rule === "TURN-21");
    expect(listed.map((c) => c.reasonNotApplicable)).toEqual([expect.stringMatching(/^needs silentStore \(raw.storeAddress and raw.openVia/), expect.stringMatching(/^needs silentStore/)]);
    expect(() => conversationStoreChecks({ ...subject, limits: {} }, { seed: 7, runs: 1 })).toThrow(/capabilities.silentStore needs limits.operationBoundMs/);
  });
});
