// The shared conformance kit, run against this adapter with its real file-backed store.
import { describe, it } from "vitest";
import { registerLedgerChecks } from "@dispatch-once/conformance";
import subject from "./conformance-subject.js";

registerLedgerChecks(subject, { describe, it });
