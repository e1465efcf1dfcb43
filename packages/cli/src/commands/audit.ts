import { auditTools, checkRowKeys, DEFAULT_MAX_AUDIT_ROWS } from "../audit.js";
import { LEDGER_HELP, LEDGER_OPTIONS, stringOption, type Command } from "../context.js";
import { table } from "../format.js";
import { loadToolsModule } from "../tools-module.js";

export const auditCommand: Command = {
  name: "audit",
  summary: "report which tools can double-fire and how each is guarded",
  options: { ...LEDGER_OPTIONS, strict: { type: "boolean" }, json: { type: "boolean" } },
  positionals: [1, 1],
  help: `Usage: dispatch-once audit <tools module> [options]

For every tool in the registry the module exports (see \`reconcile --help\` for the export):
its effect class, whether a replayed turn could perform it twice, and what guards it:
  keyed downstream         the Idempotency-Key is forwarded; the API deduplicates (keyed_write)
  ledger only              the ledger claim is the only guard (unkeyed_write)
  reconcile probe          a lost response can be checked downstream (RECON-1)
  volatile ledger refusal  the dispatcher refuses the tool on the --ledger given (LEDGER-14)
Risky tools are flagged: an unkeyed_write without a reconcile probe, or one on a volatile ledger.
With --ledger, each write row's key is also derived again from the module's definition of its tool
(its conversation, turn and stored request; the first ${DEFAULT_MAX_AUDIT_ROWS} rows): a tool with rows
it keys differently was changed (identity or schema, IDENT-4) while they are within retention, and
is flagged: a re-sent message of their turns would run the effect again. Run it before a deploy,
with the new release's module.

Options:
      --strict   exit 5 when any tool is flagged
      --json     print the reports as one JSON array
      --ledger   optional here: also check the tools against that ledger's durability
${LEDGER_HELP}`,
  async run({ io, values, positionals, ledger }) {
    const registry = await loadToolsModule(positionals[0] as string, io.cwd);
    const hasLedger = stringOption(values, "ledger") !== undefined;
    const opened = hasLedger ? (await ledger()).ledger : undefined;
    const rowKeys = opened !== undefined ? await checkRowKeys(registry, opened) : undefined;
    const reports = auditTools(registry, opened?.capabilities, rowKeys);
    const risky = reports.filter((r) => r.risk !== undefined);
    if (values["json"] === true) {
      io.stdout(`${JSON.stringify(reports)}\n`);
    } else {
      io.stdout(
        table(
          ["TOOL", "EFFECT", "DOUBLE-FIRE", "GUARDED BY", "IDENTITY", "RISK"],
          reports.map((r) => [
            r.name,
            r.effect,
            r.canDoubleFire ? "possible" : "no",
            r.guards.join(" + "),
            Array.isArray(r.identity) ? r.identity.join(",") : String(r.identity),
            r.risk === undefined ? "-" : "RISKY",
          ]),
        ),
      );
      for (const r of risky) io.stdout(`\nRISKY ${r.name}: ${r.risk}\n`);
    }
    io.stderr(`${reports.length} tool${reports.length === 1 ? "" : "s"}, ${risky.length} flagged\n`);
    return risky.length > 0 && values["strict"] === true ? 5 : 0;
  },
};
