import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { renderTurn, scriptFromPlans, toolUse, turn } from "../src/index.js";
import { body, setup } from "./helpers.js";

// Arguments as a model could produce them: any JSON object, strings over all of UTF-16 (lone surrogates too).
const args = fc.dictionary(fc.string({ unit: "binary", maxLength: 12 }), fc.jsonValue({ stringUnit: "binary", maxDepth: 3 }), {
  maxKeys: 8,
});
const normalise = (value: unknown) => JSON.parse(JSON.stringify(value)) as unknown;
const isHighSurrogate = (code: number) => code >= 0xd800 && code <= 0xdbff;

describe("rendering properties", () => {
  it("fragments always reassemble into JSON of exactly the scripted values, split on code points", () => {
    fc.assert(
      fc.property(args, fc.string(), fc.integer({ min: 1, max: 6 }), (input, seed, attempt) => {
        const options = { seed, bodyHash: "h", attempt, model: "m", inputTokens: 1, pings: "standard" as const };
        const rendered = renderTurn(turn(toolUse("search_orders", input)), options);
        const call = rendered.toolUses[0]!;
        expect(call.fragments.join("")).toBe(call.json);
        expect(JSON.parse(call.json)).toEqual(normalise(input));
        call.fragments.forEach((f, i) => {
          if (i > 0) expect(f.length).toBeGreaterThan(0);
          if (f.length > 0) expect(isHighSurrogate(f.charCodeAt(f.length - 1))).toBe(false);
        });
        // Determinism: same (seed, body, attempt), same bytes.
        expect(renderTurn(turn(toolUse("search_orders", input)), options)).toEqual(rendered);
      }),
    );
  });
});

describe("the real SDK over loopback", () => {
  it("parses any scripted arguments back to the same values through messages.stream()", async () => {
    let current: Record<string, unknown> = {};
    const { client } = await setup({ script: scriptFromPlans({ go: () => turn(toolUse("search_orders", current)) }) });
    await fc.assert(
      fc.asyncProperty(args, async (input) => {
        current = input;
        const message = await client.messages.stream(body("go")).finalMessage();
        expect((message.content[0] as { input: unknown }).input).toEqual(normalise(input));
      }),
      { numRuns: 60 },
    );
  });
});
