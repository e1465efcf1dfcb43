// `resolve --not-performed` of a row left unknown after request_mismatch (RECON-6): the downstream
// holds the key for another request, which may have been performed, so every re-run of the stored
// request meets the same refusal (422), and once the downstream forgets the key it would pay again.
// trials/ops-gameday FRICTION 4: the CLI released such a row on the operator's word.
import { describe, expect, it } from "vitest";
import { EXIT_CODES } from "../src/index.js";
import { randomKey, runBin, sqliteBackend } from "./helpers.js";

describe("resolve --not-performed of a request_mismatch row", () => {
  it("is refused (exit 4, mismatch_not_releasable, nothing written); --completed still settles it, and other unknown rows still release", async () => {
    const backend = await sqliteBackend();
    try {
      const seed = async (reason: string) => {
        const key = randomKey();
        const claim = await backend.ledger.claim({ key, toolName: "send_payment", effect: "keyed_write", owner: "w", leaseMs: 60_000, request: '{"payee":"acme","amount":1200,"memo":"Re: as asked"}', conversationId: "c1", turnIndex: 0 });
        if (claim.outcome !== "claimed") throw new Error("not claimed");
        await backend.ledger.markUnknown(key, claim.fence, reason);
        return { key, fence: claim.fence };
      };
      const common = ["--retention", "24h", "--actor", "oncall", "--reason", "nothing at the bank"];
      const mismatch = await seed("request_mismatch: the key holds another payment; reconcile: unknown (no probe)");
      const refused = await runBin(["resolve", mismatch.key, ...backend.args, ...common, "--not-performed", "--expected-fence", String(mismatch.fence)]);
      expect(refused.code, refused.stderr).toBe(EXIT_CODES.refused);
      expect(refused.stderr).toContain("the row was left unknown after request_mismatch");
      expect(refused.stderr).toContain("nothing was written");
      const row = await backend.ledger.lookup(mismatch.key);
      expect(row).toMatchObject({ state: "unknown", fence: mismatch.fence });
      // The request under the key was performed: --completed with the downstream's result settles it.
      const completed = await runBin(["resolve", mismatch.key, ...backend.args, ...common, "--completed", '{"paymentId":"pay_1"}', "--expected-fence", String(mismatch.fence)]);
      expect(completed.code, completed.stderr).toBe(0);
      // Any other unknown keyed row is released as before (its re-run carries the same key).
      const other = await seed("tool_error: socket hang up");
      const released = await runBin(["resolve", other.key, ...backend.args, ...common, "--not-performed", "--expected-fence", String(other.fence)]);
      expect(released.code, released.stderr).toBe(0);
      expect(await backend.ledger.lookup(other.key)).toMatchObject({ state: "released" });
    } finally {
      await backend.cleanup();
    }
  });
});
