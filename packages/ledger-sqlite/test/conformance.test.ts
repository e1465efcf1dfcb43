// The shared conformance kit, run against this adapter with its real file-backed store.
import { describe, it } from "vitest";
import { registerEndToEndChecks, registerLedgerChecks } from "@dispatch-once/conformance";
import subject from "./conformance-subject.js";

registerLedgerChecks(subject, { describe, it });
// CONF-2: 1,000 random end-to-end runs (CONFORMANCE_E2E_RUNS) through the runner, SDK and mocks.
registerEndToEndChecks(subject, { describe, it });
