#!/usr/bin/env node
// Runs every model check of spec/model/dispatch_once.pml with spin (`pnpm model`).
//
//   node spec/model/run.mjs             every check; exit 1 on any failure
//   node spec/model/run.mjs --only a,b  the named checks only
//   node spec/model/run.mjs --list      the checks and what they cover
//   node spec/model/run.mjs --deep      also the larger searches (several minutes; not run by CI)
//   node spec/model/run.mjs --write     also regenerate COUNTEREXAMPLES.md and the figures in README.md
//   node spec/model/run.mjs --shortest  search the expect checks breadth-first (shortest trails; --write does)
//   node spec/model/run.mjs --record    also record, when every CI check passed, their inputs' hash in passed.json
//   node spec/model/run.mjs --changed   CI: every CI check when the inputs differ from passed.json's; else SMOKE only
//
// A "verify" check must finish with `errors: 0` and a complete search. An "expect" check switches
// a rule off (the turn-1 design, or the code on main where it lacks a proposed rule) and must
// produce a counterexample of the named property; its trail is replayed (spin -t -p) and
// summarised into a timeline. No dependencies: node, spin (Debian package) and gcc.

import { spawn, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { copyFileSync, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir, cpus } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const HERE = dirname(fileURLToPath(import.meta.url));
const MODEL = "dispatch_once.pml";

// Every fault budget at zero; each check switches on what it is about.
const NONE = {
  CRASHES: 0, PAUSES: 0, STREAMCUTS: 0, REWORDS: 0, LOSTS: 0, REFUSALS: 0,
  DECLINES: 0, NOTSTORABLE: 0, REDELIVERIES: 0, PARTITIONS: 0, RETENTION: 0, VOLATILE: 0, LOSTCLAIMS: 0, LATECLAIMS: 0,
  DIVERGES: 0, AGING: 0, LOSTACQS: 0, LATEACQS: 0, RUNTIMEOUTS: 0, LOSTRECS: 0,
};
const ONLY = (property) => ({
  CHECK_ONCE: 0, CHECK_UKW: 0, CHECK_TRUTH: 0, CHECK_RECORD: 0, CHECK_FENCE: 0, CHECK_OWNER: 0, CHECK_SAME: 0, CHECK_END: 0, CHECK_NOFALSE: 0, CHECK_GRANT: 0, CHECK_TOLD: 0, CHECK_FRESH: 0, CHECK_ACK: 0,
  [`CHECK_${property}`]: 1,
});

const REPLAY = { STREAMCUTS: 2, REWORDS: 1, LOSTS: 1, REFUSALS: 1, DECLINES: 1, NOTSTORABLE: 1, REDELIVERIES: 1 };
const LEASE_A = { CRASHES: 1, PAUSES: 1, STREAMCUTS: 2, REFUSALS: 1 };
const LEASE_B = { CRASHES: 1, PAUSES: 1, LOSTS: 1, REWORDS: 1 };
const RETAIN = { PARTITIONS: 1, RETENTION: 1, PAUSES: 1, STREAMCUTS: 1 };
const VOLATILE = { ALL_KEYED: true, VOLATILE: 1, REWORDS: 1, PAUSES: 1, REFUSALS: 1 };
// A claim whose reply is lost (applied or not) and a claim the store applies late (LEDGER-26, DISPATCH-16).
const LOSTCLAIM = { LOSTCLAIMS: 1, LATECLAIMS: 1 };
// A re-run of a turn that answers without the call an earlier run made (RECORD-8), and a crash.
const DIVERGE = { DIVERGES: 1, CRASHES: 1, STREAMCUTS: 1, LOSTS: 1, REFUSALS: 1 };
// A turn-lease acquire whose reply is lost (applied or not) and one the store applies late (TURN-10, grant ids).
const GRANT_FAULTS = { LOSTACQS: 1, LATEACQS: 1 };
// Time passes for failed messages: TURN-12's re-send window and the ledger's retention (LEDGER-13).
const WINDOW_FAULTS = { AGING: 1, RETENTION: 1, RESEND_FROM: 1, STREAMCUTS: 2, REDELIVERIES: 2, MAXATT: 1 };
// The binding is a point of time too (boundAt) and time passes for a message in progress whose holder is
// gone; the runner re-checks the window before a resumed turn (TURN-11, TURN-12, TURN-15). SOLO=1: the
// client sends the ticket only (one message: the searches stay small enough for CI).
const RESUME_FAULTS = { AGING: 1, BOUNDAT: 1, RETENTION: 1, CRASHES: 1, STREAMCUTS: 1, REDELIVERIES: 1, MAXATT: 1 };
// Message 1 asks for what message 0 asked (SAME_ASK: "pay" again under a new message id): bound at failed
// message 0's index it derives message 0's key (TURN-12). Both messages, two cut streams (one for each), a
// re-send, one attempt per turn, the window from the binding (inherited with INHERIT, TURN-11).
// A volatile conversation store that restarts once and loses its last write (TURN-14), beside a volatile ledger
// that loses a row (TURN-14 refuses it beside a durable one); one attempt per turn, so a refused request fails it.
const VSTORE_FAULTS = { VSTORE: 1, ALL_KEYED: true, VOLATILE: 1, REFUSALS: 1, DECLINES: 1, LOSTS: 1, STREAMCUTS: 1, REDELIVERIES: 1, MAXATT: 1 };
// A run that outlives the dispatcher's bound on it (runTimeoutMs, DISPATCH-18), with a refused request, a lost
// response, a decline and a cut stream (a pause, the costly fault, is in the deep check).
const RUN_TIMEOUT_FAULTS = { RUNTIMEOUTS: 1, REFUSALS: 1, LOSTS: 1, DECLINES: 1, STREAMCUTS: 1 };
// A record the ledger applies while its reply is lost (DISPATCH-10, DISPATCH-17), with the outcomes that make each write:
// a refused request (release), a lost response (release or markUnknown), a cut stream (a retry replays the row).
const LOST_RECORD_FAULTS = { LOSTRECS: 1, REFUSALS: 1, LOSTS: 1, STREAMCUTS: 1 };
// Two turns of message 0 (TURN-23): turn 0's re-run answers without the call (DIVERGES), turn 1 makes it again; a crash
// between or in the turns makes another holder take the message up and read the carried call back from the records.
const CARRY_FAULTS = { SOLO: 0, TURNS2: 1, DIVERGES: 1, STREAMCUTS: 1, CRASHES: 1, LOSTS: 1, REFUSALS: 1 };
const CARRY_PAUSE_FAULTS = { SOLO: 0, TURNS2: 1, DIVERGES: 1, STREAMCUTS: 1, PAUSES: 1, REDELIVERIES: 1, LOSTS: 1, REFUSALS: 1 };
// A deploy between two runs of one turn (IDENT-4 broken, IDENT-10's guard), message 0 alone, with a crash (the take-over).
const DEPLOY_FAULTS = { SOLO: 0, DEPLOY: 1, CRASHES: 1, STREAMCUTS: 1, LOSTS: 1, REFUSALS: 1, DIVERGES: 1 };
// Two turns of message 0 and a deploy at any moment, between the turns too (TURN-23 across a deploy, IDENT-10): turn 0's
// re-run answers without the call, a crash makes a holder of the new release take the message up.
const CARRY_DEPLOY_FAULTS = { SOLO: 0, TURNS2: 1, DEPLOY: 1, DIVERGES: 1, STREAMCUTS: 1, CRASHES: 1, REFUSALS: 1 };
// TURN-23's slot after a committed resumed turn (finding 29's fix) across a deploy: turn 0's first attempt is cut and the
// message fails (one attempt per turn), a re-send resumes turn 0 at its index, and a crash after turn 0's commit makes the
// other worker take the message up and read the committed turn back.
const SLOT_FAULTS = { SOLO: 0, TURNS2: 1, DEPLOY: 1, SLOT: true, STREAMCUTS: 1, MAXATT: 1, REDELIVERIES: 1, CRASHES: 1 };
const SAME_ASK_FAULTS = { AGING: 1, BOUNDAT: 1, RETENTION: 1, STREAMCUTS: 2, REDELIVERIES: 1, MAXATT: 1, RESEND_FROM: 3, RECHECK: 3, SAME_ASK: 1 };

/** @type {{name: string, kind: "verify"|"ltl"|"np"|"expect", deep?: boolean, about: string, defines: object, ltl?: string, property?: string, rules?: string, explain?: string}[]} */
const CHECKS = [
  {
    name: "replay",
    kind: "verify",
    about: "streams cut before and after the call, re-worded replays, lost and refused requests, declines, "
      + "unstorable results, a re-send or redelivery of either message",
    defines: { ...NONE, ...REPLAY },
  },
  {
    name: "lease-a",
    kind: "verify",
    // The two largest searches (5.3 and 5.8 million states, about a third of the CPU of every check
    // CI ran): --deep, so that CI keeps its 15-minute budget on 2 cores. Run them with --deep, or
    // --only lease-a,lease-b, whenever the model or a rule they cover changes.
    deep: true,
    about: "a worker crash and a pause past the turn lease and/or the claim's lease (takeover, unknown, "
      + "wait, stale fences), with cut streams and a refused request",
    defines: { ...NONE, ...LEASE_A },
  },
  {
    name: "lease-b",
    kind: "verify",
    // The two largest searches (5.3 and 5.8 million states, about a third of the CPU of every check
    // CI ran): --deep, so that CI keeps its 15-minute budget on 2 cores. Run them with --deep, or
    // --only lease-a,lease-b, whenever the model or a rule they cover changes.
    deep: true,
    about: "a worker crash and a pause, with a lost response (release, 409 in progress) and a re-worded replay "
      + "(the stored request on takeover and re-claim)",
    defines: { ...NONE, ...LEASE_B },
  },
  {
    name: "retention",
    kind: "verify",
    about: "a worker cut off from the ledger (self-fencing, orphan claims, ledger_unavailable), retention "
      + "forgetting rows and downstream keys, a pause and a cut stream",
    defines: { ...NONE, ...RETAIN },
  },
  {
    name: "volatile",
    kind: "verify",
    about: "a volatile ledger that loses a row at any time (both tools keyed, LEDGER-14), a re-worded replay "
      + "(so the downstream sees a different request: 422, EFFECT-6), a pause and a refused request; "
      + "fencing of stale owners is not claimed here (see volatile-fence)",
    defines: { ...NONE, ...VOLATILE, CHECK_OWNER: 0 },
  },
  {
    name: "volatile-replay",
    kind: "verify",
    about: "a volatile ledger that loses a row, with a lost response, a refused request, a re-worded replay and "
      + "a re-send or redelivery (what a record may say after the ledger forgot)",
    defines: { ...NONE, ALL_KEYED: true, VOLATILE: 1, LOSTS: 1, REFUSALS: 1, REWORDS: 1, REDELIVERIES: 1, CHECK_OWNER: 0 },
  },
  {
    name: "volatile-unkeyed",
    kind: "verify",
    about: "an unkeyed_write allowed over a volatile ledger (LEDGER-14's opt-in) that loses its row: a not-performed "
      + "failure of any claim there says may have happened (LEDGER-8, whatever the write class); with a cut stream, a lost response, "
      + "a refused request and a re-send or redelivery. P_ONCE, P_UKW (the opt-in's known cost: a lost row re-runs "
      + "the write) and P_OWNER (volatile-fence) are off",
    defines: { ...NONE, VOLATILE: 1, VOLATILE_UNKEYED: 1, STREAMCUTS: 1, REFUSALS: 1, REDELIVERIES: 1, LOSTS: 1, CHECK_ONCE: 0, CHECK_UKW: 0, CHECK_OWNER: 0 },
  },
  {
    name: "lost-claim",
    kind: "verify",
    about: "a claim whose reply is lost (applied or not) and a claim the store applies late, with claim ids, "
      + "retries, settling and retiring (GUARD 2), a refused request, a cut stream and a re-send or redelivery",
    defines: { ...NONE, ...LOSTCLAIM, REFUSALS: 1, STREAMCUTS: 1, REDELIVERIES: 1 },
  },
  {
    name: "lost-claim-tombstone",
    kind: "verify",
    // Moved to --deep on 2026-12-06 (CI at 14m37s, 15.9 s of its CPU): a ledger without retire (GUARD 1);
    // lost-claim keeps main's guard (GUARD 2) in CI.
    deep: true,
    about: "(--deep) LEDGER-27's guard alone, a ledger without retire (GUARD 1: a released row refuses only the claim id it was released under) keeps "
      + "every other property with the faults of lost-claim; P_NOFALSE is off (late-claim-tombstone breaks it)",
    defines: { ...NONE, ...LOSTCLAIM, REFUSALS: 1, STREAMCUTS: 1, REDELIVERIES: 1, GUARD: 1, CHECK_NOFALSE: 0 },
  },
  {
    name: "lost-claim-pause",
    kind: "verify",
    deep: true,
    about: "a lost claim reply and a late claim, with a pause past a lease (of a holder, or of a claimant "
      + "still sending its claim again or settling it)",
    defines: { ...NONE, ...LOSTCLAIM, PAUSES: 1 },
  },
  {
    name: "lost-claim-crash",
    kind: "verify",
    deep: true,
    about: "a lost claim reply and a late claim, with a worker crash (a claimant that dies mid-claim leaves "
      + "the row to its lease)",
    defines: { ...NONE, ...LOSTCLAIM, CRASHES: 1 },
  },
  {
    name: "diverge",
    kind: "verify",
    about: "a re-run of a turn (a retry, or a turn resumed after its holder crashed) answers without the call an "
      + "earlier run made, so the committed turn's record (RECORD-8), kept in the commit's own write "
      + "(recordsWithCommit, TURN-5), must list it; with a crash, a cut stream, a lost response and a refused request",
    defines: { ...NONE, ...DIVERGE },
  },
  {
    name: "diverge-pause",
    kind: "verify",
    about: "a re-run that answers without the call, with a pause past the turn lease and a crash: the resumed "
      + "turn's record lists the key's row before its commit, and a paused holder may still claim and pay after "
      + "the listing, or die before its own record; with a cut stream",
    defines: { ...NONE, DIVERGES: 1, PAUSES: 1, CRASHES: 1, STREAMCUTS: 1 },
  },
  {
    name: "grants",
    kind: "verify",
    about: "lease grant ids (TURN-10): an acquire whose reply is lost (applied or not) and an acquire the store "
      + "applies late, re-sent with the same grant id, refused once its grant is over or earlier, given back by "
      + "releaseLeaseGrant when the runner gives up; with a pause and a cut stream",
    defines: { ...NONE, ...GRANT_FAULTS, PAUSES: 1 },
  },
  {
    name: "grants-crash",
    kind: "verify",
    deep: true,
    about: "(--deep) lease grant ids with a worker crash: a lost acquire reply and a late acquire of a runner that dies "
      + "while it sends its acquire again",
    defines: { ...NONE, ...GRANT_FAULTS, CRASHES: 1 },
  },
  {
    name: "grants-latest-only",
    kind: "verify",
    deep: true,
    about: "(--deep) a store that keeps only the latest grant's id, the faults of grants: every property but P_GRANT "
      + "holds (an orphan grant costs a wait of one lease, nothing else)",
    defines: { ...NONE, ...GRANT_FAULTS, PAUSES: 1, LATEST_GRANT_ONLY: true, CHECK_GRANT: 0 },
  },
  {
    name: "grants-liveness",
    kind: "ltl",
    ltl: "terminates",
    deep: true,
    about: "(--deep) LTL under weak fairness with a lost acquire reply and a late acquire, over a store that keeps only "
      + "the latest grant's id: every send still returns and every message ends",
    defines: { ...NONE, LIVENESS: true, ...GRANT_FAULTS, LATEST_GRANT_ONLY: true, CHECK_GRANT: 0 },
  },
  {
    name: "window",
    kind: "verify",
    about: "TURN-12's re-send window from the first failure: time passes for a failed message, retention sweeps "
      + "its rows, re-sends past the window return the stored failure; with cut streams, a lost response and two re-sends",
    defines: { ...NONE, ...WINDOW_FAULTS },
  },
  {
    name: "window-resume",
    kind: "verify",
    about: "the re-send window counted from the binding (boundAt, the rule being built), re-checked before any "
      + "attempt of a resumed turn: a message in progress whose holder died or lost the turn lease waits while "
      + "the window and the retention pass and retention sweeps its rows; one message (the ticket), a crash, "
      + "a cut stream and a re-send",
    defines: { ...NONE, ...RESUME_FAULTS, RESEND_FROM: 3, RECHECK: 3, SOLO: 1 },
  },
  {
    name: "deep-window-resume",
    kind: "verify",
    deep: true,
    about: "(--deep) the faults of window-resume with both messages",
    defines: { ...NONE, ...RESUME_FAULTS, RESEND_FROM: 3, RECHECK: 3 },
  },
  {
    name: "window-resume-pause",
    kind: "verify",
    deep: true,
    about: "(--deep) the faults of window-resume and a pause past a lease (a holder that lost the turn lease and may "
      + "still act while time passes for its message); both messages with a pause are past 32 million states",
    defines: { ...NONE, ...RESUME_FAULTS, RESEND_FROM: 3, RECHECK: 3, PAUSES: 1, SOLO: 1 },
  },
  {
    name: "fence-continues",
    kind: "verify",
    about: "LEDGER-19 allows it: a claim of a key retention forgot continues above the forgotten row's fence "
      + "(ledger-postgres: old fence + 1), so P_FENCE holds across the retention too and a not-performed failure "
      + "of that claim says may have happened (fence above 1, LEDGER-8); the faults of same-ask (message 1 bound at "
      + "failed message 0's index claims key 0 again after retention forgot it) and a refused request",
    defines: { ...NONE, ...SAME_ASK_FAULTS, REFUSALS: 1, FENCE_CONTINUES: 1 },
  },
  {
    name: "deep-fence-continues",
    kind: "verify",
    deep: true,
    about: "(--deep) fence continuation past retention (LEDGER-19) with the faults of same-ask-crash (a take-over of "
      + "message 1 after its holder died)",
    defines: { ...NONE, ...SAME_ASK_FAULTS, CRASHES: 1, FENCE_CONTINUES: 1 },
  },
  {
    name: "volatile-store",
    kind: "verify",
    about: "a volatile conversation store (TURN-14) that restarts and loses its last write (a commit, or a failMessage "
      + "with its record) beside a volatile ledger that loses a row (both tools keyed): the message is resumed by the "
      + "next driver; what a failure told the user stays true; with a refused request, a decline, a lost response, a cut stream and a "
      + "re-send or redelivery (P_OWNER off, volatile-fence)",
    defines: { ...NONE, ...VSTORE_FAULTS, CHECK_OWNER: 0 },
  },
  {
    name: "resolve",
    kind: "verify",
    about: "an operator resolves an unknown row, or an in-flight one whose lease expired, as not_performed (RESOLVE-2, "
      + "RESOLVE-3, RESOLVE-5: released, fence raised, the next claim re-runs the stored request) after RESOLVE-6's grace "
      + "(no living owner of its fence can still send late); with a pause past a lease, a lost response and a cut stream",
    defines: { ...NONE, RESOLVES: 1, PAUSES: 1, LOSTS: 1, STREAMCUTS: 1 },
  },
  {
    name: "diverge-nolist",
    kind: "verify",
    deep: true,
    about: "(--deep) the faults of diverge-pause over a ledger that does not list rows (-DNOLIST, RECORD-8's listed: false): "
      + "a resumed turn's record rests on its blanket statement alone (RECORD-7), and every property holds",
    defines: { ...NONE, DIVERGES: 1, PAUSES: 1, CRASHES: 1, STREAMCUTS: 1, NOLIST: true },
  },
  {
    name: "volatile-store-crash",
    kind: "verify",
    deep: true,
    // With the lost response too the search passed 34.6 million states and its 3 GB bound (938 s): not a check.
    about: "(--deep) the faults of volatile-store but the lost response, and a worker crash (a resumed turn of a "
      + "message whose holder died, and of one whose answer the store lost)",
    defines: { ...NONE, ...VSTORE_FAULTS, LOSTS: 0, CRASHES: 1, CHECK_OWNER: 0 },
  },
  {
    name: "volatile-store-pause",
    kind: "verify",
    deep: true,
    about: "(--deep) the faults of volatile-store but the lost response, and a pause past a lease (a paused holder that "
      + "may still pay while another resumes its message)",
    defines: { ...NONE, ...VSTORE_FAULTS, LOSTS: 0, PAUSES: 1, CHECK_OWNER: 0 },
  },
  {
    name: "liveness",
    kind: "ltl",
    // Moved to --deep on 2026-12-06 (CI at 14m37s, 29.8 s of its CPU): acyclic keeps non-progress cycles in CI and
    // every verify check keeps P_END at terminal states; this LTL adds progress under weak fairness.
    deep: true,
    ltl: "terminates",
    about: "(--deep) LTL under weak fairness: every send returns and every bound message ends answered or failed "
      + "(a crash and a pause)",
    defines: { ...NONE, LIVENESS: true, CRASHES: 1, PAUSES: 1 },
  },
  {
    name: "acyclic",
    kind: "np",
    about: "no cycle at all in the state graph (pan -l, no progress labels): every run is finite, so with "
      + "P_END at every terminal state every dispatch and turn terminates under any scheduler "
      + "(a crash, a pause and a cut stream)",
    defines: { ...NONE, CRASHES: 1, PAUSES: 1, STREAMCUTS: 1 },
  },
  {
    name: "deep-outcomes",
    kind: "verify",
    deep: true,
    about: "(--deep) a crash and a pause with a re-send or redelivery, a decline, an unstorable result and a cut stream",
    defines: { ...NONE, CRASHES: 1, PAUSES: 1, REDELIVERIES: 1, DECLINES: 1, NOTSTORABLE: 1, STREAMCUTS: 1 },
  },
  {
    name: "deep-partition",
    kind: "verify",
    deep: true,
    about: "(--deep) a crash, a worker cut off from the ledger, retention, a lost response and a re-worded replay",
    defines: { ...NONE, CRASHES: 1, PARTITIONS: 1, RETENTION: 1, LOSTS: 1, REWORDS: 1 },
  },
  {
    name: "deep-volatile",
    kind: "verify",
    deep: true,
    about: "(--deep) a volatile ledger with a crash, a lost response, a re-worded replay and a redelivery",
    defines: { ...NONE, ALL_KEYED: true, VOLATILE: 1, CRASHES: 1, LOSTS: 1, REWORDS: 1, REDELIVERIES: 1, CHECK_OWNER: 0 },
  },
  {
    name: "deep-diverge",
    kind: "verify",
    deep: true,
    about: "(--deep) a re-run that answers without the call, with a pause, a crash, a cut stream and a refused request "
      + "(what a resumed turn's committed record may say not_happened)",
    defines: { ...NONE, DIVERGES: 1, PAUSES: 1, CRASHES: 1, STREAMCUTS: 1, REFUSALS: 1 },
  },
  {
    name: "deep-lost-claim",
    kind: "verify",
    deep: true,
    about: "(--deep) a lost claim reply and a late claim, with a pause and a refused request",
    defines: { ...NONE, ...LOSTCLAIM, PAUSES: 1, REFUSALS: 1 },
  },
  {
    name: "old-rerun",
    kind: "expect",
    property: "P_SAME",
    rules: "LEDGER-21, IDENT-3",
    explain: "W1's first request is performed but its answer is lost, so the claim is released as \"may have happened\". The retry's model output re-words the memo (request 2: same identity, same key). The turn-1 dispatcher re-runs with that re-worded request instead of the stored request 1, so the downstream gets a different request under a key it holds for request 1: it cannot collapse the re-run, which is the promise a release of a keyed write rests on. With LEDGER-21 the re-run sends request 1 and the downstream replays its answer.",
    about: "turn-1 design: a re-run (after a release or a takeover) sends the replay's own arguments instead of the "
      + "request stored by the key's first claim",
    defines: { ...NONE, LOSTS: 1, REWORDS: 1, OLD_RERUN: true, ...ONLY("SAME") },
  },
  {
    name: "old-rerun-422",
    kind: "expect",
    property: "P_TRUTH",
    rules: "LEDGER-21, EFFECT-6",
    explain: "The same run as old-rerun, with the turn-1 reading of the answer: the downstream's 422 (the key holds another request) is taken as a definite failure. The ledger row and the committed turn now say the payment failed although it was made. With EFFECT-6 a 422 marks the row unknown (the effect may have happened); with LEDGER-21 the 422 does not arise at all.",
    about: "turn-1 design: the replay's arguments on re-run, and a 422 \"key reused\" read as a definite failure",
    defines: { ...NONE, LOSTS: 1, REWORDS: 1, OLD_RERUN: true, OLD_422: true, ...ONLY("TRUTH") },
  },
  {
    name: "old-turn",
    kind: "expect",
    explain: "Both messages are in the log and both workers read the committed count 0. W1's model answers message 1 at turn 0 and commits; W1 then answers message 0 at turn 1 (key 2) and pays. W0, still at its stale turn 0, answers message 0 too, under key 0: a different key, so neither the ledger nor the downstream can tell the two payments are one. With the turn lease, binding and the in-order queue (TURN-9 to TURN-11) message 0 has one turn index for every worker and attempt.",
    property: "P_ONCE",
    rules: "TURN-1, TURN-5, TURN-9, TURN-10, TURN-11",
    about: "turn-1 design: the turn index is the committed count read when a turn starts, with no turn lease "
      + "and no binding; user messages go into the log at once",
    defines: { ...NONE, STREAMCUTS: 1, OLD_TURN: true, ...ONLY("ONCE") },
  },
  {
    name: "no-self-fence",
    kind: "expect",
    explain: "W1 claims the payment and freezes past both leases; W0 takes the conversation over, takes the claim over, pays and commits. W1 then loses the ledger: its renewals fail, and without self-fencing its tool keeps going for as long as it likes, longer than the retention of the key at the ledger and the downstream. Its request finally arrives at a downstream that no longer knows the key, and pays again. With DISPATCH-13 the tool is aborted once W1's own clock passes the lease, before the store's clock lets anyone take the row over.",
    property: "P_ONCE",
    rules: "DISPATCH-13",
    about: "turn-1 design: an owner whose renewals cannot reach the ledger keeps its tool running past the lease",
    defines: { ...NONE, PARTITIONS: 1, RETENTION: 1, PAUSES: 1, NO_SELF_FENCE: true, ...ONLY("ONCE") },
  },
  {
    name: "np-says-not",
    kind: "expect",
    explain: "W0's request is performed but its answer is lost: the claim is released as \"may have happened\" and the message fails with a record that says so. The user re-sends; the message re-opens at the same turn (TURN-12) and the re-run's request is refused before the downstream accepts it (a 503). The code on main releases with effectMayHaveHappened false and the new record says not_happened, while the first request's payment stands. Proposed rule: only the key's first claim (fence 1) on a durable ledger can learn not_happened from a not-performed failure.",
    property: "P_RECORD",
    rules: "RECORD-2, LEDGER-8 (proposed: a not-performed failure of a re-claim, a takeover or any claim of a volatile ledger may have happened)",
    about: "the code on main: a not-performed failure releases with effectMayHaveHappened false even when the "
      + "claim was a re-claim or a takeover, whose earlier run may have performed the effect",
    defines: { ...NONE, LOSTS: 1, REFUSALS: 1, REDELIVERIES: 1, MAXATT: 1, NP_SAYS_NOT: true, ...ONLY("RECORD") },
  },
  {
    name: "resume-says-not",
    kind: "expect",
    explain: "W1 dispatches the payment and freezes past its turn lease before claiming. W0 takes the conversation, resumes message 0, claims the key, and its request is refused before acceptance: release, not performed. W1 wakes, never learns that it lost the turn (nothing fences a claim with the turn lease), re-claims the released key and pays. W0 then fails the message with a record saying not_happened. Proposed rule: a runner that resumed a message bound under an earlier lease grant says may_have_happened for every call it cannot show settled.",
    property: "P_RECORD",
    rules: "RECORD-2, RECORD-5, TURN-10 (proposed: a resumed turn's record says an earlier holder's effects may have happened)",
    about: "the code on main: a runner that resumed a message bound by an earlier holder records only what its "
      + "own attempts learned; the earlier holder can still be running",
    defines: { ...NONE, PAUSES: 1, REFUSALS: 1, MAXATT: 1, RESUME_SAYS_NOT: true, ...ONLY("RECORD") },
  },
  {
    name: "record-after-commit",
    kind: "expect",
    explain: "W0 answers message 0, then binds message 1 (the ticket, unkeyed, key 3). Its first attempt issues the ticket and completes the row, but the stream dies after the call resolved; the retry's model answers without the call (plain text), so W0 commits turn 1 without the ticket's result, and the record that the ticket was issued (RECORD-8) is still to be written, in a second write. W0 dies between the two writes. The queue redelivers message 1; W1 finds it answered and returns what the store holds (TURN-7): nothing ever runs the turn again, so nothing ever writes the record, and the ticket is in no committed turn and no record. With recordsWithCommit (TURN-5) the record is part of the commit's own write.",
    property: "P_RECORD",
    rules: "TURN-5 (recordsWithCommit), RECORD-8, TURN-7",
    about: "main before recordsWithCommit, and main over a store that does not declare it: a committed turn's record "
      + "(RECORD-8) is added in a second write after the commit, and a worker that dies between the two leaves an "
      + "earlier attempt's effect told nowhere",
    defines: { ...NONE, DIVERGES: 1, CRASHES: 1, STREAMCUTS: 1, RECORD_AFTER_COMMIT: true, ...ONLY("RECORD") },
  },
  {
    name: "resume-omits-record",
    kind: "expect",
    explain: "W1 binds message 0, its attempt's call (the payment) is complete, and W1 freezes before it claims the key, past its turn lease. W0 takes the lease and resumes message 0; its model answers without the call, it lists the turn's rows (none yet) and commits turn 0; with nothing to list, the code on main keeps no record. W1 wakes, claims the key (no row: fence 1) and pays, then dies before it can learn that its commit is refused and record its attempt (TURN-13). The redelivered message 0 is answered from the store. The payment is in no committed turn and no record: no listing taken before the commit (or after it) can see a claim made later. Proposed rule: a resumed turn's record is never omitted, and says that an earlier holder's attempts may have had effects it does not name (RECORD-8, RECORD-7).",
    property: "P_RECORD",
    rules: "RECORD-7, RECORD-8 (proposed: a resumed turn's committed-turn record is never omitted, and says an earlier holder's effects may have happened)",
    about: "the code on main: a resumed turn that commits without the call keeps no record when the ledger "
      + "listed nothing for it, so a paused earlier holder that claims after the listing and dies leaves its effect told nowhere",
    defines: { ...NONE, DIVERGES: 1, PAUSES: 1, CRASHES: 1, MAXATT: 1, RESUME_OMITS: true, ...ONLY("RECORD") },
  },
  {
    name: "superseded-own",
    kind: "expect",
    property: "P_RECORD",
    rules: "TURN-13, RECORD-5, RECORD-7",
    explain: "W1 binds message 0; its first attempt pays and completes the row, and the stream dies after the call resolved. W1 retries; W0 receives message 1 while W1 freezes past its turn lease, and takes the lease over (fence 2). W1's second attempt is answered by the model without the call (plain text, a real model need not repeat itself) and reaches message_stop; its commit is refused, since W0 holds the turn now (TURN-13). The runner before df13d09 kept a superseded record of the refused attempt's calls only: none. W1 lives and can record, so the blanket statement of the turn W0 resumes (an earlier holder's effects may have happened, RECORD-6, RECORD-8) does not account for the payment (RECORD-7: it covers a holder that died before it could record): on a ledger that does not list rows, nothing names it. With TURN-13 as it stands the superseded record carries the earlier attempts' keyed calls (attempt 1: happened).",
    about: "the runner before df13d09: a superseded attempt's record (TURN-13) lists the refused attempt's calls only, "
      + "not those of the runner's earlier attempts of the turn",
    defines: { ...NONE, DIVERGES: 1, PAUSES: 1, STREAMCUTS: 1, SUPERSEDED_OWN: true, ...ONLY("RECORD") },
  },
  {
    name: "np-keyed-only",
    kind: "expect",
    property: "P_RECORD",
    rules: "LEDGER-8 (whatever the write class), LEDGER-14, RECORD-2",
    explain: "An unkeyed_write (the ticket, message 1) over a volatile ledger the dispatcher is allowed to use for it (LEDGER-14's opt-in). W0 binds message 1; the ticket is issued, and the volatile ledger loses the row before W0 records it: the record is refused (stale_claim), and the message fails with a record saying may_have_happened. The user re-sends; the message re-opens (TURN-12) and the new run's claim finds no row: fence 1 again. Its request is refused before the downstream accepts it (a 503): not performed. Core before a84fff3 released it with effectMayHaveHappened false, the volatile case being a keyed_write's only, and the new record says not_happened of a ticket that was issued. LEDGER-8: whatever the write class, a not-performed failure on a volatile ledger (or of a claim above fence 1) may have happened. As with np-says-not, the model's re-opened message is not resumed (the model's resumed is the message's, TURN-15's is the turn index's, under which the runner would say may_have_happened for any class): the route stands for a dispatch whose turn is not marked resumed, as core's fidelity test's.",
    about: "core before a84fff3: an unkeyed_write's not-performed failure says not performed whatever its fence and "
      + "the ledger's durability (the may-have-happened cases were a keyed_write's only), over a volatile ledger "
      + "allowed for unkeyed writes",
    defines: { ...NONE, VOLATILE: 1, VOLATILE_UNKEYED: 1, STREAMCUTS: 1, REFUSALS: 1, REDELIVERIES: 1, MAXATT: 1, NP_KEYED_ONLY: true, ...ONLY("RECORD") },
  },
  {
    name: "volatile-store-durable-ledger",
    kind: "expect",
    property: "P_TRUTH",
    rules: "TURN-14 (a volatile store beside a durable ledger), LEDGER-8, TURN-15",
    explain: "TURN-14's opt-in (allowVolatileConversationStore: true): a volatile conversation store beside a durable ledger. W0 binds message 0; its one attempt's request is refused before the downstream accepts it (a 503). The claim was the key's first on a durable ledger, so the release says not performed, and the message fails with a record that says not_happened: W0's send raises turn_failed with it. The store restarts and loses that last write: message 0 is in progress again at turn 0, its failure and record gone. W1's send of message 1 drives the conversation, resumes message 0 (TURN-15) and re-claims the released key (fence 2): the payment is made, after the user was told it was not. Beside a volatile ledger (TURN-14's rule) the first release already says may_have_happened (LEDGER-8), which stays true: volatile-store verifies it.",
    about: "TURN-14's opt-in: a volatile conversation store beside a durable ledger; the store loses a failMessage "
      + "whose record said not_happened (a first claim on a durable ledger), and the resumed turn pays",
    defines: { ...NONE, VSTORE: 1, ALLOW_VOLATILE_STORE: true, REFUSALS: 1, MAXATT: 1, ...ONLY("TRUTH") },
  },
  {
    name: "volatile-store-forgets",
    kind: "expect",
    property: "P_ONCE",
    rules: "TURN-14 (a turn index not issued again while a key derived from it is within retention), TURN-2, TURN-11",
    explain: "A volatile conversation store beside a volatile ledger, the combination TURN-14 allows, whose restart loses more than a message's end: every write since message 0's append (-DVSTORE_FORGET); both tools keyed (-DALL_KEYED), so the downstream's key guards every call. W1 answers message 0 at turn 0: it claims key 0 and pays, completes the row and commits; its send returns, and the queue delivers message 0 again. The store restarts and forgets message 0 altogether: its append, its binding to turn 0, its commit. Message 1 is appended, then the redelivered message 0: the store does not know it, so it is a new message (TURN-2 cannot tell). W0 binds message 1 at turn 0, the index issued again (key 1), and answers it; then it binds message 0 at turn 1, which derives key 2: the ledger has no row for it and the downstream has never seen that key, so the payment is made a second time. Neither guard can collapse it, since the key changed with the index. The volatile store the other checks model loses only a message's end and keeps its binding, so the message is resumed at its index under its old key (volatile-store verifies every property with it); a store that forgets a binding breaks TURN-14's rule that an index is not issued again while a key derived from it is within retention, whatever the ledger.",
    about: "a volatile store (beside a volatile ledger) whose restart forgets a message with its binding and commit "
      + "(-DVSTORE_FORGET): its turn index goes to the next message, and a redelivery of the forgotten one is a new "
      + "message at a new index, under a new key",
    defines: { ...NONE, VSTORE: 1, VSTORE_FORGET: true, ALL_KEYED: true, LEDGER_VOLATILE: 1, REDELIVERIES: 1, MAXATT: 1, ...ONLY("ONCE") },
  },
  {
    name: "volatile-store-same-ask",
    kind: "verify",
    about: "the volatile store that loses a message's end (VSTORE) with message 1 asking for what message 0 asked "
      + "(-DSAME_ASK=1, both at one key per index), beside a volatile ledger that loses a row: a message bound at a failed "
      + "message's index replays its rows, never a row at an index issued again (P_FRESH); with a refused request, a "
      + "decline, a cut stream and a re-send (P_OWNER off, volatile-fence)",
    defines: { ...NONE, VSTORE: 1, SAME_ASK: 1, ALL_KEYED: true, VOLATILE: 1, REFUSALS: 1, DECLINES: 1, STREAMCUTS: 1, REDELIVERIES: 1, MAXATT: 1, CHECK_OWNER: 0 },
  },
  {
    name: "volatile-store-forgets-same-ask",
    kind: "expect",
    property: "P_FRESH",
    rules: "TURN-14 (rationale: a store that forgot a message or its binding issues its turn index again, and a new request at that index is answered with the old row), TURN-11, DISPATCH-5",
    explain: "Message 1 asks for what message 0 asked (-DSAME_ASK=1: at one turn index both derive one key), as two payments to one payee do: message 1 is a new request, not a re-send. W1 answers message 0 at turn 0: it claims key 0, pays, completes the row and commits; its send returns. The volatile store restarts and forgets message 0 with its binding to turn 0 and its commit (-DVSTORE_FORGET), beside a volatile ledger that keeps its rows. W1 takes message 1: turn index 0 is free as far as the store knows, so it is issued again, and message 1's call derives key 0: the ledger answers it with message 0's completed row (DISPATCH-5), and the new payment is reported made without being made. This is the consequence TURN-14's rationale names. A store that loses only a message's end keeps its binding (the message is resumed at its index), and a new message takes an index only after the message bound there failed (TURN-12, where replaying its row is meant): volatile-store-same-ask verifies P_FRESH with that store.",
    about: "a volatile store whose restart forgets a message with its binding (-DVSTORE_FORGET), and message 1 asking for "
      + "what message 0 asked (-DSAME_ASK=1): bound at the index issued again, message 1 is answered with message 0's row",
    defines: { ...NONE, VSTORE: 1, VSTORE_FORGET: true, SAME_ASK: 1, LEDGER_VOLATILE: 1, MAXATT: 1, ...ONLY("FRESH") },
  },
  {
    name: "resolve-no-grace",
    kind: "expect",
    property: "P_UKW",
    rules: "RESOLVE-6 (the grace of an operator tool's not_performed), RESOLVE-2, RESOLVE-3, RESOLVE-5",
    explain: "W0 answers message 0, binds message 1 (the ticket, unkeyed) and claims its key (fence 1), then freezes past the claim's lease with the request unsent. The lease expires; an operator, seeing the row in flight with its lease expired and no ticket at the downstream (true at that moment), resolves it as not_performed at once: released, fence 2, the request kept (RESOLVE-3, RESOLVE-5). W0 wakes and sends the ticket (issued once); its complete is refused as stale (fence 1 is no longer the row's), so its runner retries the turn, re-claims the released key (fence 3) and runs the stored request again: the ticket is issued twice. The fence refuses the late write, never the late request. RESOLVE-6's grace (measured from the lease's expiry: the owner may be paused with its request unsent) makes the operator wait until no living owner of the fence can still send; resolve verifies every property with it.",
    about: "an operator resolves an in-flight unkeyed_write row whose lease expired as not_performed at once, without "
      + "RESOLVE-6's grace: its owner, paused with the request unsent, wakes and sends it",
    defines: { ...NONE, RESOLVES: 1, RESOLVE_GRACE: 0, PAUSES: 1, ...ONLY("UKW") },
  },
  {
    name: "run-timeout",
    kind: "verify",
    about: "a run that outlives the dispatcher's bound (runTimeoutMs, DISPATCH-18): the dispatch is answered in_flight_elsewhere "
      + "while the run goes on unrenewed; it stops, sends its request late, or never settles, and is recorded under its own "
      + "fence (refused after a takeover); with a refused request, a lost response, a decline and a cut stream",
    defines: { ...NONE, ...RUN_TIMEOUT_FAULTS },
  },
  {
    name: "run-timeout-pause",
    kind: "verify",
    deep: true,
    about: "(--deep) a run past its bound with a pause past a lease (a holder frozen while its late run, or another's, "
      + "can still send and record), a refused request and a cut stream",
    defines: { ...NONE, RUNTIMEOUTS: 1, PAUSES: 1, REFUSALS: 1, STREAMCUTS: 1 },
  },
  {
    name: "run-timeout-says-not",
    kind: "expect",
    property: "P_TRUTH",
    rules: "DISPATCH-18 (in_flight_elsewhere at the bound: the effect may have happened), LEDGER-8",
    explain: "W1 binds message 0 and claims the payment's key (fence 1); the tool's run is still pending when the bound passes. This dispatcher answers the bound as a run that was not performed, so the runner's one attempt fails the message with a record that says not_happened, and W1's send raises turn_failed with it. The run was only signalled to stop: its request was on its way, the downstream performs it, and the payment the user was told did not happen is made. DISPATCH-18 answers in_flight_elsewhere (the effect may have happened), which stays true whatever the run does later: run-timeout verifies it.",
    about: "a dispatcher that answers a run past its bound as not performed (-DRT_SAYS_NOT): the run goes on and its "
      + "request is performed after the user was told it was not",
    defines: { ...NONE, RUNTIMEOUTS: 1, MAXATT: 1, RT_SAYS_NOT: true, ...ONLY("TRUTH") },
  },
  {
    name: "run-timeout-release",
    kind: "expect",
    property: "P_ONCE",
    rules: "DISPATCH-18 (the row is not written at the bound), LEDGER-7, LEDGER-8",
    explain: "The client sends message 1 only (the ticket, unkeyed). W1 binds it and claims the ticket's key (fence 1); the run is still pending at the bound, and this dispatcher releases the row then (the claim given back, may have happened). The runner retries the turn: its claim re-claims the released key (fence 2) and issues the ticket. The first run, signalled but already sending, issues it too: two tickets. DISPATCH-18 leaves the row in flight, unrenewed: the retry waits or, once the lease lapsed, finds an unkeyed_write's row expired and marks it unknown, never re-run (LEDGER-7), and the late run's outcome is recorded under its fence or refused.",
    about: "a dispatcher that releases the row when a run passes its bound (-DRT_RELEASE): the retry re-runs an unkeyed "
      + "write whose first run is still going",
    defines: { ...NONE, RUNTIMEOUTS: 1, SOLO: 1, RT_RELEASE: true, ...ONLY("ONCE") },
  },
  {
    name: "run-timeout-unfenced",
    kind: "expect",
    property: "P_OWNER",
    rules: "DISPATCH-18 (a late outcome is recorded under its own fence), LEDGER-5, LEDGER-16, DISPATCH-8",
    explain: "W1 claims the payment's key (fence 1) and the run passes its bound: in_flight_elsewhere, the lease no longer renewed. W1's runner retries the turn; the lease lapses on the store's clock and the retry takes the row over (fence 2). The first run then settles (it honoured the signal and stopped before sending) and its outcome is written without its fence: the ledger releases the row under fence 2's claim, a write that is not the key's latest claim's, while fence 2's run is about to send. Recorded under its own fence (LEDGER-5, DISPATCH-8) it is refused as stale and changes nothing.",
    about: "a late outcome of a run past its bound written whatever the row's fence (-DRT_UNFENCED): it lands on the "
      + "claim that took the row over",
    defines: { ...NONE, RUNTIMEOUTS: 1, RT_UNFENCED: true, ...ONLY("OWNER") },
  },
  {
    name: "run-timeout-unbounded",
    kind: "expect",
    // The least informative of the four (a wait that never ends): --deep, to keep CI's added time under 10 %.
    deep: true,
    property: "P_END",
    rules: "DISPATCH-18 (the wait for a run is bounded), LEDGER-9",
    explain: "W1 binds message 0, claims the payment's key, and the run never settles (a client without a timeout, a socket dropped silently). With no bound the dispatcher waits for it, renewing the claim's lease, and the runner its turn lease: the send never returns, and W0's send of message 1 waits for the turn lease for ever. With DISPATCH-18 the dispatch is answered at the bound and the row is left to its lease.",
    about: "(--deep) no bound on a run (-DRT_NOBOUND): a run that never settles holds its row, the turn and every send of the "
      + "conversation for ever",
    defines: { ...NONE, RUNTIMEOUTS: 1, RT_NOBOUND: true, ...ONLY("END") },
  },
  {
    name: "lost-record",
    kind: "verify",
    about: "a record (complete, fail, release, markUnknown) that the ledger applies while its reply is lost (DISPATCH-10, "
      + "DISPATCH-17): the identical write sent again is refused with stale_claim and the dispatcher reads the row: its own "
      + "write at its fence is answered as acknowledged, a row that moved on keeps the refusal, a row it cannot read "
      + "raises ledger_unavailable; with a refused request, a decline, a lost response, an unstorable result, a cut "
      + "stream and a re-send or redelivery",
    defines: { ...NONE, ...LOST_RECORD_FAULTS, DECLINES: 1, NOTSTORABLE: 1, REDELIVERIES: 1 },
  },
  {
    name: "lost-record-pause",
    kind: "verify",
    // 4.2 million states, about 13 s of CPU: --deep. The pause is what lets the row move on (a take-over
    // re-claims a released row) between the write and its re-send, so the lookup meets another fence.
    deep: true,
    about: "(--deep) a record applied with its reply lost, and a pause past the turn lease: another holder takes the "
      + "message over and moves the row on before the re-send, so the lookup finds another fence and the refusal stands",
    defines: { ...NONE, ...LOST_RECORD_FAULTS, PAUSES: 1 },
  },
  {
    name: "lost-record-face-safe",
    kind: "verify",
    deep: true,
    about: "(--deep) the stale_claim of a re-sent record taken at face value (-DSTALE_FACE, no lookup) with the faults of "
      + "lost-record-pause: every property but P_ACK holds, since the refusal only weakens the answer to may have "
      + "happened (DISPATCH-8) and no write or re-run follows it; what DISPATCH-17 buys is the answer, P_ACK",
    defines: { ...NONE, ...LOST_RECORD_FAULTS, PAUSES: 1, STALE_FACE: true, CHECK_ACK: 0 },
  },
  {
    name: "lost-record-face",
    kind: "expect",
    property: "P_ACK",
    rules: "DISPATCH-17 (lookup after a re-sent record is refused with stale_claim), DISPATCH-10",
    explain: "W1 answers message 0: it claims key 0 (fence 1), pays, and completes the row; the ledger applies the completion but its reply is lost (ledger_unavailable). The dispatcher sends the identical write again with fence 1 (DISPATCH-10): the row is no longer in flight at fence 1, because that very write completed it, so the re-send is refused with stale_claim. Taken at face value, the refusal says the claim was lost: the dispatch answers stale_claim and the payment, which the ledger holds as completed under this claim's fence, is reported as one that may have happened. DISPATCH-17 reads the row instead: only this claim ever holds fence 1 (LEDGER-4), so a row completed at fence 1 is this write, answered as acknowledged. The face value breaks no other property (lost-record-face-safe, --deep): the answer is weaker, never false, and nothing is written or re-run on it.",
    about: "the stale_claim of a re-sent record taken at face value (-DSTALE_FACE): a completion the ledger applied, its "
      + "reply lost, is answered as a lost claim (may have happened) while the row holds it at this claim's fence",
    defines: { ...NONE, LOSTRECS: 1, STALE_FACE: true, ...ONLY("ACK") },
  },
  {
    name: "carry",
    kind: "verify",
    // Subsumed by carry-deploy-faults (--deep: the same faults with the deploy optional); CI keeps carry-deploy
    // and carry-deploy-slot. Moved on 2026-12-06 to pay for carry-deploy-slot and carry-deploy-rederive.
    deep: true,
    about: "(--deep) a message with two turns (TURN-23): turn 0's re-run answers without the call an earlier run made, turn 0 "
      + "commits with its record listing it, and turn 1's model makes the call again; dispatched under turn 0's key "
      + "(answered from its row, met in flight, or re-run under the stored request if released), read back from the "
      + "records by a holder that takes the message up after a crash; a second ask after turn 0 answered the call runs "
      + "under its own key; with a cut stream, a lost response and a refused request",
    defines: { ...NONE, ...CARRY_FAULTS },
  },
  {
    name: "carry-pause",
    kind: "verify",
    deep: true,
    about: "(--deep) the two turns of carry with a pause past a lease instead of the crash, and a re-send: a holder of "
      + "turn 0 paused with the call in flight while another commits turn 0 and carries the call into turn 1",
    defines: { ...NONE, ...CARRY_PAUSE_FAULTS },
  },
  {
    name: "no-carry",
    kind: "expect",
    property: "P_ONCE",
    rules: "TURN-23 (a later turn's call dispatched under the listed call's key), RECORD-8",
    explain: "Message 0 alone, with two turns (-DTURNS2). W1 binds message 0 at turn 0, claims key 0 (fence 1), pays and completes the row; the stream dies after the call resolved. The retry's model answers without the call this time (a re-run need not answer as an earlier run did), and W1 commits turn 0 without it; the committed turn's record says key 0 happened (RECORD-8). The message goes on to turn 1, and its model, which never saw the payment, makes the same call again: the same ask. With -DNO_CARRY it is claimed under turn 1's own key 2, which meets no row, and the downstream sees a new Idempotency-Key: paid twice for one ask, while every key ran once and every record told the truth. TURN-23 dispatches it under the listed call's key 0, whose completed row answers it (carry verifies it with a crash, a cut stream, a lost response and a refused request; carry-pause, --deep, with a pause).",
    about: "turn 1's repeat of a call turn 0 left unanswered is claimed under turn 1's own key (-DNO_CARRY): it meets no "
      + "row and the downstream sees a new Idempotency-Key",
    defines: { ...NONE, SOLO: 0, TURNS2: 1, DIVERGES: 1, STREAMCUTS: 1, NO_CARRY: true, ...ONLY("ONCE") },
  },
  {
    name: "carry-answered",
    kind: "expect",
    property: "P_FRESH",
    rules: "TURN-23 (a listed call carried only while no committed turn of the message answered it)",
    explain: "Message 0 alone, with two turns (-DTURNS2), no fault. W1 binds message 0 at turn 0, claims key 0, pays and completes the row, and commits turn 0 answering the call with its result: the model has seen the payment. Turn 1's model makes the same call again: a second ask, made having seen the first, which TURN-23 runs under turn 1's own key. With -DCARRY_ANSWERED the runner carries the call although a committed turn answered it: turn 1's call is dispatched under key 0, the completed row replays its result, and the second payment is reported as made while nothing was paid. It is not a double effect (P_ONCE holds): what breaks is what the model and the user are told, P_FRESH with TURNS2. TURN-23 carries a listed call only while no committed turn of the message answered it (the runner's carriedAfter drops the answered keys).",
    about: "a runner that carries a call after a committed turn answered it (-DCARRY_ANSWERED): the second ask turn 1 makes, "
      + "having seen the first, is answered from the first ask's completed row and nothing is paid",
    defines: { ...NONE, SOLO: 0, TURNS2: 1, CARRY_ANSWERED: true, ...ONLY("FRESH") },
  },
  {
    name: "deploy",
    kind: "verify",
    // Subsumed by carry-deploy-faults (--deep: the same faults with the deploy optional); CI keeps carry-deploy
    // and carry-deploy-slot. Moved on 2026-12-06 to pay for carry-deploy-slot and carry-deploy-rederive.
    deep: true,
    about: "(--deep) a deploy between two runs of one turn changes how pay's key is derived (IDENT-4 broken), its new definition "
      + "reading old stored requests or not: in a resumed turn IDENT-10's guard lists the turn's rows and dispatches the call "
      + "under an earlier definition's row's key, or refuses it (tool_definition_changed) when the row cannot be read; "
      + "with a crash, a cut stream, a lost response, a refused request and a re-run that answers without the call (the "
      + "resumed turn's record lists the other definition's row, RECORD-8)",
    defines: { ...NONE, ...DEPLOY_FAULTS },
  },
  {
    name: "deploy-reword",
    kind: "verify",
    deep: true,
    about: "(--deep) the faults of deploy and a re-worded replay: the row matched under another definition holds a request "
      + "worded otherwise than the resumed turn's call, and its re-run sends the stored one (LEDGER-21)",
    defines: { ...NONE, ...DEPLOY_FAULTS, REWORDS: 1 },
  },
  {
    name: "no-guard",
    kind: "expect",
    property: "P_ONCE",
    rules: "IDENT-10 (a resumed turn's guard against rows of another definition), IDENT-4, TURN-15",
    explain: "Message 0 alone, one deploy (-DDEPLOY). W1 binds message 0 at turn 0, claims key 0 under pay's first definition and pays; it crashes before it records anything. A deploy changes how pay's key is derived (IDENT-4 says it must not while rows of the old definition are within retention; IDENT-10 is the net for when it does). The queue redelivers message 0 and W0 takes the turn over (resumed, TURN-15) under the new definition: the call's key is now key 1, which meets no row. With -DNO_IDENT_GUARD it is claimed and paid again, and a keyed downstream sees a new Idempotency-Key. IDENT-10's guard lists the turn's rows before claiming: key 0's row, made under another definition, whose stored request gives the call's key under the new one, and the call is dispatched under key 0 (in flight with its lease lapsed: taken over and re-run under the stored request, which the downstream collapses); when the new schema refuses the stored request, the call is refused with tool_definition_changed before anything is claimed (deploy verifies both).",
    about: "a resumed turn after a deploy claims the call under its own key, with no listing (-DNO_IDENT_GUARD): the row "
      + "the earlier run made under the old definition is never met",
    defines: { ...NONE, SOLO: 0, DEPLOY: 1, CRASHES: 1, NO_IDENT_GUARD: true, ...ONLY("ONCE") },
  },
  {
    name: "deploy-pause",
    kind: "expect",
    // A residual of the rule, not a guard of the code: --deep keeps the new CI checks within about 20 s of CPU.
    deep: true,
    property: "P_ONCE",
    rules: "IDENT-10 (its residual: a claim of the old definition made after the listing), IDENT-4, TURN-15",
    explain: "IDENT-10's residual: a process of the old release still able to claim. W1 binds message 0 and its model's call is complete when W1 pauses past its turn lease, before it claims. Message 0 is delivered again; W0 acquires the lease, and a deploy changes pay's key derivation. W0 resumes the turn under the new definition (key 1); its listing finds no row, since W1 has not claimed. W1 wakes, claims key 0 under the old definition and pays; W0 claims key 1 and pays: two payments for one ask. Without the deploy both derive key 0 and the ledger holds the second claimant off (in flight elsewhere, LEDGER-15). No listing sees a claim made after it, and the paused process does not know it lost the turn (TURN-15): only IDENT-4 (no such deploy while a process of the old release can still claim for a turn, which in practice means draining the old release before it) keeps it out. With a crash instead of the pause (the old holder dead), deploy verifies every property.",
    about: "(--deep) IDENT-10's guard with a pause instead of a crash: a holder of the old release, paused past its turn lease before "
      + "its claim, claims under the old definition's key after the new holder's listing, and both pay",
    defines: { ...NONE, SOLO: 0, DEPLOY: 1, PAUSES: 1, REDELIVERIES: 1, ...ONLY("ONCE") },
  },
  {
    name: "carry-deploy",
    kind: "verify",
    about: "the two turns of carry with a deploy at any moment, between the turns too (TURN-23 across a deploy): turn 1's "
      + "call carried from turn 0 is dispatched at turn 0's index as a re-run, through IDENT-10's guard there (answered "
      + "from the old definition's row, waited on, re-run under its old key), or refused with tool_definition_changed "
      + "when the new schema refuses the stored request (answered as not run, the listed call's effect may have happened); "
      + "a holder of the new release takes the message up after a crash and reads the carried call back; with a cut stream",
    defines: { ...NONE, ...CARRY_DEPLOY_FAULTS },
  },
  {
    name: "carry-deploy-faults",
    kind: "verify",
    deep: true,
    about: "(--deep) the faults of carry-deploy and a lost response and a refused request (a released row of the old "
      + "definition re-run under its old key from turn 1)",
    defines: { ...NONE, ...CARRY_DEPLOY_FAULTS, LOSTS: 1 },
  },
  {
    name: "carry-deploy-pause",
    kind: "expect",
    // IDENT-10's residual (deploy-pause) reached through a carried call: nothing of the code to regress, so --deep.
    deep: true,
    property: "P_ONCE",
    rules: "IDENT-10 (its residual: a claim of the old definition made after the listing), TURN-23, TURN-15",
    explain: "IDENT-10's residual (deploy-pause) reached through a carried call, with the deploy only after turn 0's commit (-DDEPLOY_BETWEEN_TURNS). W1 binds message 0 at turn 0; its model's call is complete when W1 pauses past its turn lease, before it claims. W0 resumes turn 0, lists no row, and the re-run answers without the call; W0 commits turn 0 with its resumed statement (the earlier holder's effects may have happened), which the model's TURNS2 carries as key 0. The deploy comes, and turn 1's carried call is dispatched at turn 0's index under the new definition's key 1; IDENT-10's guard there lists no row, since W1 has not claimed. W1 wakes, claims key 0 under the old definition and pays; W0 claims key 1 and pays. Without the deploy the carried call claims key 0 and meets W1's claim. Only IDENT-4 (no such deploy while a process of the old release can still claim for a turn) keeps it out, as for deploy-pause. The runner as coded does not carry on the resumed statement at all, and pays twice here without any deploy (carry-listed-only-pause).",
    about: "(--deep) IDENT-10's residual across the turns: a holder of the old release paused before its claim at turn 0, "
      + "a deploy only after turn 0's commit (-DDEPLOY_BETWEEN_TURNS); turn 1's carried call, dispatched at turn 0's index "
      + "under the new definition's key, lists no row there and both pay",
    defines: { ...NONE, SOLO: 0, TURNS2: 1, DEPLOY: 1, DIVERGES: 1, PAUSES: 1, REDELIVERIES: 1, DEPLOY_BETWEEN_TURNS: true, ...ONLY("ONCE") },
  },
  {
    name: "carry-deploy-pause-safe",
    kind: "verify",
    deep: true,
    about: "(--deep) the two turns and the deploy of carry-deploy with a pause past a lease and a re-send instead of the "
      + "crash, P_ONCE off (carry-deploy-pause is its residual): every other property holds, P_RECORD, P_TRUTH, P_SAME "
      + "and P_FRESH among them",
    defines: { ...NONE, SOLO: 0, TURNS2: 1, DEPLOY: 1, DIVERGES: 1, STREAMCUTS: 1, PAUSES: 1, REDELIVERIES: 1, REFUSALS: 1, CHECK_ONCE: 0 },
  },
  {
    name: "carry-listed-only-pause",
    kind: "expect",
    // A finding against TURN-23 as written (2026-12-06), for the lead: --deep until the rule is settled.
    deep: true,
    property: "P_ONCE",
    rules: "TURN-23 (calls carried only when a record lists them), RECORD-7, RECORD-8, TURN-15",
    explain: "The runner as coded (carry.ts's withRecord, -DCARRY_LISTED_ONLY): a call is carried only when a committed turn's record lists it, not on a resumed record's \"resumed\": true, which names no call. W1 binds message 0 at turn 0; its model's call is complete when W1 pauses past its turn lease, before it claims. Message 0 is delivered again; W0 takes the lease and resumes turn 0 (TURN-15); its listing finds no row (W1 has not claimed) and the re-run's model answers without the call, so W0 commits turn 0 with a record that lists no call and says resumed (RECORD-7: the earlier holder's effects may have happened). W1 wakes, claims key 0 and pays. Turn 1's model, which never saw the payment, makes the call again, the same ask; nothing is carried, and it is claimed under turn 1's key 2 and paid again. No deploy is needed. The model's TURNS2 carry without the switch carries on the resumed statement too (turn 1's call dispatched under turn 0's key 0, where it meets W1's claim), and carry-pause (--deep) verifies that: what TURN-23 would need to say for a resumed committed turn whose listing could not exclude a later claim.",
    about: "(--deep) a finding against TURN-23 as written: the runner carries only calls a record lists (-DCARRY_LISTED_ONLY), and a "
      + "holder paused before its claim at turn 0 claims after the resumed turn 0 committed without listing it; turn 1's call "
      + "runs under its own key and both pay, with no deploy",
    defines: { ...NONE, SOLO: 0, TURNS2: 1, DIVERGES: 1, PAUSES: 1, REDELIVERIES: 1, CARRY_LISTED_ONLY: true, ...ONLY("ONCE") },
  },
  {
    name: "carry-deploy-runs",
    kind: "expect",
    property: "P_ONCE",
    rules: "TURN-23 (a later turn's call of a tool whose new definition refuses the listed call's stored request is refused), IDENT-10",
    explain: "Message 0 alone, two turns and one deploy (-DTURNS2 -DDEPLOY). W1 binds message 0 at turn 0, claims key 0 under pay's first definition, pays and completes the row; the stream dies after the call resolved, the retry's model answers without the call, and W1 commits turn 0 with a record that says key 0 happened (RECORD-8). A deploy changes how pay's key is derived, and its new schema refuses the stored request of key 0 (a new required field in the identity, RECORD-10). Turn 1 begins under the new definition and its model, which never saw the payment, makes the call again: the same ask. The spec before read the refused request as matching nothing (-DCARRY_DEPLOY_RUNS): the call is claimed under turn 1's own key 3, which meets no row, and the downstream sees a new Idempotency-Key: paid twice for one ask. TURN-23 as it stands refuses it with tool_definition_changed (request_refused) before anything is claimed, answered to the model as a call not run whose effect happened or may have happened, and the call stays listed (carry-deploy verifies it; a holder of the new release that takes the message up after a crash reads key 0 back and refuses alike).",
    about: "the spec before: a carried call whose stored request the deployed schema refuses matches nothing and runs under "
      + "turn 1's own key (-DCARRY_DEPLOY_RUNS)",
    defines: { ...NONE, ...CARRY_DEPLOY_FAULTS, CARRY_DEPLOY_RUNS: true, ...ONLY("ONCE") },
  },
  {
    name: "carry-deploy-own-index",
    kind: "expect",
    property: "P_ONCE",
    rules: "TURN-23 (a call matched across a deploy is dispatched at the listed call's turn index as a re-run), IDENT-10",
    explain: "As carry-deploy-runs until the deploy: W1 pays under key 0 at turn 0, its stream dies after the call, the retry answers without it, and turn 0 commits with a record that says key 0 happened. The deploy changes pay's key derivation, and the new definition reads the old stored request (its key under the new definition is the call's). Turn 1's model makes the call again; with -DCARRY_DEPLOY_OWN_INDEX the matched call is claimed at turn 1's own index, key 3: IDENT-10's guard lists the rows of the index a call is dispatched at, and turn 1's index has none, so nothing finds key 0's row and the payment is made twice. TURN-23 dispatches it at turn 0's index as a re-run: its key there under the new definition is key 1, the guard lists turn 0's rows and finds key 0's, whose stored request gives the call's key, and the call is answered from it (carry-deploy verifies it).",
    about: "a carried call matched across a deploy claimed at turn 1's index instead of re-run at turn 0's "
      + "(-DCARRY_DEPLOY_OWN_INDEX): no guard lists turn 0's rows, and the new definition's key meets no row",
    defines: { ...NONE, ...CARRY_DEPLOY_FAULTS, CARRY_DEPLOY_OWN_INDEX: true, ...ONLY("ONCE") },
  },
  {
    name: "carry-no-takeup-read",
    kind: "expect",
    property: "P_ONCE",
    rules: "TURN-23 (a runner that takes a message up finds the listed calls again from the records and committed turns)",
    explain: "As no-carry until turn 0's commit: W1 pays under key 0, the stream dies after the call, the retry answers without it, and W1 commits turn 0 with a record that says key 0 happened. W1 crashes before it begins turn 1; the queue redelivers message 0 and W0 takes it up (the lease of the crashed holder expires): W0 begins turn 1 with nothing carried, since it does not read turn 0's records back (-DCARRY_NO_TAKEUP_READ; the holder that committed turn 0 carries the call from the record it wrote, and would have). Turn 1's model makes the call again and it is claimed under key 2: paid twice. TURN-23's take-up reads the records kept beside the conversation and the committed turns (the runner's carriedBefore) and finds key 0 again; carry verifies it.",
    about: "a holder that takes the message up between its turns does not read turn 0's records back "
      + "(-DCARRY_NO_TAKEUP_READ): the call turn 0 left unanswered is claimed under turn 1's own key",
    defines: { ...NONE, SOLO: 0, TURNS2: 1, DIVERGES: 1, STREAMCUTS: 1, CRASHES: 1, CARRY_NO_TAKEUP_READ: true, ...ONLY("ONCE") },
  },
  {
    name: "carry-deploy-slot",
    kind: "verify",
    about: "TURN-23's slot after a committed resumed turn (-DSLOT, finding 29's fix: carry.ts's pausedSlot) across a deploy "
      + "at any moment: turn 0 fails, is re-sent and resumed, and answers the call; turn 1's second ask is dispatched at turn "
      + "0's index (at the ordinal after the answered one when that key is the call's), through IDENT-10's guard less the "
      + "row turn 0 answered; turn 1 fails too and a re-send resumes it, reading back the key stored with the committed turn "
      + "0; two cut streams, two re-sends, one attempt per turn",
    defines: { ...NONE, ...SLOT_FAULTS, CRASHES: 0, STREAMCUTS: 2, REDELIVERIES: 2 },
  },
  {
    name: "carry-deploy-slot-crash",
    kind: "verify",
    deep: true,
    about: "(--deep) the slot of carry-deploy-slot taken up after a crash between the turns (the faults of carry-deploy-rederive, "
      + "with the key stored with the committed turn), with a re-run that answers without the call and a refused request",
    defines: { ...NONE, ...SLOT_FAULTS, DIVERGES: 1, REFUSALS: 1 },
  },
  {
    name: "carry-deploy-rederive",
    kind: "expect",
    property: "P_FRESH",
    rules: "TURN-23 (a slot's guard never answers a call from a row a committed turn answered: the key that turn answered, kept with it), IDENT-10",
    explain: "Message 0 alone, two turns, one deploy, the slot (-DTURNS2 -DDEPLOY -DSLOT), one attempt per turn. W1 binds message 0 at turn 0; its stream dies before the call is complete and the message fails. The user re-sends it: W0's send re-opens it (TURN-12), and W1, whose send had not returned yet, binds it again at its index, resumed (TURN-15), claims key 0 under pay's first definition, pays, completes the row and commits turn 0 answering the call with its result: turn 0's record says resumed (RECORD-7), so the message has a slot at turn 0's index (TURN-23, finding 29). W1 crashes before it begins turn 1, and a deploy changes pay's key derivation (the new definition reads old stored requests). W0 takes the message up (the queue's redelivery) and begins turn 1, whose model pays again having seen the payment: a second ask, dispatched at the slot. W0 reads the committed turn 0 back and, with -DREDERIVE_ANSWERED, derives the key its call answered under its own definition, key 1, not the key 0 it was dispatched under: key 1 is the call's key at ordinal 0, so the slot takes ordinal 1, key 5, and IDENT-10's guard at turn 0's index excludes key 1, which has no row. It finds key 0, made under the other definition, whose stored request gives the call's key, and dispatches the call under it: the completed row replays the first payment's result, and the second ask is told a payment that was not made. With the key kept with the committed turn (the default) W0 knows turn 0 answered key 0: the slot is key 1 at ordinal 0, the guard excludes key 0 and finds no other row, and the second ask is claimed under key 1 and paid (carry-deploy-slot, and carry-deploy-slot-crash, --deep, with these faults, verify it). The holder that committed turn 0 knows the key from its own dispatch and is right either way: only a take-up between the turns or in turn 1, or a re-send, reads the turn back.",
    about: "a holder that reads the committed turn 0 back derives the key it answered under its own definition "
      + "(-DREDERIVE_ANSWERED, the runner before the keys are stored with the committed turn): after a deploy the slot's guard "
      + "does not exclude the first ask's row, and turn 1's second ask is answered from it",
    defines: { ...NONE, ...SLOT_FAULTS, REDERIVE_ANSWERED: true, ...ONLY("FRESH") },
  },
  {
    name: "carry-three-deploy",
    kind: "verify",
    deep: true,
    about: "(--deep) a third turn (-DTURNS3): turn 0's re-run answers without the call, turn 1 carries it and may answer it, "
      + "turn 2 makes it again (the same ask while no committed turn answered it, a second ask once turn 1 did); a deploy "
      + "at any moment and a crash make a holder of the new release take the message up before turn 2 and read which listed "
      + "call turn 1 answered from the key stored with it (TURN-24); with a cut stream and a refused request",
    defines: { ...NONE, ...CARRY_DEPLOY_FAULTS, TURNS3: 1 },
  },
  {
    name: "carry-three-resend",
    kind: "verify",
    about: "the three turns of carry-three-deploy read back by a re-send instead of a take-up after a crash: turn 0 "
      + "fails after its payment, is re-sent and resumed, and its re-run answers without the call; turn 1 answers it from "
      + "its row; turn 2 fails and a re-send resumes it, reading which listed call turn 1 answered from its stored key; "
      + "a deploy at any moment, two cut streams, two re-sends, one attempt per turn",
    defines: { ...NONE, SOLO: 0, TURNS2: 1, DEPLOY: 1, TURNS3: 1, DIVERGES: 1, STREAMCUTS: 2, REDELIVERIES: 2, MAXATT: 1 },
  },
  {
    name: "carry-deploy-rederive-carry",
    kind: "expect",
    // The runner's fix is guarded in CI by carry-three-resend (the same reading, default), whose flip to -DREDERIVE_CARRY
    // breaks P_FRESH too; this trail, the finding's story, is --deep.
    deep: true,
    property: "P_FRESH",
    rules: "TURN-24 (which listed call a committed turn answered is read from its stored keys alone), TURN-23, IDENT-10",
    explain: "Message 0 alone, three turns and one deploy (-DTURNS2 -DDEPLOY -DTURNS3). W1 binds message 0 at turn 0, claims key 0 under pay's first definition, pays and completes the row; the stream dies after the call resolved, the retry's model answers without the call, and W1 commits turn 0 with a record that says key 0 happened (RECORD-8). Turn 1's model, which never saw the payment, makes the call again, the same ask: carried (TURN-23), dispatched under key 0 and answered from its completed row; W1 commits turn 1 with the result, and the model has now seen the payment. W1 crashes before it begins turn 2, and a deploy changes pay's key derivation (the new definition reads old stored requests). W0 takes the message up (the queue's redelivery) and reads the committed turns back before turn 2: turn 0's record lists key 0, and which listed call turn 1 answered is the question. With -DREDERIVE_CARRY W0 derives turn 1's committed call's key now, at turn 0's index under its own definition: key 1, which no record lists, so the listed call of key 0 is taken for unanswered and still carried. Turn 2's model pays again having seen the payment, a second ask; carried, it is dispatched at turn 0's index under key 1, IDENT-10's guard there finds key 0, made under the other definition, whose stored request gives the call's key, and the completed row replays the first payment to the second ask: a payment reported and not made (P_FRESH). With the key stored with the committed turn 1 (TURN-24, the default) W0 reads that turn 1 answered the listed call under key 0, carries nothing, and turn 2's call is claimed under its own key 5 and paid (the same faults verify every property: 619,825 states; carry-three-resend, in CI, reads the turns back by a re-send of a failed turn 2 instead, and carry-three-deploy, --deep, adds a refused request). The runner before TURN-24's stored keys did this after a rename (IDENT-11): the committed call's former name matched no listed call under the tool's name now (packages/runner/test/committed-keys-carry.test.ts); the model has no names, and the deploy's key change stands for it. Turn 0's own record needs no such reading: a committed turn's record lists only the calls it does not answer, as the holder that committed it knew them.",
    about: "(--deep) a holder that takes the message up before turn 2 derives turn 1's committed call's key now, at the listed call's "
      + "index under its own definition (-DREDERIVE_CARRY, the runner before TURN-24's stored keys): after a deploy the "
      + "listed call turn 1 answered is taken for unanswered, and turn 2's second ask is answered from the first ask's row",
    defines: { ...NONE, ...CARRY_DEPLOY_FAULTS, REFUSALS: 0, TURNS3: 1, REDERIVE_CARRY: true, ...ONLY("FRESH") },
  },
  {
    name: "nolist-omits-record",
    kind: "expect",
    deep: true,
    property: "P_RECORD",
    rules: "RECORD-8 (listed: false), RECORD-7",
    explain: "Over a ledger that does not list rows (-DNOLIST), with the runner before 2ae1515 (-DRESUME_OMITS: a resumed turn that commits without the call keeps no record when it lists nothing). W1 binds message 0 and pays; it crashes before it can record anything. W0 takes the lease over, resumes message 0, and the model answers without the call; W0 commits the turn, and with no listing there is nothing to list, so it keeps no record. The payment is in no committed turn and no record. With a listing, the in-flight row would have been listed (may_have_happened), and resume-omits-record needs a paused holder that claims after the listing; without one, a crash is enough. RECORD-8 as it stands keeps the resumed turn's record, listed: false, and its blanket statement covers the dead holder's payment (diverge-nolist, --deep).",
    about: "(--deep) a ledger that does not list rows, and a resumed turn that commits without the call and keeps no "
      + "record since it lists nothing (RESUME_OMITS): the paused earlier holder's payment is told nowhere",
    defines: { ...NONE, DIVERGES: 1, PAUSES: 1, CRASHES: 1, MAXATT: 1, RESUME_OMITS: true, NOLIST: true, ...ONLY("RECORD") },
  },
  {
    name: "volatile-fence",
    kind: "expect",
    explain: "W1 claims and pays, then freezes past its turn lease; W0 resumes the message. The volatile ledger loses the row, so W0's claim creates it again with fence 1, the fence W1 still holds. When W1 wakes it completes the row with fence 1 and the ledger accepts it, on W0's claim. The effect stays single (W0's own request, when it comes, gets the downstream's stored answer; the volatile check proves it for every run), but fencing no longer says who owns the row: LEDGER-19's note, and one more reason unkeyed writes stay off volatile ledgers (LEDGER-14).",
    property: "P_OWNER",
    rules: "LEDGER-4, LEDGER-5, LEDGER-19 (note), LEDGER-14",
    about: "a volatile ledger that loses an in-flight row issues fence 1 again, so a stale owner's write lands "
      + "on the new owner's claim (the downstream key still keeps the effect single: see the volatile check)",
    defines: { ...NONE, ALL_KEYED: true, VOLATILE: 1, PAUSES: 1, ...ONLY("OWNER") },
  },
  {
    name: "late-claim",
    kind: "expect",
    explain: "W0 dispatches the ticket (unkeyed, key 3). The store holds its claim (claim id 1) and applies it only later; W0's dispatcher sees ledger_unavailable, its retries run out, and it settles the claim in the background: it claims again with claim id 1, which creates the row, and releases it. Then the store applies the held copy: the row is released, so claim id 1 re-claims it with fence 2. Nobody holds that claim and nobody comes back for it; its lease runs out, and W0's next attempt finds the row expired: unknown (LEDGER-7), for a ticket that was never sent. LEDGER-26's residual before LEDGER-27.",
    property: "P_NOFALSE",
    rules: "LEDGER-26 (residual before LEDGER-27), DISPATCH-16, LEDGER-7",
    about: "before LEDGER-27: a copy of a claim applied after its claimant released it by claim id takes the "
      + "released row again, ownerless, and its lease turns an unkeyed call that never ran unknown",
    defines: { ...NONE, LATECLAIMS: 1, GUARD: 0, ...ONLY("NOFALSE") },
  },
  {
    name: "late-claim-tombstone",
    kind: "expect",
    explain: "With LEDGER-27's tombstone alone, on a ledger without retire (a released row refuses the claim id it was released under): W0's claim of the ticket (claim id 1) is applied but its reply is lost; the retries run out and claim id 1 is left to settle in the background. The turn retries: a new dispatch, claim id 2. The store holds its first claim; its retry meets the row held by claim id 1, waits and gives up (in_flight_elsewhere), and nothing settles claim id 2, whose claims all got an answer but one. The settling of claim id 1 releases the row (tombstone: 1). The held copy of claim id 2 arrives: not the tombstone's id, so it re-claims the row, ownerless, and the lease turns the ticket that was never sent unknown. A single tombstone cannot know every id a copy of which is still on its way; the claimant can (GUARD 2, LEDGER-28: retire every such id; main).",
    property: "P_NOFALSE",
    rules: "LEDGER-26, LEDGER-27, DISPATCH-16 (closed by LEDGER-28: retire every claim id a copy of which may be on its way)",
    about: "LEDGER-27's guard alone (a ledger without retire): a released row refuses only the claim id it was released under; a late copy of "
      + "another claim of the same call still takes the row",
    defines: { ...NONE, ...LOSTCLAIM, GUARD: 1, ...ONLY("NOFALSE") },
  },
  {
    name: "grant-latest-only",
    kind: "expect",
    property: "P_GRANT",
    rules: "TURN-10 (grant ids: a store that keeps the latest grant's id only)",
    explain: "The store holds W1's first acquire (grant id 1); W1 sees store_unavailable and sends the acquire again with grant id 1. The held copy has not been applied, so the re-send is a new grant (fence 1), which W1 learns; W1 answers message 0 and gives the lease back. W0 acquires in an acquisition of its own (fence 2), answers message 1 and gives the lease back. Then the store applies the held copy of grant id 1. A store that keeps only the latest grant's id no longer knows it (the latest grant is W0's), so it takes the copy for a new acquire and grants fence 3 to W1, which waits for no acquire any more: the conversation is held for nobody until the lease expires, and every send waits for it. The stores being changed keep the ids of earlier grants and refuse the copy (conversation_lease_lost). It is a wait and nothing else: grants-latest-only (--deep) verifies every other property with the faults of grants.",
    about: "a store that keeps only the latest grant's id: a copy of an earlier grant's acquire, landing after a later "
      + "grant is over, is not recognised and takes the lease, for nobody",
    defines: { ...NONE, LATEACQS: 1, LATEST_GRANT_ONLY: true, ...ONLY("GRANT") },
  },
  {
    name: "no-giveback",
    kind: "expect",
    property: "P_GRANT",
    rules: "TURN-10 (releaseLeaseGrant when the runner gives up)",
    explain: "W1's acquire applies at the store but its reply is lost: store_unavailable. Its re-send time is up and it gives up without releaseLeaseGrant: the grant holds the conversation for nobody until its lease expires, and every send waits for it. With the give-back (TURN-10) the runner releases the grant by its grant id before it raises the error.",
    about: "a runner that gives an acquire up after store_unavailable without releaseLeaseGrant: a grant that applied "
      + "holds the conversation, for nobody, until its lease expires",
    defines: { ...NONE, LOSTACQS: 1, NO_GIVEBACK: true, ...ONLY("GRANT") },
  },
  {
    name: "grant-residual",
    kind: "verify",
    about: "TURN-10's former residual, with every grant id kept: a copy of an acquire that the store never applied, landing "
      + "after its runner gave it up, is refused, since the give-back kept its grant id as given back (P_GRANT without "
      + "its exception)",
    defines: { ...NONE, LATEACQS: 1, GRANT_STRICT: 1, ...ONLY("GRANT") },
  },
  {
    name: "grant-no-mark",
    kind: "expect",
    property: "P_GRANT",
    rules: "TURN-10 (a give-back of a grant id no grant carries keeps it as given back)",
    explain: "The store holds W1's acquire (grant id 1). W1's re-send time is up: it gives the grant back by its grant id, which finds no such grant (the store never applied it), and raises; the queue delivers the message again. Then the store applies the held copy: the lease is free and the id unknown, so it is a new grant, held for nobody until its lease expires. Keeping earlier grants' ids cannot refuse a copy of an id that was never granted: the give-back must keep it as given back (TURN-10), as LEDGER-27's tombstone does for a claim id; grant-residual verifies that it then holds.",
    about: "a store whose give-back of a grant id no grant carries keeps nothing: a copy of that acquire, landing after its "
      + "runner gave it up, takes the lease as any acquire would, for nobody (P_GRANT without its exception)",
    defines: { ...NONE, LATEACQS: 1, GRANT_STRICT: 1, NO_GIVEBACK_MARK: true, ...ONLY("GRANT") },
  },
  {
    name: "same-ask",
    kind: "verify",
    about: "message 1 asks for what message 0 asked (the same key at the same turn index): bound at failed message 0's "
      + "index it inherits its window start (TURN-11) and its first run is never refused for it (TURN-12); two cut "
      + "streams, a re-send, one attempt per turn",
    defines: { ...NONE, ...SAME_ASK_FAULTS },
  },
  {
    name: "same-ask-crash",
    kind: "verify",
    deep: true,
    about: "(--deep) the faults of same-ask and a crash (a take-over of message 1 after its holder died)",
    defines: { ...NONE, ...SAME_ASK_FAULTS, CRASHES: 1 },
  },
  {
    name: "same-ask-no-exemption",
    kind: "verify",
    deep: true,
    about: "(--deep) the faults of same-ask with the first-run exemption off (-DFIRST_RUN_EXEMPT=0): a new message bound "
      + "at a failed message's index after its window is failed unrun; P_END still holds (failed is an end), so the "
      + "model's liveness cannot tell a refused new request from an answered one",
    defines: { ...NONE, ...SAME_ASK_FAULTS, FIRST_RUN_EXEMPT: 0 },
  },
  {
    name: "same-ask-own-window",
    kind: "expect",
    property: "P_TOLD",
    rules: "TURN-11 (boundAt inherited at a failed message's index), TURN-12, LEDGER-13",
    explain: "Message 1 asks for what message 0 asked (SAME_ASK: pay acme again, under a new message id). W0 binds message 0 at turn 0, pays and completes key 0; the stream dies after the call resolved and the message fails (record: happened). W0 binds message 1 at the failed message's index 0 (TURN-12), derives the same key 0 and replays the completed row: message 1 is told the payment happened; its stream dies too and it fails. The window and the ledger's retention since message 0's binding and failure pass (message 1 was bound much later, so its own window, counted from its own binding, is still open), and retention sweeps key 0 from the ledger and the downstream. The user re-sends message 1: within its own window it re-opens, the claim finds no row, and the payment is made a second time by a message that was told it had happened. With the inherited boundAt (TURN-11: message 1 takes message 0's window start) the re-send is past the window and returns the stored failure; message 1's first run still runs (`bound`, TURN-12).",
    about: "a message bound at a failed message's index counts its re-send window from its own binding (-DINHERIT=0): "
      + "it replays the failed message's completed row (told the payment happened), fails, and a re-send after "
      + "the sweep pays again",
    defines: { ...NONE, ...SAME_ASK_FAULTS, INHERIT: 0, ...ONLY("TOLD") },
  },
  {
    name: "window-none",
    kind: "expect",
    property: "P_ONCE",
    rules: "TURN-12 (the re-send window), LEDGER-13",
    explain: "W0 binds message 1 (the ticket, unkeyed); the ticket is issued and its row completed, but the stream dies after the call resolved and, with one attempt per turn, the message fails with a record saying the ticket was issued. The re-send window and then the ledger's retention pass since that failure, and retention sweeps the key from the ledger and the downstream. The user re-sends message 1: with no window the failed message re-opens at its bound index (nothing was bound since), the claim finds no row, and the ticket is issued a second time. With TURN-12's window the re-send returns the stored failure (past_resend_window).",
    about: "no re-send window: a re-send re-opens a failed message whenever nothing was bound since, also after the "
      + "ledger and the downstream swept the failed turn's rows",
    defines: { ...NONE, AGING: 1, RETENTION: 1, RESEND_FROM: 0, STREAMCUTS: 1, REDELIVERIES: 1, MAXATT: 1, ...ONLY("ONCE") },
  },
  {
    name: "window-last",
    kind: "expect",
    // window-none keeps CI's search of the window's rule; this larger search (3M states) shows the
    // window's start must not move with later failures (--deep, for CI's 15-minute budget).
    deep: true,
    property: "P_ONCE",
    rules: "TURN-12 (the re-send window, from the first failure), LEDGER-13",
    explain: "W0 binds message 1 (the ticket, unkeyed); the ticket is issued and its row completed, the stream dies after the call resolved, and the message fails (failure 1). A re-send re-opens it within the window; the retry's stream dies before the call, so the completed row stays as the first run wrote it, and the message fails again (failure 2). The window since failure 1 passes, then the ledger's retention since failure 1, which sweeps the row and the downstream's key: they aged from the first run. Measured from the last failure the window is still open, so a second re-send re-opens the message, the claim finds no row, and the ticket is issued again. Measured from the first failure (TURN-12) the window had passed before the sweep, and the re-send returns the stored failure.",
    about: "the re-send window measured from the last failure: a retry that failed again moves the window past the "
      + "retention of the first attempts' rows",
    defines: { ...NONE, AGING: 1, RETENTION: 1, RESEND_FROM: 2, STREAMCUTS: 2, REDELIVERIES: 2, MAXATT: 1, ...ONLY("ONCE") },
  },
  {
    name: "resume-no-recheck",
    kind: "expect",
    property: "P_ONCE",
    rules: "TURN-12 (the window checked again before any attempt of a resumed turn), TURN-15, LEDGER-13",
    explain: "W1 binds message 1 (the ticket, unkeyed); its stream dies before the call and the message fails. The user re-sends it within the window (W0 takes the delivery); it re-opens, and W1, whose send still waits for the message to settle, takes the turn lease again and binds it: the retry issues the ticket, completes its row and crashes before the commit. The message stays in progress, its retry's holder gone. The window (here from the binding, which is never later than the first failure) and then the ledger's retention pass, and retention sweeps the ticket's row. W0 takes the turn lease only now (the queue's redelivery of the crashed send): it resumes the message, and without the check before a resumed turn its attempt finds no row and issues the ticket again. With TURN-12's check (from firstFailedAt, or from the binding) W0 runs nothing and fails the message (past_resend_window).",
    about: "no window check before a resumed turn of a message that failed before: a re-opened retry whose holder "
      + "died is resumed after the window and the sweep",
    defines: { ...NONE, ...RESUME_FAULTS, RESEND_FROM: 3, RECHECK: 2, SOLO: 1, ...ONLY("ONCE") },
  },
  {
    name: "resume-no-boundat",
    kind: "expect",
    property: "P_ONCE",
    rules: "TURN-11 (boundAt), TURN-12 (the window from boundAt before a resumed turn of a message that never failed), TURN-15, LEDGER-13",
    explain: "W1 binds message 1 (the ticket), issues it, completes its row and crashes before the commit: the message never failed and stays in progress. The window since its binding and then the ledger's retention pass, and retention sweeps the row and the downstream's key. W0 takes the redelivery, resumes the message and, with no check from boundAt, its attempt finds no row and issues the ticket a second time. With the check (TURN-12, supports.boundAt) W0 runs nothing and fails the message (past_resend_window) with a record that lists the call as the ledger last knew it.",
    about: "no window check from boundAt before a resumed turn of a message that never failed: its holder paid and "
      + "died before the commit, and the next send resumes it after the sweep",
    defines: { ...NONE, ...RESUME_FAULTS, RESEND_FROM: 3, RECHECK: 1, SOLO: 1, ...ONLY("ONCE") },
  },
  {
    name: "window-first-failure",
    kind: "expect",
    property: "P_ONCE",
    rules: "TURN-12 (the window from the binding, proposed), TURN-11, LEDGER-13",
    explain: "The rule before the window from the binding: the window counts from the first failure, and a message that never failed is checked from boundAt when resumed. W1 issues the ticket, completes its row and crashes before the commit. W0 takes the conversation after the window since the binding passed: the check from boundAt fails the message, as it must, and nothing runs. But that failure is the message's first: its window counts from now. The ledger's retention since the binding passes and sweeps the row; the user re-sends within the window since that failure, the message re-opens, the claim finds no row and the ticket is issued again. Counted from the binding (boundAt, never later than the first failure), the re-send is past the window.",
    about: "the re-send window counted from the first failure only: a message failed past the window from boundAt "
      + "(its holder died before the commit) re-opens within the window of that failure, after the sweep",
    defines: { ...NONE, ...RESUME_FAULTS, RESEND_FROM: 1, RECHECK: 3, SOLO: 1, ...ONLY("ONCE") },
  },
  {
    name: "window-first-failure-bound",
    kind: "expect",
    // window-first-failure already keeps CI's search of the rule off; this one shows the other route (--deep).
    deep: true,
    property: "P_ONCE",
    rules: "TURN-12 (the window from the binding, proposed), TURN-15, LEDGER-13",
    explain: "The window from the first failure, with the narrower repair of window-first-failure (a message failed by the check from boundAt counts its first failure from the binding, -DPAST_AT_BINDING). W1 issues the ticket, completes its row and crashes before the commit. W0 takes over inside the window: it resumes the message, its stream dies before the call, and the message fails (its first failure, long after the payment's row was written). The window since the binding and the ledger's retention since it pass, and retention sweeps the row; the user re-sends within the window since the failure, the message re-opens and the ticket is issued again. Counted from the binding, the re-send is past the window: no row a re-send can meet is older than the binding.",
    about: "the re-send window counted from the first failure: a take-over inside the window that fails moves the "
      + "window past the retention of the dead holder's rows",
    defines: { ...NONE, ...RESUME_FAULTS, RESEND_FROM: 1, RECHECK: 3, PAST_AT_BINDING: true, SOLO: 1, ...ONLY("ONCE") },
  },
];

// What each property asserts, for the reports.
const MEANING = {
  P_ONCE: "at most one downstream effect per user intent (message)",
  P_UKW: "an unkeyed_write request reaches its downstream at most once per key",
  P_TRUTH: "a committed or recorded failure implies that the effect did not happen",
  P_RECORD: "a failed or committed turn's record covers every effect its attempts made and calls none that happened not_happened; every effect is committed or recorded",
  P_FENCE: "fences strictly increase per key within retention",
  P_OWNER: "every write the ledger accepts comes from the key's latest claim",
  P_SAME: "a re-run under a key the ledger remembers sends the request the downstream holds, so the downstream collapses it",
  P_END: "every send returns and every message ends answered or failed",
  P_NOFALSE: "an unkeyed_write row turns unknown by lease expiry only under a claim that could have run the tool",
  P_GRANT: "a turn-lease grant nobody takes up (so every send waits out its lease) never comes from a grant id the store granted before",
  P_TOLD: "with SAME_ASK: a message told its call happened never makes that call again in a later attempt or run of it",
  P_ACK: "with LOSTRECS: a dispatch whose record the ledger applied, its reply lost, answers what that record says once the lookup shows it landed",
  P_FRESH: "with SAME_ASK and VSTORE: a message is never answered with a row at a turn index issued again (bound before to a message that did not fail there); with TURNS2: a second ask is never answered from the first ask's row (with TURNS3, a further ask from an earlier ask's row)",
};

const args = process.argv.slice(2);
const write = args.includes("--write");
const onlyArg = args.find((a) => a.startsWith("--only"));
const only = onlyArg ? (onlyArg.includes("=") ? onlyArg.split("=")[1] : args[args.indexOf(onlyArg) + 1]).split(",") : null;

if (args.includes("--list")) {
  for (const c of CHECKS) console.log(`${c.name.padEnd(16)} ${c.kind.padEnd(7)} ${c.about}`);
  process.exit(0);
}
for (const tool of ["spin", "gcc"]) {
  if (spawnSync("sh", ["-c", `command -v ${tool}`]).status !== 0) {
    console.error(`${tool} is not installed (Debian: apt-get install -y ${tool === "spin" ? "spin" : "build-essential"})`);
    process.exit(2);
  }
}
const deep = args.includes("--deep");
const shortest = write || args.includes("--shortest");
const ciChecks = CHECKS.filter((c) => !c.deep);

// A check's verdict is a function of the model's files, this runner (the checks' defines, the compiler
// flags, how a report is read) and the spin and gcc that build it: spin's searches here are exhaustive and
// deterministic. passed.json keeps the hash of those inputs from a run in which every CI check passed
// (--record); with --changed (CI), inputs that hash the same run only SMOKE, which proves spin, gcc and the
// trail replay work on this machine, and any change to them runs every CI check again. Like a build cache:
// nothing is taken on trust that the inputs do not already fix.
const PASSED = join(HERE, "passed.json");
const SMOKE = ["window-resume", "old-turn"];
function inputsHash() {
  const hash = createHash("sha256");
  for (const f of readdirSync(HERE).filter((f) => f.endsWith(".pml") || f === "run.mjs").sort()) hash.update(`${f}\0`).update(readFileSync(join(HERE, f))).update("\0");
  /** @type {[string, string[]][]} */
  const versions = [["spin", ["-V"]], ["gcc", ["--version"]]];
  for (const [tool, argv] of versions) hash.update(spawnSync(tool, argv).stdout?.toString().split("\n")[0] ?? tool).update("\0");
  return hash.digest("hex");
}
const inputs = inputsHash();
let recorded;
try {
  recorded = existsSync(PASSED) ? JSON.parse(readFileSync(PASSED, "utf8")) : undefined;
} catch {
  recorded = undefined; // unreadable: every CI check runs
}
const unchanged = recorded?.inputs === inputs && JSON.stringify(recorded?.checks?.map((c) => c.name)) === JSON.stringify(ciChecks.map((c) => c.name));
const changedOnly = args.includes("--changed") && !only && !deep;
const selected = only
  ? CHECKS.filter((c) => only.includes(c.name))
  : changedOnly && unchanged
    ? CHECKS.filter((c) => SMOKE.includes(c.name))
    : CHECKS.filter((c) => deep || !c.deep);
if (changedOnly) {
  console.log(
    unchanged
      ? `The model, run.mjs, spin and gcc hash as when all ${ciChecks.length} CI checks last passed (spec/model/passed.json, ${recorded.at}, `
        + `inputs ${inputs.slice(0, 12)}): running ${SMOKE.join(" and ")} to prove the toolchain; \`pnpm model\` runs them all.`
      : `The model's inputs changed since spec/model/passed.json (inputs ${inputs.slice(0, 12)}, recorded ${String(recorded?.inputs ?? "none").slice(0, 12)}): `
        + `running all ${ciChecks.length} CI checks (\`node spec/model/run.mjs --record\` records a pass).`,
  );
}
// The CI checks whose search at -O0 takes above about 4 s of CPU: compiled with -Og (see check()).
const OPTIMISE_OG = new Set(["lost-claim-tombstone", "lost-claim", "retention", "volatile", "acyclic", "replay"]);
// Largest searches first, so that the two lanes end together.
const COST = {
  "deep-volatile": 19, "deep-partition": 18, "deep-outcomes": 17, "deep-lost-claim": 16, "deep-diverge": 10,
  "lease-b": 9, "lease-a": 8, volatile: 7.5, replay: 7, retention: 6, "lost-claim-pause": 5, liveness: 4, acyclic: 3,
  "lost-claim-tombstone": 2.7, "lost-claim": 2.5, "diverge-pause": 2.2, "volatile-replay": 2, "lost-claim-crash": 1.9,
  diverge: 1.8, grants: 2.6, window: 1.5, "grants-latest-only": 2.8, "grants-liveness": 1, "deep-window-resume": 3,
};
const queue = selected.map((c, i) => i).sort((a, b) => (COST[selected[b].name] ?? 0) - (COST[selected[a].name] ?? 0));
if (only && selected.length !== only.length) {
  console.error(`unknown check in --only; known: ${CHECKS.map((c) => c.name).join(", ")}`);
  process.exit(2);
}

function defineFlags(defines) {
  return Object.entries(defines).map(([k, v]) => (v === true ? `-D${k}` : `-D${k}=${v}`));
}

// CPU of each step (user + system seconds). CI's cost is CPU (two cores shared with the tests), not the wall
// time a loaded host stretches, and node has no rusage of a child; but node waits for each child it spawned,
// so the kernel adds the child's CPU to node's own cutime and cstime (/proc/self/stat, Linux), read when the
// child closes. With two lanes, two children that end in one tick are both counted to the first; the total
// is exact. The child is spawned directly, so .ci/run's `pkill -P` of this process still stops every pan.
const TICK = Number(spawnSync("getconf", ["CLK_TCK"]).stdout?.toString().trim()) || 100;
function childCpu() {
  try {
    const stat = readFileSync("/proc/self/stat", "utf8");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" "); // from field 3 (state) on
    return { user: Number(fields[13]) / TICK, system: Number(fields[14]) / TICK }; // cutime, cstime
  } catch {
    return { user: 0, system: 0 }; // not Linux: no figures
  }
}
let counted = childCpu();
function run(cmd, argv, cwd) {
  return new Promise((resolve) => {
    const child = spawn(cmd, argv, { cwd });
    let out = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (out += d));
    child.on("close", (code) => {
      const now = childCpu();
      const cpu = { user: Math.max(0, now.user - counted.user), system: Math.max(0, now.system - counted.system) };
      counted = now;
      resolve({ code, out, cpu });
    });
  });
}

// The lines of pan's report that say what was searched and what was found.
const SUMMARY = [
  /^pan:\d+: .*/, /^pan: (wrote|reached|out of|max search depth|elapsed|resizing).*/, /^\s*\d+ states, stored.*/,
  /^State-vector .*/, /^\s*[\d.]+\s+total actual memory usage.*/, /^\s*[\d.]+\s+actual memory usage for states.*/,
  /^Warning: Search not completed.*/, /^\s*[\d]+ transitions .*/, /^hint: .*/, /^\s*(acceptance\s+cycles|non-progress cycles)\s.*/, /^pan: ltl formula .*/,
];

function figures(out) {
  const num = (re) => {
    const m = out.match(re);
    return m ? Number(m[1]) : null;
  };
  return {
    errors: num(/errors: (\d+)/),
    states: num(/(\d+) states, stored/),
    visited: num(/states, stored \(([\d.e+]+) visited\)/),
    depth: num(/depth reached (\d+)/),
    memory: num(/([\d.]+)\s+total actual memory usage/),
    seconds: num(/pan: elapsed time ([\d.e+]+) seconds/),
    incomplete: /Search not completed|reached -DMEMLIM bound|out of memory|max search depth too small/.test(out),
  };
}

// The violated assertion names its property: assert(!P_XXX || ...) (P_XXX is a constant bit).
function violation(out) {
  const line = out.split("\n").find((l) => /assertion violated/.test(l)) ?? "";
  const text = (line.match(/assertion violated (.*) \(at depth/) ?? [null, line])[1];
  return { property: (line.match(/P_[A-Z]+/) ?? ["an unnamed assertion"])[0], text };
}

// spin -t -p: keep the model's own narration ("@@ who what") and the violated assertion.
function timeline(trace) {
  const rows = [];
  let violation = null;
  for (const raw of trace.split("\n")) {
    const line = raw.trim();
    const said = line.match(/^@@ (\S+)\s+(.*)$/);
    if (said) rows.push({ who: said[1], what: said[2] });
    const failed = line.match(/^spin: ([\w.]+:\d+), Error: assertion violated/);
    if (failed && violation === null) violation = failed[1];
  }
  return { rows, violation };
}

/**
 * The working directories of the checks under way. A run that is stopped (CI's exit trap sends
 * SIGTERM when a test fails first) removes them: a check's files are kept only when it ended
 * not ok, to be read; one cut short has nothing to read.
 */
const live = new Set();
for (const signal of ["SIGTERM", "SIGINT"]) {
  process.once(signal, () => {
    for (const dir of live) rmSync(dir, { recursive: true, force: true });
    process.exit(signal === "SIGTERM" ? 143 : 130);
  });
}

async function check(c) {
  const dir = mkdtempSync(join(tmpdir(), `dispatch-once-model-${c.name}-`));
  live.add(dir);
  try {
    return await checkIn(c, dir);
  } finally {
    live.delete(dir);
  }
}

async function checkIn(c, dir) {
  for (const f of readdirSync(HERE).filter((f) => f.endsWith(".pml"))) copyFileSync(join(HERE, f), join(dir, f));
  const flags = defineFlags(c.defines);
  const started = Date.now();
  const gen = await run("spin", ["-a", ...flags, MODEL], dir);
  if (gen.code !== 0) return { c, ok: false, lines: [`spin -a failed:\n${gen.out}`] };
  const sum = (t) => t.user + t.system;
  // gcc -O2 on pan.c takes about 8 s here and -O0 under 2 s, while -O0's safety search is about 1.5x
  // slower and the LTL search (with its never claim) 2x: a safety search under about 12 s costs less
  // CPU compiled without optimisation (measured back to back: replay 8.4 s of CPU at -O0 against 12.5
  // at -O2, lost-claim-tombstone 13.0 against 15.0, liveness 25.5 against 20.6). So only the LTL
  // check and the deep ones, whose searches take minutes, are compiled with -O2.
  // -Og sits between (measured on 2026-12-05, back to back at nice 10, CPU of gcc plus search): gcc 2.9 s
  // instead of 0.8, and a search about half as long as at -O0, so it pays for a search above about 4 s at
  // -O0: lost-claim-tombstone 10.4 s at -O0 against 7.9 at -Og, lost-claim 9.3 against 7.2, retention 7.9
  // against 6.3 (the same states stored). The checks in OPTIMISE_OG are those.
  // -DCOLLAPSE compresses each stored state: about 1.6-2.7x less memory for 15-30 % more CPU. The
  // checks CI runs fit without it (at most 1.6 GB each, two at a time), so it is kept for the deep
  // searches only (up to 2.3 GB with it) and for the small BFS searches of the expect checks.
  const compress = c.deep === true || c.kind === "expect";
  const optimise = c.deep === true || c.kind === "ltl";
  const cc = [optimise ? "-O2" : OPTIMISE_OG.has(c.name) ? "-Og" : "-O0", "-w", ...(compress ? ["-DCOLLAPSE", "-DMEMLIM=3072"] : ["-DMEMLIM=4096"]), "-DNFAIR=3", "-o", "pan", "pan.c"];
  if (c.kind === "np") cc.unshift("-DNP");
  else if (c.kind !== "ltl") cc.unshift("-DSAFETY");
  // Breadth-first gives the shortest counterexample, the most readable trail: COUNTEREXAMPLES.md is written
  // from it (--write, --shortest). Otherwise an expect check needs only some counterexample of its property,
  // which the depth-first search finds as surely (both are complete over the same states) and, on the
  // 28 CI expect checks of 2026-12-05, after 0.9 s of search in all instead of 9.8 s (breadth-first stores
  // every state up to the trail's depth; same-ask-own-window 1,580,421 of them, depth-first 19,414).
  if (c.kind === "expect" && shortest) cc.unshift("-DBFS");
  const comp = await run("gcc", cc, dir);
  if (comp.code !== 0) return { c, ok: false, lines: [`gcc failed:\n${comp.out}`] };
  const panArgs = ["-m100000", c.kind === "expect" ? "-w22" : "-w25"];
  if (c.kind !== "ltl") panArgs.push("-E"); // a crashed worker is blocked forever; P_END checks the rest
  if (c.kind === "ltl") panArgs.push("-a", "-f", "-N", c.ltl);
  if (c.kind === "np") panArgs.push("-l");
  const pan = await run("./pan", panArgs, dir);
  // CPU seconds (user + system): spin -a and gcc, the search, and the trail's replay where there is one.
  const cpu = { build: sum(gen.cpu) + sum(comp.cpu), search: sum(pan.cpu), trail: 0 };
  const f = figures(pan.out);
  const lines = pan.out.split("\n").filter((l) => SUMMARY.some((re) => re.test(l))).map((l) => l.trim());
  const cmd = `spin -a ${flags.join(" ")} ${MODEL}; gcc ${cc.join(" ")}; ./pan ${panArgs.join(" ")}`;
  let ok;
  let note;
  let story = null;
  if (c.kind === "expect") {
    if (f.errors > 0) {
      const replay = await run("spin", ["-t", "-p", "-k", `${MODEL}.trail`, ...flags, MODEL], dir);
      cpu.trail = sum(replay.cpu);
      story = timeline(replay.out);
      const found = violation(pan.out);
      story.assertion = found.text;
      ok = found.property === c.property;
      note = ok
        ? `counterexample found, as expected: ${found.property} (${MEANING[found.property]}) violated after ${story.rows.length} steps`
        : `expected a counterexample of ${c.property}, got ${found.property}: ${found.text}`;
    } else {
      ok = false;
      note = `expected a counterexample of ${c.property}; the search found none (the old bug is not reproduced)`;
    }
  } else {
    ok = f.errors === 0 && !f.incomplete;
    if (ok) note = "verified";
    else if (f.errors > 0) {
      const found = violation(pan.out);
      note = `${found.property} violated (${MEANING[found.property] ?? found.text})`;
    } else note = "search incomplete (depth or memory limit): not verified";
    if (!ok && f.errors > 0) {
      const replay = await run("spin", ["-t", "-p", "-k", `${MODEL}.trail`, ...flags, MODEL], dir);
      story = timeline(replay.out);
    }
  }
  if (ok) rmSync(dir, { recursive: true, force: true });
  else note += ` (files kept in ${dir})`;
  return { c, ok, note, lines, cmd, figures: f, story, cpu, wall: (Date.now() - started) / 1000 };
}

function print(r) {
  console.log(`\n== ${r.c.name} (${r.c.kind}${r.c.property ? `, expects ${r.c.property}` : ""}): ${r.c.about}`);
  if (r.cmd) console.log(`   ${r.cmd}`);
  for (const l of r.lines) console.log(`   ${l}`);
  if (r.story && r.story.rows.length > 0) {
    const rows = r.story.rows;
    const shown = rows.length > 40 ? [...rows.slice(0, 12), null, ...rows.slice(-26)] : rows;
    for (const row of shown) console.log(row ? `     ${row.who.padEnd(3)} ${row.what}` : "     ...");
  }
  if (r.cpu) console.log(`   cpu: ${cpuOf(r).toFixed(1)} s (spin and gcc ${r.cpu.build.toFixed(1)}, search ${r.cpu.search.toFixed(1)}, trail ${r.cpu.trail.toFixed(1)}), wall ${r.wall.toFixed(1)} s`);
  console.log(`   ${r.ok ? "ok" : "FAIL"}: ${r.note}`);
}

function cpuOf(r) {
  return r.cpu ? r.cpu.build + r.cpu.search + r.cpu.trail : 0;
}

// Two at a time: the machine has two cores and each pan is single-threaded.
const parallel = Math.max(1, Math.min(2, cpus().length));
const results = new Array(selected.length);
let next = 0;
const t0 = Date.now();
await Promise.all(
  Array.from({ length: parallel }, async () => {
    while (next < queue.length) {
      const i = queue[next++];
      results[i] = await check(selected[i]);
      print(results[i]);
    }
  }),
);
const failed = results.filter((r) => !r.ok);
const total = (Date.now() - t0) / 1000;
console.log(`\n${results.length - failed.length}/${results.length} model checks passed in ${total.toFixed(1)} s`
  + (failed.length ? `; failed: ${failed.map((r) => r.c.name).join(", ")}` : ""));
const slowest = [...results].sort((a, b) => cpuOf(b) - cpuOf(a)).slice(0, 5);
console.log(`CPU ${results.reduce((n, r) => n + cpuOf(r), 0).toFixed(1)} s in spin, gcc and pan; the slowest: `
  + slowest.map((r) => `${r.c.name} ${cpuOf(r).toFixed(1)} s`).join(", "));

// --record: only a run of every CI check, all passing, on these inputs.
if (args.includes("--record")) {
  const ran = new Set(results.map((r) => r.c.name));
  if (failed.length > 0 || !ciChecks.every((c) => ran.has(c.name))) {
    console.error("--record: not recorded (it records a run in which every CI check ran and passed)");
    process.exitCode = 1;
  } else {
    const checks = ciChecks.map((c) => {
      const r = results.find((x) => x.c.name === c.name);
      return { name: c.name, kind: c.kind, states: r.figures?.states ?? null, errors: r.figures?.errors ?? null };
    });
    writeFileSync(PASSED, `${JSON.stringify({ inputs, at: new Date().toISOString(), spin: spawnSync("spin", ["-V"]).stdout.toString().trim(), checks }, null, 2)}\n`);
    console.log(`recorded ${checks.length} passed CI checks in spec/model/passed.json (inputs ${inputs.slice(0, 12)})`);
  }
}

// With --only, --write replaces (or adds) only the named checks' sections and figure rows.
if (write && failed.length === 0) {
  writeCounterexamples(results.filter((r) => r.c.kind === "expect"));
  writeFigures(results);
}
process.exit(failed.length ? 1 : (process.exitCode ?? 0));

function writeCounterexamples(expects) {
  const spinVersion = spawnSync("spin", ["-V"]).stdout.toString().trim();
  let md = `# Counterexamples\n\n`
    + `Generated by \`node spec/model/run.mjs --write\` (${spinVersion}; breadth-first search, so each trail is a\n`
    + `shortest one). Each section switches one rule off in [dispatch_once.pml](dispatch_once.pml) and shows the\n`
    + `trail spin found, replayed with \`spin -t -p\` and reduced to the model's narration. \`W0\`, \`W1\` are the\n`
    + `two workers, \`--\` is the environment (the store's clock, retention, redelivery). Message 0 asks for the\n`
    + `keyed \`pay\` tool (key 0 at turn 0, key 2 at turn 1); message 1 asks for the unkeyed \`ticket\` tool (keys 1\n`
    + `and 3). Request 1 is the wording the model first produced, request 2 a re-worded replay.\n`;
  // the sections kept from the file (with --only), by check name, then the ones of this run
  const sections = new Map();
  if (only) {
    for (const part of readFileSync(join(HERE, "COUNTEREXAMPLES.md"), "utf8").split("\n## ").slice(1)) {
      sections.set(part.slice(0, part.indexOf(":")), `\n## ${part.replace(/\n*$/, "\n")}`);
    }
  }
  for (const r of expects) {
    sections.set(r.c.name, `\n## ${r.c.name}: ${r.c.property} violated\n\n${r.c.about}.\nRules: ${r.c.rules}.\n`
      + `Run: \`node spec/model/run.mjs --only ${r.c.name}\` (spin defines, faults and switches not zero: `
      + `\`${defineFlags(r.c.defines).filter((d) => !d.endsWith("=0") || /^-D(GUARD|INHERIT|FIRST_RUN_EXEMPT|SOLO)=/.test(d)).join(" ")}\`).\n\n${r.c.explain}\n\n`
      + `| # | who | what |\n|---:|---|---|\n`
      + r.story.rows.map((row, i) => `| ${i + 1} | ${row.who} | ${row.what.replace(/\|/g, "\\|")} |`).join("\n")
      + `\n\nspin: \`assertion violated ${r.story.assertion}\`: ${r.c.property}, ${MEANING[r.c.property]}.\n`);
  }
  for (const c of CHECKS) if (sections.has(c.name)) md += sections.get(c.name);
  writeFileSync(join(HERE, "COUNTEREXAMPLES.md"), md);
  console.log("wrote spec/model/COUNTEREXAMPLES.md");
}

function writeFigures(results) {
  const path = join(HERE, "README.md");
  const readme = readFileSync(path, "utf8");
  const start = "<!-- figures:start -->";
  const end = "<!-- figures:end -->";
  if (!readme.includes(start) || !readme.includes(end)) {
    console.error("README.md has no figures markers; not written");
    return;
  }
  const rows = results.filter((r) => !only || !r.c.deep).map((r) => {
    const f = r.figures;
    const found = r.c.kind === "expect" ? `counterexample (${r.c.property}), ${r.story.rows.length} steps` : "errors: 0";
    const visited = f.visited ? ` (${Math.round(f.visited).toLocaleString("en")} visited)` : "";
    return `| ${r.c.name} | ${r.c.kind} | ${f.states.toLocaleString("en")}${visited} | ${f.depth} | ${f.memory.toFixed(1)} | ${f.seconds} | ${found} |`;
  });
  if (only) {
    // keep the other checks' rows and the note below the table; this run's rows replace or join them
    const [, kept, note] = readme.match(new RegExp(`${start}\\n[^\\n]*\\n[^\\n]*\\n((?:\\|[^\\n]*\\n)*)([\\s\\S]*)${end}`));
    const byName = new Map(kept.trim().split("\n").map((row) => [row.split(" | ")[0].slice(2), row]));
    for (const row of rows) byName.set(row.split(" | ")[0].slice(2), row);
    const ordered = CHECKS.filter((c) => byName.has(c.name)).map((c) => byName.get(c.name));
    const table = `${start}\n| check | kind | states stored | depth | memory (MB) | seconds | result |\n|---|---|---:|---:|---:|---:|---|\n`
      + `${ordered.join("\n")}\n${note}${end}`;
    writeFileSync(path, readme.replace(new RegExp(`${start}[\\s\\S]*${end}`), table));
    console.log("wrote the figures of the named checks in spec/model/README.md");
    return;
  }
  const table = `${start}\n| check | kind | states stored | depth | memory (MB) | seconds | result |\n|---|---|---:|---:|---:|---:|---|\n`
    + `${rows.join("\n")}\n\nTotal wall time ${total.toFixed(0)} s on ${cpus().length} cores (${cpus()[0]?.model ?? "?"}), two checks at a time.\n${end}`;
  writeFileSync(path, readme.replace(new RegExp(`${start}[\\s\\S]*${end}`), table));
  console.log("wrote the figures in spec/model/README.md");
}
