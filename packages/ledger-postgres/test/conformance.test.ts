import { registerLedgerChecks } from "@dispatch-once/conformance";
import { afterAll, describe, it } from "vitest";
import { closeSubjectPool, postgresSubject } from "./subject.js";

// The shared conformance kit, against the real server: every §6 rule the kit checks.
describe("conformance kit: ledger-postgres", () => {
  registerLedgerChecks(postgresSubject, { describe, it });
  afterAll(closeSubjectPool);
});
