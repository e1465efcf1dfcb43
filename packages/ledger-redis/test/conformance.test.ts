import { registerLedgerChecks } from "@dispatch-once/conformance";
import { describe, it } from "vitest";
import { redisSubject } from "./subject.js";

// The shared conformance kit (spec §6 ledger rules) against a real Redis, one fresh prefix per fixture.
registerLedgerChecks(redisSubject, { describe, it });
