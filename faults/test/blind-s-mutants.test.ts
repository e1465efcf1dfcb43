import { checkBlindRound } from "./blind-round.js";

// Blind round S's mutants of what was built after round R (faults/blind-s): ERR-6 in the CLI's
// resolve and core's frozen reserved codes, the OpenAI runners' read-back (isErrorOutput), STREAM-10's
// whole-repeat check (CallPhases.repeatedCall, both accumulators, the AI SDK's splice guard),
// LANGGRAPH-6's stop, and the kit's relay repeat (the mocks' repeat_call fault, the SplicePlan draw).
checkBlindRound("s");
