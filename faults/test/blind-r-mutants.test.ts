import { checkBlindRound } from "./blind-round.js";

// Blind round R's mutants of what was built after round Q (faults/blind-r): the LangGraph.js profile
// (LANGGRAPH-1..7), the PostgreSQL thread lock (THREAD-1..6), the busy answer's order (TURN-25) and
// ERR-6's reserved codes in core, the anthropic helpers and the MCP server's unguarded path.
checkBlindRound("r");
