import type { RowState } from "@dispatch-once/core";

import { LEDGER_HELP, LEDGER_OPTIONS, listingOptions, stringOption, supports, type Command } from "../context.js";
import { UnsupportedOperationError } from "../errors/unsupported-operation-error.js";
import { UsageError } from "../errors/usage-error.js";
import { LIST_HEADER, listRow, table } from "../format.js";
import { evidenceOf } from "../evidence.js";
import { isRecordRowName } from "../record-rows.js";
import { MAX_LIST_LIMIT, type ListRowsQuery } from "@dispatch-once/core";

export const ROW_STATES: readonly RowState[] = ["in_flight", "completed", "failed", "unknown", "released"];

/** Rows shown when --limit is not given: a screenful, not the whole ledger. */
export const DEFAULT_LIST_ROWS = 100;

export const listCommand: Command = {
  name: "list",
  summary: "list ledger rows by state, tool, conversation and age",
  options: {
    ...LEDGER_OPTIONS,
    state: { type: "string", multiple: true },
    tool: { type: "string" },
    conversation: { type: "string" },
    "older-than": { type: "string" },
    limit: { type: "string" },
    "page-size": { type: "string" },
    records: { type: "boolean" },
    json: { type: "boolean" },
  },
  positionals: [0, 0],
  help: `Usage: dispatch-once list [options]

List ledger rows, oldest last change first, following the ledger's cursor page by page.
An in-flight row's STATE says whether its lease is live ("in_flight (lease 25s left)") or
expired ("in_flight (lease expired 3m ago)": an abandoned claim resolve or reconcile may settle).
A failed row whose effect happened but whose result could not be stored (result_not_storable)
reads "failed (the effect happened; result not stored)"; plain "failed" did not happen.
A settled row says on whose word its outcome rests: "released (not performed on alice's word)"
(resolve --not-performed), "completed (by a reconcile probe)", "released (not performed, as its
tool answered)", "released (may have happened; ...)": a keyed_write its owner released after an
unknown outcome, whose re-run carries the same key.
Rows of Dispatch-Once's own bookkeeping (tool names beginning with "dispatch-once-": the AI SDK
wrapper's records of a turn's messages and of repaired calls) hold no effect and are left out
unless --records (or --tool with such a name) is given; shown, their STATE reads
"completed (bookkeeping, no effect)".

Options:
      --state <state>        in_flight, completed, failed, unknown or released; repeat it
                             (or separate with commas) for several
      --tool <name>          only this tool's rows
      --conversation <id>    only this conversation's rows
      --records              also Dispatch-Once's own bookkeeping rows (no effect; see above)
      --older-than <age>     only rows whose last change is at least this old: 30s, 10m, 2h, 7d
      --limit <n>            print at most n rows (default ${DEFAULT_LIST_ROWS}; 0 = all)
      --page-size <n>        rows asked of the ledger per page (default and most ${MAX_LIST_LIMIT});
                             smaller pages hold the store's locks and memory for less time
      --json                 one JSON object per line: the row as the ledger returns it, plus
                             "evidence": { effect, basis, actor?, reason? } (a bookkeeping
                             row's: { "effect": "none", "basis": "record" })
${LEDGER_HELP}

Examples:
  dispatch-once list --ledger ./ledger.db --state unknown
  dispatch-once list -l postgres://app@db/app --state in_flight --older-than 10m --json`,
  async run({ io, values, ledger, command }) {
    const query: ListRowsQuery = {};
    const states = (values["state"] as string[] | undefined)?.flatMap((s) => s.split(",")).map((s) => s.trim());
    if (states !== undefined) {
      for (const state of states) {
        if (!(ROW_STATES as readonly string[]).includes(state)) {
          throw new UsageError(`--state must be one of ${ROW_STATES.join(", ")}, not ${JSON.stringify(state)}`, command);
        }
      }
      query.state = [...new Set(states)] as RowState[];
    }
    const tool = stringOption(values, "tool");
    if (tool !== undefined) query.toolName = tool;
    // EFFECT-8: bookkeeping rows are no effect; an operator looking for payments is not shown them
    // unless asked (--records, or naming such a tool).
    const records = values["records"] === true || (tool !== undefined && isRecordRowName(tool));
    let hidden = 0;
    const { conversationId, olderThanMs, limit, pageSize, json } = listingOptions(values, command, { limit: DEFAULT_LIST_ROWS, maxPageSize: MAX_LIST_LIMIT });
    if (conversationId !== undefined) query.conversationId = conversationId;
    if (olderThanMs !== undefined) query.olderThanMs = olderThanMs;

    const opened = await ledger();
    const store = opened.ledger;
    if (!supports(store, "listRows") || store.listRows === undefined) throw new UnsupportedOperationError("listRows", opened.display);

    const trail = supports(store, "auditTrail");
    const now = Date.now();
    const printed: string[][] = [];
    let count = 0;
    let more = false;
    let cursor: string | undefined;
    do {
      const want = limit === 0 ? pageSize : Math.min(pageSize, limit - count);
      const page = await store.listRows({ ...query, limit: want, ...(cursor !== undefined ? { cursor } : {}) });
      for (const row of page.rows) {
        if (!records && isRecordRowName(row.toolName)) {
          hidden += 1;
          continue;
        }
        if (limit !== 0 && count >= limit) {
          more = true;
          break;
        }
        count += 1;
        // A settled row's outcome rests on someone's word: its trail says whose (RESOLVE-7).
        const audit = trail && (row.state === "completed" || row.state === "failed" || row.state === "released") ? await store.auditTrail!(row.key) : undefined;
        const evidence = evidenceOf(row, trail ? (audit ?? []) : undefined);
        // JSON lines go out as they arrive: a long listing streams instead of piling up.
        if (json) io.stdout(`${JSON.stringify({ ...row, evidence })}\n`);
        else printed.push(listRow(row, now, evidence));
      }
      cursor = page.cursor;
      if (limit !== 0 && count >= limit && cursor !== undefined) more = true;
    } while (cursor !== undefined && (limit === 0 || count < limit));

    // A Redis prefix names no table that could be missing: a typo in --prefix (or the default where the
    // application set its own) lists nothing, which reads as "no row is unknown". Say when the prefix
    // holds no row at all, on stderr, so that an empty listing is never silently the wrong ledger.
    const nothingUnderPrefix =
      count === 0 && opened.target.kind === "redis" && (await store.listRows({ limit: 1 })).rows.length === 0
        ? `no row at all under prefix ${JSON.stringify((store as { prefix?: string }).prefix ?? "")} on ${opened.display}: if your application writes its rows elsewhere, check --prefix (its ledger's prefix option; default "dispatch-once"); ` +
          `or the server lost them: a Redis ledger is volatile unless declared durable, and a restart or failover without an fsync'd AOF forgets every row ` +
          `(check the server's uptime_in_seconds; what to do: the CLI README, "After a Redis restart")\n`
        : undefined;
    if (!json) {
      if (printed.length > 0) io.stdout(table(LIST_HEADER, printed));
      const left = hidden === 0 ? "" : ` (${hidden} bookkeeping row${hidden === 1 ? "" : "s"} of Dispatch-Once itself, which hold no effect, not shown: --records shows them)`;
      io.stderr(`${count} row${count === 1 ? "" : "s"}${left}${more ? ` (more may match: raise --limit, or --limit 0 for all)` : ""}\n`);
    } else if (more) {
      io.stderr(`stopped at --limit ${limit}; more rows may match\n`);
    }
    if (nothingUnderPrefix !== undefined) io.stderr(nothingUnderPrefix);
    return 0;
  },
};
