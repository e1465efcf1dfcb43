import { MAX_FAILED_TURNS_LIMIT, type ConversationStore, type FailedTurnsQuery } from "@dispatch-once/core";
import { checkTargetOptions, listingOptions, stringOption, type Command } from "../context.js";
import { formatAge } from "../duration.js";
import { UnsupportedOperationError } from "../errors/unsupported-operation-error.js";
import { UsageError } from "../errors/usage-error.js";
import { iso, table } from "../format.js";
import { openConversationStore, parseTarget } from "../target.js";

/** Turns shown when --limit is not given. */
const DEFAULT_TURN_ROWS = 100;

export const turnsCommand: Command = {
  name: "turns",
  summary: "list failed turns of the conversation store (messages whose turn failed and was recorded)",
  options: {
    failed: { type: "boolean" },
    store: { type: "string", short: "s" },
    schema: { type: "string" },
    "table-prefix": { type: "string" },
    conversation: { type: "string" },
    "older-than": { type: "string" },
    limit: { type: "string" },
    "page-size": { type: "string" },
    json: { type: "boolean" },
  },
  positionals: [0, 0],
  help: `Usage: dispatch-once turns --failed --store <target> [options]

List the user messages whose turn failed and was recorded (state "failed") and that no re-send
has reopened, oldest failure first, with their turn index and failed-turn record. A re-send of
such a message (the same message id) retries it at the same turn index (TURN-12).

Options:
      --failed                 required: which turns to list (only failed turns are listed today)
  -s, --store <target>         the conversation store: a SQLite file (./chat.db or
                               sqlite:./chat.db) or postgres://... / postgresql://...
                               Default: the DISPATCH_ONCE_STORE environment variable.
      --schema <name>          PostgreSQL schema (default public)
      --table-prefix <prefix>  table name prefix (default dispatch_once_)
      --conversation <id>      only this conversation's failed turns
      --older-than <age>       only turns that failed at least this long ago: 30s, 10m, 2h, 7d
      --limit <n>              print at most n turns (default ${DEFAULT_TURN_ROWS}; 0 = all)
      --page-size <n>          turns asked of the store per page (default and most ${MAX_FAILED_TURNS_LIMIT})
      --json                   one JSON object per line

Example:
  dispatch-once turns --failed --store postgres://app@db/app --older-than 1h`,
  async run({ io, values, command }) {
    if (values["failed"] !== true) throw new UsageError("say which turns: --failed (the only listing today)", command);
    const target = stringOption(values, "store") ?? io.env["DISPATCH_ONCE_STORE"];
    if (target === undefined || target === "") throw new UsageError("no conversation store: pass --store <target> or set DISPATCH_ONCE_STORE", command);
    const query: FailedTurnsQuery = {};
    const { conversationId, olderThanMs, limit, pageSize, json } = listingOptions(values, command, { limit: DEFAULT_TURN_ROWS, maxPageSize: MAX_FAILED_TURNS_LIMIT });
    if (conversationId !== undefined) query.conversationId = conversationId;
    if (olderThanMs !== undefined) query.olderThanMs = olderThanMs;
    checkTargetOptions(parseTarget(target, io.cwd).kind, values, { sqlite: ["table-prefix"], postgres: ["schema", "table-prefix"] }, "conversation store", command);
    const schema = stringOption(values, "schema");
    const tablePrefix = stringOption(values, "table-prefix");

    const opened = await openConversationStore(target, {
      cwd: io.cwd,
      ...(schema !== undefined ? { schema } : {}),
      ...(tablePrefix !== undefined ? { tablePrefix } : {}),
    });
    const store: ConversationStore = opened.store;
    try {
      if (store.listFailedTurns === undefined) throw new UnsupportedOperationError("listFailedTurns", opened.display);
      const now = Date.now();
      const printed: string[][] = [];
      let count = 0;
      let more = false;
      let cursor: string | undefined;
      do {
        const want = limit === 0 ? pageSize : Math.min(pageSize, limit - count);
        const page = await store.listFailedTurns({ ...query, limit: want, ...(cursor !== undefined ? { cursor } : {}) });
        for (const turn of page.turns) {
          count += 1;
          if (json) io.stdout(`${JSON.stringify(turn)}\n`);
          else printed.push([turn.conversationId, turn.messageId, turn.turnIndex === undefined ? "-" : String(turn.turnIndex), turn.failedAt === 0 ? "unknown" : iso(turn.failedAt), turn.failedAt === 0 ? "-" : formatAge(now - turn.failedAt)]);
        }
        cursor = page.cursor;
        if (limit !== 0 && count >= limit && cursor !== undefined) more = true;
      } while (cursor !== undefined && (limit === 0 || count < limit));
      if (!json && printed.length > 0) io.stdout(table(["CONVERSATION", "MESSAGE", "TURN", "FAILED AT", "AGE"], printed));
      io.stderr(`${count} failed turn${count === 1 ? "" : "s"}${more ? " (more may match: raise --limit, or --limit 0 for all)" : ""}\n`);
      return 0;
    } finally {
      await store.close();
    }
  },
};
