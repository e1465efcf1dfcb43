import { describe, expect, it } from "vitest";
import { conversationStoreChecks, memoryConversationSubject, runChecks, type Check } from "../src/index.js";
import { minimalStoreSubject } from "./fixtures/outstore/minimal-store.js";
import { RACY_APPEND_BUGS, racyAppendSubject, type RacyAppendBug } from "./fixtures/outstore/racy-append-stores.js";

/**
 * Outside-store trial (2026-12-05): an outside team wrote a MariaDB conversation store from the
 * docs (trials/conversation-mariadb, outside the workspace) and certified it with this level.
 */
const SEED = 20261205;
const RUNS = 30;

describe("outside-store trial: a store with the MUST parts only", () => {
  it("the whole conversation level certifies it (its OPTIONAL parts are not applicable, never failed)", async () => {
    const subject = minimalStoreSubject();
    const report = await runChecks(conversationStoreChecks(subject, { runs: RUNS, seed: SEED }), { subject: subject.name, seed: SEED, runs: RUNS, levels: ["conversation"] });
    expect(report.checks.filter((c) => c.status === "fail").map((c) => `${c.rule} ${c.name}: ${String(c.error).slice(0, 600)}`)).toEqual([]);
  });
});

/**
 * Design review of the trial's store: an appendUserMessage that reads, then writes in another
 * statement without the conversation's lock. The whole level (100 runs, seed 20261205) certified
 * all three (58 checks pass each): every check and the model append one message at a time. Each is
 * now rejected by the check of the rule it breaks; the reference, the MUST-parts-only store and
 * (in their own suites) the SQLite and PostgreSQL stores pass them.
 */
const RACY: { bug: RacyAppendBug; rule: string; check: RegExp; message: RegExp }[] = [
  { bug: "append-reopen-stale", rule: "TURN-12", check: /^a re-send of a failed message racing beginTurn/, message: /reopened m1 though beginTurn bound m2/ },
  { bug: "append-insert-stale", rule: "TURN-2", check: /^of 8 concurrent sends of one message id/, message: /Duplicate entry/ },
  { bug: "append-seq-stale", rule: "TURN-9", check: /^8 messages sent at once/, message: /seq/ },
];

function racyOnly(checks: Check[], racy: (typeof RACY)[number]): Check[] {
  const picked = checks.filter((c) => c.rule === racy.rule && racy.check.test(c.name));
  expect(picked.map((c) => c.name), `exactly one ${racy.rule} check matching ${racy.check}`).toHaveLength(1);
  return picked;
}

describe("outside-store trial: appends that race are rejected by the check of the rule they break", () => {
  it("lists every racy store once, with the rule its fixture names", () => {
    expect(RACY.map((r) => r.bug).sort()).toEqual(Object.keys(RACY_APPEND_BUGS).sort());
    for (const r of RACY) expect(r.rule).toBe(RACY_APPEND_BUGS[r.bug]);
  });

  for (const racy of RACY) {
    it(`${racy.bug} fails ${racy.rule}`, async () => {
      const subject = racyAppendSubject(racy.bug);
      const report = await runChecks(racyOnly(conversationStoreChecks(subject, { runs: RUNS, seed: SEED }), racy), { subject: subject.name, seed: SEED, runs: RUNS, levels: ["conversation"] });
      const [check] = report.checks;
      expect(check!.status, `${check!.rule} ${check!.name}: ${String(check!.error)}`).toBe("fail");
      expect(check!.error).toMatch(racy.message);
    });
  }

  for (const subject of [memoryConversationSubject(), minimalStoreSubject()]) {
    it(`the racing-append checks pass ${subject.name}`, async () => {
      const checks = conversationStoreChecks(subject, { runs: RUNS, seed: SEED }).filter((c) => RACY.some((r) => c.rule === r.rule && r.check.test(c.name)));
      expect(checks).toHaveLength(RACY.length);
      const report = await runChecks(checks, { subject: subject.name, seed: SEED, runs: RUNS, levels: ["conversation"] });
      expect(report.checks.filter((c) => c.status !== "pass")).toEqual([]);
    });
  }
});
