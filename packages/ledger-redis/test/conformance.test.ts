import { registerLedgerChecks } from "@dispatch-once/conformance";
import { registerEndToEndChecks } from "@dispatch-once/conformance-e2e";
import { describe, it } from "vitest";
import { redisSubject } from "./subject.js";

// The shared conformance kit (spec §6 ledger rules) against a real Redis, one fresh prefix per fixture.
registerLedgerChecks(redisSubject, { describe, it });
// CONF-2: 1,000 random end-to-end runs (CONFORMANCE_E2E_RUNS) through the runner, SDK and mocks.
registerEndToEndChecks(redisSubject, { describe, it });
