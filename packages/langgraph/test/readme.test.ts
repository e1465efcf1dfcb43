import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { main } from "../examples/agent.js";

const root = join(import.meta.dirname, "..");

describe("README", () => {
  it("LANGGRAPH-4 the README's example is examples/agent.ts verbatim, and it runs: one payment, the model told it", async () => {
    const readme = readFileSync(join(root, "README.md"), "utf8");
    const example = readFileSync(join(root, "examples", "agent.ts"), "utf8");
    expect(readme).toContain(example.trim());
    const result = await main();
    expect(result).toEqual({ payments: 1, answer: expect.stringMatching(/^Paid: \{.*"id":"pay_1"/) });
  });
});
