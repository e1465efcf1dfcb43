import fc from "fast-check";
import { ConformanceFailure, show } from "../failure.js";
import type { LedgerSubject } from "../types.js";
import { seededKey } from "./context.js";
import { failedCase, propertyRunOptions, runProperty } from "./property-runner.js";
import { claimNew, claimRequest, withFixture } from "./support.js";

export const RESULT_PROPERTY_NAME = "random JSON texts (any Unicode, any layout) are replayed byte-for-byte";

/** The property's input: a random JSON value over the whole of Unicode, in a random layout. */
export function resultTexts(): fc.Arbitrary<string> {
  const layout = fc.oneof(
    fc.constant((v: unknown) => JSON.stringify(v)),
    fc.integer({ min: 1, max: 4 }).map((n) => (v: unknown) => JSON.stringify(v, null, n)),
    fc.constant((v: unknown) => ` ${JSON.stringify(v, null, "\t").replaceAll(":", " : ").replaceAll(",", " ,")}\r\n`),
  );
  return fc.tuple(fc.jsonValue({ stringUnit: "binary", maxDepth: 4 }), layout).map(([value, render]) => render(value) ?? "null");
}

/**
 * LEDGER-10 as a property: random JSON values over the whole of Unicode, written in random
 * layouts (compact, indented, with spaces around separators), completed and read back through
 * claim, lookup and the raw row. Catches stores that normalise, re-encode or trim text.
 */
export async function runResultProperty(subject: LedgerSubject, options: { runs: number; seed: number; path?: string; timeLimitMs?: number; shrinkTimeLimitMs?: number }): Promise<void> {
  await withFixture(subject, async (fixture) => {
    // Keys from the seed: one per run, so runs share the namespace without meeting each other's rows.
    let n = 0;
    const outcome = await runProperty(
      resultTexts(),
      async (result) => {
        const key = seededKey(options.seed, "random JSON texts", String(n++));
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
      },
      propertyRunOptions(options),
    );
    const failed = failedCase(outcome, "random-JSON property", options.runs);
    if (failed === undefined) return;
    const value = failed.value;
    const error = failed.error instanceof Error ? failed.error.message : String(failed.error);
    throw new ConformanceFailure(
      `${error}\n${failed.replay ? "replayed one case" : `shrunk after ${failed.numRuns} runs and ${failed.numShrinks} shrinks`}; seed ${failed.seed}, path "${failed.path}"`,
      {
        counterexample: {
          seed: failed.seed,
          path: failed.path,
          timeline: [
            `t=1 claim k1 (keyed_write) by owner-a -> claimed`,
            `t=2 complete k1 with ${show(value)} (${Buffer.byteLength(value)} bytes) -> ok`,
            `t=3 claim/lookup/raw.read k1 -> ${error}`,
          ],
          report: failed.report,
          value,
          violates: "LEDGER-10",
        },
      },
    );
  });
}
