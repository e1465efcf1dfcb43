/**
 * The crash suite: runner processes (the Anthropic, the OpenAI Responses or the Chat Completions stream side over its mock provider,
 * the real dispatcher, a durable ledger and a durable conversation store) SIGKILLed at chosen points of a
 * streamed turn that pays, then the same message delivered again to a new process. The oracle
 * reads the payments API's effect log, the ledger rows and the conversation store: each payment
 * asked for happened once, and what the conversation and the records beside it say is true.
 * Every crash point is reached deterministically (the worker parks there and says so over IPC);
 * only the leases' running out (LEASE_MS) is waited for. Tests run two at a time: most of a test
 * is a process starting or a lease running out.
 */
import { describe, expect, it, vi } from "vitest";
import type { CrashPoint } from "./crash-protocol.js";
import { EVERY_POINT, INVOICE_ACME, LEASE_MS, PAY_ACME, inWorld as inWorldOf, judgeAnswers, makeWorld, type LedgerKind, type ProviderKind, type StoreKind, type World } from "./crash-harness.js";

// No bound of its own on a test: the package's (120 s) fails a runner that hangs. A 30 s bound
// judged the host, not the runners: a test starts two or three runner processes, and on a loaded
// host their start alone outlived it (RECORD-8's three runners: over 30 s beside four busy loops,
// 8 s on a quiet host). A runner parked or hung still renews its leases, so no sign of progress
// short of its answer tells a hang from a slow host (a watchdog on its messages and CPU time never
// fired on a runner parked at a crash point, in 60 s).
vi.setConfig({ maxConcurrency: 2 });

/** Runs `test` in a world of its own, closed whatever the test does, and by 115 s at the latest (a hang; the package's bound is 120 s). */
function inWorld(options: Parameters<typeof makeWorld>[0], test: (world: World) => Promise<void>): Promise<void> {
  // No test here partitions a ledger, so its bound is never what a test waits for. At its default
  // (5 s), listing a turn's rows outlived it on a loaded host ('no reply within 5000 ms
  // (listRows)'): in a runner process (RECORD-8's resumed turn then said "unlisted" where the test
  // reads the listed row) and in the suite's own audit.
  return inWorldOf({ ledgerTimeoutMs: 30_000, ...options }, 115_000, test);
}

/**
 * A runner process stops at `point` (its `occurrence`-th passage) while answering `content` as
 * message m1, and is SIGKILLed there. Returns another runner process, started meanwhile.
 */
async function crashAt(w: World, conversationId: string, point: CrashPoint, occurrence = 1, content = "pay acme") {
  const first = w.runner({ crashAt: point, occurrence });
  const second = w.runner(); // started now: ready by the time the first is dead
  await Promise.all([first.ready, second.ready]);
  // The provider holds message_stop (response.completed), so the row completes while the stream is still open.
  if (point === "after_complete") w.holdBeforeFinish();
  first.send(conversationId, "m1", content);
  if (point === "during_commit" && w.storeKind === "sqlite") {
    // The worker SIGKILLs itself inside the commit's transaction (better-sqlite3 is synchronous).
    expect((await first.exited).signal).toBe("SIGKILL");
  } else {
    await first.reached(point);
    await first.kill();
  }
  return second;
}

/** The API each stream side asks its mock on. */
const API_OF: Record<ProviderKind, string> = { anthropic: "messages", openai: "responses", "openai-chat": "chat.completions" };

const paymentsOf = (w: World) => w.payments.effects().filter((e) => e.account === w.account && e.kind === "payment_created");
const invoicesOf = (w: World) => w.payments.effects().filter((e) => e.account === w.account && e.kind === "invoice_created");

// The turn that pays commits first (stop_reason tool_use, with the tool result), then the model's
// answer to the result: after_commit #1 falls between the two, #2 after the last. Every point on
// SQLite; on the server stores the points where the store itself acts (the ledger's takeover of a
// dead owner's row, the store's transaction dying with its connection, the last commit). The
// OpenAI stream side shares the runner; what differs is the stream (a call final at
// output_item.done, long before response.completed), so it runs the points that window decides,
// to keep the suite's time: the row completed while response.completed is held, and a commit
// dying with its connection (every point passed when measured: 9 tests, about 45 s more). The
// Chat Completions side (ChatCompletionsRunner) has a stream of its own again (a call final at the
// next index's first fragment or at finish_reason, STREAM-20; no event closes a call): it runs the
// payment accepted and its row in flight, and a commit dying inside its transaction on a server store.

describe.concurrent.each<[ProviderKind, LedgerKind, StoreKind, [CrashPoint, number][]]>([
  ["anthropic", "sqlite", "sqlite", EVERY_POINT],
  ["anthropic", "postgres", "postgres", [["after_accept", 1], ["during_commit", 1], ["after_commit", 1]]],
  ["anthropic", "redis", "postgres", [["after_accept", 1], ["after_complete", 1]]],
  ["openai", "sqlite", "sqlite", [["after_complete", 1]]],
  ["openai", "redis", "postgres", [["during_commit", 1]]],
  ["openai-chat", "sqlite", "sqlite", [["after_accept", 1]]],
  ["openai-chat", "postgres", "postgres", [["during_commit", 1]]],
])("a runner process (%s) SIGKILLed mid-turn (%s ledger, %s conversations)", (provider, ledger, store, points) => {
  it.each<[CrashPoint, number]>(points)("killed %s (#%i): the re-sent message is answered with the one payment, the ledger row completed with it", (point, occurrence) =>
    inWorld({ provider, ledger, store }, async (world) => {
      const conversation = `crash-${point}-${occurrence}`;
      const next = await crashAt(world, conversation, point, occurrence);
      // Whatever the crash left, the payments API holds the one payment the first process made.
      expect(paymentsOf(world)).toHaveLength(1);
      const [payment] = paymentsOf(world);

      next.send(conversation, "m1", "pay acme"); // the client re-sends (or a queue redelivers) the same message
      const answer = await next.outcome();
      expect(answer.type, JSON.stringify(answer)).toBe("answered");
      if (answer.type !== "answered") return;
      expect(answer.result.fromStore).toBe(point === "after_commit" && occurrence === 2);
      // The answer is the message's whole answer: the turn that paid, whoever committed it, then the text.
      expect(answer.result.turns.map((t) => t.turnIndex)).toEqual([0, 1]);
      expect(answer.result.turns[0]!.calls).toEqual([
        expect.objectContaining({ name: "send_payment", key: payment!.idempotencyKey, result: { paymentId: payment!.resourceId } }),
      ]);

      const audit = await world.audit(conversation);
      expect(audit.violations).toEqual([]);
      expect(audit.effects).toHaveLength(1);
      expect(audit.messages).toEqual({ m1: "answered" });
      expect(audit.rows.map((r) => [r.key, r.state])).toEqual([[payment!.idempotencyKey, "completed"]]);
      expect(audit.log).toContain(payment!.resourceId);
      // Each runner process spoke its side's API (ChatCompletionsRunner: Chat Completions, on the mock that also serves Responses).
      expect(world.apis()).toEqual([API_OF[provider]]);
    }),
  );
});

describe.concurrent("other deliveries, pauses and answers after a crash", () => {
  it.each<ProviderKind>(["anthropic", "openai"])("RECORD-8 (%s) attempt 1 paid and its stream was cut, attempt 2 answered with text, killed right after the commit: the payment is still told beside the conversation", (provider) => {
    let requests = 0;
    return inWorld(
      {
        provider,
        ledger: "sqlite",
        store: "sqlite",
        // The model answers the same prompt differently the second time (RECORD-8's premise).
        script: () => (++requests === 1 ? { call: "send_payment", input: PAY_ACME } : { text: "I could not confirm the payment; please check your account." }),
      },
      async (world) => {
        // Attempt 1's stream dies after the payment, before message_stop (response.completed): the chapter's incident.
        world.cutBeforeFinish();
        const conversation = "crash-retried-commit";
        const next = await crashAt(world, conversation, "after_commit");
        expect(paymentsOf(world)).toHaveLength(1);
        const [payment] = paymentsOf(world);

        next.send(conversation, "m1", "pay acme");
        const answer = await next.outcome();
        expect(answer.type, JSON.stringify(answer)).toBe("answered");
        if (answer.type !== "answered") return;
        expect(answer.result.fromStore).toBe(true);
        // The committed answer does not mention the payment; what the client is told must.
        expect(answer.result.records?.flatMap((r) => r.calls ?? []).map((c) => [c.key, c.effect])).toEqual([[payment!.idempotencyKey, "happened"]]);
        const audit = await world.audit(conversation);
        expect(audit.violations).toEqual([]);
        expect(audit.effects).toHaveLength(1);
        expect(audit.log).not.toContain(payment!.resourceId);
      },
    );
  });

  it("RECORD-8 a dead worker's payment, a resumed turn answered with text, its worker killed right after the commit: the listed row is still told beside the conversation", () => {
    let requests = 0;
    return inWorld(
      {
        ledger: "redis",
        store: "postgres",
        script: () => (++requests === 1 ? { call: "send_payment", input: PAY_ACME } : { text: "I could not confirm the payment; please check your account." }),
      },
      async (world) => {
        const conversation = "crash-resumed-commit";
        const first = world.runner({ crashAt: "after_accept" });
        const resumer = world.runner({ crashAt: "after_commit" });
        const last = world.runner();
        await Promise.all([first.ready, resumer.ready, last.ready]);
        first.send(conversation, "m1", "pay acme");
        await first.reached("after_accept"); // the first worker dies with the payment accepted, its row in flight
        await first.kill();
        const [payment] = paymentsOf(world);

        resumer.send(conversation, "m1", "pay acme"); // resumes the turn (TURN-15); the model answers with text
        await resumer.reached("after_commit");
        await resumer.kill();

        last.send(conversation, "m1", "pay acme");
        const answer = await last.outcome();
        expect(answer.type, JSON.stringify(answer)).toBe("answered");
        if (answer.type !== "answered") return;
        expect(answer.result.fromStore).toBe(true);
        // The dead worker's row, listed by the resumed turn: in flight when listed, so "may have happened".
        expect(answer.result.records).toEqual([expect.objectContaining({ kind: "resumed_turn", resumed: true, listed: true })]);
        expect(answer.result.records![0]!.calls!.map((c) => [c.key, c.state, c.effect])).toEqual([[payment!.idempotencyKey, "in_flight", "may_have_happened"]]);
        expect(paymentsOf(world)).toHaveLength(1);
        const audit = await world.audit(conversation);
        expect(audit.violations).toEqual([]);
        expect(audit.log).not.toContain(payment!.resourceId);
      },
    );
  });

  it("STREAM-6 (openai) two payments as parallel calls of one response, the runner killed when the first was accepted (the other dispatched beside it, or not yet): the re-sent message pays each once", () =>
    inWorld({ provider: "openai", ledger: "sqlite", store: "sqlite" }, async (world) => {
      const conversation = "crash-parallel";
      const next = await crashAt(world, conversation, "after_accept", 1, "pay acme and bob");
      expect(paymentsOf(world).length).toBeGreaterThanOrEqual(1);

      next.send(conversation, "m1", "pay acme and bob");
      const answer = await next.outcome();
      expect(answer.type, JSON.stringify(answer)).toBe("answered");
      if (answer.type !== "answered") return;
      const payments = paymentsOf(world);
      expect(payments).toHaveLength(2);
      // Each call is answered with its own payment, whichever process made it.
      const byKey = new Map(payments.map((p) => [p.idempotencyKey, p.resourceId]));
      const calls = answer.result.turns[0]!.calls;
      expect(calls).toHaveLength(2);
      for (const c of calls) expect(c.result).toEqual({ paymentId: byKey.get(c.key!) });
      expect(new Set(calls.map((c) => c.key)).size).toBe(2);

      const audit = await world.audit(conversation);
      expect(audit.violations).toEqual([]);
      expect(audit.rows.map((r) => r.state)).toEqual(["completed", "completed"]);
      expect(audit.messages).toEqual({ m1: "answered" });
    }));

  it("LEDGER-7 an invoice API that deduplicates nothing, its runner killed after the invoice was created: the re-sent message fails saying it may have been; a re-ask in a new message creates nothing", () =>
    inWorld({ ledger: "sqlite", store: "postgres" }, async (world) => {
      const conversation = "crash-invoice";
      const next = await crashAt(world, conversation, "after_accept", 1, "invoice acme");
      expect(invoicesOf(world)).toHaveLength(1);
      const [invoice] = invoicesOf(world);
      // Which invoice: its arguments, as the dead owner's claim stored them (RECORD-10).
      const told = [{ key: invoice!.idempotencyKey, name: "create_invoice", effect: "may_have_happened", input: INVOICE_ACME }];

      next.send(conversation, "m1", "invoice acme");
      const resent = await next.outcome();
      expect(resent.type, JSON.stringify(resent)).toBe("refused");
      if (resent.type !== "refused") return;
      expect(resent.code).toBe("turn_failed");
      // Nobody alive knows whether the dead owner's request went out: never not_happened, never retried blindly.
      expect(resent.record).toMatchObject({ messageId: "m1", turnIndex: 0, resumed: true, retryable: false });
      expect(resent.record!.effects).toEqual(told);

      // The client gives up on m1 and asks again in a new message: the failed turn's index (TURN-12), the same key.
      next.send(conversation, "m2", "invoice acme");
      const reasked = await next.outcome();
      expect(reasked.type).toBe("refused");
      if (reasked.type !== "refused") return;
      expect(reasked.record).toMatchObject({ messageId: "m2", turnIndex: 0 });
      expect(reasked.record!.effects).toEqual(told);

      expect(invoicesOf(world)).toHaveLength(1);
      const audit = await world.audit(conversation);
      expect(audit.violations).toEqual([]);
      expect(audit.rows.map((r) => [r.key, r.state])).toEqual([[invoice!.idempotencyKey, "unknown"]]);
      expect(audit.messages).toEqual({ m1: "failed", m2: "failed" });
      expect(audit.log).toBe("[]");
    }));

  it("TURN-8 a client that lost the message id sends the same words as a new message: m1 is finished with its one payment, m2 is a new request", () =>
    inWorld({ ledger: "postgres", store: "sqlite" }, async (world) => {
      const conversation = "crash-new-id";
      const next = await crashAt(world, conversation, "after_accept");
      const [first] = paymentsOf(world);

      next.send(conversation, "m2", "pay acme");
      const answer = await next.outcome();
      expect(answer.type, JSON.stringify(answer)).toBe("answered");
      if (answer.type !== "answered") return;
      // m1 was bound first (TURN-9): it is answered before m2, with the payment its dead worker made.
      expect(JSON.stringify(await world.store.turnsOf(conversation, "m1"))).toContain(first!.resourceId);
      // m2 is what the user chose to say again: a new turn index, a new key, a new payment (TURN-8's price).
      expect(paymentsOf(world)).toHaveLength(2);
      const second = paymentsOf(world).find((e) => e.idempotencyKey !== first!.idempotencyKey)!;
      expect(answer.result.turns.map((t) => t.turnIndex)).toEqual([2, 3]);
      expect(answer.result.turns[0]!.calls).toEqual([expect.objectContaining({ key: second.idempotencyKey, result: { paymentId: second.resourceId } })]);
      const audit = await world.audit(conversation);
      expect(audit.violations).toEqual([]);
      expect(audit.messages).toEqual({ m1: "answered", m2: "answered" });
    }));

  it("TURN-7 a queue redelivers the message to two processes at once after the crash: one payment, both answered with it", () =>
    inWorld({ ledger: "redis", store: "sqlite" }, async (world) => {
      const conversation = "crash-redelivered";
      const third = world.runner();
      const second = await crashAt(world, conversation, "after_accept");
      await third.ready;
      const [payment] = paymentsOf(world);

      second.send(conversation, "m1", "pay acme");
      third.send(conversation, "m1", "pay acme");
      for (const answer of await Promise.all([second.outcome(), third.outcome()])) {
        expect(answer.type, JSON.stringify(answer)).toBe("answered");
        if (answer.type !== "answered") return;
        expect(answer.result.turns[0]!.calls).toEqual([
          expect.objectContaining({ key: payment!.idempotencyKey, result: { paymentId: payment!.resourceId } }),
        ]);
      }
      expect(paymentsOf(world)).toHaveLength(1);
      const audit = await world.audit(conversation);
      expect(audit.violations).toEqual([]);
      expect(audit.messages).toEqual({ m1: "answered" });
    }));

  it("TURN-13 a runner paused (SIGSTOP) past its leases after the payment was accepted: another re-sends and finishes the turn; the paused one wakes, cannot commit, and keeps a true record", () =>
    inWorld({ ledger: "postgres", store: "postgres" }, async (world) => {
      const conversation = "crash-paused";
      const paused = world.runner({ crashAt: "after_accept" });
      const next = world.runner();
      await Promise.all([paused.ready, next.ready]);
      paused.send(conversation, "m1", "pay acme");
      await paused.reached("after_accept");
      paused.stop(); // its renewals stop with it: both its leases run out
      const [payment] = paymentsOf(world);
      await new Promise((resolve) => setTimeout(resolve, LEASE_MS + 200));

      next.send(conversation, "m1", "pay acme");
      const answered = await next.outcome();
      expect(answered.type, JSON.stringify(answered)).toBe("answered");

      paused.resume();
      const woke = await paused.outcome();
      expect(woke.type, JSON.stringify(woke)).toBe("answered"); // the message is answered: it reads the answer back
      for (const answer of [answered, woke]) {
        if (answer.type !== "answered") return;
        expect(answer.result.turns[0]!.calls).toEqual([
          expect.objectContaining({ key: payment!.idempotencyKey, result: { paymentId: payment!.resourceId } }),
        ]);
      }
      expect(paymentsOf(world)).toHaveLength(1);
      const audit = await world.audit(conversation);
      expect(audit.violations).toEqual([]);
      // What the woken process did is beside the conversation (TURN-13), and never says not_happened.
      // Its complete is refused with stale_claim effectHappened, which no re-send settles (RECORD-5),
      // so it does not retry: its failMessage finds the lease taken and the failed-turn record goes
      // beside the conversation, saying the payment happened (before, a retry met the takeover and
      // recorded a superseded attempt).
      const beside = audit.records.filter((r) => r.kind === "superseded_attempt" || r.kind === "failed_turn");
      expect(beside.length).toBeGreaterThan(0);
      const effects = beside.flatMap((r) => (r.calls ?? []).filter((c) => c.key === payment!.idempotencyKey).map((c) => c.effect));
      expect(effects.length).toBeGreaterThan(0);
      expect(effects).not.toContain("not_happened");
    }));

  it("TURN-7 a runner paused (SIGSTOP) past its turn lease right after committing the turn that paid: another finishes the message; both answers hold both turns", () =>
    inWorld({ ledger: "sqlite", store: "sqlite" }, async (world) => {
      const conversation = "crash-paused-between-turns";
      const paused = world.runner({ crashAt: "after_commit" });
      const next = world.runner();
      await Promise.all([paused.ready, next.ready]);
      paused.send(conversation, "m1", "pay acme");
      await paused.reached("after_commit");
      // Stopped between transactions: a SIGSTOP from outside can land inside its lease renewal's
      // write transaction, and a stopped holder of SQLite's write lock makes every other writer's
      // answer store_unavailable (the next test), which is not what this one is about.
      await paused.pauseBetweenTransactions();
      const [payment] = paymentsOf(world);
      await new Promise((resolve) => setTimeout(resolve, LEASE_MS + 200));

      next.send(conversation, "m1", "pay acme");
      const finished = await next.outcome();
      paused.resume();
      const woke = await paused.outcome();
      for (const answer of [finished, woke]) {
        expect(answer.type, JSON.stringify(answer)).toBe("answered");
        if (answer.type !== "answered") return;
        expect(answer.result.turns.map((t) => t.turnIndex)).toEqual([0, 1]);
        expect(answer.result.turns[0]!.calls).toEqual([
          expect.objectContaining({ key: payment!.idempotencyKey, result: { paymentId: payment!.resourceId } }),
        ]);
      }
      expect(paymentsOf(world)).toHaveLength(1);
      const audit = await world.audit(conversation);
      expect(audit.violations).toEqual([]);
      expect(audit.messages).toEqual({ m1: "answered" });
    }));

  // About 9 s, most of it the re-send waiting out its store's 5 s busy timeout (a wait, not CPU).
  it("TURN-10 a runner SIGSTOPped inside a SQLite write transaction (it holds the file's write lock) past its leases: the re-send is refused store_unavailable, saying nothing false; after the holder wakes, the message is answered with the one payment", () =>
    inWorld({ ledger: "sqlite", store: "sqlite" }, async (world) => {
      const conversation = "crash-stopped-holding-the-lock";
      // Inside the transaction that commits the turn that paid, after its first write.
      const holder = world.runner({ crashAt: "at_call", call: { method: "commitTurn", n: 1, side: "commit" }, inTransaction: "stop" });
      const next = world.runner();
      await Promise.all([holder.ready, next.ready]);
      holder.send(conversation, "m1", "pay acme");
      await holder.stoppedItself();
      const [payment] = paymentsOf(world);
      await new Promise((resolve) => setTimeout(resolve, LEASE_MS + 200));

      // No lease breaks a file lock held by a live process: every write waits its busy timeout, then refuses.
      next.send(conversation, "m1", "pay acme");
      const refused = await next.outcome();
      expect(refused.type, JSON.stringify(refused)).toBe("refused");
      if (refused.type !== "refused") return;
      expect(refused.code).toBe("store_unavailable");
      expect(judgeAnswers(world.payments.effects().filter((e) => e.account === world.account).map((e) => ({ kind: e.kind, key: e.idempotencyKey ?? "", resourceId: e.resourceId })), [{ who: "next", answer: refused }])).toEqual([]);

      holder.resume();
      const woke = await holder.outcome();
      next.send(conversation, "m1", "pay acme"); // the client re-sends, as store_unavailable asks
      const answered = await next.outcome();
      for (const answer of [woke, answered]) {
        expect(answer.type, JSON.stringify(answer)).toBe("answered");
        if (answer.type !== "answered") return;
        expect(answer.result.turns.map((t) => t.turnIndex)).toEqual([0, 1]);
        expect(answer.result.turns[0]!.calls).toEqual([expect.objectContaining({ key: payment!.idempotencyKey, result: { paymentId: payment!.resourceId } })]);
      }
      expect(paymentsOf(world)).toHaveLength(1);
      const audit = await world.audit(conversation);
      expect(audit.violations).toEqual([]);
      expect(audit.messages).toEqual({ m1: "answered" });
    }), 60_000);
});
