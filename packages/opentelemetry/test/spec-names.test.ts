import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

/** OTEL-1's paragraph of the spec: the names an implementation that exports telemetry should use. */
function otel1(): string {
  const spec = readFileSync(join(__dirname, "..", "..", "..", "spec", "dispatch-once.md"), "utf8");
  const line = spec.split("\n").find((l) => l.startsWith('<a id="OTEL-1"></a>'));
  if (line === undefined) throw new Error("OTEL-1 not found in spec/dispatch-once.md");
  return line;
}

/** Every `dispatch_once.*` name written in the package's source: spans, span events, attributes, metrics. */
function emittedNames(): string[] {
  const src = join(__dirname, "..", "src");
  const names = new Set<string>();
  for (const file of readdirSync(src).filter((f) => f.endsWith(".ts"))) {
    for (const match of readFileSync(join(src, file), "utf8").matchAll(/"(dispatch_once\.[a-z_.]+)"/g)) names.add(match[1]!);
  }
  return [...names].sort();
}

describe("OTEL-1 names what the package emits", () => {
  // OTEL-1 is the contract a dashboard or alert is written against: a span event or attribute the
  // package emits and the spec does not name (dispatch_once.call.ok once) is one a second
  // implementation would name differently, and a query written for one would miss the other.
  it("every dispatch_once.* name in src/ is named, in backquotes, by OTEL-1", () => {
    const rule = otel1();
    const names = emittedNames();
    expect(names.length).toBeGreaterThan(40);
    expect(names.filter((name) => !rule.includes(`\`${name}\``))).toEqual([]);
  });
});
