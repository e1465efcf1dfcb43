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

  it("the example's '// or @dispatch-once/openai' import holds: the OpenAI side exports every name it imports (adoption trial 2)", () => {
    const line = readFileSync(example, "utf8")
      .split("\n")
      .find((l) => l.includes("// or @dispatch-once/openai"))!;
    const names = /import \{([^}]*)\}/.exec(line)![1]!.split(",").map((n) => n.trim());
    // A file that imports those names from the OpenAI side, type-checked beside the example.
    const swapped = join(root, "test", "__openai-swap.ts");
    const text = `import { ${names.join(", ")} } from "../../openai/src/index.js";\nexport const used = [${names.join(", ")}];\n`;
    const config = ts.getParsedCommandLineOfConfigFile(join(root, "tsconfig.json"), {}, { ...ts.sys, onUnRecoverableConfigFileDiagnostic: () => {} })!;
    const options = { ...config.options, noEmit: true, skipLibCheck: true };
    const host = ts.createCompilerHost(options);
    const getSourceFile = host.getSourceFile.bind(host);
    host.getSourceFile = (file, language, ...rest) => (file === swapped ? ts.createSourceFile(file, text, language) : getSourceFile(file, language, ...rest));
    const fileExists = host.fileExists.bind(host);
    host.fileExists = (file) => file === swapped || fileExists(file);
    const program = ts.createProgram([swapped], options, host);
    const diagnostics = program
      .getSemanticDiagnostics(program.getSourceFile(swapped))
      .map((d) => ts.flattenDiagnosticMessageText(d.messageText, "\n"));
    expect(diagnostics).toEqual([]);
  }, 60_000);

  it("the example builds a runner", () => {
    const runner = createRunner(new Anthropic({ apiKey: "test", maxRetries: 0 }), new ToolRegistry([]));
    expect(typeof runner.send).toBe("function");
  });
});
