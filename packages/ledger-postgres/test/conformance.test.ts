import { registerLedgerChecks } from "@dispatch-once/conformance";
import { registerEndToEndChecks } from "@dispatch-once/conformance-e2e";
import { afterAll, describe, it } from "vitest";
import { closeSubjectPool, postgresSubject } from "./subject.js";

// The shared conformance kit, against the real server: every §6 rule the kit checks.
describe("conformance kit: ledger-postgres", () => {
  registerLedgerChecks(postgresSubject, { describe, it });
  // CONF-2: 1,000 random end-to-end runs (CONFORMANCE_E2E_RUNS) through the runner, SDK and mocks.
  registerEndToEndChecks(postgresSubject, { describe, it });
  afterAll(closeSubjectPool);
});
