import fc from "fast-check";
import { ConformanceFailure, show } from "../failure.js";
import type { LedgerSubject } from "../types.js";
import { claimNew, claimRequest, freshKey, withFixture } from "./support.js";

export const RESULT_PROPERTY_NAME = "random JSON texts (any Unicode, any layout) are replayed byte-for-byte";

/**
 * LEDGER-10 as a property: random JSON values over the whole of Unicode, written in random
 * layouts (compact, indented, with spaces around separators), completed and read back through
 * claim, lookup and the raw row. Catches stores that normalise, re-encode or trim text.
 */
export async function runResultProperty(subject: LedgerSubject, options: { runs: number; seed: number; path?: string }): Promise<void> {
  await withFixture(subject, async (fixture) => {
    const layout = fc.oneof(
      fc.constant((v: unknown) => JSON.stringify(v)),
      fc.integer({ min: 1, max: 4 }).map((n) => (v: unknown) => JSON.stringify(v, null, n)),
      fc.constant((v: unknown) => ` ${JSON.stringify(v, null, "\t").replaceAll(":", " : ").replaceAll(",", " ,")}\r\n`),
    );
    const text = fc.tuple(fc.jsonValue({ stringUnit: "binary", maxDepth: 4 }), layout).map(([value, render]) => render(value) ?? "null");
    const property = fc.asyncProperty(text, async (result) => {
      const key = freshKey();
      const fence = await claimNew(fixture.ledger, key, "owner-a", "keyed_write");
      await fixture.ledger.complete(key, fence, result);
      const replay = await fixture.ledger.claim(claimRequest(key, "owner-b", "keyed_write"));
      const viaClaim = replay.outcome === "existing" && replay.row.state === "completed" ? replay.row.result : replay;
      const looked = await fixture.ledger.lookup(key);
      const viaLookup = looked?.state === "completed" ? looked.result : looked;
      const viaRaw = (await fixture.raw.read(key))?.result;
      for (const [how, got] of [["claim", viaClaim], ["lookup", viaLookup], ["raw.read", viaRaw]] as const) {
        if (got !== result) {
          throw new ConformanceFailure(`${how} returned ${show(got)} for the completed result ${show(result)}`);
        }
      }
    });
    const details = await fc.check(property, {
      numRuns: options.runs,
      seed: options.seed,
      ...(options.path === undefined ? {} : { path: options.path }),
    });
    if (!details.failed) return;
    const value = details.counterexample?.[0];
    const error = details.errorInstance instanceof Error ? details.errorInstance.message : String(details.errorInstance);
    throw new ConformanceFailure(
      `${error}\nshrunk after ${details.numRuns} runs and ${details.numShrinks} shrinks; seed ${details.seed}, path "${details.counterexamplePath}"`,
      {
        counterexample: {
          seed: details.seed,
          path: details.counterexamplePath ?? "",
          timeline: [
            `t=1 claim k1 (keyed_write) by owner-a -> claimed`,
            `t=2 complete k1 with ${show(value)} (${typeof value === "string" ? Buffer.byteLength(value) : 0} bytes) -> ok`,
            `t=3 claim/lookup/raw.read k1 -> ${error}`,
          ],
          report: fc.defaultReportMessage(details) ?? "",
          value,
          violates: "LEDGER-10",
        },
      },
    );
  });
}
