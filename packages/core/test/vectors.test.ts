// The spec's data-driven vectors (spec/vectors/*.json), run against this implementation,
// plus the independent Python reference run over the same files: two implementations, one truth.
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import {
  DEFAULT_RETENTION_MS,
  MemoryLedger,
  canonicalize,
  deriveKey,
  keyMaterial,
  type KeyInput,
  type LedgerRow,
} from "../src/index.js";
import { manualClock } from "./helpers.js";

const specDir = join(__dirname, "..", "..", "..", "spec");
const load = <T>(name: string): T => JSON.parse(readFileSync(join(specDir, "vectors", name), "utf8")) as T;

interface CanonicalVector { id: string; rule: string; description: string; input: unknown; canonical: string }
interface KeyVector {
  id: string;
  rule: string;
  description: string;
  input: KeyInput;
  canonicalArgs: string;
  material: string;
  key: string;
}
interface RejectionVector {
  id: string;
  rule: string;
  description: string;
  input: KeyInput;
  special?: string;
  specialPath?: string;
  error: { code: string; field?: string; problem?: string; path?: string };
}
interface IdentityVector {
  id: string;
  rule: string;
  identity: string[];
  args: Record<string, unknown>;
  projection: Record<string, unknown>;
  input: Omit<KeyInput, "args">;
  key: string;
}

describe("spec/vectors/canonical.json", () => {
  for (const v of load<{ vectors: CanonicalVector[] }>("canonical.json").vectors) {
    it(`${v.rule} ${v.id} ${v.description}`, () => {
      expect(canonicalize(v.input)).toBe(v.canonical);
    });
  }
});

describe("spec/vectors/keys.json", () => {
  for (const v of load<{ vectors: KeyVector[] }>("keys.json").vectors) {
    it(`${v.rule} ${v.id} ${v.description}`, () => {
      expect(canonicalize(v.input.args)).toBe(v.canonicalArgs);
      expect(keyMaterial(v.input)).toBe(v.material);
      expect(deriveKey(v.input)).toBe(v.key);
    });
  }
});

/** Put the JS-only value the vector names where JSON could not carry it. */
function withSpecial(v: RejectionVector): KeyInput {
  const input = structuredClone(v.input) as KeyInput & { args: unknown };
  if (v.special === undefined) return input;
  const values: Record<string, () => unknown> = {
    NaN: () => Number.NaN,
    Infinity: () => Number.POSITIVE_INFINITY,
    "-Infinity": () => Number.NEGATIVE_INFINITY,
    undefined_in_array: () => undefined,
    bigint: () => 1n,
    function: () => () => 1,
    date: () => new Date(0),
    cycle: () => input.args,
  };
  const make = values[v.special];
  if (make === undefined) throw new Error(`unknown special ${v.special} in ${v.id}`);
  const path = (v.specialPath ?? "").split("/").slice(1).map((p) => p.replace(/~1/g, "/").replace(/~0/g, "~"));
  if (path.length === 0) {
    input.args = make();
    return input;
  }
  let parent = input.args as Record<string, unknown>;
  for (const part of path.slice(0, -1)) parent = parent[part] as Record<string, unknown>;
  parent[path[path.length - 1]!] = make();
  return input;
}

describe("spec/vectors/rejections.json", () => {
  for (const v of load<{ vectors: RejectionVector[] }>("rejections.json").vectors) {
    it(`${v.rule} ${v.id} ${v.description}`, () => {
      let caught: unknown;
      try {
        deriveKey(withSpecial(v));
      } catch (error) {
        caught = error;
      }
      expect(caught, "must be rejected").toBeDefined();
      expect(caught).toMatchObject(v.error);
    });
  }
});

describe("spec/vectors/identity.json", () => {
  for (const v of load<{ vectors: IdentityVector[] }>("identity.json").vectors) {
    it(`${v.rule} ${v.id}`, () => {
      const projection = Object.fromEntries(v.identity.filter((f) => v.args[f] !== undefined).map((f) => [f, v.args[f]]));
      expect(projection).toEqual(v.projection);
      expect(deriveKey({ ...v.input, args: projection })).toBe(v.key);
    });
  }
});

type Step = Record<string, unknown> & { op: string; key?: string; expect?: Record<string, unknown> };
interface LedgerCase { id: string; rule: string; description: string; steps: Step[] }

describe("spec/vectors/ledger-transitions.json on the in-memory ledger", () => {
  for (const c of load<{ cases: LedgerCase[] }>("ledger-transitions.json").cases) {
    it(`${c.rule} ${c.id} ${c.description}`, async () => {
      const clock = manualClock();
      const ledger = new MemoryLedger({ now: clock.now });
      for (const [i, step] of c.steps.entries()) {
        const where = `${c.id} step ${i} (${step.op})`;
        const key = step.key as string;
        const fence = step.fence as number;
        const settle = async (run: () => Promise<unknown>) => {
          try {
            await run();
            return { ok: true };
          } catch (error) {
            return { error: (error as { code?: string }).code ?? String(error) };
          }
        };
        switch (step.op) {
          case "claim": {
            const claim = () =>
              ledger.claim({
                key,
                toolName: "send_payment",
                effect: step.effect as "keyed_write",
                owner: step.owner as string,
                leaseMs: step.leaseMs as number,
                // LEDGER-21: the vectors compare the request a claim returns and a row keeps.
                request: step.request as string,
                // LEDGER-26: a claim id, when the step carries one (a malformed one must be refused).
                ...(step.claimId === undefined ? {} : { claimId: step.claimId as string }),
              });
            if (step.expect!.outcome === undefined) {
              // A refused claim: invalid_ledger_input for a malformed claim id, stale_claim for the
              // claim id a released row was released under (LEDGER-27). Accepted, it shows what it took.
              let got: Record<string, unknown>;
              try {
                const r = await claim();
                got = r.outcome === "claimed" ? { outcome: "claimed", fence: r.fence } : { outcome: "existing", state: r.row.state, fence: r.row.fence };
              } catch (error) {
                got = { error: (error as { code?: string }).code ?? String(error) };
              }
              expect(got, where).toEqual(step.expect);
              break;
            }
            const result = await claim();
            const seen = result.outcome === "claimed" ? result : { outcome: "existing", ...result.row };
            expect(seen, where).toMatchObject(step.expect!);
            break;
          }
          case "complete": {
            const repeat = step.resultRepeat as { char: string; count: number } | undefined;
            const text = repeat ? `"${repeat.char.repeat(repeat.count)}"` : (step.result as string);
            expect(await settle(() => ledger.complete(key, fence, text)), where).toEqual(step.expect);
            break;
          }
          case "fail":
            expect(await settle(() => ledger.fail(key, fence, step.error as never)), where).toEqual(step.expect);
            break;
          case "markUnknown":
            expect(await settle(() => ledger.markUnknown(key, fence, step.reason as string)), where).toEqual(step.expect);
            break;
          case "release":
            expect(await settle(() => ledger.release(key, fence)), where).toEqual(step.expect);
            break;
          case "renew":
            expect(await settle(() => ledger.renew(key, fence, step.leaseMs as number)), where).toEqual(step.expect);
            break;
          case "lookup": {
            const row: LedgerRow | undefined = await ledger.lookup(key);
            if (step.expect!.absent) expect(row, where).toBeUndefined();
            else expect(row, where).toMatchObject(step.expect!);
            break;
          }
          case "expire_lease": {
            const row = await ledger.lookup(key);
            if (row?.state === "in_flight") clock.advance(row.leaseExpiresAt - clock.now() + 1);
            break;
          }
          case "expire_retention":
          case "expire_retired":
            // One clock: past the retention of every row finished and every claim id retired so far (LEDGER-28).
            clock.advance(DEFAULT_RETENTION_MS + 1);
            break;
          case "retire": {
            // LEDGER-28: claimId and options are sent as given (malformed ones must be refused).
            const options = step.options as { release?: boolean } | undefined;
            const retire = () => ledger.retire(key, step.claimId as string, options);
            let answer: unknown;
            try {
              answer = await retire();
            } catch (error) {
              answer = { error: (error as { code?: string }).code ?? String(error) };
            }
            expect(answer, where).toEqual(step.expect);
            break;
          }
          case "resolve": {
            // RESOLVE-1..5: {key, ...resolveRequest} sent as given (malformed ones must be refused);
            // resultRepeat makes resolution.result.
            const request = { key, ...structuredClone(step.resolveRequest as Record<string, unknown>) } as unknown as { key: string; resolution: Record<string, unknown> };
            const repeat = step.resultRepeat as { char: string; count: number } | undefined;
            if (repeat) request.resolution.result = `"${repeat.char.repeat(repeat.count)}"`;
            let answer: Record<string, unknown>;
            try {
              answer = { outcome: "resolved", ...(await ledger.resolve(request as never)) };
            } catch (error) {
              const e = error as { code?: string; state?: string; field?: string; key?: string };
              answer = { error: e.code ?? String(error), ...(e.state === undefined ? {} : { state: e.state }), ...(e.field === undefined ? {} : { field: e.field }) };
              // resolution_refused carries the key it was sent (RESOLVE-2).
              if (e.code === "resolution_refused") expect(e.key, `${where}: the refusal's key`).toBe(key);
            }
            if (step.expect!.outcome === undefined) expect(answer, where).toEqual(step.expect);
            else expect(answer, where).toMatchObject(step.expect!);
            break;
          }
          case "auditTrail": {
            // RESOLVE-7: as many entries, in order, each with the members the vector names; `at` never decreasing.
            const entries = await ledger.auditTrail(key);
            const want = (step.expect as { entries: Record<string, unknown>[] }).entries;
            expect(entries, where).toMatchObject(want);
            expect(entries, where).toHaveLength(want.length);
            for (const [n, entry] of entries.entries()) if (n > 0) expect(entry.at, `${where} entry ${n}: at`).toBeGreaterThanOrEqual(entries[n - 1]!.at);
            break;
          }
          case "sweep":
            expect({ removed: await ledger.sweep() }, where).toEqual(step.expect);
            break;
          default:
            throw new Error(`${where}: unknown op`);
        }
      }
    });
  }
});

describe("the Python reference implementation (spec/reference)", () => {
  it("KEY-8 agrees with every vector, and the chapter's function agrees where the spec says it does", () => {
    const out = execFileSync("python3", [join(specDir, "reference", "test_vectors.py")], { encoding: "utf8" });
    expect(out.trim().split("\n").at(-1)).toMatch(/^\d+ passed, 0 failed$/);
  });

  it("every rule id in spec/rules.json is anchored in the text and vice versa", () => {
    execFileSync("python3", [join(specDir, "check.py")], { encoding: "utf8" });
  });
});
