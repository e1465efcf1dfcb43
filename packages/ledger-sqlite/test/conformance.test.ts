// The shared conformance kit, run against this adapter with its real file-backed store.
import { describe, expect, it } from "vitest";
import { bindLedgerCheck, leasesOnOneClock, skewedProcessClock } from "@dispatch-once/conformance/ledger";
import { SqliteLedger, type SqliteLedgerOptions } from "../src/index.js";
import { createSqliteSubject } from "./subject.js";
import { registerLedgerChecks } from "@dispatch-once/conformance";
import { registerEndToEndChecks } from "@dispatch-once/conformance-e2e";
import subject from "./conformance-subject.js";

registerLedgerChecks(subject, { describe, it });
// CONF-2: 1,000 random end-to-end runs (CONFORMANCE_E2E_RUNS) through the runner, SDK and mocks.
registerEndToEndChecks(subject, { describe, it });
// CONF-2 on the OpenAI Responses stream side (apps/mock-openai): the same oracle, fewer runs in CI.
registerEndToEndChecks(subject, { describe, it }, { provider: "openai", runs: Number(process.env.CONFORMANCE_E2E_OPENAI_RUNS ?? 100) });

// The clock-skew hook can fail: the same adapter with its leases on this process's clock
// (the `now` test hook reading Date.now()) while declaring the store's is rejected through
// raw.skewedInstance, which the real adapter (above, on SQLite's own clock) passes.
class ProcessClockSqliteLedger extends SqliteLedger {
  constructor(options: SqliteLedgerOptions) {
    super({ ...options, now: () => Date.now() });
    Object.assign(this, { capabilities: { ...this.capabilities, clock: "store" } });
  }
}

describe("planted: a SQLite ledger on the process clock", () => {
  it("LEDGER-20 is rejected by the skewed-instance check (leases 10 minutes apart, a live claim taken over)", async () => {
    const planted = createSqliteSubject(ProcessClockSqliteLedger, "ledger-sqlite on the process clock");
    await expect(bindLedgerCheck(skewedProcessClock, planted, { seed: 20 }).run()).rejects.toThrow(/different clocks|measured on the store's clock/);
    // The check without the hook cannot see it: one process, one clock.
    await expect(bindLedgerCheck(leasesOnOneClock, planted, { seed: 20 }).run()).resolves.toBeUndefined();
  });
});
