import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { EXIT_CODES, loadToolsModule, mainHelp } from "../src/index.js";

describe("README", () => {
  const readme = readFileSync(join(__dirname, "..", "README.md"), "utf8");

  it("shows `dispatch-once --help` as the bin prints it", () => {
    expect(readme).toContain(mainHelp().trimEnd());
  });

  it("shows examples/tools.mjs verbatim, and that module is a loadable tools module", async () => {
    expect(readme).toContain(readFileSync(join(__dirname, "..", "examples", "tools.mjs"), "utf8").trim());
    const registry = await loadToolsModule(join(__dirname, "..", "examples", "tools.mjs"));
    expect(registry.list().map((t) => [t.name, t.effect, typeof t.reconcile])).toEqual([["create_invoice", "unkeyed_write", "function"]]);
  });

  it("documents every exit code", () => {
    for (const code of Object.values(EXIT_CODES)) expect(readme).toMatch(new RegExp(`^\\| ${code} \\|`, "m"));
  });
});
