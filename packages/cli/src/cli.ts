#!/usr/bin/env node
import { runCli } from "./run.js";

// exitCode, not process.exit(): pending stdout writes to a pipe are flushed before the process ends.
void runCli(process.argv.slice(2)).then((code) => {
  process.exitCode = code;
});
