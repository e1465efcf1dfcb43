import { readFileSync } from "node:fs";
import { resolve as resolvePath } from "node:path";
import type { Ledger, LedgerRow, Resolution, ResolveRequest, StoredError } from "@dispatch-once/core";
import { keyArgument, LEDGER_HELP, LEDGER_OPTIONS, RETENTION_HELP, RETENTION_OPTION, stringOption, supports, type CliIo, type Command, type OptionValues } from "../context.js";
import { actorOf } from "../actor.js";
import { parseCount } from "../duration.js";
import { KeyNotFoundError } from "../errors/key-not-found-error.js";
import { RecordRowError } from "../errors/record-row-error.js";
import { isRecordRowName } from "../record-rows.js";
import { TooSoonError } from "../errors/too-soon-error.js";
import { MismatchNotReleasableError } from "../errors/mismatch-not-releasable-error.js";
import { FenceMovedError } from "../errors/fence-moved-error.js";
import { isDispatchOnceError, ResolutionRefusedError, ToolError } from "@dispatch-once/core";
import { DEFAULT_GRACE_MS, openForGrace } from "../grace.js";
import { parseDuration } from "../duration.js";
import { UnsupportedOperationError } from "../errors/unsupported-operation-error.js";
import { UsageError } from "../errors/usage-error.js";
import { iso } from "../format.js";


/** How the dispatcher begins the reason of a row it left unknown after request_mismatch (RECON-6). */
const REQUEST_MISMATCH_REASON = "request_mismatch";

/** The `name` of the stored error a `--failed` resolution writes; replays raise tool_failed with it. */
export const RESOLVED_FAILURE_NAME = "OperatorResolvedFailure";

export const resolveCommand: Command = {
  name: "resolve",
  summary: "settle an unknown (or abandoned in-flight) row: completed, failed or not performed",
  options: {
    ...LEDGER_OPTIONS,
    ...RETENTION_OPTION,
    completed: { type: "string" },
    failed: { type: "string" },
    code: { type: "string" },
    "not-performed": { type: "boolean" },
    reason: { type: "string" },
    actor: { type: "string" },
    "expected-fence": { type: "string" },
    "current-fence": { type: "boolean" },
    grace: { type: "string" },
    json: { type: "boolean" },
  },
  positionals: [1, 1],
  retention: "required",
  help: `Usage: dispatch-once resolve <key> (--completed <json> | --failed <message> [--code <code>] | --not-performed)
                              --reason <text> --retention <age> (--expected-fence <n> | --current-fence)
                              [--actor <name>] [options]

Settle a row whose outcome is open (unknown, or in flight with an expired lease) after you have
checked the downstream yourself. The ledger bumps the fence (the former owner's late writes are
refused), stores who, when and why in the row's audit trail, and every replay answers from it:
  --completed <json>   the effect happened; <json> is its result, returned to every replay.
                       Must be valid JSON; @path reads it from a file (@- from stdin is not read).
  --failed <message>   the effect definitely failed; replays fail with this message
      --code <code>    a machine-readable code for that failure (the downstream's, e.g.
                       card_declined; result_not_storable, invalid_arguments_json and
                       tool_definition_changed are Dispatch-Once's and refused, exit 2)
  --not-performed      the effect did not happen: the row is released and the next replay runs
                       the stored request again
Options:
      --reason <text>        why: what you checked (required; kept in the audit trail)
      --actor <name>         who resolves (default: your OS user name)
      --expected-fence <n>   the fence of the row you checked (list's FENCE, inspect's fence):
                             refused (exit 4, nothing written) when the row is no longer at n,
                             e.g. a replay took it over since you looked
      --current-fence        instead of --expected-fence: settle the row at the fence resolve
                             reads now (shown in the output), whatever happened since you
                             looked; a change between that read and the write is still refused
      --grace <age>          --not-performed of an unkeyed_write row, and --failed of any row, is
                             refused (exit 4, nothing written) until the row has been unknown, or
                             its lease expired, this long on the ledger's clock: a request may
                             still be in transit, or its owner paused with it unsent, and a re-run
                             would pay twice, or the row say failed of a payment that happened
                             (default 60s; 0s when you know the owner is gone)
      --json                 print the resolved row as JSON, with "resolvedNow": true when this
                             run wrote the resolution, false when an earlier run of the same
                             resolution did (its reply was lost: "already resolved")
${RETENTION_HELP}
${LEDGER_HELP}

Run again with the same --expected-fence, outcome, --reason and --actor after a lost reply, it
answers "already resolved" (exit 0) when the row holds exactly that resolution.

One of --expected-fence and --current-fence is required (exit 2 otherwise): a resolution acts on
one claim, and a claim a replay took over after you looked is not the one you checked.

Exit 3 when the key has no row; 4 when the ledger refuses (the row is completed, failed, or in
flight with a live lease, or the fence moved), or when --not-performed or --failed comes within
--grace; 4 also for a row of Dispatch-Once's own bookkeeping (a tool name beginning with
"dispatch-once-"): it holds no effect, and there is nothing to settle.

Example:
  dispatch-once resolve 3f1c0a9b8e7d6c5b4a3928170f6e5de9 -l ./ledger.db --retention 7d --completed '{"invoiceId":"inv_42"}' \\
    --reason "invoice inv_42 found in the billing console" --expected-fence 1`,
  async run({ io, values, positionals, ledger, command }) {
    const key = keyArgument(positionals, command);
    const completed = stringOption(values, "completed");
    const failed = stringOption(values, "failed");
    const notPerformed = values["not-performed"] === true;
    const chosen = [completed !== undefined, failed !== undefined, notPerformed].filter(Boolean).length;
    if (chosen !== 1) throw new UsageError("give exactly one of --completed <json>, --failed <message>, --not-performed", command);
    const code = stringOption(values, "code");
    if (code !== undefined && failed === undefined) throw new UsageError("--code only goes with --failed", command);
    // ERR-6: stored in the field that carries Dispatch-Once's own codes, one of those is read back as
    // ours: a failed row under result_not_storable says the effect HAPPENED, the opposite of --failed.
    if (code !== undefined && ToolError.reservedCodes.includes(code)) {
      throw new UsageError(`--code ${JSON.stringify(code)} is a code Dispatch-Once reads back from failed rows as a fact about the effect; name the downstream's own failure (e.g. card_declined) (ERR-6)`, command);
    }
    const reason = stringOption(values, "reason")?.trim();
    if (reason === undefined || reason === "") throw new UsageError("--reason <text> is required: say what you checked downstream", command);
    const actor = actorOf(values, io, command);
    const graceText = stringOption(values, "grace");
    const graceMs = graceText === undefined ? DEFAULT_GRACE_MS : parseDuration(graceText, "--grace", command);
    if (graceText !== undefined && completed !== undefined) throw new UsageError("--grace only goes with --not-performed or --failed", command);
    const fenceText = stringOption(values, "expected-fence");
    const pinned = fenceText === undefined ? undefined : parseCount(fenceText, "--expected-fence", command, 1);
    const current = values["current-fence"] === true;
    if (pinned !== undefined && current) throw new UsageError("give --expected-fence <n> or --current-fence, not both", command);

    let resolution: Resolution;
    if (completed !== undefined) {
      resolution = { outcome: "completed", result: resultJson(completed, io, command) };
    } else if (failed !== undefined) {
      if (failed.trim() === "") throw new UsageError("--failed needs a message", command);
      const error: StoredError = { name: RESOLVED_FAILURE_NAME, message: failed, ...(code !== undefined ? { code } : {}) };
      resolution = { outcome: "failed", error };
    } else {
      resolution = { outcome: "not_performed" };
    }
    // RESOLVE-4: the operator's check was about one claim; without its fence a resolution could
    // settle a replay's takeover made after the check, whose request may be on its way.
    if (pinned === undefined && !current) {
      throw new UsageError("--expected-fence <n> is required: the fence of the row you checked (list's FENCE column, inspect's fence); --current-fence settles the row at the fence resolve reads now instead", command);
    }

    const opened = await ledger();
    const store = opened.ledger;
    if (!supports(store, "resolve") || store.resolve === undefined) throw new UnsupportedOperationError("resolve", opened.display);
    const before = await store.lookup(key);
    if (before === undefined) throw new KeyNotFoundError(key);
    // EFFECT-8: a bookkeeping row holds no effect; settling it would only corrupt the bookkeeping.
    if (isRecordRowName(before.toolName)) throw new RecordRowError("resolve", key, before.toolName);
    if (pinned !== undefined && before.fence !== pinned) {
      // A run of this very command whose reply was lost (a crashed CLI, a dropped connection) left
      // the row as asked: say so, rather than that someone else acted.
      if (await isThisResolution(store, before, pinned, resolution, actor, reason)) return alreadyResolved(io, values, key, before, pinned, actor, opened.retentionMs);
      throw new FenceMovedError(key, pinned, before.fence, `now ${before.state}`);
    }
    // Always fenced: the grace check and the operator's choice are about the row read above.
    const expectedFence = pinned ?? before.fence;
    // "I found nothing downstream" is a probe's not performed: for an unkeyed_write it releases the
    // row only once nothing can still land (RESOLVE-6), as reconcile's grace (RESOLVE-6). --failed
    // asserts the same absence for any write class (a keyed re-run is safe, a failed row is not: it
    // answers every replay with tool_failed even after the owner's late request lands), and a late
    // arrival cannot make --completed false, so only --completed goes without the wait.
    // A row left unknown after request_mismatch (RECON-6): the downstream holds its key for another
    // request, which may have happened; a release re-runs into the same refusal, or, once the
    // downstream forgot the key, performs it again. Only --completed (or reconcile) settles it.
    if (notPerformed && before.state === "unknown" && before.reason.startsWith(REQUEST_MISMATCH_REASON)) throw new MismatchNotReleasableError(key);
    const held = (notPerformed && before.effect === "unkeyed_write") || failed !== undefined;
    if (held && graceMs > 0) {
      const open = await openForGrace(store, before, graceMs);
      // Refused here, not left to the ledger: a lease live at this read may run out before the
      // write arrives, and the ledger would then release a claim whose grace never began.
      if (!open.passed && open.live === true) throw new ResolutionRefusedError(key, "in_flight", `key ${key}: its claim's lease is live on the ledger's clock, so its owner may still send its request; only an unknown row, or an in-flight row whose lease has expired, can be resolved. Nothing was written`);
      if (!open.passed) throw new TooSoonError(key, open.why, notPerformed ? "--not-performed" : "--failed");
    }
    const request: ResolveRequest = { key, resolution, actor, reason, expectedFence };
    let row;
    try {
      row = await store.resolve(request);
    } catch (error) {
      if (!isDispatchOnceError(error, "stale_claim")) throw error;
      const now = await store.lookup(key).catch(() => undefined);
      if (now !== undefined && (await isThisResolution(store, now, expectedFence, resolution, actor, reason).catch(() => false))) {
        return alreadyResolved(io, values, key, now, expectedFence, actor, opened.retentionMs);
      }
      throw new FenceMovedError(key, expectedFence, now?.fence, now === undefined ? "its row could not be read again" : `now ${now.state}`);
    }
    if (values["json"] === true) io.stdout(`${jsonOutput(row, true)}\n`);
    else {
      io.stdout(`resolved ${key}: ${before.state} at fence ${expectedFence} -> ${row.state} (fence ${row.fence}) by ${actor}\n`);
      if (opened.retentionMs !== undefined) io.stdout(`kept until ${iso(row.finishedAt + opened.retentionMs)}\n`);
    }
    return 0;
  },
};

/**
 * Whether `row` is what this resolution, made at `fence`, leaves: the next fence (RESOLVE-5), the
 * outcome's state and stored value, and the trail's entry at that fence with the same actor,
 * reason and outcome (RESOLVE-7). A released row moves on (a replay re-claims it, LEDGER-8): past
 * the next fence, the trail's entry at it is what this resolution left. Anything less is someone
 * else's act.
 */
async function isThisResolution(store: Ledger, row: LedgerRow, fence: number, resolution: Resolution, actor: string, reason: string): Promise<boolean> {
  if (!supports(store, "auditTrail")) return false;
  const movedOn = row.fence > fence + 1 && resolution.outcome === "not_performed";
  if (row.fence !== fence + 1 && !movedOn) return false;
  const same =
    movedOn ||
    (resolution.outcome === "completed"
      ? row.state === "completed" && row.result === resolution.result
      : resolution.outcome === "failed"
        ? row.state === "failed" && row.error.name === resolution.error.name && row.error.message === resolution.error.message && row.error.code === resolution.error.code
        : row.state === "released");
  if (!same) return false;
  const trail = await store.auditTrail!(row.key);
  const entry = trail.filter((e) => e.fence === fence + 1).at(-1);
  const state = movedOn ? "released" : row.state;
  return entry !== undefined && entry.action === "resolved" && entry.actor === actor && entry.reason === reason && entry.outcome === resolution.outcome && entry.toState === state;
}

/**
 * The --json line: the row as it stands, and `resolvedNow`: true when this run's write settled it,
 * false when an earlier run of the same resolution did (its reply was lost) and this run wrote
 * nothing. A script that re-runs a resolve after a lost reply tells the two apart by it alone.
 */
function jsonOutput(row: LedgerRow, resolvedNow: boolean): string {
  return JSON.stringify({ ...row, resolvedNow });
}

function alreadyResolved(io: CliIo, values: OptionValues, key: string, row: LedgerRow, fence: number, actor: string, retentionMs: number | undefined): number {
  if (values["json"] === true) io.stdout(`${jsonOutput(row, false)}\n`);
  else if (row.fence > fence + 1) {
    // Released, then re-claimed: the row holds the replay's claim now, not this resolution.
    io.stdout(`already resolved ${key}: at fence ${fence} -> released (fence ${fence + 1}) by ${actor}, by an earlier run of this resolution whose reply was lost; the row has since moved to fence ${row.fence} (now ${row.state})\n`);
  } else {
    io.stdout(`already resolved ${key}: at fence ${fence} -> ${row.state} (fence ${row.fence}) by ${actor}, by an earlier run of this resolution whose reply was lost\n`);
    if (retentionMs !== undefined && row.state !== "in_flight") io.stdout(`kept until ${iso(row.finishedAt + retentionMs)}\n`);
  }
  return 0;
}

/** The result text to store: valid JSON, kept as given (no re-serialization that would round big numbers). */
function resultJson(given: string, io: CliIo, command: string): string {
  let text = given;
  if (given.startsWith("@")) {
    const path = resolvePath(io.cwd, given.slice(1));
    try {
      text = readFileSync(path, "utf8");
    } catch (error) {
      throw new UsageError(`--completed ${given}: cannot read ${path}: ${(error as Error).message}`, command);
    }
  }
  text = text.trim();
  try {
    JSON.parse(text);
  } catch (error) {
    throw new UsageError(`--completed must be the result as JSON (${(error as Error).message}); quote it for your shell, e.g. '{"id":"inv_1"}'`, command);
  }
  return text;
}
