import { LEDGER_HELP, LEDGER_OPTIONS, type Command } from "../context.js";

export const sweepCommand: Command = {
  name: "sweep",
  summary: "delete finished rows whose retention has passed; print how many went",
  options: { ...LEDGER_OPTIONS, retention: { type: "string" }, json: { type: "boolean" } },
  positionals: [0, 0],
  help: `Usage: dispatch-once sweep [options]

Run the ledger's sweep(): delete completed, failed, unknown and released rows whose retention
has passed (in-flight rows are never swept). Prints the number of rows deleted. Redis expires
rows by itself, so its sweep usually finds nothing.

Options:
      --retention <age>  the retention your application gives its ledger (retentionMs): 24h, 7d, ...
                         (default 24h, the adapters' default). The adapter judges "past retention"
                         by this setting, so pass the application's, or rows it still replays
                         from may go (LEDGER-13).
      --json             print {"swept": n}
${LEDGER_HELP}`,
  async run({ io, values, ledger }) {
    const { ledger: store } = await ledger();
    const swept = await store.sweep();
    io.stdout(values["json"] === true ? `${JSON.stringify({ swept })}\n` : `swept ${swept} row${swept === 1 ? "" : "s"}\n`);
    return 0;
  },
};
