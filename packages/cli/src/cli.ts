#!/usr/bin/env node
import { runCli } from "./run.js";

// A reader that stops reading (`dispatch-once list --json | head -1`) closes the pipe: the next
// write fails with EPIPE, emitted as an 'error' event nobody handles, which used to crash with a
// stack trace. Output goes last in every command that writes to the ledger (the write has been
// acknowledged by then), so stopping here loses nothing: end quietly. A closed stderr is ignored.
process.stdout.on("error", (error: NodeJS.ErrnoException) => {
  if (error.code !== "EPIPE") throw error;
  process.exit(0);
});
process.stderr.on("error", (error: NodeJS.ErrnoException) => {
  if (error.code !== "EPIPE") throw error;
});

// exitCode, not process.exit(): pending stdout writes to a pipe are flushed before the process ends.
void runCli(process.argv.slice(2)).then((code) => {
  process.exitCode = code;
  // The command is done. What a --tools module left running (a probe given up on at --timeout,
  // stuck on a socket) must not keep the process alive: end it if anything still holds it, but
  // only once stdout is flushed (a slow reader of a long listing must get all of it).
  process.stdout.write("", () => setTimeout(() => process.exit(code), 1_000).unref());
});
