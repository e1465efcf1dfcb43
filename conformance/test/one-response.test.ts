import { describe, expect, it } from "vitest";
import { callSequence, mixedResponses } from "../src/ledger/index.js";

/**
 * The "one response" judge both the end-to-end level and the chaos suite run (src/one-response.ts):
 * a committed turn's calls, in order and with their arguments, are one response's.
 */
const pay = (payee: string, memo: string) => ({ name: "send_payment", input: { payee, amount: 100, memo } });

describe("mixedResponses: a committed turn is one response's", () => {
  it("takes a response's calls whatever the member order of their arguments", () => {
    const committed = [{ name: "send_payment", input: { memo: "Invoice", amount: 100, payee: "acme" } }, pay("bob", "Invoice")];
    expect(mixedResponses(committed, [[pay("acme", "Refund")], [pay("acme", "Invoice"), pay("bob", "Invoice")]])).toBeUndefined();
  });

  it("rejects the calls of two responses taken together (a spliced response's re-worded memo beside the call that ran), and another order", () => {
    const first = [pay("acme", "Invoice"), pay("bob", "Invoice")];
    const spliced = [pay("acme", "Invoice (as requested)"), pay("bob", "Invoice (as requested)")];
    const mixed = mixedResponses([first[0]!, spliced[1]!], [first, spliced]);
    expect(mixed).toEqual({ committed: callSequence([first[0]!, spliced[1]!]), responses: [callSequence(first), callSequence(spliced)] });
    expect(mixedResponses([first[1]!, first[0]!], [first])).toBeDefined();
  });

  it("has nothing to judge in a turn without calls", () => {
    expect(mixedResponses([], [])).toBeUndefined();
  });
});
