// The app's retry policy is application code the runner calls between attempts. One that throws
// (a bug in shouldRetry or backoffMs) is a policy that did not ask for a retry: the turn fails
// with its record, which tells what its calls did (RECORD-5). Before, its error left the turn bare:
// a payment made in the cut attempt was told as the policy's error ("possibly", no record), and
// the message stayed in progress, every re-send meeting the same throw.
import { describe, expect, it } from "vitest";
import { TurnFailedError } from "../src/index.js";
import { payCall, world } from "./toy.js";

describe("RECORD-5 a retry policy that throws is no retry: the turn fails with its record", () => {
  const policies = [
    ["shouldRetry", { shouldRetry: () => { throw new Error("policy bug"); } }],
    ["backoffMs", { backoffMs: () => { throw new Error("policy bug"); } }],
  ] as const;
  it.each(policies)("%s throws after a cut attempt whose payment was made: one payment, told turn_failed with it happened, the warning logged, a re-send answered the same", async (member, retry) => {
    const warnings: string[] = [];
    const { runner, performed, events } = world(() => [...payCall("c1", "rent"), "cut"], true, {
      runner: { retry, logger: { warn: (message) => void warnings.push(message) } },
    });
    const error = await runner.send("conv-policy", { id: "m1", content: "pay acme" }).catch((e: unknown) => e);
    expect(performed).toHaveLength(1);
    expect(error, String(error)).toBeInstanceOf(TurnFailedError);
    expect((error as TurnFailedError).record.effects).toEqual([expect.objectContaining({ effect: "happened" })]);
    expect(warnings).toContainEqual(expect.stringContaining(`retry policy's ${member} threw`));
    expect(events.filter((e) => e.type === "retry_scheduled")).toEqual([]);
    expect(events.filter((e) => e.type === "attempt_discarded").map((e) => (e as { reason: string }).reason)).toEqual(["failed"]);
    const again = await runner.send("conv-policy", { id: "m1", content: "pay acme" }).catch((e: unknown) => e);
    expect(again).toBeInstanceOf(TurnFailedError);
    expect(performed).toHaveLength(1);
  });
});
