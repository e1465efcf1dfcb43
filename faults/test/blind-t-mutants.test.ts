import { checkBlindRound } from "./blind-round.js";

// Blind round T's mutants of the operator's side (faults/blind-t): the CLI's resolve, grace,
// evidence, list, inspect, reconcile, retention, turns and audit (RESOLVE-*, RECORD-2, RECON-*,
// TURN-12, EFFECT-8, IDENT-4/11, LEDGER-13) and the OpenTelemetry package's spans and metrics (OTEL-2..5).
checkBlindRound("t");
