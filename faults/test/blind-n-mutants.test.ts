import { checkBlindRound } from "./blind-round.js";

// Blind round N's mutants of the last session's mechanisms (faults/blind-n): TURN-23's carried
// calls, core's { at } and IDENT-10/11 guard, RECORD-10, AISDK-18, ATR-13, the kit's TURN-23 oracle
// and AISDK-17 tabs draw.
checkBlindRound("n");
