// `dispatch-once turns --failed --store <target>` on the real conversation stores (TURN-17).
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { ConversationStore, FailedTurn } from "@dispatch-once/core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Dispatcher, defineTool } from "@dispatch-once/core";
import { createSqliteLedger } from "@dispatch-once/ledger-sqlite";
import { z } from "zod";
import { resendVerdict } from "../src/commands/turns.js";
import { jsonLines, postgresStoreBackend, runBin, sqliteStoreBackend, type StoreBackend } from "./helpers.js";

/** A failed-turn record as the runner stores it (RECORD-5), trimmed to what the listing reads. */
const RECORD = { failed: "m1", effects: ["may_have_happened"], retryable: true };
/** One whose effect is left unknown: re-sending cannot help, whatever the store does (RECORD-5). */
const UNKNOWN_RECORD = { failed: "m1", calls: [{ name: "send_payment", status: "outcome_unknown" }], retryable: false };

/**
 * A record an older runner stored (before RECORD-5 said "not retryable" for an effect known to have
 * happened): a payment made whose record never reached the ledger, listed with retryable true.
 */
const OLD_HAPPENED_RECORD = {
  kind: "failed_turn",
  calls: [{ name: "send_payment", key: "k1", status: "error", effect: "happened" }],
  effects: [{ key: "k1", name: "send_payment", effect: "happened" }],
  retryable: true,
};

async function failNext(store: ConversationStore, c: string, id: string, record: FailedTurn["failure"] = RECORD): Promise<void> {
  await store.appendUserMessage(c, { id, content: { role: "user", content: `${c} ${id}` } });
  const lease = await store.acquireLease(c, "worker", 600_000);
  if (!lease.acquired) throw new Error("not acquired");
  await store.beginTurn(c, lease.fence);
  await store.failMessage(c, lease.fence, id, record);
  await store.releaseLease(c, lease.fence);
}

/** A new message bound at the failed turn's index (TURN-12), left in progress. */
async function bindNext(store: ConversationStore, c: string, id: string): Promise<void> {
  await store.appendUserMessage(c, { id, content: { role: "user", content: `${c} ${id}` } });
  const lease = await store.acquireLease(c, "worker", 600_000);
  if (!lease.acquired) throw new Error("not acquired");
  await store.beginTurn(c, lease.fence);
  await store.releaseLease(c, lease.fence);
}

describe.each([
  ["sqlite", sqliteStoreBackend],
  ["postgres", postgresStoreBackend],
] as const)("dispatch-once turns --failed on %s", (_name, open) => {
  let backend: StoreBackend;
  beforeAll(async () => {
    backend = await open();
    await failNext(backend.store, "conv-turns-a", "m1");
    await failNext(backend.store, "conv-turns-b", "m1");
    // m2 takes m1's index: a re-send of m1 now returns the stored failure (TURN-12), though its record says retryable.
    await bindNext(backend.store, "conv-turns-b", "m2");
    await backend.store.appendUserMessage("conv-turns-c", { id: "m1", content: "queued" });
    await failNext(backend.store, "conv-turns-d", "m1", UNKNOWN_RECORD);
  });
  afterAll(async () => {
    await backend?.cleanup();
  });

  it("--json prints each failed turn with its record; --conversation narrows it", async () => {
    const result = await runBin(["turns", "--failed", "--json", ...backend.args]);
    expect(result.code, result.stderr).toBe(0);
    const turns = jsonLines(result.stdout) as FailedTurn[];
    expect(turns.map((t) => [t.conversationId, t.messageId, t.turnIndex, t.failure]).sort()).toEqual([
      ["conv-turns-a", "m1", 0, RECORD],
      ["conv-turns-b", "m1", 0, RECORD],
      ["conv-turns-d", "m1", 0, UNKNOWN_RECORD],
    ]);
    const one = await runBin(["turns", "--failed", "--json", "--conversation", "conv-turns-b", ...backend.args]);
    expect((jsonLines(one.stdout) as FailedTurn[]).map((t) => t.conversationId)).toEqual(["conv-turns-b"]);
  });

  it("pages through the store's cursor, prints a table, and --older-than excludes fresh failures", async () => {
    const paged = await runBin(["turns", "--failed", "--json", "--limit", "0", "--page-size", "1", ...backend.args]);
    expect(jsonLines(paged.stdout)).toHaveLength(3);
    const table = await runBin(["turns", "--failed", ...backend.args]);
    expect(table.stdout.split("\n")[0]).toMatch(/^CONVERSATION\s+MESSAGE\s+TURN\s+FAILED AT\s+AGE\s+RE-SEND$/);
    expect(table.stderr).toBe("3 failed turns\n");
    const old = await runBin(["turns", "--failed", "--older-than", "1h", ...backend.args]);
    expect(old.code).toBe(0);
    expect(old.stdout).toBe("");
  });
});

describe.each([
  ["sqlite", sqliteStoreBackend],
  ["postgres", postgresStoreBackend],
] as const)("dispatch-once turns --failed on %s says whether a re-send would help (TURN-12, TURN-17, RECORD-5)", (_name, open) => {
  let backend: StoreBackend;
  beforeAll(async () => {
    backend = await open();
  });
  afterAll(async () => {
    await backend?.cleanup();
  });

  const listed = async () => {
    const json = await runBin(["turns", "--failed", "--json", "--conversation", "conv-resend", ...backend.args]);
    expect(json.code, json.stderr).toBe(0);
    const table = await runBin(["turns", "--failed", "--conversation", "conv-resend", ...backend.args]);
    expect(table.code, table.stderr).toBe(0);
    const rows = table.stdout.split("\n").slice(1).filter((l) => l !== "");
    return {
      json: (jsonLines(json.stdout) as (FailedTurn & { resend: string })[]).map((t) => [t.messageId, t.reopenable, t.resend]),
      column: rows.map((l) => [l.split(/\s+/)[1], l.replace(/^(\S+\s+){5}/, "")]),
    };
  };

  it("yes while the failed message is the last bound; no once a later message was bound, and the re-send then returns the stored failure", async () => {
    const { store } = backend;
    await failNext(store, "conv-resend", "a");
    expect(await listed()).toEqual({ json: [["a", true, "yes"]], column: [["a", "yes"]] });

    // b takes a's index (TURN-12): a stays failed and listed, its record still says retryable.
    await bindNext(store, "conv-resend", "b");
    const after = await listed();
    expect(after).toEqual({ json: [["a", false, "no: a later message was bound"]], column: [["a", "no: a later message was bound"]] });
    const json = await runBin(["turns", "--failed", "--json", "--conversation", "conv-resend", ...backend.args]);
    expect((jsonLines(json.stdout) as FailedTurn[])[0]?.failure).toEqual(RECORD);

    // As the listing says: a re-send of a does not reopen it, and it is still listed.
    const resend = await store.appendUserMessage("conv-resend", { id: "a", content: "again" });
    expect([resend.reopened, resend.message.state, resend.message.failure]).toEqual([false, "failed", RECORD]);
    expect(await listed()).toEqual(after);
  });

  it("no, with the record's reason, when the record written at the failure says a re-send cannot help", async () => {
    await failNext(backend.store, "conv-resend-unknown", "m1", UNKNOWN_RECORD);
    const json = await runBin(["turns", "--failed", "--json", "--conversation", "conv-resend-unknown", ...backend.args]);
    expect((jsonLines(json.stdout) as (FailedTurn & { resend: string })[]).map((t) => [t.reopenable, t.resend])).toEqual([
      [true, "no: an effect's outcome is unknown (settle it first: reconcile, resolve)"],
    ]);
  });

  it("RECORD-5 no, for a record an older version stored with retryable true beside a call whose effect happened and was never completed", async () => {
    await failNext(backend.store, "conv-resend-old-form", "m1", OLD_HAPPENED_RECORD);
    const json = await runBin(["turns", "--failed", "--json", "--conversation", "conv-resend-old-form", ...backend.args]);
    const listed = (jsonLines(json.stdout) as (FailedTurn & { resend: string })[]).map((t) => [t.reopenable, t.resend, (t.failure as { retryable: boolean }).retryable]);
    console.log(`${_name}: ${JSON.stringify(listed)}`);
    // The record is printed as stored; the verdict reads its calls.
    expect(listed).toEqual([[true, "no: an effect happened and was never recorded as completed (its row is, or may become, an operator's: check it first)", true]]);
  });
});

describe.each([
  ["sqlite", sqliteStoreBackend],
  ["postgres", postgresStoreBackend],
] as const)("dispatch-once turns --failed on %s: a failure older than the ledger's retention (LEDGER-13, TURN-12)", (_name, open) => {
  let backend: StoreBackend;
  let dir: string;
  beforeAll(async () => {
    backend = await open();
    dir = mkdtempSync(join(tmpdir(), "dispatch-once-cli-turns-ledger-"));
  });
  afterAll(async () => {
    await backend?.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });

  it("says no once the failure is older than --retention on the store's clock: the call's row is swept and a re-send would pay again", async () => {
    // The application's ledger keeps finished rows 1 s; its payment in the failed turn happened.
    const ledgerPath = join(dir, `ledger-${randomBytes(4).toString("hex")}.db`);
    const ledger = createSqliteLedger({ path: ledgerPath, retentionMs: 1_000 });
    const payments: string[] = [];
    const pay = defineTool({
      name: "send_payment",
      effect: "unkeyed_write",
      input: z.object({ amount: z.int() }),
      run: (args) => (payments.push(`pay ${args.amount}`), { id: `pay_${payments.length}` }),
    });
    const dispatcher = new Dispatcher({ tools: [pay], ledger, logger: { warn: () => {} } });
    const call = { name: "send_payment", input: { amount: 12 } };
    const turn = { conversationId: "conv-retention", turnIndex: 0 };
    try {
      await dispatcher.dispatch(call, turn);
      // The turn then fails for another reason; its record says a re-send can help (RECORD-5).
      await failNext(backend.store, "conv-retention", "m1", { failed: "m1", calls: [{ name: "send_payment", status: "completed", effect: "happened" }], retryable: true });
      // Judged against a retention it is well within (a CLI start on a loaded host takes longer than 1 s).
      const fresh = await runBin(["turns", "--failed", "--json", "--conversation", "conv-retention", "--retention", "10m", ...backend.args]);
      expect(fresh.code, fresh.stderr).toBe(0);
      expect((jsonLines(fresh.stdout) as { resend: string }[]).map((t) => t.resend)).toEqual(["yes"]);

      await new Promise((resolve) => setTimeout(resolve, 1_500));
      const swept = await runBin(["sweep", "--retention", "1s", "--ledger", ledgerPath]);
      expect(swept.stdout, swept.stderr).toBe("swept 1 row\n");
      const old = await runBin(["turns", "--failed", "--json", "--conversation", "conv-retention", "--retention", "1s", ...backend.args]);
      expect(old.code, old.stderr).toBe(0);
      const table = await runBin(["turns", "--failed", "--conversation", "conv-retention", "--retention", "1s", ...backend.args]);
      // What a re-send of m1 would do now: the same call at the same turn index meets no row.
      await dispatcher.dispatch(call, turn);
      expect(payments).toEqual(["pay 12", "pay 12"]);
      const verdict = "no: its re-send window has passed (23/24 of the ledger's retention, 1s): the runner refuses the re-send (past_resend_window), since the ledger may have swept its calls' rows; send a new message";
      expect((jsonLines(old.stdout) as { resend: string; pastResendWindow: boolean }[]).map((t) => [t.resend, t.pastResendWindow])).toEqual([[verdict, true]]);
      expect(table.stdout.split("\n")[1]?.replace(/^(\S+\s+){5}/, "")).toBe(verdict);
      // Without --retention (or DISPATCH_ONCE_RETENTION) it is judged by the adapters' default, 24h, and says so.
      const byDefault = await runBin(["turns", "--failed", "--json", "--conversation", "conv-retention", ...backend.args]);
      expect((jsonLines(byDefault.stdout) as { resend: string }[]).map((t) => t.resend)).toEqual(["yes"]);
      const byEnv = await runBin(["turns", "--failed", "--json", "--conversation", "conv-retention", ...backend.args], { env: { DISPATCH_ONCE_RETENTION: "1s" } });
      expect((jsonLines(byEnv.stdout) as { resend: string }[]).map((t) => t.resend)).toEqual([verdict]);
      // The runner's own window, when it is not the default: the same verdict naming it; above the retention, refused.
      const byWindow = await runBin(["turns", "--failed", "--json", "--conversation", "conv-retention", "--retention", "10m", "--resend-window", "1s", ...backend.args]);
      expect((jsonLines(byWindow.stdout) as { resend: string }[]).map((t) => t.resend)).toEqual([verdict.replace("23/24 of the ledger's retention, 1s", "1s")]);
      const tooLong = await runBin(["turns", "--failed", "--conversation", "conv-retention", "--retention", "1h", "--resend-window", "2h", ...backend.args]);
      expect(tooLong.code).toBe(2);
      expect(tooLong.stderr).toContain("--resend-window");
    } finally {
      await ledger.close();
    }
  });
});

describe.each([
  ["sqlite", sqliteStoreBackend],
  ["postgres", postgresStoreBackend],
] as const)("dispatch-once turns --failed on %s: the re-send window counts from the FIRST failure, or from the binding where that is earlier (TURN-12)", (_name, open) => {
  let backend: StoreBackend;
  beforeAll(async () => {
    backend = await open();
  });
  afterAll(async () => {
    await backend?.cleanup();
  });

  it("TURN-12: a message that failed, was re-sent and failed again is past the window by its first failure, as the runner's store decides, though its last failure is fresh", async () => {
    const { store } = backend;
    await failNext(store, "conv-first", "m1");
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    // Re-sent (no window: the first failure's age is not asked), retried at its index, failed again now.
    const reopened = await store.appendUserMessage("conv-first", { id: "m1", content: "again" });
    expect(reopened.reopened).toBe(true);
    const lease = await store.acquireLease("conv-first", "worker", 600_000);
    if (!lease.acquired) throw new Error("not acquired");
    await store.beginTurn("conv-first", lease.fence);
    await store.failMessage("conv-first", lease.fence, "m1", RECORD);
    await store.releaseLease("conv-first", lease.fence);
    // What the CLI says with a 1 s window: the runner's re-send would be refused.
    const listed = await runBin(["turns", "--failed", "--json", "--conversation", "conv-first", "--retention", "10m", "--resend-window", "1s", ...backend.args]);
    expect(listed.code, listed.stderr).toBe(0);
    const turns = jsonLines(listed.stdout) as (FailedTurn & { resend: string; pastResendWindow: boolean })[];
    expect(turns.map((t) => [t.messageId, t.pastResendWindow, t.reopenable, t.resend.slice(0, 3)])).toEqual([["m1", true, false, "no:"]]);
    expect(turns[0]!.firstFailedAt).toBeLessThanOrEqual(turns[0]!.failedAt - 1_500);
    // And the store, asked as a runner with a 1 s window asks it, refuses the reopen.
    const resend = await store.appendUserMessage("conv-first", { id: "m1", content: "again" }, { reopenWithinMs: 1_000 });
    expect([resend.reopened, resend.pastReopenWindow]).toEqual([false, true]);
  });

  it("TURN-12: a message bound, taken over 1.5 s later by the next holder and failed at once is past a 1 s window by its binding (bound_at), as the runner's store decides", async () => {
    const { store } = backend;
    await store.appendUserMessage("conv-bound", { id: "m1", content: "pay" });
    const first = await store.acquireLease("conv-bound", "worker-a", 600_000);
    if (!first.acquired) throw new Error("not acquired");
    await store.beginTurn("conv-bound", first.fence);
    // The holder dies; the next one takes m1 over later, and its attempt fails.
    await store.releaseLease("conv-bound", first.fence);
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    const next = await store.acquireLease("conv-bound", "worker-b", 600_000);
    if (!next.acquired) throw new Error("not acquired");
    await store.beginTurn("conv-bound", next.fence);
    await store.failMessage("conv-bound", next.fence, "m1", RECORD);
    await store.releaseLease("conv-bound", next.fence);
    const listed = await runBin(["turns", "--failed", "--json", "--conversation", "conv-bound", "--retention", "10m", "--resend-window", "1s", ...backend.args]);
    expect(listed.code, listed.stderr).toBe(0);
    const turns = jsonLines(listed.stdout) as (FailedTurn & { resend: string; pastResendWindow: boolean })[];
    expect(turns.map((t) => [t.messageId, t.pastResendWindow, t.reopenable, t.resend.slice(0, 3)])).toEqual([["m1", true, false, "no:"]]);
  });
});

describe("resendVerdict: the store's reopenable, then the record's retryable as of the failure", () => {
  const turn = (over: Partial<FailedTurn>): FailedTurn => ({ conversationId: "c", messageId: "m", turnIndex: 0, failedAt: 1, failure: RECORD, ...over });
  it("combines them", () => {
    expect(resendVerdict(turn({ reopenable: true }))).toBe("yes");
    expect(resendVerdict(turn({ reopenable: false }))).toBe("no: a later message was bound");
    expect(resendVerdict(turn({ reopenable: false, failure: UNKNOWN_RECORD }))).toBe("no: a later message was bound");
    // A store written before reopenable existed does not say: the record alone cannot tell.
    expect(resendVerdict(turn({}))).toBe("unknown");
    expect(resendVerdict(turn({ failure: UNKNOWN_RECORD }))).toBe("unknown");
    expect(resendVerdict(turn({ reopenable: true, failure: { position: "turn_limit", retryable: false } }))).toBe("no: the turn reached the runner's maxTurns");
    expect(resendVerdict(turn({ reopenable: true, failure: { position: "commit_refused", retryable: false } }))).toBe("no: the store refused the turn's commit");
    expect(resendVerdict(turn({ reopenable: true, failure: { position: "past_resend_window", notRetried: "past_resend_window", retryable: false } }))).toBe("no: its retry was taken up after the re-send window (past_resend_window)");
    expect(resendVerdict(turn({ reopenable: true, failure: { calls: [{ status: "result_not_storable" }], retryable: false } }))).toBe("no: an effect happened but its result could not be stored");
    expect(resendVerdict(turn({ reopenable: true, failure: { error: { name: "APIError", message: "400 invalid_request_error" }, retryable: false } }))).toBe(
      "no: the record says a re-send cannot help (APIError: 400 invalid_request_error)",
    );
    expect(resendVerdict(turn({ reopenable: true, failure: { error: { name: "E", message: "x".repeat(200) }, retryable: false } }))).toBe(
      `no: the record says a re-send cannot help (E: ${"x".repeat(77)}…)`,
    );
    // Not a runner's record: the store would reopen it, whether that helps is not recorded.
    expect(resendVerdict(turn({ reopenable: true, failure: { failed: "m" } }))).toBe("yes: it reopens; the record does not say if that helps");
    // An older version's record: retryable true beside a call left unknown, or one that happened and was not completed (RECORD-5).
    expect(resendVerdict(turn({ reopenable: true, failure: { calls: [{ status: "outcome_unknown" }], retryable: true } }))).toBe("no: an effect's outcome is unknown (settle it first: reconcile, resolve)");
    expect(resendVerdict(turn({ reopenable: true, failure: { calls: [{ status: "completed", effect: "happened" }, { status: "error", effect: "may_have_happened" }], retryable: true } }))).toBe("yes");
    expect(resendVerdict(turn({ reopenable: true, failure: null }))).toBe("yes: it reopens; the record does not say if that helps");
  });
});

describe("dispatch-once turns usage", () => {
  it("needs --failed and a store; a Redis URL is refused", async () => {
    expect((await runBin(["turns", "--store", "x.db"])).stderr).toContain("say which turns: --failed");
    const none = await runBin(["turns", "--failed"]);
    expect(none.code).toBe(2);
    expect(none.stderr).toContain("no conversation store");
    const redis = await runBin(["turns", "--failed", "--store", "redis://127.0.0.1:6379"]);
    expect(redis.code).toBe(2);
    expect(redis.stderr).toContain("there is no Redis conversation store");
  });

  it("--help tells the truth about re-sending: only while no other message was bound since (TURN-12)", async () => {
    const help = await runBin(["turns", "--help"]);
    expect(help.code).toBe(0);
    expect(help.stdout).not.toContain("retries it at the same turn index (TURN-12)");
    expect(help.stdout).toContain("only while no other message of its conversation has been bound since");
    expect(help.stdout).toContain("RE-SEND");
  });
});
