import { checkBlindRound } from "./blind-round.js";

// Blind round O's mutants of the last session's mechanisms (faults/blind-o): TURN-23's slot after a
// resumed turn and its refusal across a deploy (runner), core's { at: { answered } }, guards per
// earlier turn index and sharedTurn, AISDK-18's shared re-send and forTurn({ resumed }), the kit's
// deploy draw and its IDENT-10, RECORD-10 and TURN-23 readings.
checkBlindRound("o");
