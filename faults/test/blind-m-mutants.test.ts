import { checkBlindRound } from "./blind-round.js";

// Blind round M's mutants of the last two sessions' mechanisms (faults/blind-m): AISDK-17, MCP-16,
// the OpenAI side's delivered message and heal, RECORD-8, TURN-12, the CLI's audit and resolve.
checkBlindRound("m");
