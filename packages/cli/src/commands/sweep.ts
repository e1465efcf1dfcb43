import { LEDGER_HELP, LEDGER_OPTIONS, RETENTION_OPTION, type Command } from "../context.js";

export const sweepCommand: Command = {
  name: "sweep",
  summary: "delete finished rows whose retention has passed; print how many went",
  options: { ...LEDGER_OPTIONS, ...RETENTION_OPTION, json: { type: "boolean" } },
  positionals: [0, 0],
  retention: "optional",
  help: `Usage: dispatch-once sweep [options]

Run the ledger's sweep(): delete completed, failed, unknown and released rows whose retention
has passed (in-flight rows are never swept). Prints the number of rows deleted.

Each finished row carries its own deadline, its finish time plus the retention of the ledger
that finished it (your application's). On SQLite and PostgreSQL a row goes only when that
deadline has passed AND it was claimed at least --retention ago: --retention can hold rows back
for longer, never delete one before its deadline. On Redis, sweep does nothing and prints 0:
Redis drops each finished row by itself when its TTL (set from the application's retention)
runs out; --retention below 1h is refused there.

Options:
      --retention <age>  only rows claimed at least this long ago go: 24h, 7d, ... (default: the
                         DISPATCH_ONCE_RETENTION environment variable, else 24h, the adapters'
                         default). Pass your application's retentionMs (LEDGER-13) or less to
                         sweep every row whose stored deadline has passed.
      --json             print {"swept": n}
${LEDGER_HELP}`,
  async run({ io, values, ledger }) {
    const { ledger: store } = await ledger();
    const swept = await store.sweep();
    io.stdout(values["json"] === true ? `${JSON.stringify({ swept })}\n` : `swept ${swept} row${swept === 1 ? "" : "s"}\n`);
    return 0;
  },
};
