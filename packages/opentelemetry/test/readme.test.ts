import { readFileSync } from "node:fs";
import { join } from "node:path";
import Anthropic from "@anthropic-ai/sdk";
import { ToolRegistry } from "@dispatch-once/core";
import ts from "typescript";
import { describe, expect, it } from "vitest";
import { createRunner } from "../examples/wire.js";

describe("README", () => {
  const root = join(__dirname, "..");
  const readme = readFileSync(join(root, "README.md"), "utf8");
  const example = join(root, "examples", "wire.ts");

  it("shows examples/wire.ts verbatim", () => {
    expect(readme).toContain(readFileSync(example, "utf8").trim());
  });

  it("the example type-checks as written (the runner's options accept onRunnerEvent)", () => {
    const config = ts.getParsedCommandLineOfConfigFile(join(root, "tsconfig.json"), {}, { ...ts.sys, onUnRecoverableConfigFileDiagnostic: () => {} })!;
    const program = ts.createProgram([example], { ...config.options, noEmit: true });
    const diagnostics = ts.getPreEmitDiagnostics(program).map((d) => ts.flattenDiagnosticMessageText(d.messageText, "\n"));
    expect(diagnostics).toEqual([]);
  }, 60_000);

  it("the example builds a runner", () => {
    const runner = createRunner(new Anthropic({ apiKey: "test", maxRetries: 0 }), new ToolRegistry([]));
    expect(typeof runner.send).toBe("function");
  });
});
