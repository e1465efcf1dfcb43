import { join } from "node:path";
import ts from "typescript";
import { describe, expect, it } from "vitest";

/**
 * Findings of the adoption trial (packed packages, strict app): the README's own options did not
 * compile there. The fixture is type-checked as a strict app compiles it: exactOptionalPropertyTypes on.
 */
describe("adoption trial (conversation-postgres): the options type-check in a strict app", () => {
  it("connectionString from process.env (store and ledger) and a pool typed by another @types/pg version are accepted", () => {
    const root = join(__dirname, "..");
    const config = ts.getParsedCommandLineOfConfigFile(join(root, "tsconfig.json"), {}, { ...ts.sys, onUnRecoverableConfigFileDiagnostic: () => {} })!;
    const program = ts.createProgram([join(__dirname, "adopter-types.fixture.ts")], { ...config.options, exactOptionalPropertyTypes: true, noEmit: true });
    const diagnostics = ts.getPreEmitDiagnostics(program).map((d) => `${d.file ? `line ${d.file.getLineAndCharacterOfPosition(d.start ?? 0).line + 1}: ` : ""}${ts.flattenDiagnosticMessageText(d.messageText, "\n").split("\n")[0]}`);
    expect(diagnostics).toEqual([]);
  }, 60_000);
});
