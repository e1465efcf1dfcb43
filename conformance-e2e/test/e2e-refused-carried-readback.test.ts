import { describe, expect, it } from "vitest";
import { runEndToEnd } from "../src/index.js";
import { memory } from "./audit-mutants.js";

/**
 * TURN-23 with IDENT-10 on read-back: after a deploy, a later turn's call matched a call its message
 * left listed, was dispatched at that call's index, and IDENT-10's guard there refused it
 * (tool_definition_changed: two rows of the earlier definition match it). The first send reported
 * the refusal's own key; a re-send of the answered message read the turn back as if the call had
 * been answered from the carried row: that row's key, "carried from turn 0", with the error, so
 * the record denied, under the key that paid, the payment that happened (a fresh-clone CI of
 * 2026-12-06 on ledger-sqlite, seed 449695201: "reported with key 4c4ea6dd and, by a later send (a
 * read-back), with key 7dfa9cfa, carried from turn 0"; RECORD-3: "committed as an error ... but
 * its effect happened"). The shrunk scenario, replayed on the reference ledger, must pass.
 */
const PATH = "6:2:0:0:75:0:0:0:0:2:0:3:2:2:2:2:2:2:2:2:2:3:2:3:4:3:3:3:5:3:3:4:4:3:3:7:3:3:3";

describe("CONF-2 TURN-23 IDENT-10 a refused carried call read back", () => {
  it("CONF-2 TURN-23 IDENT-10 a call IDENT-10 refused at a carried call's index reads back with the refusal's key, not the carried row's (seed 449695201, the shrunk path)", async () => {
    const seen: Record<string, number> = {};
    await runEndToEnd(memory, { provider: "anthropic", runs: 1, seed: 449695201, path: PATH, onStats: (s) => Object.assign(seen, s) });
    // The path still builds its case: a deploy, a carried call, and the shrunk case replayed.
    expect({ carried: (seen.deferred_calls_carried ?? 0) > 0, replayed: seen.replayed_passed }).toEqual({ carried: true, replayed: 1 });
  }, 120_000);
});
