import { checkBlindRound } from "./blind-round.js";

// Blind round L's mutants of the stream sides (faults/blind-l).
checkBlindRound("l");
