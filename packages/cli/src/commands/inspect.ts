import { keyArgument, LEDGER_HELP, LEDGER_OPTIONS, supports, type Command } from "../context.js";
import { KeyNotFoundError } from "../errors/key-not-found-error.js";
import { describeRow } from "../format.js";
import { evidenceOf } from "../evidence.js";

export const inspectCommand: Command = {
  name: "inspect",
  summary: "show one row: state, fence, lease, owner, request, result or error, audit trail",
  options: { ...LEDGER_OPTIONS, json: { type: "boolean" } },
  positionals: [1, 1],
  help: `Usage: dispatch-once inspect <key> [options]

Show everything the ledger holds for one key: state, tool and effect class, fence, claim time,
lease and owner (in flight), request, result or error, conversation and turn, and the audit
trail of its resolutions. A settled row's state says on whose word its outcome rests:
"released (not performed on alice's word)", "completed (by a reconcile probe)", "released (may
have happened; ...)" for a keyed_write its owner released after an unknown outcome. A row of
Dispatch-Once's own bookkeeping (a tool name beginning with "dispatch-once-") reads
"completed (bookkeeping, no effect)" and says what it records. Exit 3 when the key has no row.

Options:
      --json   one JSON object: { "row": ..., "audit": [...], "evidence": {...} } ("audit" is
               null when the ledger keeps no audit trail; "evidence": { effect, basis, actor?,
               reason? }, what the row and its trail establish about the effect)
${LEDGER_HELP}

Example:
  dispatch-once inspect 3f1c0a9b8e7d6c5b4a3928170f6e5de9 --ledger ./ledger.db`,
  async run({ io, values, positionals, ledger, command }) {
    const key = keyArgument(positionals, command);
    const opened = await ledger();
    const store = opened.ledger;
    const row = await store.lookup(key);
    if (row === undefined) throw new KeyNotFoundError(key);
    const audit = supports(store, "auditTrail") && store.auditTrail !== undefined ? await store.auditTrail(key) : undefined;
    if (values["json"] === true) io.stdout(`${JSON.stringify({ row, audit: audit ?? null, evidence: evidenceOf(row, audit) })}\n`);
    else io.stdout(describeRow(row, audit, Date.now()));
    return 0;
  },
};
