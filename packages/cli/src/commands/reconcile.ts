import { hostname } from "node:os";
import { actorOf } from "../actor.js";
import { Dispatcher } from "@dispatch-once/core";
import { keyArgument, LEDGER_HELP, LEDGER_OPTIONS, RETENTION_HELP, RETENTION_OPTION, stringOption, type Command } from "../context.js";
import { parseDuration } from "../duration.js";
import { KeyNotFoundError } from "../errors/key-not-found-error.js";
import { RecordRowError } from "../errors/record-row-error.js";
import { isRecordRowName } from "../record-rows.js";
import { NothingSettledError } from "../errors/nothing-settled-error.js";
import { UsageError } from "../errors/usage-error.js";
import { iso } from "../format.js";
import { loadToolsModule } from "../tools-module.js";

/** How long `reconcile` waits for the probe when --timeout is not given. */
export const DEFAULT_PROBE_TIMEOUT_MS = 30_000;
/** The longest --timeout: Node's timers hold at most 2^31-1 ms (a longer one would fire at once). */
const MAX_PROBE_TIMEOUT_MS = 24 * 86_400_000;

export const reconcileCommand: Command = {
  name: "reconcile",
  summary: "ask the tool's reconcile probe whether an unknown row's effect happened, and settle it",
  options: { ...LEDGER_OPTIONS, ...RETENTION_OPTION, tools: { type: "string" }, grace: { type: "string" }, timeout: { type: "string" }, actor: { type: "string" }, json: { type: "boolean" } },
  positionals: [1, 1],
  retention: "required",
  help: `Usage: dispatch-once reconcile <key> --tools <module> --retention <age> [options]

Import your tool registry from <module>, build a Dispatcher on the ledger and run
dispatcher.reconcile(key): the row's tool asks the downstream (its reconcile probe, RECON-1)
whether the effect happened, and the dispatcher settles the row from the answer. Nothing is
run: only the probe is called, with the row's stored request.

Options:
      --tools <module>   a JavaScript module exporting the registry as \`tools\` or as its default
                         export (a ToolRegistry, an array of tool definitions, or a function
                         returning either); see the README, "The tools module"
      --grace <age>      how long an unkeyed_write row must have been unknown, on the ledger's
                         clock (not this machine's) when the probe is asked, before its "not
                         performed" may release it (a request still in transit may land
                         later): 30s, 10m, ... (default: the dispatcher's, 60s)
      --timeout <age>    how long the probe may take: then its AbortSignal aborts, nothing is
                         written, and the command exits 4 (default 30s; at most 24d)
      --actor <name>     who settles the row, in its audit trail (default: your OS user name)
      --json             print {"report": ..., "before": state, "row": row after, "settled": bool}:
                         report is the dispatcher's ReconcileReport; settled is true exactly when
                         this reconcile wrote the row (report.settled is not "none")
${RETENTION_HELP}
${LEDGER_HELP}

Exit 0 when the row was settled; 3 when the key has no row; 4 when nothing was settled (the row
is not open, its tool has no probe or is not in the module, the probe could not tell, or it
did not answer within --timeout; or the row is Dispatch-Once's own bookkeeping, a tool name
beginning with "dispatch-once-": it holds no effect, and there is nothing to settle).`,
  async run({ io, values, positionals, ledger, command }) {
    const key = keyArgument(positionals, command);
    const toolsPath = stringOption(values, "tools");
    if (toolsPath === undefined) throw new UsageError("--tools <module> is required: the module that exports your tool registry", command);
    const graceText = stringOption(values, "grace");
    const grace = graceText === undefined ? undefined : parseDuration(graceText, "--grace", command);
    const timeoutText = stringOption(values, "timeout");
    const timeoutMs = timeoutText === undefined ? DEFAULT_PROBE_TIMEOUT_MS : parseDuration(timeoutText, "--timeout", command);
    if (timeoutMs < 1 || timeoutMs > MAX_PROBE_TIMEOUT_MS) throw new UsageError(`--timeout must be more than 0 and at most 24d, not ${JSON.stringify(timeoutText)}`, command);
    const actor = actorOf(values, io, command);
    const tools = await loadToolsModule(toolsPath, io.cwd);
    const opened = await ledger();
    const store = opened.ledger;
    const before = await store.lookup(key);
    if (before === undefined) throw new KeyNotFoundError(key);
    // EFFECT-8: a bookkeeping row holds no effect; settling it would only corrupt the bookkeeping.
    if (isRecordRowName(before.toolName)) throw new RecordRowError("reconcile", key, before.toolName);
    const dispatcher = new Dispatcher({
      tools,
      ledger: store,
      owner: `dispatch-once-cli:${actor}@${hostname()}:${process.pid}`,
      // This dispatcher never runs a tool (reconcile only calls probes), so the durability
      // refusal that protects unkeyed runs does not apply; its warning still goes to stderr.
      allowVolatileLedgerForUnkeyedWrites: true,
      ...(grace !== undefined ? { reconcileGraceMs: grace } : {}),
      logger: { warn: (message) => io.stderr(`warning: ${message}\n`) },
    });
    // The probe gets the signal; one that does not answer in time is given up on, and nothing is written.
    // A timer of our own: AbortSignal.timeout's is unref'd, and a probe waiting on nothing else
    // (a SQLite ledger holds no socket) would let the process end before it fired, exit 0.
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(new Error(`the probe did not answer within ${timeoutText ?? "30s"}`)), timeoutMs);
    const signal = controller.signal;
    const reported = await dispatcher.reconcile(key, { actor, signal }).finally(() => clearTimeout(timer));
    const timedOut = reported.verdict === "error" && signal.aborted;
    const report = timedOut ? { ...reported, detail: `the probe did not answer within ${timeoutText ?? "30s"} (--timeout)` } : reported;
    const after = await store.lookup(key);
    // Settled by THIS reconcile: the dispatcher's report says what it wrote. A row that changed
    // meanwhile (another operator, the application) was settled by someone else: nothing here.
    const settled = report.settled !== "none";
    if (values["json"] === true) {
      io.stdout(`${JSON.stringify({ report, before: before.state, row: after ?? null, settled })}\n`);
    } else {
      const lines = [
        `key:      ${key}`,
        `tool:     ${report.toolName ?? before.toolName}`,
        `verdict:  ${report.verdict}${report.detail !== undefined ? ` (${report.detail})` : ""}`,
        `state:    ${before.state} -> ${after?.state ?? "absent"}${after !== undefined ? ` (fence ${after.fence})` : ""}${
          !settled && (after?.state !== before.state || after?.fence !== before.fence) ? " by another writer, not this reconcile" : ""
        }`,
      ];
      if (report.resultJson !== undefined) lines.push(`result:   ${report.resultJson}`);
      if (settled && after !== undefined && after.state !== "in_flight" && opened.retentionMs !== undefined) lines.push(`kept:     until ${iso(after.finishedAt + opened.retentionMs)}`);
      io.stdout(`${lines.join("\n")}\n`);
    }
    if (!settled) throw new NothingSettledError(key, report.detail ?? `the probe answered ${report.verdict}`);
    return 0;
  },
};
