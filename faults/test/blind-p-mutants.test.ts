import { checkBlindRound } from "./blind-round.js";

// Blind round P's mutants of the last session's mechanisms (faults/blind-p): the splice guard over
// Bedrock's Converse and Google's Gemini streams and Google's provider tools (AISDK-15, AISDK-16),
// the memory ledger's resolve (RESOLVE-3, LEDGER-27), the ledger kit's RESOLVE-1 check and vectors'
// runner, the end-to-end kit's Anthropic platform draw and its AI SDK profile over the cloud model
// APIs, the mock provider's cloud routes, and the Python reference's resolve.
checkBlindRound("p");
