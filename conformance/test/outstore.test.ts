import { describe, expect, it } from "vitest";
import { conversationStoreChecks, runChecks } from "../src/index.js";
import { minimalStoreSubject } from "./fixtures/outstore/minimal-store.js";

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
