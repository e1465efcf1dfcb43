/*
 * Dispatch-Once, the protocol of spec/dispatch-once.md (draft 2), as a Promela model for spin.
 * Run every check with `pnpm model` (spec/model/run.mjs); README.md says what each one covers.
 *
 * Read it beside the spec: every action names the rule it stands for. It models the code on
 * main: packages/core/src/{memory-conversation-store,memory-ledger,dispatcher}.ts and
 * packages/anthropic/src/runner.ts (worker.pml), except where a proposed rule is marked
 * (NP_SAYS_NOT, RESUME_SAYS_NOT switch the code's behaviour back on). The abstraction is
 * chosen so that the exhaustive searches finish in about a minute on two cores:
 *
 *   - 2 workers (processes running ConversationRunner and Dispatcher), 2 user messages in one
 *     conversation; each message is one user intent, answered by one response with one call:
 *       message 0 -> "pay"    (keyed_write: the downstream honours Idempotency-Key, EFFECT-3)
 *       message 1 -> "ticket" (unkeyed_write: the ledger is the only guard, EFFECT-4)
 *     (-DALL_KEYED makes both keyed, for the volatile ledger, LEDGER-14). A re-run of a turn
 *     (a retry, a resumed turn) may answer without the call (-DDIVERGES: plain text): the
 *     committed turn then does not answer an effect an earlier run made (RECORD-8).
 *   - A key is (turn index, intent): k = t*M + i. The identity arguments of a call are a
 *     function of the turn's input (IDENT-5), so every attempt of one turn derives one key;
 *     the ordinal is always 0 (one call per response; DISPATCH-6 is not modelled).
 *   - A request is an id: 1 = the wording the model first produced, 2 = a re-worded replay
 *     (same identity, different bytes outside it, IDENT-3). No payload strings.
 *   - Time is abstract. A lease expires by an event of the store's clock (LEDGER-20, TURN-10):
 *     freely when its holder crashed, moved on, or is cut off from the ledger; otherwise only
 *     by spending the PAUSES budget (a live holder frozen past its lease: a long GC, a stopped
 *     container). Renewal (LEDGER-9) is what keeps every other lease live. Retention
 *     (LEDGER-13) passes only for keys that no replay route can reach any more and that no
 *     bounded-late worker still holds (PINNED).
 *   - Every fault has a small budget (crashes, pauses, stream cuts, lost responses, ...), so
 *     every run is finite; run.mjs switches on, per check, the budgets that check is about.
 *
 * Properties. Each is a constant bit (so spin's report names it) switched off by -DCHECK_X=0:
 *   P_ONCE    at most one downstream effect per user intent (message); with -DTURNS2, per ask (a call a committed turn
 *             left unanswered and its repeat in the message's next turn are one ask, TURN-23)
 *   P_UKW     an unkeyed_write request reaches its downstream at most once per key: nothing
 *             re-runs an unkeyed write whose outcome was unknown
 *   P_TRUTH   a committed or recorded failure implies no effect (a ledger row failed with a
 *             definite error, a committed error tool_result)
 *   P_RECORD  a failed turn's record covers every effect its own attempts made (RECORD-5) and
 *             calls none that already happened not_happened (RECORD-2), and so does a committed
 *             turn's record of a call the committed turn does not answer (RECORD-8) and a superseded
 *             attempt's record (TURN-13: a living holder names its own effects, RECORD-7); whenever the
 *             system is quiet, every effect is committed as done or listed by some record (TURN-13)
 *   P_FENCE   fences strictly increase per key within retention (LEDGER-4)
 *   P_OWNER   every write the ledger accepts comes from the key's latest claim (LEDGER-5, -16)
 *   P_SAME    a request sent under a key that the ledger has not forgotten is the request the
 *             downstream holds for the key, so the downstream collapses the re-run (LEDGER-21)
 *   P_END     every send returns and every message ends answered or failed (at every terminal
 *             state; the LTL formula `terminates` at the end says it under weak fairness)
 *   P_NOFALSE an unkeyed_write row turns unknown by lease expiry (LEDGER-7) only under a claim
 *             that could have run the tool: its `claimed` reached its claimant, or its claimant
 *             crashed, paused past the lease or lost the ledger (no false `unknown`)
 *   P_TOLD    (with -DSAME_ASK) a message that was told its call happened (a run of it replayed or made the
 *             completed row: the call resolved as a result) never makes that call again in a later attempt or
 *             run of the same message (a retry after a re-send, a take-over). With the same ask, a second
 *             effect of the intent is not always wrong: message 1 bound after message 0's row was swept is a
 *             new request and may pay; so P_ONCE counts effects per message (at most one by the runs of each)
 *             and P_TOLD says what the user was told stays true; P_RECORD still accounts for every effect.
 *   P_FRESH   (with -DTURNS2) a second ask (a call made again after a committed turn answered it) is never answered
 *             from the first ask's row (TURN-23); with -DTURNS3, no ask from the row of an earlier one;
 *             (with -DSAME_ASK and -DVSTORE) a message is never answered with a row at a turn index issued again: one
 *             bound before to another message that had not failed there (a store that forgot that binding, TURN-14)
 *   P_ACK     (with -DLOSTRECS) a dispatch whose record the ledger applied, its reply lost, answers what that record
 *             says once a re-send and the lookup show it landed (DISPATCH-17): a ledger outage that heals does not
 *             turn a written outcome into stale_claim (may have happened)
 *   P_GRANT   a turn-lease grant nobody takes up (its acquirer gave the acquire up, or acquired under
 *             another grant: every send then waits out its lease) never comes from a grant id the
 *             store granted before (TURN-10; the one such grant TURN-10 leaves is a copy of an
 *             acquire the store never applied, landing after its runner stopped waiting for it)
 *
 * Switches that put an old or current behaviour back, each expected to yield a counterexample:
 *   -DOLD_RERUN        turn-1: a re-run sends the replay's own arguments, not the stored
 *                      request (LEDGER-21)
 *   -DOLD_422          turn-1: a 422 "key reused" is read as a definite failure (EFFECT-6)
 *   -DOLD_TURN         turn-1: turn index = committed count read when the turn starts, no turn
 *                      lease, no binding, user messages in the log at once (TURN-1, TURN-9..11)
 *   -DNO_SELF_FENCE    turn-1: an owner whose renewals cannot reach the ledger keeps its tool
 *                      running (DISPATCH-13)
 *   -DNP_SAYS_NOT      main: a not-performed failure is "not happened" even for a re-claim or a
 *                      takeover, whose earlier run may have performed the effect (RECORD-2)
 *   -DRESUME_SAYS_NOT  main: a runner that resumed a message bound by an earlier holder records
 *                      only its own attempts; the earlier holder may still act (RECORD-2, -5)
 *   -DGUARD=0          before LEDGER-27: nothing keeps a late copy of a claim from taking a released row
 *                      (LEDGER-26's residual)
 *   -DGUARD=1          a ledger without retire (LEDGER-27 alone): a released row refuses only the claim
 *                      id it was released under
 *   -DRESUME_OMITS     main: a resumed turn that commits without the call keeps no record when the
 *                      ledger listed no row for it; a paused earlier holder that claims after the listing
 *                      and dies before recording leaves its effect told nowhere (RECORD-7, RECORD-8)
 *   -DRECORD_AFTER_COMMIT  main before recordsWithCommit: a committed turn's record (RECORD-8) is added
 *                      in a second write after the commit; a worker that dies between the two loses it
 *                      (TURN-5; the default keeps it in the commit's own write)
 *   -DSUPERSEDED_OWN   the runner before df13d09: a superseded attempt's record (TURN-13) lists the refused
 *                      attempt's calls only, not the runner's earlier attempts' (RECORD-5, RECORD-7; P_RECORD)
 *   -DNP_KEYED_ONLY    core before a84fff3: a not-performed failure of an unkeyed_write says not performed
 *                      whatever its fence and the ledger's durability (LEDGER-8: whatever the write class; P_RECORD,
 *                      with -DVOLATILE_UNKEYED: an unkeyed_write allowed over a volatile ledger, LEDGER-14's opt-in)
 *   -DFENCE_CONTINUES=1  a claim of a key retention forgot continues above the forgotten row's fence, as LEDGER-19
 *                      allows and ledger-postgres does (not a bug: fence-continues verifies it)
 *   (GUARD 2, the default and main with a ledger that offers retire: LEDGER-28, see the configuration below)
 *   -DLATEST_GRANT_ONLY  main's stores: only the latest turn-lease grant's id is kept, so a late copy of an
 *                      earlier grant's acquire takes a free lease for nobody (TURN-10; P_GRANT, a wait only)
 *   -DNO_GIVEBACK      a runner that gives an acquire up without releaseLeaseGrant (TURN-10; P_GRANT)
 *   -DGRANT_STRICT=1   P_GRANT without TURN-10's former residual (a copy of an acquire the store never applied)
 *   -DNO_GIVEBACK_MARK a store whose give-back of a grant id no grant carries keeps nothing, and a runner that
 *                      gives no grant back when a re-send finds the lease held (TURN-10; P_GRANT with GRANT_STRICT)
 *   -DRESEND_FROM=0|2  with AGING: no re-send window, or one measured from the last failure (TURN-12; P_ONCE)
 *   -DRECHECK=2|1      with BOUNDAT: no window check before a resumed turn of a message that failed before, or
 *                      of one that never failed (from boundAt) (TURN-12, TURN-15; P_ONCE)
 *   -DRESEND_FROM=1    with BOUNDAT: the window from the first failure, not the binding (TURN-12, TURN-11; P_ONCE),
 *                      and -DPAST_AT_BINDING its narrower repair (a message failed by the check from boundAt
 *                      counts its first failure from the binding)
 *   (-DBOUNDAT=1 -DRESEND_FROM=3, RECHECK 3: the window from the binding, checked before a resumed turn: the rule
 *   being built; -DSOLO=i: the client sends message i only, for small searches)
 *   -DVSTORE=n         a volatile conversation store (TURN-14) that restarts n times, each time losing its last
 *                      write when that write ended a message's turn (its commit, or its failMessage with the
 *                      failed-turn record): the message is back in progress and the next driver resumes it. Allowed
 *                      beside a volatile ledger only; -DALLOW_VOLATILE_STORE puts it beside a durable ledger
 *                      (allowVolatileConversationStore: true, TURN-14's opt-in; P_TRUTH)
 *   -DVSTORE_FORGET    with VSTORE: a restart may also lose every write since a message's append (the message, its
 *                      binding and its end), so the store issues its turn index again and a redelivery of the message is
 *                      a new one, at a new index under a new key (TURN-14; P_ONCE, whatever the ledger); with -DSAME_ASK=1
 *                      a new message at the index issued again is answered with the old row (P_FRESH)
 *   -DRESOLVES=1 -DRESOLVE_GRACE=0  an operator's not_performed resolution of an expired in-flight row at once,
 *                      without RESOLVE-6's grace: a paused owner sends its request late (P_UKW); RESOLVE_GRACE=1 (the
 *                      default) waits until no living owner of the row's fence can send (resolve verifies it)
 *   -DNOLIST           a ledger that does not list rows: a resumed turn's record rests on its blanket statement
 *                      (RECORD-8 listed: false; with RESUME_OMITS, nolist-omits-record)
 *   -DRUNTIMEOUTS=n    n runs outlive the dispatcher's bound on a run (runTimeoutMs, DISPATCH-18): the dispatch is
 *                      answered in_flight_elsewhere while the run goes on (LateRun); -DRT_SAYS_NOT answers the bound as
 *                      not performed (P_TRUTH), -DRT_RELEASE releases the row at the bound (P_ONCE), -DRT_UNFENCED
 *                      writes the late outcome whatever the row's fence (P_OWNER), -DRT_NOBOUND has no bound (P_END)
 *   -DLOSTRECS=n       n records (complete, fail, release, markUnknown) that the ledger applies while their reply is lost:
 *                      the dispatcher sends the identical write again (DISPATCH-10), is refused with stale_claim (its own
 *                      first copy moved the row), and reads the row (lookup, DISPATCH-17): the row at its fence in the state
 *                      the write makes is its own write, answered as acknowledged; otherwise the refusal stands (P_ACK).
 *                      -DSTALE_FACE takes the stale_claim at face value (no lookup: P_ACK)
 *   -DTURNS2=1         with -DSOLO=0: message 0 has a second turn; turn 1's model makes the call again when turn 0 committed
 *                      without answering it, and it is dispatched under turn 0's key when turn 0's record lists it (TURN-23);
 *                      -DNO_CARRY claims it under turn 1's own key, -DCARRY_NO_TAKEUP_READ leaves a holder that takes the
 *                      message up between the turns without the records' carried call (P_ONCE), -DCARRY_ANSWERED carries
 *                      it also when turn 0 answered it, so a second ask is answered from the first's row (P_FRESH)
 *   -DDEPLOY=1         with -DSOLO=0: a deploy between two runs of a turn changes pay's key derivation (key 0, then key 1);
 *                      IDENT-10's guard in a resumed turn lists the turn's rows and dispatches under the other definition's
 *                      row's key, or refuses (tool_definition_changed); -DNO_IDENT_GUARD claims the call's own key (P_ONCE).
 *                      With -DTURNS2=1 too, the deploy may come between the turns (TURN-23 across a deploy): a carried call
 *                      is dispatched at turn 0's index as a re-run, through the guard there; -DCARRY_DEPLOY_RUNS runs it
 *                      under turn 1's key when the new schema refuses the stored request, -DCARRY_DEPLOY_OWN_INDEX claims a
 *                      matched one at turn 1's index (both P_ONCE)
 *   -DSLOT             with -DTURNS2 -DDEPLOY: finding 29's slot (TURN-23, the runner's pausedSlot): after a committed
 *                      resumed turn 0 that answered the call, turn 1's second ask is dispatched at turn 0's index, at
 *                      ordinal 1 when the key turn 0 answered is the call's key at ordinal 0 (keys 4 and 5: turn 0 at
 *                      ordinal 1 under each definition), through IDENT-10's guard there less the row turn 0 answered
 *                      (core's { at: { answered } }); -DREDERIVE_ANSWERED: a holder that reads the committed turn 0 back
 *                      (a take-up, a re-send) sees the key it answered as KEY(0, its own definition), as the runner
 *                      derives it, not the key stored with the turn: after a deploy the first ask's row is not excluded
 *                      and the second ask is answered from it (P_FRESH)
 *   -DTURNS3=1         with -DTURNS2 -DDEPLOY (not -DSLOT): message 0 has a third turn, so that a listed call of turn 0 can be
 *                      answered by turn 1 (carried) and asked for again in turn 2 (a second ask); a holder that reads the
 *                      committed turns back (a take-up before turn 2, a re-send of a failed turn 2) decides which listed call
 *                      turn 1 answered by the key stored with the committed turn 1 (TURN-24: the runner's afterStoredTurn);
 *                      -DREDERIVE_CARRY: by the key it derives for turn 1's committed call now, at the listed call's index
 *                      under its own definition (the runner before that fix: afterTurn's matchCarried): after a deploy the
 *                      answered listed call is taken for unanswered, turn 2's second ask is carried to turn 0's index and
 *                      IDENT-10's guard there answers it from the first ask's row (P_FRESH)
 *   -DSAME_ASK=1       with BOUNDAT: message 1 asks for what message 0 asked (the same intent, "pay" again under a
 *                      new message id), so bound at a failed message 0's index it derives message 0's key there
 *                      (TURN-12) and may replay its row; -DINHERIT=0 counts its window from its own binding, not
 *                      from message 0's window start (TURN-11's inherited boundAt; P_TOLD), and
 *                      -DFIRST_RUN_EXEMPT=0 refuses its first run too when the inherited window has passed
 */

/* ------------------------------------------------------------------ configuration */

#ifndef CRASHES
#define CRASHES 1        /* worker crashes (the queue redelivers its message) */
#endif
#ifndef PAUSES
#define PAUSES 1         /* a live holder's lease lapses (GC pause, frozen container) */
#endif
#ifndef STREAMCUTS
#define STREAMCUTS 2     /* streams that die before message_stop (STREAM-1) */
#endif
#ifndef REWORDS
#define REWORDS 1        /* replays whose model output re-words the request (IDENT-3) */
#endif
#ifndef LOSTS
#define LOSTS 1          /* downstream responses lost or timed out */
#endif
#ifndef REFUSALS
#define REFUSALS 1       /* requests refused before the downstream accepted them (not performed) */
#endif
#ifndef DECLINES
#define DECLINES 1       /* downstream definite failures (card declined) */
#endif
#ifndef NOTSTORABLE
#define NOTSTORABLE 1    /* results too large to store (LEDGER-10) */
#endif
#ifndef REDELIVERIES
#define REDELIVERIES 1   /* client re-sends, queue redeliveries, double clicks (TURN-2, TURN-8) */
#endif
#ifndef PARTITIONS
#define PARTITIONS 0     /* a worker cut off from the ledger (renewals and writes fail) */
#endif
#ifndef RETENTION
#define RETENTION 0      /* 1: rows and downstream keys may be forgotten after retention */
#endif
#ifndef VOLATILE
#define VOLATILE 0       /* >0: a volatile ledger may lose that many rows at any time */
#endif
#ifndef FENCE_CONTINUES
#define FENCE_CONTINUES 0    /* 1: a claim of a key retention forgot continues its fence (LEDGER-19 allows it; ledger-postgres does it) */
#endif
#ifndef VOLATILE_UNKEYED
#define VOLATILE_UNKEYED 0   /* 1: unkeyed_write tools allowed over the volatile ledger (LEDGER-14's opt-in): it loses their rows too */
#endif
#ifndef LOSTCLAIMS
#define LOSTCLAIMS 0     /* claims whose reply is lost: applied by the ledger or not (LEDGER-12, LEDGER-26) */
#endif
#ifndef LATECLAIMS
#define LATECLAIMS 0     /* claims the store holds and applies at any later moment (a paused store, a frozen connection) */
#endif
#ifndef DIVERGES
#define DIVERGES 0       /* re-runs of a turn (a retry, a resumed turn) whose response answers without the call (RECORD-8) */
#endif
#ifndef AGING
#define AGING 0          /* 1: time passes for a failed message: its re-send window, then its rows' retention (TURN-12) */
#endif
/* TURN-12's re-send window (with AGING): measured from the message's first failure (1, the rule),
 * from its last failure (2), or no window at all (0: a re-send re-opens whenever nothing was bound since) */
#ifndef RESEND_FROM
#define RESEND_FROM 1
#endif
/* BOUNDAT (with AGING): the message's first binding is a point of time too (boundAt, TURN-11), and time
 * also passes for a message in progress whose holder is gone (it died, or lost the turn lease, and
 * nobody holds the lease): the message waits, in progress, until the conversation is next driven
 * (TURN-15). RESEND_FROM=3 counts the re-send window from the binding (boundAt <= the first failure).
 * Off (0), the window checks' searches are the ones before it. */
#ifndef BOUNDAT
#define BOUNDAT 0
#endif
/* -DSOLO=i: the client sends message i only (and re-sends only it); a search of one conversation with
 * one message, for the small checks of a single message's life. Default: both messages. */
#ifndef SOLO
#define SOLO M
#endif
/* With BOUNDAT: the runner's check of the window before any attempt of a resumed turn (TURN-12),
 * a bit each: 1 a message that failed before (its retry's holder died: from firstFailedAt, or from
 * the binding with RESEND_FROM=3), 2 a message that never failed (from boundAt); 3 both, 0 neither */
#ifndef RECHECK
#define RECHECK 3
#endif
/* -DSAME_ASK (with AGING and BOUNDAT): message 1's call has message 0's intent: at turn index t its key is
 * KEY(t, 0). INHERIT: a message bound at the index of a failed message takes that message's window start
 * (boundAt inherited, TURN-11); 0: from its own binding. FIRST_RUN_EXEMPT: the run that binds a message is
 * never refused for an inherited date (`bound`, TURN-12); 0: checked there too. */
#ifndef SAME_ASK
#define SAME_ASK 0
#endif
#ifndef INHERIT
#define INHERIT 1
#endif
#ifndef FIRST_RUN_EXEMPT
#define FIRST_RUN_EXEMPT 1
#endif
#define CALLI(i) (SAME_ASK -> 0 : (i))
/* -DVSTORE=n: the conversation store is volatile (TURN-14) and restarts n times; each restart loses the store's
 * last write if that write ended a message's turn (a commit, or a failMessage with its record), while the turn
 * lease is free (the lease writes after it are lost too: a free lease and an expired one are the same to the
 * next acquirer; the fence counter is kept). The message is in progress again at its bound index and the
 * conversation's next driver resumes it (TURN-15). LEDGER_VOLATILE: the ledger declares itself volatile
 * (LEDGER-14; by default it is when it may lose rows). TURN-14: a runner refuses a volatile store beside a
 * durable ledger (durability_mismatch) unless allowVolatileConversationStore is set (-DALLOW_VOLATILE_STORE). */
#ifndef VSTORE
#define VSTORE 0
#endif
/* -DRESOLVES=n: an operator resolves n rows as not_performed (RESOLVE-2, RESOLVE-3, RESOLVE-5): an unknown row, or
 * an in-flight one whose lease expired, on a person's word that is true when given (no effect under the key yet).
 * The row is released with a higher fence, keeping its request, and the next claim re-runs it. RESOLVE_GRACE (1,
 * RESOLVE-6's grace for such a tool): only once no owner of the row's fence that is still alive can send its
 * request late (a paused owner with its request unsent); 0: at once. */
#ifndef RESOLVES
#define RESOLVES 0
#endif
#ifndef RESOLVE_GRACE
#define RESOLVE_GRACE 1
#endif
/* -DRUNTIMEOUTS=n: n runs outlive the dispatcher's bound on a run (runTimeoutMs, DISPATCH-18): the dispatch is
 * answered in_flight_elsewhere at the bound while its run goes on (LateRun) and may still send its request, settle
 * and be recorded under its own fence, or never settle. Switches that take a part of the rule away: -DRT_SAYS_NOT
 * (the bound answered as not performed), -DRT_RELEASE (the row released at the bound), -DRT_UNFENCED (the late
 * outcome written whatever the row's fence), -DRT_NOBOUND (no bound: the dispatch waits for the run for ever). */
#ifndef RUNTIMEOUTS
#define RUNTIMEOUTS 0
#endif
/* -DLOSTRECS=n: n records applied by the ledger whose reply is lost (DISPATCH-10, DISPATCH-17); see above */
#ifndef LOSTRECS
#define LOSTRECS 0
#endif
/* -DTURNS2=1: a message has a second turn (TURN-3's continuation, TURN-23). After message 0's turn 0 commits, the
 * message goes on to turn 1, a new turn index issued under the turn lease; it is answered when turn 1 commits. Turn 1's
 * model makes the call again exactly when turn 0 committed without answering it (the same ask: the model never saw
 * the call's effect), and when turn 0 answered it, either makes it again (a second ask, which runs under its own key)
 * or answers with plain text. TURN-23: turn 1's call is dispatched under turn 0's key when turn 0's record lists it
 * (happened, may_have_happened) and no committed turn answered it; the holder that committed turn 0 knows that record,
 * a holder that takes the message up between turns (or in turn 1) reads it back from the records kept beside the
 * conversation and the committed turn. Modelled with message 0 alone (-DSOLO=0). Switches that take a part away:
 * -DNO_CARRY (turn 1's call claimed under turn 1's own key: P_ONCE), -DCARRY_NO_TAKEUP_READ (a holder that takes the
 * message up does not read the records: P_ONCE). P_ONCE then counts effects per ask (the call of turn 0 and its
 * repeat in turn 1 are one ask; a repeat after turn 0 answered it is a second one). */
#ifndef TURNS2
#define TURNS2 0
#endif
/* -DDEPLOY=1: a deploy between two runs of one turn changes how pay's key is derived (IDENT-4 broken, IDENT-10's case).
 * The key of the call derives from (turn index, definition): key 0 under the first definition, key 1 (message 1's
 * slot: message 0 alone, -DSOLO=0, and pay keyed) under the deployed one. A holder derives under the definition
 * deployed when it begins the turn; a holder that began it before the deploy (a paused process of the old release)
 * keeps the old one. The deploy may keep the old stored request readable (the current definition gives the call's
 * key from it) or not (its schema refuses it). IDENT-10's guard: in a resumed turn the dispatcher lists the turn's rows
 * (one ledger step) before it claims; a row under the other definition's key, when the call's own key has none, is
 * matched (the call dispatched under the row's key) when the stored request gives the call's key, and otherwise
 * refused (tool_definition_changed: nothing claimed, nothing run; the turn commits with the call answered as not run
 * and its record lists the row, RECORD-8). -DNO_IDENT_GUARD: no listing, the call claimed under its own key (P_ONCE). */
#ifndef DEPLOY
#define DEPLOY 0
#endif
/* With both -DTURNS2 and -DDEPLOY (TURN-23 across a deploy): keys KEY(turn index, definition), 0 and 1 at turn 0, 2 and 3 at
 * turn 1. The deploy may come at any moment, between turn 0's commit and turn 1 too. Turn 1's call carried from turn 0
 * (its record lists key 0 or key 1, happened or may_have_happened, and no committed turn answered it) is dispatched at
 * turn 0's index as a re-run: under its key there as this holder's definition derives it (the listed key, when the listed
 * call ran under this definition), through IDENT-10's guard at that index, which finds the other definition's row: the
 * call is dispatched under the row's key when the stored request gives the call's key (answered from a completed row,
 * waited on in flight, re-run under its old key when released), and refused with tool_definition_changed (request_refused)
 * when the new schema refuses the stored request: nothing claimed or run, answered to the model as a call not run whose
 * effect happened or may have happened, and the call stays listed (a retry or a take-up refuses again).
 * -DCARRY_DEPLOY_RUNS (the spec before: a refused stored request matches nothing and the call runs under turn 1's key) and
 * -DCARRY_DEPLOY_OWN_INDEX (a matched call claimed at turn 1's index instead of re-run at turn 0's): P_ONCE.
 * -DDEPLOY_BETWEEN_TURNS: the deploy only after turn 0's commit (IDENT-10's residual reached through a carried call). */
/* message 0 alone, with store keys per turn (tk) and TURN-15's resumed from the indexes begun (nbeg) */
#define SOLO_TURNS (TURNS2 || DEPLOY > 0)
#ifdef RT_UNFENCED
#define RT_UNFENCED_ON true
#else
#define RT_UNFENCED_ON false
#endif
#ifndef LEDGER_VOLATILE
#define LEDGER_VOLATILE (VOLATILE > 0)
#endif
#if VSTORE && !LEDGER_VOLATILE && !defined(ALLOW_VOLATILE_STORE)
#error "TURN-14: a volatile conversation store beside a durable ledger is refused (durability_mismatch); -DALLOW_VOLATILE_STORE allows it"
#endif
#if VSTORE && (AGING || defined(OLD_TURN))
#error "VSTORE is modelled without AGING and OLD_TURN"
#endif
#if SAME_ASK && !(AGING && BOUNDAT) && !VSTORE
#error "SAME_ASK is modelled with AGING and BOUNDAT, or with VSTORE (a store that forgets a binding)"
#endif
#if DEPLOY && (RETENTION || VOLATILE > 0)
#error "DEPLOY is modelled without RETENTION, VOLATILE"
#endif
#if (defined(CARRY_DEPLOY_RUNS) || defined(CARRY_DEPLOY_OWN_INDEX) || defined(DEPLOY_BETWEEN_TURNS)) && !(TURNS2 && DEPLOY)
#error "CARRY_DEPLOY_RUNS, CARRY_DEPLOY_OWN_INDEX and DEPLOY_BETWEEN_TURNS are modelled with TURNS2 and DEPLOY"
#endif
/* -DCARRY_LISTED_ONLY (with TURNS2, the runner as coded: carry.ts's withRecord): a call is carried only when a record lists
 * it (RECORD-8's calls: an attempt's outcome, or the row the resumed turn's listing found), not on a resumed record's
 * "resumed": true alone, which names no call (RECORD-7). recl[k] is the strongest statement of the key any record lists
 * as a call. */
#if defined(CARRY_LISTED_ONLY) && !(TURNS2 && !DEPLOY)
#error "CARRY_LISTED_ONLY is modelled with TURNS2 alone"
#endif
#ifdef CARRY_LISTED_ONLY
#define LISTED_REC(v) if :: (v) > recl[k] -> recl[k] = (v) :: else fi
#else
#define LISTED_REC(v) skip
#endif
#ifdef DEPLOY_BETWEEN_TURNS
#define DEPLOY_NOW (nturns >= 1)
#else
#define DEPLOY_NOW true
#endif
/* -DSLOT (with TURNS2 and DEPLOY): TURN-23's slot after a committed resumed turn (finding 29's fix, carry.ts's pausedSlot).
 * A committed turn 0 that was resumed (its record says so, RECORD-7: an earlier holder may have acted) gives the message a
 * slot at turn 0's index. When turn 0 answered the call (a result or an error result) and turn 1's model makes it again, a
 * second ask that no listed call answers, it is dispatched at the slot: at ordinal 0 under the holder's definition, or at
 * ordinal 1 when the key turn 0 answered is that key (the ordinal after the answered one: keys 4 and 5, ORD1), as a re-run
 * through IDENT-10's guard at turn 0's index, which never answers it from the row turn 0 answered (core's `at.answered`).
 * The slot when turn 0 did not answer the call is the model's carry on the resumed statement (carry-pause), unchanged.
 * Which key turn 0 answered: the holder that committed it knows the key its call was dispatched under (the runner's
 * carriedAfter); one that reads the committed turn back (a take-up between the turns or in turn 1, a re-send) knows the key
 * stored with the turn (TURN-24: the keys kept with the committed turn), or, with -DREDERIVE_ANSWERED, the key
 * it derives for the committed call under its own definition, KEY(0, defv) (the runner before that fix: storedCallReports
 * derives keys, the store keeps none). Not modelled with the slot: listed calls at the slot's index (the record's other
 * rows), several calls per response, ordinals past 1. */
#if (defined(SLOT) || defined(REDERIVE_ANSWERED)) && !(TURNS2 && DEPLOY)
#error "SLOT and REDERIVE_ANSWERED are modelled with TURNS2 and DEPLOY"
#endif
#if defined(REDERIVE_ANSWERED) && !defined(SLOT)
#error "REDERIVE_ANSWERED is modelled with SLOT (the answered key is read only by the slot and its guard)"
#endif
/* -DTURNS3=1 (with TURNS2 and DEPLOY): message 0 has a third turn (turn indexes 0, 1, 2; keys KEY(t, definition), 0 to 5). A
 * call turn 0 left unanswered (listed by its record) is carried by turn 1, which may answer it; turn 2's model makes the
 * call again, the same ask while no committed turn answered it, a further ask once one did (or plain text). TURN-23,
 * TURN-24: a holder that reads the committed turns back before turn 2 (a take-up, a re-send of a failed turn 2) reads
 * which listed call turn 1 answered from the key stored with the committed turn 1 (the runner's afterStoredTurn): the
 * listed call under that key; -DREDERIVE_CARRY derives turn 1's committed call's key now instead, at the listed call's
 * turn index under the holder's own definition, and compares it with the listed key (afterTurn's matchCarried before the
 * keys were stored; the model has one identity and no names, so the deploy stands for every change that makes the
 * derivation miss: a rename, IDENT-11, in the runner's case). Turn 0's own record needs no such decision: a committed
 * turn's record lists only the calls it does not answer, as the holder that committed it knew them (RECORD-8); the
 * model reads that from tres[0], as with two turns. Not with SLOT (its keys 4 and 5 are turn 2's here). */
#ifndef TURNS3
#define TURNS3 0
#endif
#if TURNS3 && (!(TURNS2 && DEPLOY) || defined(SLOT))
#error "TURNS3 is modelled with TURNS2 and DEPLOY, without SLOT"
#endif
#if defined(REDERIVE_CARRY) && !TURNS3
#error "REDERIVE_CARRY is modelled with TURNS3 (the decision it changes is which listed call a later committed turn answered)"
#endif
#if SOLO_TURNS && (SOLO != 0 || AGING || VSTORE || SAME_ASK || NOTSTORABLE > 0 || RUNTIMEOUTS > 0 || defined(OLD_TURN) || defined(RECORD_AFTER_COMMIT))
#error "TURNS2 and DEPLOY are modelled for message 0 alone (-DSOLO=0), without AGING, VSTORE, SAME_ASK, NOTSTORABLE, RUNTIMEOUTS, OLD_TURN, RECORD_AFTER_COMMIT"
#endif
#ifndef LOSTACQS
#define LOSTACQS 0       /* turn-lease acquires whose reply is lost: applied by the store or not (TURN-10) */
#endif
#ifndef LATEACQS
#define LATEACQS 0       /* acquires the store holds and applies at any later moment (TURN-10) */
#endif
/* Lease grant ids (TURN-10, supports.leaseGrants) are modelled only when an acquire's reply can be
 * lost: without that fault they change nothing, and the other checks keep their state space. */
#define GRANTS (LOSTACQS + LATEACQS > 0)
/* -DGRANT_STRICT=1: P_GRANT without TURN-10's residual (a copy of an acquire the store never applied,
 * landing after its runner stopped waiting for it, takes the lease as any acquire would) */
#ifndef GRANT_STRICT
#define GRANT_STRICT 0
#endif
/* Claim ids (LEDGER-26, DISPATCH-16) are minted only when a claim reply can be lost: without
 * that fault they change nothing, and the other checks keep their state space. */
#define CLAIMIDS (LOSTCLAIMS + LATECLAIMS > 0)
/* How a copy of a claim applied after its claimant stopped waiting is kept from taking a row:
 *   GUARD 0  before LEDGER-27: nothing (LEDGER-26's residual)
 *   GUARD 1  tombstone (LEDGER-27 alone: a ledger without retire): a released row keeps the claim id
 *            it was released under and refuses a claim carrying it
 *   GUARD 2  retire (LEDGER-28, DISPATCH-16; main): GUARD 1, and the dispatcher retires every claim id of which
 *            a copy may still be on its way (any claim of the dispatch met ledger_unavailable),
 *            whatever the dispatch ended with; the ledger keeps the retired ids of the key
 *            (until retention) and refuses every claim carrying one */
#ifndef GUARD
#define GUARD 2
#endif
#define TOMBSTONE (GUARD >= 1)
#define RETIRE (GUARD >= 2)
#if defined(ALL_KEYED) || DEPLOY
#define KEYED(i) true
#else
#define KEYED(i) ((i) == 0)
#endif
#ifdef NO_SELF_FENCE
#define SELF_FENCE false
#else
#define SELF_FENCE true
#endif

/* Which properties this run checks; the old-design runs switch on only the one they break. */
#ifndef CHECK_ONCE
#define CHECK_ONCE 1
#endif
#ifndef CHECK_UKW
#define CHECK_UKW 1
#endif
#ifndef CHECK_TRUTH
#define CHECK_TRUTH 1
#endif
#ifndef CHECK_RECORD
#define CHECK_RECORD 1
#endif
#ifndef CHECK_FENCE
#define CHECK_FENCE 1
#endif
#ifndef CHECK_OWNER
#define CHECK_OWNER 1
#endif
#ifndef CHECK_SAME
#define CHECK_SAME 1
#endif
#ifndef CHECK_END
#define CHECK_END 1
#endif
#ifndef CHECK_NOFALSE
#define CHECK_NOFALSE 1
#endif
#ifndef CHECK_GRANT
#define CHECK_GRANT 1
#endif
#ifndef CHECK_TOLD
#define CHECK_TOLD 1
#endif
#ifndef CHECK_FRESH
#define CHECK_FRESH 1
#endif

/* The properties as constant bits, so that spin names the one an assertion belongs to. */
bit P_ONCE = CHECK_ONCE;
bit P_UKW = CHECK_UKW;
bit P_TRUTH = CHECK_TRUTH;
bit P_RECORD = CHECK_RECORD;
bit P_FENCE = CHECK_FENCE;
bit P_OWNER = CHECK_OWNER;
bit P_SAME = CHECK_SAME;
bit P_END = CHECK_END;
bit P_NOFALSE = CHECK_NOFALSE;
bit P_GRANT = CHECK_GRANT;
bit P_TOLD = CHECK_TOLD;
bit P_FRESH = CHECK_FRESH;
#if LOSTRECS > 0
#ifndef CHECK_ACK
#define CHECK_ACK 1
#endif
bit P_ACK = CHECK_ACK;   /* only where it is on: the other checks' state vector keeps its size */
#endif

/* ------------------------------------------------------------------ sizes and codes */

#define W 2              /* workers */
#define M 2              /* messages = user intents */
#if TURNS3
#define T 3              /* turn indexes: message 0's three turns */
#else
#define T 2              /* turn indexes */
#endif
#if TURNS3
#define K 6              /* keys: KEY(t, definition) for turns 0, 1, 2 */
#elif defined(SLOT)
#define K 6              /* keys: 0 .. 3 KEY(t, definition), 4 and 5 turn 0's slot at ordinal 1 (ORD1) */
#define ORD1(d) (4 + (d))
#else
#define K 4              /* keys */
#endif
#ifndef MAXATT
#define MAXATT 3         /* retry policy: attempts per turn, the first included */
#endif
#define MAXTURNS 2       /* OLD_TURN: model responses per send */
#define KEY(t, i) ((t) * M + (i))
#define INTENT(k) ((k) % M)
#define NOMSG 9

/* message states in the conversation store (§4.2) */
#define MS_NONE 0
#define MS_QUEUED 1      /* received, waiting its turn (TURN-9) */
#define MS_INPROG 2      /* bound to its turn index (TURN-11) */
#define MS_ANSWERED 3
#define MS_FAILED 4      /* its turn failed; the record is kept (RECORD-4) */

/* ledger row states (LEDGER-3) */
#define R_NONE 0
#define R_INFLIGHT 1
#define R_COMPLETED 2
#define R_FAILED 3       /* definite failure: the effect did not happen */
#define R_FAILED_NS 4    /* failed with result_not_storable: the effect DID happen (LEDGER-10) */
#define R_UNKNOWN 5
#define R_RELEASED 6

/* keyed downstream, per key (IETF Idempotency-Key draft, Stripe) */
#define DS_NONE 0
#define DS_INPROG 1      /* a request under the key is executing: others get 409 (EFFECT-7) */
#define DS_DONE 2        /* performed; a same-payload repeat gets the stored answer */
#define DS_DECL 3        /* declined; a same-payload repeat gets the decline again */

/* what the tool's downstream call returned */
#define O_OK 1
#define O_ACCEPTED 2     /* keyed downstream accepted the request, response still to come */
#define O_DECLINED 3     /* definite failure */
#define O_REFUSED 4      /* not performed: never reached the downstream (503, connection refused) */
#define O_409 5          /* key in use by a request in progress (EFFECT-7) */
#define O_422 6          /* key held for a different request (EFFECT-6) */
#define O_LOST 7         /* no answer: timeout, dropped connection */
#define O_ABORT 8        /* aborted by the dispatcher's self-fencing (DISPATCH-13) */
#define O_NS 9           /* ran, but the result cannot be stored (LEDGER-10, DISPATCH-7) */

/* how a dispatch resolved, as the runner sees it (§11 codes) */
#define C_NONE 0         /* not dispatched: the stream died first (STREAM-3) */
#define C_OK 1           /* result, first run or replayed (DISPATCH-5) */
#define C_FAILED 2       /* tool_failed (DISPATCH-9) */
#define C_REL_NP 3       /* claim_released, effect not performed */
#define C_REL_MAY 4      /* claim_released, effect may have happened */
#define C_UNKNOWN 5      /* outcome_unknown */
#define C_NS 6           /* result_not_storable */
#define C_ELSEWHERE 7    /* in_flight_elsewhere (LEDGER-15) */
#define C_STALE 8        /* stale_claim (DISPATCH-8) */
#define C_LEDGER 9       /* ledger_unavailable (DISPATCH-10) */

/* what a record says about an effect (RECORD-2), ordered by strength (RECORD-5) */
#define SAY_NONE 0
#define SAY_NOT 1
#define SAY_MAY 2
#define SAY_HAPPENED 3
#define SAY_OF(c) ((c) == C_NONE -> SAY_NONE : \
                  (((c) == C_OK || (c) == C_NS) -> SAY_HAPPENED : \
                  (((c) == C_FAILED || (c) == C_REL_NP) -> SAY_NOT : SAY_MAY)))

/* What the listing of a row (LIST-3) says of its effect in a committed turn's record (RECORD-8):
 * happened for completed, not_happened for failed (the spec and the code do not tell a
 * result_not_storable failure apart: no check turns both NOTSTORABLE and DIVERGES on), may for
 * the rest; no row, nothing listed. */
#ifdef NOLIST
/* -DNOLIST: a ledger that does not list rows (or whose listing fails): the record says the rows were not listed
 * (RECORD-8's listed: false) and, of a resumed turn, that an earlier holder's effects may have happened */
#define SAY_ROW(k) SAY_NONE
#define LISTED_FAILED(k) false
#else
#define LISTED_FAILED(k) (rst[k] == R_FAILED)
#define SAY_ROW(k) (rst[k] == R_NONE -> SAY_NONE : \
                   (rst[k] == R_COMPLETED -> SAY_HAPPENED : \
                   ((rst[k] == R_FAILED || rst[k] == R_FAILED_NS) -> SAY_NOT : SAY_MAY)))
#endif
#if TURNS2
/* A resumed turn lists the rows claimed at its own turn index (LIST-3): a call carried from an earlier turn (TURN-23) is
 * under that turn's key, which the listing of turn t does not show; the turn's own attempts and the resumed statement
 * (RECORD-7) speak for it */
#define SAY_LISTED(k) ((k) / M == t -> SAY_ROW(k) : SAY_NONE)
#define LISTED_FAILED_AT(k) ((k) / M == t && LISTED_FAILED(k))
#else
#define SAY_LISTED(k) SAY_ROW(k)
#define LISTED_FAILED_AT(k) LISTED_FAILED(k)
#endif

/* ------------------------------------------------------------------ state */

/* acquire answers (TURN-10), with lease grant ids */
#define AQ_NEW 1         /* acquired: a new grant, a fence above every earlier one */
#define AQ_SAME 2        /* acquired: the live grant sent again (its reply was lost), its fence, the lease restarted */
#define AQ_HELD 3        /* not acquired: the lease is live under another grant */
#define AQ_LOST 4        /* conversation_lease_lost: that grant is over, or an earlier grant's id */
#define AQ_UNAVAIL 5     /* store_unavailable: the reply is lost (the acquire applied or not) */

/* conversation store (§4, MemoryConversationStore) */
byte ms[M];              /* message state */
byte midx[M];            /* bound turn index (TURN-11) */
byte order[M];           /* arrival order (TURN-9) */
byte narr;
byte nturns;             /* committed turns: the log's version (TURN-1, TURN-5) */
byte tmsg[T];            /* message each committed turn answers, +1 */
byte tres[T];            /* the call result it committed: C_OK or C_FAILED (RECORD-3) */
byte lholder;            /* turn lease: holder worker +1, 0 none (TURN-10) */
byte lfence;             /* its fence */
bool llive;              /* not yet expired on the store's clock */
byte fencectr;           /* highest turn-lease fence ever issued */
byte lastBound;          /* message bound most recently, +1 (TURN-12) */
#if GRANTS
/* lease grant ids (TURN-10, supports.leaseGrants): a grant id is a number, minted for one
 * acquisition, and only when one of its acquires meets store_unavailable (an id no copy of which
 * is on its way is never presented again, so which one it was cannot matter): 0 is "no id" */
byte gidctr;
byte lgrant;             /* grant id of the conversation's latest grant (kept after its lease ended) */
byte gearlier;           /* grant ids of earlier grants, a bit per id (the stores keep them: refused) */
bool lknown;             /* the latest grant's acquirer learned it (its `acquired` reached it) */
byte wga[W];             /* grant id worker w sends its acquire with, while it waits for it; 0 none */
byte lak;                /* an acquire the store holds, to apply later: 1 */
byte lag;                /* its grant id */
byte law;                /* its acquirer */
byte eaq;                /* scratch: the store's answer to that copy */
byte b_lostacq = LOSTACQS;
byte b_lateacq = LATEACQS;
#endif
#if AGING
/* TURN-12's re-send window and LEDGER-13's retention on abstract time: for message i, failure 1, 2, ...
 * happen in order; "the window since failure j passed" and "retention since failure j passed" are
 * events in that order for each j (the window is below the retention), and retention since j may
 * come before or after the window since j + 1. A row is swept once retention passed since the
 * failure that ended the run that last wrote it. */
byte nfail[M];           /* how often message i failed */
byte wpass[M];           /* the re-send window since failures 1 .. wpass[i] passed */
byte rpass[M];           /* retention since failures 1 .. rpass[i] passed (rpass <= wpass) */
byte rborn[K];           /* failures of the key's message before its row (or downstream key) was last written */
/* TURN-12: the message failed again (failMessage) */
#define FAILED_AGAIN(i) if :: nfail[i] < 3 -> nfail[i]++ :: else fi
#if BOUNDAT
/* With BOUNDAT the points of message i are p0, its first binding, and p1 .. pn, its failures: wpass[i]
 * and rpass[i] count the points (from p0) since which the window, the retention, passed. A row ages
 * from the last point before its write, rborn = nfail (conservative: a row of a run whose holder died
 * is as old as that run's start allows). Only a run whose live holder fails the message ages its rows
 * from that failure (the margin between window and retention covers such a run, TURN-12): rcur marks
 * a row written since the current run of its message began. */
bool rcur[K];
#define TOUCH(kk) rborn[kk] = nfail[INTENT(kk)]; rcur[kk] = true
#if SAME_ASK
/* the message was bound at the index of the other message, failed there (with INHERIT its window start is the
   other's, TURN-11); with two messages only the second one bound at an index can inherit */
bool inh[M];
#define BWIN_PASSED(i) (wpass[i] > 0 || (INHERIT && inh[i] && wpass[1 - (i)] > 0))
/* a row ages on the clock of the message whose run last wrote it (both messages derive intent-0 keys) */
byte rwm[K];
#define WROTE(kk) rwm[kk] = cur; rborn[kk] = nfail[cur]
#define AGED(k) ((ms[rwm[k]] == MS_FAILED || ms[rwm[k]] == MS_INPROG) && rpass[rwm[k]] > rborn[k])
#else
#define BWIN_PASSED(i) (wpass[i] > 0)
#endif
/* the holder died or lost the lease, and nobody drives the conversation: time passes for the message */
#define UNATTENDED(i) (ms[i] == MS_INPROG && !(lholder != 0 && llive))
#if !SAME_ASK
#define AGED(k) ((ms[INTENT(k)] == MS_FAILED || ms[INTENT(k)] == MS_INPROG) && rpass[INTENT(k)] > rborn[k])
#endif
/* TURN-12: the window since the binding (3), the first failure (1), the last failure (2), or none (0) */
#define WINDOW_OPEN(i) (RESEND_FROM == 0 || (RESEND_FROM == 3 && !BWIN_PASSED(i)) || \
                        (RESEND_FROM == 1 && wpass[i] <= 1) || (RESEND_FROM == 2 && wpass[i] <= nfail[i]))
/* TURN-12: the re-check before any attempt of a resumed turn; past it, nothing runs */
#define PAST_AT_RESUME(i) ((nfail[i] > 0 && (RECHECK & 1) && !WINDOW_OPEN(i)) || \
                           (nfail[i] == 0 && (RECHECK & 2) && BWIN_PASSED(i)))
#else
/* LEDGER-13: a row's retention counts from its last write; the run writing it ends in failure nfail + 1 */
#define TOUCH(kk) rborn[kk] = nfail[INTENT(kk)]
/* LEDGER-13, LEDGER-19: retention passed for the key's row since the failure after its last write */
#define AGED(k) (ms[INTENT(k)] == MS_FAILED && rpass[INTENT(k)] > rborn[k])
/* TURN-12: a re-send re-opens the failed message only within its re-send window, from its first failure */
#define WINDOW_OPEN(i) (RESEND_FROM == 0 || (RESEND_FROM == 1 && wpass[i] == 0) || (RESEND_FROM == 2 && wpass[i] < nfail[i]))
#endif
#else
#define TOUCH(kk) skip
#define FAILED_AGAIN(i) skip
#define AGED(k) false
#define WINDOW_OPEN(i) true
#endif

/* ledger (§6, MemoryLedger) */
byte rst[K];             /* row state */
byte rfence[K];
bool rlive[K];           /* lease not expired (LEDGER-6) */
byte rreq[K];            /* stored request (LEDGER-21) */

/* claim ids (LEDGER-26, DISPATCH-16): an id is a number, fresh for every dispatch (cidctr) */
byte cidctr;
byte rcid[K];            /* the claim id stored with the in-flight row */
byte rrel[K];            /* TOMBSTONE: the claim id the row was last released under */
byte ccid[W];            /* claim id the worker is sending again after a lost reply (claimRetrying) */
byte bgk[W];             /* settleLostClaim pending: key +1 */
byte bgcid[W];           /* its claim id */
byte bgrq[W];            /* its request */
bool bgrel[W];           /* RETIRE: the dispatch never took the row: release it if held under the id */
int rret[K];             /* RETIRE: the key's retired claim ids, a bit per id */
#define RETIRED(kk, c) (RETIRE && ((rret[kk] >> (c)) & 1))
byte lk;                 /* a claim the store holds, to apply later: key +1 */
byte lcid;               /* its claim id */
byte lrq;                /* its request */
byte lw;                 /* its claimant */
bit took;                /* scratch: the unseen claim just applied took the row */

/* keyed downstream */
byte ds[K];
byte dsfp[K];            /* payload fingerprint: the request id first sent under the key */

/* workers, as the environment sees them */
chan inbox = [4] of { byte };   /* deliveries: each is one send(message id) */
bool busy[W];
byte cmsg[W];            /* the message its send() delivers */
bool crashed[W];
bool part[W];            /* cut off from the ledger */
bool aborted[W];         /* the tool's AbortSignal fired (DISPATCH-11, DISPATCH-13) */
byte hold[W];            /* key +1 of the claim the worker's dispatcher holds */
byte hfence[W];          /* that claim's fence */
bool waiting[W];         /* its request is executing downstream and it waits for the answer */
bool pend[W];            /* claimed, and the tool has not sent its request yet */
byte wk[W];              /* key +1 of the turn the worker is producing */

/* fault budgets */
byte b_crash = CRASHES;
byte b_pause = PAUSES;
byte b_cut = STREAMCUTS;
byte b_reword = REWORDS;
byte b_lost = LOSTS;
byte b_refuse = REFUSALS;
byte b_decl = DECLINES;
byte b_ns = NOTSTORABLE;
byte b_redeliver = REDELIVERIES;
byte b_part = PARTITIONS;
byte b_lose = VOLATILE;
byte b_lostc = LOSTCLAIMS;
byte b_late = LATECLAIMS;
#if LOSTRECS > 0
byte b_lostr = LOSTRECS;
#endif
#if DIVERGES > 0
byte b_div = DIVERGES;   /* only where it is on: the other checks' state vector keeps its size */
#endif
#if SOLO_TURNS
/* TURN-23's second turn (only where it is on: the other checks' state vector keeps its size) */
byte nbeg;               /* store: turn indexes of message 0 begun (beginTurn bound or began them): TURN-15's `resumed` */
byte tk[T];              /* store: key +1 of the call each committed turn answers (a carried call answers turn 0's key) */
#if TURNS3
byte effa[3];            /* ghost: effects per ask: the number of committed turns that answered the call before the turn
                            that makes it (0 the first ask and its repeats while no committed turn answered it) */
#else
byte effa[2];            /* ghost: effects per ask: 0 the call of turn 0 and its repeat in turn 1 while no committed turn
                            answered it (the same ask), 1 a repeat in turn 1 after turn 0 answered it (a second ask) */
#endif
#if TURNS3
/* the ask an effect answers, as with the slot the calling worker's: how many committed turns before its turn answered the
   call (t and tres as the worker sees them when it sends); a carried call's repeat is the same ask as the listed call */
#define ASKN (((t >= 1 && tres[0] != C_NONE) -> 1 : 0) + ((t >= 2 && tres[1] != C_NONE) -> 1 : 0))
#define ASK(k) ASKN
byte rask[K];            /* ghost: the ask whose call made the key's row (P_FRESH) */
#elif defined(SLOT)
/* the ask an effect answers: with the slot a second ask runs at turn 0's index too, so the ask is the calling worker's:
   a call of turn 1 after turn 0 answered it (t and tres[0] as the worker sees them when it sends) */
#define SECOND_ASK (t == 1 && tres[0] != C_NONE)
#define ASK(k) (SECOND_ASK -> 1 : 0)
bit t0res;               /* store: the committed turn 0 was resumed (its record says so, RECORD-7): the message has a slot */
byte rask[K];            /* ghost: the ask whose call made the key's row (P_FRESH) */
#elif TURNS2
/* the ask an effect under key k answers: a key of turn 1's own (2, or 3 under a deployed definition) is a second ask only
   when turn 0 answered the call */
#define ASK(k) (((k) / M == 1 && tres[0] != C_NONE) -> 1 : 0)
#else
#define ASK(k) 0         /* DEPLOY: one ask, under either definition's key */
#endif
#endif
#if DEPLOY
byte b_deploy = DEPLOY;
byte defv;               /* the definition of pay deployed now: 0 the first, 1 the new one (IDENT-4) */
bool dcompat;            /* the new definition reads a stored request of the old one and gives the call's key from it */
/* the key of the call at turn index t under the other definition than key k's */
#define OTHER_DEF(t, k) KEY(t, 1 - ((k) % M))
/* IDENT-10's guard runs where a call is dispatched as a re-run: in a resumed turn, and (TURN-23) for a call carried to an
   earlier turn's index */
#if TURNS2
#define RERUN_AT(k) (resumed || (k) / M != t)
#else
#define RERUN_AT(k) resumed
#endif
#endif

#if RESOLVES > 0
byte b_resolve = RESOLVES;
#endif
#if VSTORE
byte b_vstore = VSTORE;
byte vlast;              /* message +1 whose commit or failMessage is the store's last write; 0: a later write came */
bool vlost[M];           /* the store lost the message's answer or failure: it waits in progress for the next driver */
/* with its own separator, and nothing at all without VSTORE, so the other checks keep their searches */
#define VWROTE(x) vlast = (x);
#else
#define VWROTE(x)
#endif
#if VSTORE && defined(VSTORE_FORGET)
/* -DVSTORE_FORGET: a restart may also lose every write since a message's append, when all of them were that
 * message's (its append, binding, end and records): the store no longer knows the message, and the turn index it
 * was bound at is issued again (TURN-14). vrun: message +1 whose append began the store's writes since, all its own */
byte vrun;
#define VNEW(i) vrun = (i) + 1;
#define VMINE(i) vrun = (vrun == (i) + 1 -> vrun : 0);
#else
#define VNEW(i)
#define VMINE(i)
#endif
/* What a failure told the user is checked against every later effect with a volatile store (its resumed turn) and
 * with runs past their bound (a late run's request): TOLDNOT */
#define TOLDNOT (VSTORE || RUNTIMEOUTS > 0)
#if TOLDNOT
bool tnot[K];            /* the user was told the key's effect did not happen (a failed message's record, a committed
                            error result) and has not re-sent the message since (P_TRUTH) */
#define VTOLD(k) ; assert(!P_TRUTH || !tnot[k])    /* P_TRUTH: what the user was told stays true */
#else
#define VTOLD(k)
#endif
#if RUNTIMEOUTS > 0
/* DISPATCH-18: a run that outlived its bound, as the dispatcher left it (one at a time) */
byte b_rt = RUNTIMEOUTS;
byte trs;                /* its stage: */
#define TR_PEND 1        /*   claimed, its request not sent yet */
#define TR_SENT 2        /*   its keyed request accepted, executing downstream */
#define TR_SETTLED 3     /*   settled (tro), to be recorded under its fence */
#define TR_HUNG 4        /*   never settles: its row is left to its lease (LEDGER-7) */
byte trk;                /* its key +1 */
byte trf;                /* its claim's fence */
byte trg;                /* which grant of the key its claim was (ghost, P_OWNER) */
byte trl;                /* its row lineage (ghost, P_SAME) */
byte trq;                /* the request it sends */
byte trw;                /* the worker it runs in (a crash ends it) */
byte trc;                /* the message its turn answers */
byte tro;                /* what it settled with */
/* a run past its bound that can still send or write (it ends with its worker's process) */
#define LATE_ACTIVE(kk) (trk == (kk) + 1 && !crashed[trw] && trs != TR_HUNG)
#else
#define LATE_ACTIVE(kk) false
#endif

/* ghosts: what happened in the world, for the properties only */
byte eff[M];             /* downstream effects per intent (with SAME_ASK: made by the runs of each message) */
#if SAME_ASK
bool told[M];            /* a run of the message was told its call happened (P_TOLD) */
#if VSTORE
byte ibound[T];          /* message +1 first bound at the turn index (kept if the store forgets it) */
bool reiss[M];           /* the message was bound at an index issued before to another message that had not failed
                            there (the store forgot that binding, TURN-14): P_FRESH */
#endif
#if !(AGING && BOUNDAT)
/* SAME_ASK beside VSTORE (no re-send window's clock): inherited window starts and row ages are not modelled */
bool inh[M];
#define WROTE(kk) skip
#endif
#define EFFI(k) cur
#else
#define EFFI(k) INTENT(k)
#endif
byte effk[K];            /* downstream effects per key */
bool ukreached[K];       /* an unkeyed request of the key reached its downstream */
byte recd[K];            /* strongest statement any record made about the key */
#ifdef CARRY_LISTED_ONLY
byte recl[K];            /* strongest statement any record made about the key as a listed call (not the resumed flag) */
#endif
byte maxf[K];            /* highest fence issued for the key within retention */
byte gid[K];             /* claims granted for the key, ever (never reset) */
byte lin[K];             /* how often the ledger forgot the key: a row's lineage */
byte dslin[K];           /* lineage of the claim whose request the downstream holds */
byte rcl[K];             /* the in-flight row's claim, as its claimant knows it (CLAIMIDS only): */
#define CL_KNOWN 0       /*   its `claimed` reached the claimant, who may have sent the request */
#define CL_LOST 1        /*   applied, but its claimant never learned it (lost reply, late claim) */
#define CL_EXCUSED 0     /*   unseen, and its claimant paused past the lease or lost the ledger */
byte rown[K];            /* worker +1 whose unseen claim the in-flight row is (CL_LOST only) */

/* P_NOFALSE: an unkeyed_write row turns unknown by lease expiry (LEDGER-7) only under a claim
 * that could have run the tool: one whose `claimed` reached its claimant (who may have sent the
 * request), or whose claimant crashed, paused past the lease or was cut off from the ledger
 * before it could take the claim up or release it (DISPATCH-16: indistinguishable from one
 * that died after sending). Anything else is a false `unknown`: a call that never ran, which a
 * person must settle. */
#define NOFALSE(k) \
  assert(!P_NOFALSE || !CLAIMIDS || rcl[k] != CL_LOST || crashed[rown[k] - 1] || part[rown[k] - 1])

#if SAME_ASK
#define EFFECT(k) \
  eff[EFFI(k)]++; effk[k]++; mine = true; \
  printf("@@ W%d   ** EFFECT of intent %d under key %d (effects for this intent: %d)\n", w, INTENT(k), k, eff[EFFI(k)]); \
  assert(!P_ONCE || eff[EFFI(k)] <= 1);   /* P_ONCE, per message */ \
  assert(!P_TOLD || !told[cur])           /* P_TOLD */
#elif SOLO_TURNS
/* P_ONCE per ask (TURN-23): a repeat of a call the committed turns left unanswered is the same ask */
#define EFFECT(k) \
  effa[ASK(k)]++; effk[k]++; mine = true; \
  printf("@@ W%d   ** EFFECT of ask %d under key %d (effects for this ask: %d)\n", w, ASK(k), k, effa[ASK(k)]); \
  assert(!P_ONCE || effa[ASK(k)] <= 1)   /* P_ONCE, per ask */
#else
#define EFFECT(k) \
  eff[INTENT(k)]++; effk[k]++; mine = true; \
  printf("@@ W%d   ** EFFECT of intent %d under key %d (effects for this intent: %d)\n", w, INTENT(k), k, eff[INTENT(k)]); \
  assert(!P_ONCE || eff[INTENT(k)] <= 1) /* P_ONCE */ VTOLD(k)
#endif

/* ------------------------------------------------------------------ properties at quiet points */

#if SOLO_TURNS
/* the key each committed turn answered: turn 1's may be turn 0's key, carried (TURN-23) */
#define DONE_AT(x, k) (tk[x] == (k) + 1 && tres[x] == C_OK)
#else
#define DONE_AT(x, k) (tmsg[x] != 0 && KEY(x, CALLI(tmsg[x] - 1)) == (k) && tres[x] == C_OK)
#endif
#if TURNS3
#define DONE_OK(k) (DONE_AT(0, k) || DONE_AT(1, k) || DONE_AT(2, k))
#else
#define DONE_OK(k) (DONE_AT(0, k) || DONE_AT(1, k))
#endif
#if VSTORE
/* a message whose commit or failure a volatile store lost waits in progress for its resumed turn, whose records
   and commit are checked when it ends (TURN-14, TURN-15); the user was told (P_TRUTH keeps that true) */
#define VLOSTM(i) (vlost[i] && ms[i] == MS_INPROG)
#if SAME_ASK
/* with the same ask both messages derive intent-0 keys: either may be the one whose end was lost */
#define VLOSTK(k) (VLOSTM(0) || VLOSTM(1))
#else
#define VLOSTK(k) VLOSTM(INTENT(k))
#endif
#define COVERED(k) (effk[k] == 0 || DONE_OK(k) || recd[k] >= SAY_MAY || VLOSTK(k))
#else
#define COVERED(k) (effk[k] == 0 || DONE_OK(k) || recd[k] >= SAY_MAY)
#endif
#define TRUTHFUL_ROW(k) (rst[k] != R_FAILED || effk[k] == 0)
#define SETTLED(i) (ms[i] == MS_ANSWERED || ms[i] == MS_FAILED)
#define QUIET (!busy[0] && !busy[1] && len(inbox) == 0)
/* Checked whenever the system falls quiet (no send in progress, no delivery waiting): by the
 * step that ends the last send. */
#if TURNS3
#define TRUTHFUL_T2 && TRUTHFUL_TURN(2)
#else
#define TRUTHFUL_T2
#endif
#if defined(SLOT) || TURNS3
/* the same, over the slot's keys 4 and 5 too (with TURNS3, turn 2's keys and its committed turn) */
#define QUIET_CHECK \
  if \
  :: QUIET -> \
     assert(!P_RECORD || (COVERED(0) && COVERED(1) && COVERED(2) && COVERED(3) && COVERED(4) && COVERED(5))); \
     assert(!P_TRUTH || (TRUTHFUL_ROW(0) && TRUTHFUL_ROW(1) && TRUTHFUL_ROW(2) && TRUTHFUL_ROW(3) && TRUTHFUL_ROW(4) && \
                         TRUTHFUL_ROW(5))); \
     assert(!P_TRUTH || (TRUTHFUL_TURN(0) && TRUTHFUL_TURN(1)TRUTHFUL_T2)) \
  :: else \
  fi
#else
#define QUIET_CHECK \
  if \
  :: QUIET -> \
     /* every effect is committed as done, or listed as (maybe) happened by some record */ \
     assert(!P_RECORD || (COVERED(0) && COVERED(1) && COVERED(2) && COVERED(3))); \
     /* no ledger row and no committed tool_result calls an effect that happened a failure */ \
     assert(!P_TRUTH || (TRUTHFUL_ROW(0) && TRUTHFUL_ROW(1) && TRUTHFUL_ROW(2) && TRUTHFUL_ROW(3))); \
     assert(!P_TRUTH || (TRUTHFUL_TURN(0) && TRUTHFUL_TURN(1))) \
  :: else \
  fi
#endif
#if SOLO_TURNS
#define TRUTHFUL_TURN(x) (tres[x] != C_FAILED || effk[tk[x] - 1] == 0)
#else
#define TRUTHFUL_TURN(x) (tres[x] != C_FAILED || effk[KEY(x, CALLI(tmsg[x] - 1))] == 0)
#endif

/* The fence of a claim that creates the row (LEDGER-4): 1, or above a row retention forgot
 * (LEDGER-19, FENCE_CONTINUES: the forgotten row's fence is kept, with the row gone); a volatile
 * ledger that loses a row loses its fence too */
#define FRESH_FENCE(kk) (rfence[kk] + 1)

/* ------------------------------------------------------------------ unseen claims (LEDGER-26) */

/* A claim nobody hears the answer to (LEDGER-26): a claim whose reply was lost, a claim the
 * store applies late, the claim of settleLostClaim (its answer is acted on in the same step).
 * The ledger's claim (§6.2, memory-ledger.ts claim()), by claim id c of worker x; took says
 * whether it took the row. */
inline TAKE_UNSEEN(kk, f, c, x) {
  rst[kk] = R_INFLIGHT; rfence[kk] = f; rlive[kk] = true; rcid[kk] = c;
  assert(!P_FENCE || rfence[kk] > maxf[kk]);          /* P_FENCE (LEDGER-4) */
  maxf[kk] = rfence[kk]; gid[kk]++; rcl[kk] = CL_LOST; rown[kk] = x + 1; rrel[kk] = 0; took = true
}
inline APPLY_UNSEEN(kk, c, q, x) {
  took = false;
  if
  :: RETIRED(kk, c) ->
     printf("@@ --   claim id %d on key %d refused: retired (stale_claim)\n", c, kk)
  :: !RETIRED(kk, c) && rst[kk] == R_INFLIGHT && rcid[kk] == c ->
     /* LEDGER-26: its own claim id on its own in-flight row: the same claim, lease restarted */
     rlive[kk] = true; took = true;
     printf("@@ --   the ledger recognises claim id %d on key %d: same claim, fence %d, lease restarted (LEDGER-26)\n", c, kk, rfence[kk])
  :: !RETIRED(kk, c) && rst[kk] == R_NONE ->
     rreq[kk] = q; TAKE_UNSEEN(kk, FRESH_FENCE(kk), c, x);
     printf("@@ --   claim id %d of W%d takes key %d: fence %d, stores request %d\n", c, x, kk, rfence[kk], q)
  :: !RETIRED(kk, c) && rst[kk] == R_RELEASED && !(TOMBSTONE && rrel[kk] == c) ->
     TAKE_UNSEEN(kk, rfence[kk] + 1, c, x);
     printf("@@ --   claim id %d of W%d re-claims released key %d: fence %d\n", c, x, kk, rfence[kk])
  :: !RETIRED(kk, c) && rst[kk] == R_RELEASED && TOMBSTONE && rrel[kk] == c ->
     printf("@@ --   claim id %d on key %d refused: the row was released under it (tombstone)\n", c, kk)
  :: !RETIRED(kk, c) && rst[kk] == R_INFLIGHT && rcid[kk] != c && !rlive[kk] && KEYED(INTENT(kk)) ->
     TAKE_UNSEEN(kk, rfence[kk] + 1, c, x);
     printf("@@ --   claim id %d of W%d takes over expired key %d: fence %d\n", c, x, kk, rfence[kk])
  :: !RETIRED(kk, c) && rst[kk] == R_INFLIGHT && rcid[kk] != c && !rlive[kk] && !KEYED(INTENT(kk)) ->
     printf("@@ --   claim id %d finds key %d expired: unknown (lease_expired, LEDGER-7)\n", c, kk);
     NOFALSE(kk);                                   /* P_NOFALSE */
     rst[kk] = R_UNKNOWN
  :: else ->
     printf("@@ --   claim id %d on key %d: existing row, nothing taken\n", c, kk)
  fi
}
/* A released row forgets its claim id and, with the guard, keeps it as a tombstone. */
#define RELEASE_ROW(kk) \
  rst[kk] = R_RELEASED; TOUCH(kk); \
  if :: TOMBSTONE && CLAIMIDS -> rrel[kk] = rcid[kk] :: else fi; \
  rcid[kk] = 0; rcl[kk] = 0; rown[kk] = 0
/* a worker's write of a row: with SAME_ASK the row also ages on its writer message's clock */
#if SAME_ASK
#define TOUCHW(kk) TOUCH(kk); WROTE(kk)
#define RELEASE_ROWW(kk) RELEASE_ROW(kk); WROTE(kk)
#else
#define TOUCHW(kk) TOUCH(kk)
#define RELEASE_ROWW(kk) RELEASE_ROW(kk)
#endif

/* ------------------------------------------------------------------ the worker */

#include "worker.pml"

proctype Worker(byte w) provided (!crashed[w]) {
  byte m;        /* the message this send() delivers */
  byte myf;      /* turn-lease fence it holds (TURN-10) */
  byte cur;      /* message the current turn answers */
  byte t;        /* its turn index */
  byte att;      /* attempt number */
  byte rq;       /* request wording the model produced in this attempt */
  byte sreq;     /* request the run sends */
  byte k;        /* key of the call */
  byte cf;       /* fence of the ledger claim */
  byte cg;       /* which grant of the key that claim was (ghost) */
  byte cl;       /* the row lineage that claim belongs to (ghost) */
  byte cid;      /* the dispatch's claim id (LEDGER-26, DISPATCH-16), 0 without CLAIMIDS */
  bool lc;       /* a claim of this dispatch met ledger_unavailable: a copy may be on its way */
  byte out;      /* what the downstream call returned */
  byte res;      /* how the dispatch resolved */
  byte say;      /* strongest statement about k in this turn's record (RECORD-5) */
  byte turns;    /* OLD_TURN: responses produced by this send */
  bool stopped;  /* message_stop seen in this attempt */
  bool gone;     /* this worker's turn was superseded: the lease moved on */
  bool mine;     /* one of this turn's attempts, here, made an effect (ghost) */
  bool resumed;  /* the turn's message was bound under an earlier turn-lease grant */
  bool definite; /* an attempt of this turn found or made the row failed (definite) */
#ifdef RECORD_AFTER_COMMIT
  byte crec;     /* the committed turn's record, still to be written after the commit */
#endif
#if AGING && BOUNDAT
  bool past;     /* the resumed turn was past its re-send window: it ran nothing (TURN-12) */
#endif
#if LOSTRECS > 0
  byte wres;     /* what the record whose reply was lost answers, had its reply come (DISPATCH-17) */
  byte wst;      /* the row's state that record made */
  byte wfence;   /* its fence; 0: no record's reply is lost */
#endif
#if SOLO_TURNS
  byte carry;    /* TURN-23, this drive's carried call of message 0: 0 not known here (read the store at turn 1), 1 none,
                    2 + j turn 0's key j (the runner's `carried` map: set from the record of the turn 0 it committed;
                    j is 1 only under DEPLOY, a call turn 0 ran under the deployed definition) */
#ifdef CARRY_LISTED_ONLY
  byte lsay;     /* the committed record's statement of key k as a listed call, before the resumed flag's */
#endif
  bool plain;    /* turn 1's model answered with plain text: committed at once */
#endif
#ifdef SLOT
  byte slot;     /* with the slot: turn 1's call is a second ask dispatched at turn 0's slot; the key turn 0 answered, as this
                    holder knows it, +1 (what IDENT-10's guard there excludes); 0: not a slot call */
#endif
#if GRANTS
  byte aq;       /* the store's answer to this worker's acquire (TURN-10) */
  byte aq2;      /* scratch: what a lost-reply acquire did at the store */
#endif

end_idle:
  do
  :: atomic { inbox ? m -> busy[w] = true; cmsg[w] = m; APPEND() };
     SEND()
  od
}

#if RUNTIMEOUTS > 0
/* ------------------------------------------------------------------ a run past its bound (DISPATCH-18) */

/* The run a dispatcher answered at its bound (RUN_BOUND) goes on in its worker's process, unrenewed and
 * signalled to stop, with the dispatch already answered: it stops before sending (it honours the signal),
 * or sends its request anyway (it was on its way; the downstream may perform it after the dispatch said
 * in_flight_elsewhere), or never settles. Once it settles, its outcome is recorded under its own fence, as
 * any run's outcome is (RECORD_RUN: LEDGER-8, LEDGER-5, LEDGER-16): a completion lands when nobody acted on
 * the lapsed lease, and after a takeover it is refused (stale_claim) and changes nothing. A crash of its
 * worker ends it. Its locals are loaded from the globals for one step and cleared after it (TR_LOAD,
 * TR_FREE), so they add no state. */
#define TR_LOAD() w = trw; k = trk - 1; cf = trf; cg = trg; cl = trl; sreq = trq; cur = trc
#define TR_FREE() w = 0; k = 0; cf = 0; cg = 0; cl = 0; sreq = 0; cur = 0; out = 0; res = 0; mine = false; lwait = false
active proctype LateRun() {
  byte w; byte k; byte cf; byte cg; byte cl; byte sreq; byte cur; byte out; byte res;
  bool mine;     /* EFFECT's ghost of a worker's turn: unused here */
  bool lwait;    /* SEND_REQ's "caller waits": nobody waits for this run's answer */
end_late:
  do
  :: atomic { trs == TR_PEND && !crashed[trw] ->
       TR_LOAD();
       printf("@@ W%d   the run of key %d past its bound stops before sending: it honours the signal (DISPATCH-18)\n", w, k);
       tro = O_ABORT; trs = TR_SETTLED; TR_FREE() }
  :: atomic { trs == TR_PEND && !crashed[trw] ->
       TR_LOAD();
       printf("@@ W%d   the run of key %d past its bound sends its request all the same (it was on its way)\n", w, k);
       SEND_REQ(false, lwait);
       if
       :: out == O_ACCEPTED -> trs = TR_SENT
       :: else -> tro = out; trs = TR_SETTLED
       fi;
       TR_FREE() }
  :: atomic { trs == TR_SENT && !crashed[trw] ->
       /* the downstream finishes the request (if it has not yet) and its answer reaches the run */
       k = trk - 1; ds[k] = DS_DONE; tro = O_OK; trs = TR_SETTLED;
       printf("@@ W%d   the late request of key %d is done downstream; its answer reaches the run\n", trw, k); k = 0 }
  :: atomic { trs == TR_SENT && !crashed[trw] && b_lost > 0 ->
       b_lost--; tro = O_LOST; trs = TR_SETTLED; printf("@@ W%d   the late request gets no answer: timeout\n", trw) }
  :: atomic { (trs == TR_PEND || trs == TR_SENT) && !crashed[trw] ->
       trs = TR_HUNG; printf("@@ W%d   the run past its bound never settles: its row is left to its lease (LEDGER-7)\n", trw) }
  :: atomic { trs == TR_SETTLED && !crashed[trw] ->
       TR_LOAD(); out = tro;
#ifdef RT_UNFENCED
       printf("@@ W%d   the run of key %d settled after its bound: its outcome is written whatever the row's fence (its own: %d)\n", w, k, cf);
#else
       printf("@@ W%d   the run of key %d settled after its bound: recorded under its own fence %d (DISPATCH-18)\n", w, k, cf);
#endif
       RECORD_RUN(RT_UNFENCED_ON);
       trk = 0; trf = 0; trg = 0; trl = 0; trq = 0; trw = 0; trc = 0; tro = 0; trs = 0; TR_FREE() }
  od
}
#endif

/* ------------------------------------------------------------------ the store's clock */

/* A lease whose holder cannot renew it lapses, sooner or later, on the store's clock
 * (LEDGER-6, LEDGER-20, TURN-10). This process never gives up: time always passes. */
/* Ownership is the fence (LEDGER-16): worker x holds row k while its claim's fence is the row's. */
#define HELD_BY(x, k) (!crashed[x] && hold[x] == (k) + 1 && hfence[x] == rfence[k])
#define ORPHAN(k) (!HELD_BY(0, k) && !HELD_BY(1, k))
/* A claim whose reply was lost is still tended by its claimant while it sends the claim again
 * (claimRetrying) or releases it (settleLostClaim): both come back within a third of the lease
 * (DISPATCH-16), so the lease does not run out meanwhile unless the claimant pauses. */
#define TENDS(x, k) (rcid[k] != 0 && !crashed[x] && !part[x] && (ccid[x] == rcid[k] || bgcid[x] == rcid[k]))
#define TENDED(k) (TENDS(0, k) || TENDS(1, k))
#define EXPIRE_FREE(k) (rst[k] == R_INFLIGHT && rlive[k] && \
                        ((ORPHAN(k) && !TENDED(k)) || (HELD_BY(0, k) && part[0]) || (HELD_BY(1, k) && part[1])))
#define SELF_FENCE_AT(x, k) \
  if \
  :: SELF_FENCE && HELD_BY(x, k) && part[x] -> \
     aborted[x] = true; printf("@@ W%d   self-fences: no renewal reached the ledger for a lease, aborts its tool (DISPATCH-13)\n", x) \
  :: else \
  fi
#define EXPIRE(k) \
  rlive[k] = false; \
  printf("@@ --   lease of key %d (fence %d) expires on the store's clock\n", k, rfence[k]); \
  /* DISPATCH-13: an owner cut off from the ledger saw its own clock pass the lease first */ \
  SELF_FENCE_AT(0, k); SELF_FENCE_AT(1, k)

active proctype Clock() {
end_clock:
  do
  :: atomic { lholder != 0 && llive && crashed[lholder - 1] ->
       llive = false; printf("@@ --   turn lease (fence %d) of crashed W%d expires\n", lfence, lholder - 1) }
#if GRANTS
  /* TURN-10: a grant whose `acquired` reached nobody (a lost reply, a late copy) is renewed by
     nobody; its lease lapses, within the acquirer's re-send time or after it */
  :: atomic { lholder != 0 && llive && !lknown ->
       llive = false; printf("@@ --   turn lease (fence %d, grant id %d) that nobody took up expires\n", lfence, lgrant) }
#endif
  :: atomic { EXPIRE_FREE(0) -> EXPIRE(0) }
  :: atomic { EXPIRE_FREE(1) -> EXPIRE(1) }
  :: atomic { EXPIRE_FREE(2) -> EXPIRE(2) }
  :: atomic { EXPIRE_FREE(3) -> EXPIRE(3) }
#if defined(SLOT) || TURNS3
  :: atomic { EXPIRE_FREE(4) -> EXPIRE(4) }
  :: atomic { EXPIRE_FREE(5) -> EXPIRE(5) }
#endif
  od
}

/* ------------------------------------------------------------------ the keyed downstream */

/* A request under a key executes, then finishes on the downstream's side whether or not its
 * caller still listens; while it executes, another request under the key gets 409 (EFFECT-7). While the caller waits, the finish and the answer are one step of the
 * caller (worker.pml); this process finishes the requests nobody waits for any more. */
#define ORPHAN_REQ(k) (!(waiting[0] && !crashed[0] && hold[0] == (k) + 1) && !(waiting[1] && !crashed[1] && hold[1] == (k) + 1))
active proctype Downstream() {
end_ds:
  do
  :: atomic { ds[0] == DS_INPROG && ORPHAN_REQ(0) -> ds[0] = DS_DONE }
  :: atomic { ds[1] == DS_INPROG && ORPHAN_REQ(1) -> ds[1] = DS_DONE }
  :: atomic { ds[2] == DS_INPROG && ORPHAN_REQ(2) -> ds[2] = DS_DONE }
  :: atomic { ds[3] == DS_INPROG && ORPHAN_REQ(3) -> ds[3] = DS_DONE }
#ifdef SLOT
  :: atomic { ds[4] == DS_INPROG && ORPHAN_REQ(4) -> ds[4] = DS_DONE }
  :: atomic { ds[5] == DS_INPROG && ORPHAN_REQ(5) -> ds[5] = DS_DONE }
#endif
  od
}

/* ------------------------------------------------------------------ faults and time */

/* Retention (LEDGER-13) passes for key k only when no replay route can reach its turn any
 * more (its message answered, TURN-7; or failed and not re-openable, TURN-12) and no worker
 * still producing that turn could reach the ledger or the downstream late. Every such late
 * arrival is bounded (a pause, a retry, a slow request: seconds), except a tool left running
 * by an owner that is cut off from the ledger and does not fence itself (NO_SELF_FENCE):
 * that one can outlive any retention. Retention removes finished rows only, never one in
 * flight; only a claim acts on an expired lease (LEDGER-17). With AGING, time passes for a
 * failed message that a re-send could still re-open, and retention also sweeps its rows once
 * they are old enough (AGED): whether a re-send can then re-open it is TURN-12's re-send window. */
#define SETTLED_FOR_GOOD(i) (ms[i] == MS_ANSWERED || (ms[i] == MS_FAILED && lastBound != (i) + 1))
/* no route reaches the key but by time: with SAME_ASK both messages may derive an intent-0 key */
#if SAME_ASK
#define UNREACHABLE(k) (SETTLED_FOR_GOOD(0) && SETTLED_FOR_GOOD(1))
#else
#define UNREACHABLE(k) SETTLED_FOR_GOOD(INTENT(k))
#endif
#define LATE_BOUNDED(x) (!crashed[x] && !(part[x] && pend[x] && !SELF_FENCE))
#define PINNED(k) ((wk[0] == (k) + 1 && LATE_BOUNDED(0)) || (wk[1] == (k) + 1 && LATE_BOUNDED(1)) || \
                   lk == (k) + 1 || bgk[0] == (k) + 1 || bgk[1] == (k) + 1 || LATE_ACTIVE(k))
#define FINISHED(k) (rst[k] != R_NONE && rst[k] != R_INFLIGHT)
#define RETAIN(k) \
  atomic { RETENTION && (UNREACHABLE(k) || AGED(k)) && !PINNED(k) && \
           (FINISHED(k) || ds[k] == DS_DONE || ds[k] == DS_DECL) -> \
    if \
    :: FINISHED(k) -> rst[k] = R_NONE; rreq[k] = 0; lin[k]++; rrel[k] = 0; rret[k] = 0; \
       /* LEDGER-19: a claim of the forgotten key behaves as one of a key never claimed (fence 1), \
          or, with FENCE_CONTINUES, continues above the forgotten row's fence (P_FENCE then holds \
          across the retention too) */ \
       if :: !FENCE_CONTINUES -> rfence[k] = 0; maxf[k] = 0 :: else fi \
    :: else \
    fi; \
    if \
    :: ds[k] == DS_DONE || ds[k] == DS_DECL -> ds[k] = DS_NONE; dsfp[k] = 0; dslin[k] = 0 \
    :: else \
    fi; \
    printf("@@ --   retention passes for key %d: the ledger (LEDGER-19) and the downstream forget it\n", k) }
/* A volatile ledger (LEDGER-14) can lose any row, in flight or not; LEDGER-14 keeps
 * unkeyed_write tools off it, so only keyed rows are lost, unless the dispatcher is allowed to run
 * them over it (VOLATILE_UNKEYED: allowVolatileLedgerForUnkeyedWrites, LEDGER-14's explicit opt-in) */
#define LOSE(k) \
  atomic { b_lose > 0 && rst[k] != R_NONE && (KEYED(INTENT(k)) || VOLATILE_UNKEYED) -> \
    b_lose--; rst[k] = R_NONE; rfence[k] = 0; rreq[k] = 0; maxf[k] = 0; lin[k]++; \
    rcid[k] = 0; rrel[k] = 0; rret[k] = 0; rcl[k] = 0; rown[k] = 0; \
    printf("@@ --   the volatile ledger loses key %d\n", k) }
/* A volatile conversation store (TURN-14) restarts and loses its last write, message i's commit or failMessage
 * (with the record in it), while nobody holds the turn lease live: the message is in progress again at its
 * index, and the next driver of the conversation resumes it (TURN-15). What the user was told stays told. */
#define VSTORE_LOSE(i) \
  atomic { b_vstore > 0 && vlast == (i) + 1 && !(lholder != 0 && llive) -> \
    b_vstore--; vlast = 0; vlost[i] = true; \
    if \
    :: ms[i] == MS_ANSWERED -> nturns--; tmsg[nturns] = 0; tres[nturns] = 0; \
       printf("@@ --   the volatile conversation store restarts and loses its last write: turn %d, the answer to message %d (TURN-14)\n", nturns, i) \
    :: else -> \
       printf("@@ --   the volatile conversation store restarts and loses its last write: message %d's failure and its record (TURN-14)\n", i) \
    fi; \
    ms[i] = MS_INPROG }
#if VSTORE && defined(VSTORE_FORGET)
/* A volatile conversation store (TURN-14) restarts and loses every write since message i's append, all of them message
 * i's (its append, its binding, its commit or failMessage), while no send of it is in progress: the message is unknown
 * to the store again, its sends having returned, and its turn index is free: the next binding issues it again. A redelivery of the message appends it as a
 * new one (TURN-2 cannot tell). The binding before it was the other message's, if that one was bound. */
#define VSTORE_FORGET_LOSE(i) \
  atomic { b_vstore > 0 && vlast == (i) + 1 && vrun == (i) + 1 && !(lholder != 0 && llive) && \
           !(busy[0] && cmsg[0] == (i)) && !(busy[1] && cmsg[1] == (i)) -> \
    assert(narr > 0 && order[narr - 1] == (i));   /* P_MODEL: its append was the store's latest */ \
    b_vstore--; vlast = 0; vrun = 0; vlost[i] = true; \
    if \
    :: ms[i] == MS_ANSWERED -> nturns--; tmsg[nturns] = 0; tres[nturns] = 0 \
    :: else \
    fi; \
    printf("@@ --   the volatile conversation store restarts and loses message %d: its append, its binding to turn %d and its end (TURN-14)\n", i, midx[i]); \
    ms[i] = MS_NONE; midx[i] = 0; narr--; order[narr] = 0; \
    lastBound = (ms[1 - (i)] == MS_ANSWERED || ms[1 - (i)] == MS_FAILED -> 2 - (i) : 0) }
#endif
#if RESOLVES > 0
/* An owner of the row's current fence that is alive and can still send its request (claimed, not yet sent: a
 * paused owner wakes and sends it) or whose request is still executing downstream. */
#define LATE_OWNER(x, k) (HELD_BY(x, k) && (pend[x] || waiting[x]))
/* a run past its bound (DISPATCH-18) under the row's fence that can still send, or whose request still executes */
#if RUNTIMEOUTS > 0
#define LATE_RUN_OWNER(k) (LATE_ACTIVE(k) && trf == rfence[k] && (trs == TR_PEND || trs == TR_SENT))
#else
#define LATE_RUN_OWNER(k) false
#endif
/* RESOLVE-2, RESOLVE-3, RESOLVE-5: an operator's not_performed resolution of an unknown row or of an in-flight row
 * whose lease expired: released, its request kept, its fence raised, so a former owner's late write is stale. The
 * person's word is true when given (no effect under the key so far); RESOLVE-6's grace (RESOLVE_GRACE) waits until
 * no living owner can still send late. */
#define RESOLVE_NP(k) \
  atomic { b_resolve > 0 && (rst[k] == R_UNKNOWN || (rst[k] == R_INFLIGHT && !rlive[k])) && effk[k] == 0 && \
           (!RESOLVE_GRACE || !(LATE_OWNER(0, k) || LATE_OWNER(1, k) || LATE_RUN_OWNER(k))) -> \
    b_resolve--; \
    if \
    :: rst[k] == R_UNKNOWN -> printf("@@ --   an operator resolves unknown key %d as not_performed: released, fence %d (RESOLVE-3, RESOLVE-5)\n", k, rfence[k] + 1) \
    :: else -> printf("@@ --   an operator resolves key %d, in flight with its lease expired, as not_performed: released, fence %d (RESOLVE-2, RESOLVE-3, RESOLVE-5)\n", k, rfence[k] + 1) \
    fi; \
    RELEASE_ROW(k); rfence[k]++; \
    assert(!P_FENCE || rfence[k] > maxf[k]);          /* P_FENCE (LEDGER-4, RESOLVE-5) */ \
    maxf[k] = rfence[k]; gid[k]++ }
#endif
/* Worker x freezes (a long GC, a stopped container) past the lease of its turn, of its claim,
 * or both: they lapse on the store's clock while it cannot renew them. */
#define LIVE_TURN(x) (lholder == (x) + 1 && llive)
#define LIVE_ROW(x) (hold[x] != 0 && rst[hold[x] - 1] == R_INFLIGHT && rfence[hold[x] - 1] == hfence[x] && \
                     rlive[hold[x] - 1] && !part[x])
#define EXPIRE_TURN(x) llive = false; printf("@@ --   turn lease (fence %d) expires on the store's clock\n", lfence)
#define PAUSE(x) \
  :: atomic { b_pause > 0 && !crashed[x] && LIVE_TURN(x) -> \
       b_pause--; printf("@@ W%d   pauses (GC) past its turn lease\n", x); EXPIRE_TURN(x) } \
  :: atomic { b_pause > 0 && !crashed[x] && LIVE_ROW(x) -> \
       b_pause--; printf("@@ W%d   pauses (GC) past its claim's lease\n", x); EXPIRE(hold[x] - 1) } \
  :: atomic { b_pause > 0 && !crashed[x] && LIVE_TURN(x) && LIVE_ROW(x) -> \
       b_pause--; printf("@@ W%d   pauses (GC) past both its leases\n", x); EXPIRE_TURN(x); EXPIRE(hold[x] - 1) } \
  :: atomic { b_pause > 0 && wk[x] != 0 && rst[wk[x] - 1] == R_INFLIGHT && rlive[wk[x] - 1] && TENDS(x, wk[x] - 1) -> \
       b_pause--; printf("@@ W%d   pauses (GC) while it sends its claim again, past the claim's lease\n", x); \
       rcl[wk[x] - 1] = CL_EXCUSED; rown[wk[x] - 1] = 0; EXPIRE(wk[x] - 1) } \
  :: atomic { b_pause > 0 && bgk[x] != 0 && rst[bgk[x] - 1] == R_INFLIGHT && rlive[bgk[x] - 1] && TENDS(x, bgk[x] - 1) -> \
       b_pause--; printf("@@ W%d   pauses (GC) before it settles its lost claim, past the claim's lease\n", x); \
       rcl[bgk[x] - 1] = CL_EXCUSED; rown[bgk[x] - 1] = 0; EXPIRE(bgk[x] - 1) }

#define CRASH(x) \
  atomic { b_crash > 0 && busy[x] && !crashed[x] && nfull(inbox) -> \
    b_crash--; crashed[x] = true; busy[x] = false; inbox ! cmsg[x]; \
    ccid[x] = 0; bgk[x] = 0; bgcid[x] = 0; bgrq[x] = 0; bgrel[x] = false; \
    printf("@@ W%d   crashes; the queue redelivers message %d\n", x, cmsg[x]) }

#define SETTLE(x) \
  atomic { bgk[x] != 0 && !crashed[x] && !part[x] -> \
    if \
    :: !RETIRE -> \
       printf("@@ W%d   settles its lost claim: claims key %d again with claim id %d (DISPATCH-16)\n", x, bgk[x] - 1, bgcid[x]); \
       APPLY_UNSEEN(bgk[x] - 1, bgcid[x], bgrq[x], x); \
       if \
       :: took -> RELEASE_ROW(bgk[x] - 1); printf("@@ W%d   releases key %d by its claim id (the tool did not run)\n", x, bgk[x] - 1) \
       :: else \
       fi \
    :: RETIRE -> \
       /* retire: release the row if this claim holds it and its tool never ran; refuse the id for good */ \
       if \
       :: bgrel[x] && rst[bgk[x] - 1] == R_INFLIGHT && rcid[bgk[x] - 1] == bgcid[x] -> \
          RELEASE_ROW(bgk[x] - 1); printf("@@ W%d   retires claim id %d: releases key %d, held under it (the tool did not run)\n", x, bgcid[x], bgk[x] - 1) \
       :: else -> printf("@@ W%d   retires claim id %d on key %d\n", x, bgcid[x], bgk[x] - 1) \
       fi; \
       rret[bgk[x] - 1] = rret[bgk[x] - 1] | (1 << bgcid[x]) \
    fi; \
    took = false; bgk[x] = 0; bgcid[x] = 0; bgrq[x] = 0; bgrel[x] = false }

#if AGING && BOUNDAT
/* the re-send window since point j of message i passes (p0 its binding), then the retention since it */
#if SAME_ASK
/* A message's points are the window start of the message bound at its index too: while that one is queued again
   (re-opened within that window) or run by a live holder, that time is the queue's and the run's, which the
   margin between window and retention covers (TURN-12), as for a message's own points */
#define CLOCK_FREE(i) (!inh[1 - (i)] || SETTLED(1 - (i)) || UNATTENDED(1 - (i)))
#else
#define CLOCK_FREE(i) true
#endif
#define TIME_PASSES(i) \
  atomic { (ms[i] == MS_FAILED || UNATTENDED(i)) && CLOCK_FREE(i) && wpass[i] <= nfail[i] -> \
    if \
    :: wpass[i] == 0 -> printf("@@ --   message %d: the re-send window since its binding passes (TURN-12)\n", i) \
    :: else -> printf("@@ --   message %d: the re-send window since its failure %d passes (TURN-12)\n", i, wpass[i]) \
    fi; wpass[i]++ } \
  :: atomic { (ms[i] == MS_FAILED || UNATTENDED(i)) && CLOCK_FREE(i) && rpass[i] < wpass[i] -> \
    if \
    :: rpass[i] == 0 -> printf("@@ --   message %d: the ledger's retention since its binding passes (LEDGER-13)\n", i) \
    :: else -> printf("@@ --   message %d: the ledger's retention since its failure %d passes (LEDGER-13)\n", i, rpass[i]) \
    fi; rpass[i]++ }
#endif

active proctype Env() {
end_env:
  do
  /* a live holder freezes past its leases (TURN-10, LEDGER-6) */
  PAUSE(0)
  PAUSE(1)
  /* a worker dies mid-send, at any point; it never takes another step, its leases lapse,
     and at-least-once delivery brings its message back */
  :: CRASH(0)
  :: CRASH(1)
  /* a worker loses the ledger: its renewals and writes fail (LEDGER-12); later it heals */
  :: atomic { b_part > 0 && busy[0] && !part[0] -> b_part--; part[0] = true; printf("@@ W0   is cut off from the ledger\n") }
  :: atomic { b_part > 0 && busy[1] && !part[1] -> b_part--; part[1] = true; printf("@@ W1   is cut off from the ledger\n") }
  :: atomic { part[0] -> part[0] = false; printf("@@ W0   reaches the ledger again\n") }
  :: atomic { part[1] -> part[1] = false; printf("@@ W1   reaches the ledger again\n") }
  /* the same message arrives again: re-send, redelivery, double click (TURN-2, TURN-8) */
#if SOLO < M
  :: atomic { b_redeliver > 0 && nfull(inbox) -> b_redeliver--;
       inbox ! SOLO; printf("@@ --   message %d is delivered again\n", SOLO) }
#else
  :: atomic { b_redeliver > 0 && nfull(inbox) -> b_redeliver--;
       if
       :: inbox ! 0; printf("@@ --   message 0 is delivered again\n")
       :: inbox ! 1; printf("@@ --   message 1 is delivered again\n")
       fi }
#endif
  /* retention (LEDGER-13, LEDGER-19) and the downstream's own key retention */
  :: RETAIN(0)
  :: RETAIN(1)
  :: RETAIN(2)
  :: RETAIN(3)
#if AGING && BOUNDAT
  /* time passes for a failed message, and for one in progress whose holder is gone (TURN-12, TURN-15):
     the re-send window since its binding, then since each failure, each followed by the ledger's
     retention since that point (LEDGER-13: the window is below the retention) */
  :: TIME_PASSES(0)
  :: TIME_PASSES(1)
#elif AGING
  /* time passes for a failed message (TURN-12): the re-send window since its failure j, then the
     ledger's retention since it (LEDGER-13: the window is below the retention) */
  :: atomic { ms[0] == MS_FAILED && wpass[0] < nfail[0] -> wpass[0]++;
       printf("@@ --   message 0: the re-send window since its failure %d passes (TURN-12)\n", wpass[0]) }
  :: atomic { ms[1] == MS_FAILED && wpass[1] < nfail[1] -> wpass[1]++;
       printf("@@ --   message 1: the re-send window since its failure %d passes (TURN-12)\n", wpass[1]) }
  :: atomic { ms[0] == MS_FAILED && rpass[0] < wpass[0] -> rpass[0]++;
       printf("@@ --   message 0: the ledger's retention since its failure %d passes (LEDGER-13)\n", rpass[0]) }
  :: atomic { ms[1] == MS_FAILED && rpass[1] < wpass[1] -> rpass[1]++;
       printf("@@ --   message 1: the ledger's retention since its failure %d passes (LEDGER-13)\n", rpass[1]) }
#endif
#if GRANTS
  /* an acquire the store held (a paused store, a frozen connection) is applied now (TURN-10) */
  :: atomic { lak != 0 ->
       printf("@@ --   the store applies W%d's late acquire (grant id %d) now\n", law, lag);
       /* P_GRANT: was this grant id granted before (the store could know it)? */
       took = ((gearlier >> lag) & 1) || lgrant == lag || GRANT_STRICT;
       ACQ_STORE(lag, law, eaq);
       if
       :: eaq == AQ_NEW -> lknown = false;
          assert(!P_GRANT || crashed[law] || wga[law] == lag || !took)   /* P_GRANT */
       :: else
       fi;
       took = false; eaq = 0; lak = 0; lag = 0; law = 0 }
#endif
  /* a claim the store held (a paused store, a frozen connection) is applied now (LEDGER-26) */
  :: atomic { lk != 0 ->
       printf("@@ --   the store applies W%d's late claim (claim id %d) on key %d now\n", lw, lcid, lk - 1);
       APPLY_UNSEEN(lk - 1, lcid, lrq, lw); took = false; lk = 0; lcid = 0; lrq = 0; lw = 0 }
  /* settleLostClaim (DISPATCH-16): claim again with the lost claim's id; release if claimed */
  :: SETTLE(0)
  :: SETTLE(1)
  /* a claimant cut off from the ledger gives its settling up: the row, if any, is the lease's */
  :: atomic { bgk[0] != 0 && part[0] -> printf("@@ W0   gives up settling its lost claim\n"); bgk[0] = 0; bgcid[0] = 0; bgrq[0] = 0; bgrel[0] = false }
  :: atomic { bgk[1] != 0 && part[1] -> printf("@@ W1   gives up settling its lost claim\n"); bgk[1] = 0; bgcid[1] = 0; bgrq[1] = 0; bgrel[1] = false }
#if RESOLVES > 0
  /* an operator resolves a row as not_performed (RESOLVE-3) */
  :: RESOLVE_NP(0)
  :: RESOLVE_NP(1)
  :: RESOLVE_NP(2)
  :: RESOLVE_NP(3)
#endif
#if VSTORE
  /* a volatile conversation store restarts and loses its last write (TURN-14) */
  :: VSTORE_LOSE(0)
  :: VSTORE_LOSE(1)
#ifdef VSTORE_FORGET
  /* or loses a message altogether (TURN-14: its turn index is issued again) */
  :: VSTORE_FORGET_LOSE(0)
  :: VSTORE_FORGET_LOSE(1)
#endif
#endif
#if DEPLOY
  /* a deploy changes how pay's key is derived (IDENT-4 broken): holders that begin a turn from now on derive under
     the new definition, which may or may not read an old stored request (IDENT-10) */
  :: atomic { b_deploy > 0 && DEPLOY_NOW -> b_deploy--; defv = 1;
       if
       :: dcompat = true; printf("@@ --   a deploy changes pay's key derivation; the new definition reads old stored requests (IDENT-4, IDENT-10)\n")
       :: dcompat = false; printf("@@ --   a deploy changes pay's key derivation; the new schema refuses old stored requests (IDENT-4, IDENT-10)\n")
       fi }
#endif
  /* a volatile ledger forgets (LEDGER-14) */
  :: LOSE(0)
  :: LOSE(1)
  :: LOSE(2)
  :: LOSE(3)
  od
}

/* ------------------------------------------------------------------ end-state properties */

/* When nothing can move any more (timeout), check that everything ended. */
active proctype Monitor() {
  timeout ->
  /* every send returned (a crashed worker's message was redelivered and answered by the other)
     and every message ended answered or failed: every turn terminated */
  assert(!P_END || QUIET);
#if VSTORE
  /* a message whose answer or failure a volatile store lost waits in progress for the next send that drives
     the conversation (TURN-15); its own send had returned */
  assert(!P_END || ((SETTLED(0) || (vlost[0] && (ms[0] == MS_INPROG || ms[0] == MS_NONE))) &&
                    (SETTLED(1) || (vlost[1] && (ms[1] == MS_INPROG || ms[1] == MS_NONE)))))
#elif SOLO < M
  assert(!P_END || SETTLED(SOLO))
#else
  assert(!P_END || (SETTLED(0) && SETTLED(1)))
#endif
}

init {
  atomic {
    /* the client sends both messages (TURN-8: each id minted once) */
#if SOLO < M
    inbox ! SOLO;
#else
    inbox ! 0; inbox ! 1;
#endif
    run Worker(0); run Worker(1)
  }
}

/* ------------------------------------------------------------------ liveness (LTL) */

#ifdef LIVENESS
/* Under weak fairness every send returns and every bound message ends answered or failed:
 * every dispatch and every turn terminates (LEDGER-15 bound, retry policy, TURN-10 waits). */
ltl terminates { <> [] QUIET &&
                 [] ((ms[0] == MS_INPROG -> <> SETTLED(0)) && (ms[1] == MS_INPROG -> <> SETTLED(1))) }
#endif
