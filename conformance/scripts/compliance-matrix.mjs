#!/usr/bin/env node
// Renders the compliance matrix from JSON conformance reports and writes it into the spec
// between <!-- compliance-matrix:start --> and <!-- compliance-matrix:end -->.
//
//   node conformance/scripts/compliance-matrix.mjs [--spec spec/dispatch-once.md] [--stdout] report.json [name=report.json ...]
//
// Each report is the output of `pnpm conformance --adapter <module> --json`; its column is
// named by the report's subject unless given as name=path. Requires a built kit (dist/).
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { MATRIX_START, patchComplianceMatrix, renderComplianceMatrix } from "../dist/index.js";

const here = dirname(fileURLToPath(import.meta.url));

function fail(message) {
  process.stderr.write(`compliance-matrix: ${message}\n`);
  process.exit(2);
}

let parsed;
try {
  parsed = parseArgs({
    options: { spec: { type: "string" }, stdout: { type: "boolean", default: false } },
    allowPositionals: true,
  });
} catch (error) {
  fail(error.message);
}
const { values, positionals } = parsed;
if (positionals.length === 0) fail("give at least one JSON report file");

/** @type {Record<string, any>} */
const reports = {};
for (const arg of positionals) {
  const eq = arg.indexOf("=");
  const file = eq > 0 ? arg.slice(eq + 1) : arg;
  let report;
  try {
    report = JSON.parse(readFileSync(file, "utf8"));
  } catch (error) {
    fail(`${file}: ${error.message}`);
  }
  if (typeof report !== "object" || report === null || !Array.isArray(report.rules) || typeof report.subject !== "string") {
    fail(`${file}: not a conformance report (expected { subject, rules, ... } from --json)`);
  }
  const name = eq > 0 ? arg.slice(0, eq) : report.subject;
  if (name in reports) fail(`two reports for subject ${name}; name them with name=path`);
  reports[name] = report;
}

const matrix = renderComplianceMatrix(reports);
if (values.stdout) {
  process.stdout.write(`${matrix}\n`);
} else {
  // Default: the spec file that holds the markers (§10.1 of dispatch-once.md), else spec/README.md.
  const candidates = [resolve(here, "../../spec/dispatch-once.md"), resolve(here, "../../spec/README.md")];
  const spec = resolve(values.spec ?? (candidates.find((f) => existsSync(f) && readFileSync(f, "utf8").includes(MATRIX_START)) ?? candidates[1]));
  let text;
  try {
    text = readFileSync(spec, "utf8");
  } catch (error) {
    fail(`${spec}: ${error.message}`);
  }
  let patched;
  try {
    patched = patchComplianceMatrix(text, matrix);
  } catch (error) {
    fail(`${spec}: ${error.message}`);
  }
  writeFileSync(spec, patched);
  process.stdout.write(`compliance-matrix: wrote ${Object.keys(reports).length} subjects into ${spec}\n`);
}
