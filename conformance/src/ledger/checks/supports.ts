/**
 * LEDGER-14 (declared capabilities are consistent), for the OPTIONAL methods: the ledger's
 * `capabilities.supports` flags, the methods it has, and the subject's declaration agree. The
 * listing, resolution and audit checks are not applicable exactly when these say the method is
 * absent, so a subject cannot skip them by leaving its declaration out.
 */
import { must, show } from "../../failure.js";
import type { SubjectCapability } from "../../types.js";
import { withFixture } from "../support.js";
import { type LedgerCheckSpec } from "./common.js";

const OPTIONAL = ["listRows", "resolve", "auditTrail", "retire", "listExpiredInFlight"] as const;

export const supportsAgree: LedgerCheckSpec = {
  rule: "LEDGER-14",
  name: "capabilities.supports, the ledger's optional methods (listRows, resolve, auditTrail, retire, listExpiredInFlight) and the subject's declaration agree",
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const supports = (fixture.ledger.capabilities.supports ?? {}) as Record<string, unknown>;
      for (const method of OPTIONAL) {
        const flag = supports[method] === true;
        const present = typeof (fixture.ledger as unknown as Record<string, unknown>)[method] === "function";
        must(flag === present, `capabilities.supports.${method} is ${show(supports[method])} but ledger.${method} is ${present ? "a function" : "absent"}`);
        const declaration = ctx.subject.capabilities[method as SubjectCapability];
        // listExpiredInFlight joined the declarations after subjects were written without it: left
        // out, its checks are reported not applicable (by name, with the reason); declared, it must agree.
        if (method === "listExpiredInFlight" && declaration === undefined) continue;
        const declared = declaration === true;
        must(
          declared === flag,
          `the ledger ${flag ? "offers" : "does not offer"} ${method} (capabilities.supports), but the subject declares ${method}: ${show(ctx.subject.capabilities[method as SubjectCapability])}; declare it so its checks run`,
        );
      }
    }),
};

/** Every check of this file, in order. */
export const SUPPORTS_CHECKS: readonly LedgerCheckSpec[] = [supportsAgree];
