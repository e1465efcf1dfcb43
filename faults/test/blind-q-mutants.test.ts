import { checkBlindRound } from "./blind-round.js";

// Blind round Q's mutants of the last session's mechanisms (faults/blind-q): the splice guard over
// Gemini on Vertex AI's streamed call arguments and Converse's delta kinds (AISDK-16), core's
// framework-loop example and its README section, the end-to-end kit's gemini-vertex draws and
// gateway, the mock provider's Vertex Gemini route, the byte-cut harness and the runner's busy wait.
checkBlindRound("q");
