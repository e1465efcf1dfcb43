import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { plannedCalls, scenarioArbitrary, type DeployKind } from "../src/scenario.js";

/**
 * The deploy draw (MessagePlan `deploy`, IDENT-10, IDENT-11): every kind of release the kit defines
 * (world.ts DEPLOYED_PAYMENT) is drawn, on a message that defers a call to its next turn (TURN-23
 * across a deploy) too, and only on a message with a payment. A draw that left a kind out, or the
 * deferral messages, would certify nothing about them: the planted tests replay their own paths.
 */
describe("the kit's deploy draw", () => {
  it("IDENT-10 IDENT-11 the draw reaches each deploy kind, on deferral messages too, and only messages with a payment", () => {
    const kinds = new Set<DeployKind>();
    const onDeferral = new Set<DeployKind>();
    for (const scenario of fc.sample(scenarioArbitrary(), { seed: 20261206, numRuns: 60 })) {
      for (const conversation of scenario.conversations) {
        for (const plan of conversation.messages) {
          if (plan.deploy === undefined) continue;
          kinds.add(plan.deploy);
          if (plan.deferred !== undefined) onDeferral.add(plan.deploy);
          expect(plannedCalls(plan).some((c) => c.tool === "send_payment"), `seed 20261206: a deploy on ${JSON.stringify(plan.text)}, which pays nothing`).toBe(true);
        }
      }
    }
    expect([...kinds].sort(), "seed 20261206, 60 scenarios: the deploy kinds drawn").toEqual(["identity", "rename", "transform"]);
    expect(onDeferral.size, "seed 20261206, 60 scenarios: deploys drawn on deferral messages").toBeGreaterThan(0);
  });
});
