#!/usr/bin/env node
/** `pnpm demo`: the chapter's incident replayed, then measured at scale. */
import { writeFileSync } from "node:fs";
import { DemoUsageError, USAGE, parseArgs } from "./options.js";
import { renderReport } from "./report.js";
import { runDemo } from "./run.js";
import { ProgressBar, renderText } from "./text.js";

async function main(argv: string[]): Promise<number> {
  let options;
  try {
    options = parseArgs(argv);
  } catch (error) {
    if (error instanceof DemoUsageError) {
      process.stderr.write(`demo: ${error.message}\n\n${USAGE}`);
      return 2;
    }
    throw error;
  }
  if (options.help) {
    process.stdout.write(USAGE);
    return 0;
  }
  // A bar redrawn in place only makes sense on a terminal; piped stderr gets the phase lines only.
  const bar = options.progress && !options.json && process.stderr.isTTY ? new ProgressBar(process.stderr) : undefined;
  const say = (line: string) => {
    if (!options.json) process.stderr.write(`${line}\n`);
  };
  const result = await runDemo(options, {
    onPhase: (phase) =>
      phase === "incident"
        ? say(`Replaying the incident (about ${Math.ceil(5 * options.incidentTimeScale)} s at the chapter's timings)...`)
        : say(`Chaos run: ${options.turns.toLocaleString("en-US")} turns per side, naive and guarded side by side...`),
    ...(bar ? { onProgress: (p) => bar.update(p) } : {}),
  });
  bar?.done();
  if (options.report !== undefined) writeFileSync(options.report, renderReport(result));
  if (options.json) process.stdout.write(`${JSON.stringify(result)}\n`);
  else {
    process.stdout.write(`\n${renderText(result)}\n`);
    if (options.report !== undefined) process.stdout.write(`HTML report written to ${options.report}\n`);
  }
  // The guarded side must never pay twice nor misreport an effect; a run where it did is a failure, loudly.
  const guardedDuplicates =
    Math.max(0, result.incident.guarded.payments - 1) + result.chaos.routes.reduce((s, r) => s + r.guarded.duplicates, 0);
  const guardedMisreports = result.chaos.routes.reduce((s, r) => s + r.guarded.misreports, 0);
  if (guardedDuplicates > 0 || guardedMisreports > 0) {
    process.stderr.write(
      `demo: Dispatch-Once made ${guardedDuplicates} duplicate payment(s) and misreported ${guardedMisreports} effect(s): ` +
        `this is a bug, please report it with --seed ${options.seed}\n`,
    );
    return 1;
  }
  return 0;
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    process.stderr.write(`demo: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    process.exitCode = 1;
  },
);
