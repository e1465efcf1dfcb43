/*
 * One worker: ConversationRunner.send() (packages/anthropic/src/runner.ts) over the
 * conversation store (packages/core/src/memory-conversation-store.ts), and the Dispatcher
 * (packages/core/src/dispatcher.ts) over the ledger (packages/core/src/memory-ledger.ts).
 * Included by dispatch_once.pml; the inlines use the local variables of proctype Worker.
 *
 * Each atomic block is one operation of a store, the ledger or the downstream (they are atomic
 * there too) together with the worker's local bookkeeping; between two blocks anything else
 * may happen. Lines starting "@@" are the narration that COUNTEREXAMPLES.md is made of.
 */

/* ---------------------------------------------------------------- ledger claim (§6.2) */

/* A successful claim: in flight, a fresh fence, a live lease (LEDGER-1, LEDGER-4, LEDGER-6). */
inline GRANT(f) {
  rst[k] = R_INFLIGHT; rfence[k] = f; rlive[k] = true;
  assert(!P_FENCE || rfence[k] > maxf[k]);          /* P_FENCE (LEDGER-4) */
  maxf[k] = rfence[k]; gid[k]++; cg = gid[k]; cf = rfence[k]; cl = lin[k];
  hold[w] = k + 1; hfence[w] = cf; pend[w] = true; aborted[w] = false;
  /* LEDGER-26: the row keeps the claim's claim id */
  if :: CLAIMIDS -> rcid[k] = cid; rcl[k] = CL_KNOWN; rown[k] = 0; rrel[k] = 0; ccid[w] = 0 :: else fi;
#ifdef OLD_RERUN
  sreq = rq          /* turn-1 design: the (re-)run sends this attempt's own arguments */
#else
  sreq = rreq[k]     /* LEDGER-21: the owner runs the row's stored request, not its own */
#endif
}

/* A claim that the ledger wrote although its caller could not learn it (LEDGER-12): the row
 * is in flight with an owner that never runs it; its lease settles it later (LEDGER-7). */
inline ORPHAN_GRANT(f) {
  if
  :: rst[k] == R_NONE -> rreq[k] = rq
  :: else
  fi;
  rst[k] = R_INFLIGHT; rfence[k] = f; rlive[k] = true;
  assert(!P_FENCE || rfence[k] > maxf[k]);          /* P_FENCE (LEDGER-4) */
  maxf[k] = rfence[k]; gid[k]++;
  /* its claimant is cut off from the ledger: it cannot take the claim up or release it */
  if :: CLAIMIDS -> rcid[k] = cid; rcl[k] = CL_EXCUSED; rown[k] = 0 :: else fi
}

/* LEDGER-26: the claimant sends its claim again and the ledger finds its own claim id on its
 * own in-flight row: `claimed`, the same fence, takeover false, the lease restarted. */
#define MINE(k) (cid != 0 && rcid[k] == cid)
inline RECOGNISED() {
  rlive[k] = true; cf = rfence[k]; cg = gid[k]; cl = lin[k]; rcl[k] = CL_KNOWN; rown[k] = 0; ccid[w] = 0;
  hold[w] = k + 1; hfence[w] = cf; pend[w] = true; aborted[w] = false;
#ifdef OLD_RERUN
  sreq = rq
#else
  sreq = rreq[k]
#endif
}

/* ---------------------------------------------------------------- dispatch (§7.2) */

/* The tool's request (LEDGER-2), with the key as Idempotency-Key (DISPATCH-4, EFFECT-3): one step of
 * the downstream. ab: the tool's signal was aborted (DISPATCH-13); wt: set while the caller waits for a
 * keyed request's answer. Shared by the dispatch and by a run that outlived its bound (DISPATCH-18). */
inline SEND_REQ(ab, wt) {
    TOUCHW(k);   /* LEDGER-13: the downstream's key (if any) ages from now */
    if
    :: ab ->
       out = O_ABORT; printf("@@ W%d   tool was aborted before sending (DISPATCH-13)\n", w)
    :: !ab && b_refuse > 0 ->
       b_refuse--; out = O_REFUSED;
       printf("@@ W%d   sends request %d under key %d: refused before acceptance (not performed)\n", w, sreq, k)
    :: !ab && KEYED(INTENT(k)) ->
       printf("@@ W%d   sends request %d under key %d to the keyed downstream\n", w, sreq, k);
       /* LEDGER-21: a re-run the ledger remembers sends the request the downstream holds */
       assert(!P_SAME || ds[k] == DS_NONE || dslin[k] != cl || dsfp[k] == sreq);   /* P_SAME */
       if
       :: ds[k] == DS_NONE ->
          dsfp[k] = sreq; dslin[k] = cl;
          if
          :: ds[k] = DS_INPROG; out = O_ACCEPTED; wt = true; EFFECT(k)   /* P_ONCE */
          :: b_decl > 0 -> b_decl--; ds[k] = DS_DECL; out = O_DECLINED;
             printf("@@ W%d   downstream declines (definite failure)\n", w)
          fi
       :: ds[k] == DS_INPROG ->
          out = O_409; printf("@@ W%d   downstream: 409 key in use (EFFECT-7)\n", w)
       :: (ds[k] == DS_DONE || ds[k] == DS_DECL) && dsfp[k] != sreq ->
          out = O_422; printf("@@ W%d   downstream: 422 key reused with a different request (first was %d)\n", w, dsfp[k])
       :: ds[k] == DS_DONE && dsfp[k] == sreq ->
          out = O_OK; printf("@@ W%d   downstream: same key, same request: replays its answer, no new effect\n", w)
       :: ds[k] == DS_DECL && dsfp[k] == sreq ->
          out = O_DECLINED; printf("@@ W%d   downstream: replays its decline\n", w)
       fi
    :: !ab && !KEYED(INTENT(k)) ->
       printf("@@ W%d   sends request %d for key %d to the unkeyed downstream\n", w, sreq, k);
       assert(!P_UKW || !ukreached[k]);                /* P_UKW */
       ukreached[k] = true;
       if
       :: out = O_OK; EFFECT(k)                          /* P_ONCE */
       :: b_decl > 0 -> b_decl--; out = O_DECLINED; printf("@@ W%d   downstream declines (definite failure)\n", w)
       fi
    fi;
    if
    :: (out == O_OK || out == O_DECLINED) && b_lost > 0 ->
       b_lost--; out = O_LOST; printf("@@ W%d   the response is lost (timeout)\n", w)
    :: true
    fi
}

/* Record a run's outcome with its claim's fence (LEDGER-8, LEDGER-5, LEDGER-16): one step of the
 * ledger. unf: the write ignores the fence (-DRT_UNFENCED, a run past its bound only). Shared by the
 * dispatch and by a run that outlived its bound (DISPATCH-18: recorded as any run's outcome is). */
inline RECORD_RUN(unf) {
    if
    :: out == O_OK && b_ns > 0 ->
       b_ns--; out = O_NS; printf("@@ W%d   the result cannot be stored (LEDGER-10)\n", w)
    :: true
    fi;
    if
    :: part[w] ->
       /* DISPATCH-10: still cut off when the re-sends run out (a re-send that lands is this
          step taken after the cut heals): raised; the row stays in flight until its lease settles it */
       res = C_LEDGER; printf("@@ W%d   cannot record key %d: ledger_unavailable\n", w, k)
    :: !part[w] && !(rst[k] == R_INFLIGHT && (rfence[k] == cf || unf)) ->
       /* LEDGER-5, DISPATCH-8: the claim was lost; nothing is written, nothing re-run */
       res = C_STALE; printf("@@ W%d   record with fence %d refused: stale_claim (DISPATCH-8)\n", w, cf)
    :: !part[w] && rst[k] == R_INFLIGHT && (rfence[k] == cf || unf) ->
       if
       :: out == O_OK ->
          rst[k] = R_COMPLETED; res = C_OK; printf("@@ W%d   completes key %d\n", w, k)
       :: out == O_NS ->
          /* LEDGER-10: fail closed, never released */
          rst[k] = R_FAILED_NS; res = C_NS; printf("@@ W%d   fails key %d: result_not_storable\n", w, k)
       :: out == O_DECLINED ->
          /* LEDGER-8: a definite failure is stored and replayed */
          rst[k] = R_FAILED; res = C_FAILED; printf("@@ W%d   fails key %d: definite failure\n", w, k);
          assert(!P_TRUTH || effk[k] == 0)             /* P_TRUTH */
       :: out == O_REFUSED ->
          /* LEDGER-8: not performed: release. "Not performed" speaks for this run's request only:
             a claim that is not the key's first (a re-claim after release, a takeover) follows a
             run whose request may have been performed, and so does any claim of a volatile
             ledger, which may have lost the row of such a run: then the call's effect may have
             happened (RECORD-2; proposed rule, see spec/model/README.md). */
          RELEASE_ROWW(k);
#ifdef NP_SAYS_NOT
          res = C_REL_NP;       /* the code on main: claim_released, effectMayHaveHappened false */
#else
          if
          :: cf == 1 && !LEDGER_VOLATILE -> res = C_REL_NP
#ifdef NP_KEYED_ONLY
          /* core before a84fff3: the two cases were a keyed_write's only; an unkeyed_write said
             not performed whatever its fence and the ledger's durability */
          :: !KEYED(INTENT(k)) -> res = C_REL_NP
#endif
          :: else -> res = C_REL_MAY   /* LEDGER-8: whatever the write class */
          fi;
#endif
          printf("@@ W%d   releases key %d: its request was not performed (fence %d)\n", w, k, cf)
#ifdef OLD_422
       :: out == O_422 ->
          /* turn-1 design: a 4xx from the payments API read as a definite failure */
          rst[k] = R_FAILED; res = C_FAILED;
          printf("@@ W%d   fails key %d: 422 taken as a definite failure (turn-1 design)\n", w, k);
          assert(!P_TRUTH || effk[k] == 0)             /* P_TRUTH */
#else
       :: out == O_422 ->
          /* EFFECT-6: the key is held for another request, which may have been performed */
          rst[k] = R_UNKNOWN; res = C_UNKNOWN; printf("@@ W%d   marks key %d unknown: request_mismatch (EFFECT-6)\n", w, k)
#endif
       :: out == O_409 || out == O_LOST || out == O_ABORT ->
          if
          :: KEYED(INTENT(k)) ->
             /* LEDGER-8, EFFECT-7: unknown outcome of a keyed write: release; the re-run is collapsed */
             RELEASE_ROWW(k); res = C_REL_MAY; printf("@@ W%d   releases key %d (may have happened)\n", w, k)
          :: else ->
             /* LEDGER-8, EFFECT-4: unknown outcome of an unkeyed write: unknown, never re-run */
             rst[k] = R_UNKNOWN; res = C_UNKNOWN; printf("@@ W%d   marks key %d unknown (tool_error)\n", w, k)
          fi
       fi;
       assert(!P_OWNER || cg == gid[k]);                /* P_OWNER (LEDGER-5, LEDGER-16) */
       TOUCHW(k);                               /* LEDGER-13: the row ages from this write */
       if :: CLAIMIDS -> rcid[k] = 0; rcl[k] = 0; rown[k] = 0 :: else fi   /* the row left flight */
    fi
}


#if RUNTIMEOUTS > 0
/* DISPATCH-18: the bound on the run (runTimeoutMs) passes with the run still pending. The dispatcher
 * stops renewing the claim's lease (nobody renews the row now: it lapses on the store's clock), signals
 * the tool to stop, and answers the dispatch at once with in_flight_elsewhere (the effect may have
 * happened); it does not write the row. The run goes on without it (LateRun): it may still send its
 * request, settle and be recorded under its own fence, or never settle. The bound is taken before the
 * request: a bound that passes after the request was sent is this step followed at once by the late
 * run's send, which reaches the same states. */
inline RUN_BOUND() {
  b_rt--;
  trk = k + 1; trf = cf; trg = cg; trl = cl; trq = sreq; trw = w; trc = cur; trs = TR_PEND;
  hold[w] = 0; hfence[w] = 0; pend[w] = false; aborted[w] = false;
#if defined(RT_NOBOUND)
  /* the dispatcher before DISPATCH-18: no bound; the dispatch waits for a run that never settles,
     renewing its claim (and the runner its turn lease) for ever */
  trs = TR_HUNG; hold[w] = k + 1; hfence[w] = cf;
  printf("@@ W%d   the run of key %d never settles; with no bound the dispatch waits for it, renewing the claim\n", w, k);
#elif defined(RT_RELEASE)
  /* a dispatcher that gives the claim back at the bound: released, so the next claim re-runs it */
  RELEASE_ROWW(k); res = C_REL_MAY;
  printf("@@ W%d   the run of key %d passes its bound (runTimeoutMs): releases the row (may have happened)\n", w, k);
#elif defined(RT_SAYS_NOT)
  /* a dispatcher that answers the bound as a run that did not happen */
  res = C_REL_NP;
  printf("@@ W%d   the run of key %d passes its bound (runTimeoutMs): answered as not performed\n", w, k);
#else
  res = C_ELSEWHERE;
  printf("@@ W%d   the run of key %d passes its bound (runTimeoutMs): signals it, stops renewing, in_flight_elsewhere (DISPATCH-18)\n", w, k);
#endif
  out = 0; sreq = 0; cf = 0; cg = 0; cl = 0
}
#endif

#define LOST_CID() if :: cid == 0 -> cidctr++; cid = cidctr :: else fi

inline DISPATCH() {
  res = C_NONE;
#if DEPLOY
#ifdef SLOT
  /* TURN-23's slot: a second ask dispatched at turn 0's index is a re-run there, through IDENT-10's guard, which lists
     turn 0's rows (one ledger step) and never answers it from the row the committed turn 0 answered (core's
     `{ at: { answered } }`: slot - 1, the key as this holder knows it). The other rows of the other definition at that
     index (ordinals 0 and 1) may be the call's: one is matched when the stored request gives the call's key, and
     several, or one the current schema refuses, are refused (tool_definition_changed) before anything is claimed, the
     turn's record listing the row (RECORD-8); the turn's retry refuses again (SLOT_REFUSED: the rows there can only
     have grown), never dispatched under the row's key, which may be the first ask's */
#define SLOT_REFUSED 16
#define SLOT_ROW(c) (rst[c] != R_NONE && slot != (c) + 1)
#define SLOT_ROWS(k) ((SLOT_ROW(KEY(0, 1 - (k) % M)) -> 1 : 0) + (SLOT_ROW(ORD1(1 - (k) % M)) -> 1 : 0))
#define SLOT_THE_ROW(k) (SLOT_ROW(KEY(0, 1 - (k) % M)) -> KEY(0, 1 - (k) % M) : ORD1(1 - (k) % M))
  if
  :: slot != 0 ->
     atomic {
       if
       :: slot >= SLOT_REFUSED ->
          printf("@@ W%d   the slot's call is refused again: tool_definition_changed, nothing claimed (IDENT-10)\n", w);
          goto ddone
       :: slot < SLOT_REFUSED && rst[k] == R_NONE && SLOT_ROWS(k) == 1 && dcompat ->
          printf("@@ W%d   lists turn 0's rows for the slot (less key %d, which turn 0 answered): key %d, made under the other definition, gives this call's key: dispatched under key %d (IDENT-10)\n", w, slot - 1, SLOT_THE_ROW(k), SLOT_THE_ROW(k));
          k = SLOT_THE_ROW(k); wk[w] = k + 1
       :: slot < SLOT_REFUSED && rst[k] == R_NONE && ((SLOT_ROWS(k) >= 1 && !dcompat) || SLOT_ROWS(k) == 2) ->
          printf("@@ W%d   lists turn 0's rows for the slot (less key %d, which turn 0 answered): key %d cannot be told from this call: tool_definition_changed, nothing claimed (IDENT-10)\n", w, slot - 1, SLOT_THE_ROW(k));
          k = SLOT_THE_ROW(k); wk[w] = k + 1; slot = slot + SLOT_REFUSED; goto ddone
       :: else ->
          printf("@@ W%d   lists turn 0's rows for the slot (less key %d, which turn 0 answered): none is this call's\n", w, slot - 1)
       fi
     }
  :: else ->
#endif
  /* IDENT-10: in a resumed turn (TURN-15) the dispatcher lists the turn's rows (LIST-3) before it claims, one ledger
     step; a row of the tool under the other definition's key, while the call's own key has none, was made under
     another definition (IDENT-4); TURN-23: a call carried to an earlier turn is dispatched at that turn's index as a
     re-run, through the guard there (RERUN_AT) */
  if
  :: RERUN_AT(k) ->
     atomic {
       if
#ifndef NO_IDENT_GUARD
       :: rst[OTHER_DEF(k / M, k)] != R_NONE && rst[k] == R_NONE && dcompat ->
          /* its stored request, read under this definition, gives the call's key: the call is dispatched under the
             row's key (a completed row answers, an in-flight one is waited on, a released one re-runs its request) */
          printf("@@ W%d   lists turn %d's rows: key %d, made under the other definition, gives this call's key: dispatched under key %d (IDENT-10)\n", w, k / M, OTHER_DEF(k / M, k), OTHER_DEF(k / M, k));
          k = OTHER_DEF(k / M, k); wk[w] = k + 1
       :: rst[OTHER_DEF(k / M, k)] != R_NONE && rst[k] == R_NONE && !dcompat ->
          /* the current schema refuses its stored request: cannot tell; refused before anything is claimed or run, and
             answered to the model as a call that was not run; the turn's record speaks of the row (RECORD-8). TURN-23:
             for a carried call the answer says the listed call's effect happened or may have happened (res C_NONE:
             never an error result, which would say it did not) */
          printf("@@ W%d   lists turn %d's rows: key %d, made under the other definition, cannot be read: tool_definition_changed, nothing claimed (IDENT-10)\n", w, k / M, OTHER_DEF(k / M, k));
          k = OTHER_DEF(k / M, k); wk[w] = k + 1; goto ddone
#endif
       :: else
       fi
     }
  :: else
  fi;
#ifdef SLOT
  fi;
#endif
#endif
  /* DISPATCH-16: a fresh claim id for this dispatch, sent with every claim of it. The model
     names it only when one of its claims meets ledger_unavailable (LOST_CID): an id no copy of
     which is on its way is never presented again once its dispatch ends, so it cannot matter
     which one it was, and the search need not tell them apart. */
dclaim:
  atomic {
    if
    :: part[w] ->
       /* after a lost reply, the retries run out while the ledger stays out of reach: settle it
          in the background (DISPATCH-16) */
       if
       :: ccid[w] != 0 && bgk[w] == 0 -> bgk[w] = k + 1; bgcid[w] = cid; bgrq[w] = rq; bgrel[w] = true; lc = false
       :: else
       fi;
       ccid[w] = 0;
       /* LEDGER-12, DISPATCH-10: the ledger cannot be reached. Maybe the claim was written. */
       if
       :: skip
       :: rst[k] == R_NONE -> ORPHAN_GRANT(FRESH_FENCE(k))
       :: rst[k] == R_RELEASED -> ORPHAN_GRANT(rfence[k] + 1)
       fi;
       res = C_LEDGER;
       printf("@@ W%d   claim of key %d: ledger_unavailable (DISPATCH-10); the tool does not run\n", w, k);
       goto ddone
    :: else
    fi;
    /* LEDGER-12, LEDGER-26: the claim's reply is lost (applied or not), or the store holds the
       claim and applies it at some later moment; either way the dispatcher sees ledger_unavailable */
    if
    :: CLAIMIDS && b_lostc > 0 ->
       b_lostc--; LOST_CID(); ccid[w] = cid; lc = true;
       if
       :: printf("@@ W%d   claim of key %d (claim id %d) is lost before the ledger: ledger_unavailable\n", w, k, cid)
       :: APPLY_UNSEEN(k, cid, rq, w); took = false;
          printf("@@ W%d   claim of key %d (claim id %d): its reply is lost: ledger_unavailable\n", w, k, cid)
       fi;
       goto dlost
    :: CLAIMIDS && b_late > 0 && lk == 0 ->
       b_late--; LOST_CID(); ccid[w] = cid; lc = true; lk = k + 1; lcid = cid; lrq = rq; lw = w;
       printf("@@ W%d   claim of key %d (claim id %d) is held by the store: ledger_unavailable\n", w, k, cid);
       goto dlost
    :: true
    fi;
    if
    :: MINE(k) && rst[k] == R_INFLIGHT ->
       RECOGNISED();
       printf("@@ W%d   claims key %d again with claim id %d: recognised, fence %d, lease restarted (LEDGER-26)\n", w, k, cid, cf)
    :: rst[k] == R_NONE ->
       /* LEDGER-1, LEDGER-21: the claim that creates the row stores the request */
       /* LEDGER-19: fence 1, or with FENCE_CONTINUES above the fence of a row retention forgot */
       rreq[k] = rq; GRANT(FRESH_FENCE(k));
#if defined(SLOT) || TURNS3
       rask[k] = ASK(k);   /* ghost: the row is this ask's */
#endif
       printf("@@ W%d   claims key %d: fence %d, stores request %d\n", w, k, cf, rreq[k])
    :: rst[k] == R_RELEASED ->
       /* LEDGER-3, LEDGER-4: a re-claim after release; LEDGER-21: the stored request is kept */
       GRANT(rfence[k] + 1);
       printf("@@ W%d   re-claims released key %d: fence %d, stored request %d (this attempt's: %d)\n", w, k, cf, rreq[k], rq)
    :: !MINE(k) && rst[k] == R_INFLIGHT && !rlive[k] && KEYED(INTENT(k)) ->
       /* LEDGER-7, LEDGER-18: an expired keyed_write claim is taken over */
       GRANT(rfence[k] + 1);
       printf("@@ W%d   takes over expired key %d: fence %d, stored request %d\n", w, k, cf, rreq[k])
    :: !MINE(k) && rst[k] == R_INFLIGHT && !rlive[k] && !KEYED(INTENT(k)) ->
       /* LEDGER-7: an expired unkeyed_write claim becomes unknown, never re-run */
       printf("@@ W%d   finds key %d expired: unknown (lease_expired), not run (LEDGER-7)\n", w, k);
       NOFALSE(k);                                      /* P_NOFALSE */
       rst[k] = R_UNKNOWN; res = C_UNKNOWN; rcid[k] = 0; rcl[k] = 0; rown[k] = 0; TOUCHW(k);
       goto ddone
    :: !MINE(k) && rst[k] == R_INFLIGHT && rlive[k] ->
       /* LEDGER-6, LEDGER-15: in flight elsewhere: wait, do not run */
       printf("@@ W%d   finds key %d in flight elsewhere: waits (LEDGER-15)\n", w, k);
       goto dwait
    :: rst[k] == R_COMPLETED ->
       res = C_OK; printf("@@ W%d   key %d completed: replays the stored result (DISPATCH-5)\n", w, k);
#if SAME_ASK && VSTORE
       /* P_FRESH (TURN-14): a turn index is bound to a new message only after the message bound there failed (TURN-12),
          so a row is replayed to a new message only as that failed message's; never at an index issued again */
       assert(!P_FRESH || !reiss[cur]);   /* P_FRESH */
#endif
#if TURNS3
       /* P_FRESH (TURN-23): a call is never answered from a row an earlier ask made (a call made again after a committed
          turn answered it is a further ask; its carried repeats are the same ask as the listed call) */
       assert(!P_FRESH || ASKN <= rask[k]);   /* P_FRESH */
#elif TURNS2 && defined(SLOT)
       /* P_FRESH (TURN-23): a second ask is never answered from a row the first ask made (with the slot a second ask is
          dispatched at turn 0's index too, and may meet its own ask's row there: an earlier attempt of turn 1) */
       assert(!P_FRESH || !(SECOND_ASK && rask[k] == 0));   /* P_FRESH */
#elif TURNS2
       /* P_FRESH (TURN-23): a call made again after a committed turn answered it is a second ask, never answered from
          the first ask's row (a payment reported and not made) */
       assert(!P_FRESH || !(t == 1 && k / M == 0 && tres[0] != C_NONE));   /* P_FRESH */
#endif
       goto ddone
    :: rst[k] == R_FAILED ->
       res = C_FAILED; printf("@@ W%d   key %d failed: replays tool_failed (DISPATCH-9)\n", w, k); goto ddone
    :: rst[k] == R_FAILED_NS ->
       res = C_NS; printf("@@ W%d   key %d: replays result_not_storable (DISPATCH-9)\n", w, k); goto ddone
    :: rst[k] == R_UNKNOWN ->
       res = C_UNKNOWN; printf("@@ W%d   key %d unknown: outcome_unknown, not run (DISPATCH-9)\n", w, k); goto ddone
    fi
  };

  /* The tool runs, only now (LEDGER-2). Renewals (LEDGER-9) keep the lease live unless the owner
   * pauses or is cut off. */
#if RUNTIMEOUTS > 0
  if
  /* a run already aborted by self-fencing (DISPATCH-13) stops at its send step: it does not outlive a bound */
  :: atomic { b_rt > 0 && !aborted[w] -> RUN_BOUND() };
#ifdef RT_NOBOUND
     (false);   /* blocked for ever */
#endif
     goto ddone
  :: atomic { pend[w] = false; SEND_REQ(aborted[w], waiting[w]) }
  fi;
#else
  atomic { pend[w] = false; SEND_REQ(aborted[w], waiting[w]) };
#endif
  if
  :: out == O_ACCEPTED ->
     if
     :: atomic { ds[k] = DS_DONE; out = O_OK; waiting[w] = false; printf("@@ W%d   downstream finishes: done\n", w) }
     :: atomic { b_lost > 0 -> b_lost--; out = O_LOST; waiting[w] = false; printf("@@ W%d   no answer: timeout\n", w) }
     fi
  :: else
  fi;

  /* Record the outcome with the claim's fence (LEDGER-8, LEDGER-5, LEDGER-16). */
  atomic {
    hold[w] = 0;
    RECORD_RUN(false);
#if LOSTRECS > 0
    /* DISPATCH-10, DISPATCH-17: the ledger applied the write but its reply is lost (ledger_unavailable). A copy
       that never reached the ledger is the record step taken later, after the cut heals (DISPATCH-10) */
    if
    :: b_lostr > 0 && res != C_STALE && res != C_LEDGER ->
       b_lostr--; wres = res; wst = rst[k]; wfence = cf; res = C_NONE;
       printf("@@ W%d   the ledger applied it, but its reply is lost: ledger_unavailable (DISPATCH-10)\n", w)
    :: true
    fi;
#endif
    out = 0; sreq = 0; cf = 0; cg = 0; cl = 0; hfence[w] = 0; aborted[w] = false   /* forget what is spent */
  };
#if LOSTRECS > 0
  if
  :: wfence != 0 ->
     /* DISPATCH-10: the identical write again, same fence, at any later moment. Its first copy took the row out of
        flight at that fence and only this claim ever holds it (LEDGER-4), so the copy is refused: stale_claim (on a
        durable ledger: a volatile one that re-issues the fence is volatile-fence's case, not searched with this) */
     atomic {
       if
       :: printf("@@ W%d   sends the record of key %d again with fence %d: stale_claim\n", w, k, wfence);
#ifdef STALE_FACE
          /* the stale_claim taken at face value: the claim was lost (DISPATCH-8), may have happened */
          res = C_STALE; printf("@@ W%d   takes it at face value: stale_claim, the effect may have happened\n", w)
#else
          /* DISPATCH-17: lookup; the row at this fence in the state the write makes is this claim's own write */
          if
          :: rfence[k] == wfence && rst[k] == wst ->
             res = wres; printf("@@ W%d   lookup: key %d holds its write at fence %d: answered as acknowledged (DISPATCH-17)\n", w, k, wfence)
          :: else ->
             res = C_STALE; printf("@@ W%d   lookup: key %d moved on (fence %d): the refusal stands, stale_claim (DISPATCH-8)\n", w, k, rfence[k])
          fi
#endif
          ;
          /* P_ACK: a write the row still holds is answered as what it says */
          assert(!P_ACK || !(rfence[k] == wfence && rst[k] == wst) || res == wres)   /* P_ACK (DISPATCH-17) */
       :: /* the re-sends run out while the ledger stays unavailable, or the row cannot be read: raised (ERR-4) */
          res = C_LEDGER; printf("@@ W%d   the record of key %d cannot be confirmed: ledger_unavailable (DISPATCH-17)\n", w, k)
       fi;
       wres = 0; wst = 0; wfence = 0
     }
  :: else
  fi;
#endif
  goto ddone;

dlost:
  /* claimRetrying (DISPATCH-16): send the same claim (same claim id) again, or, when the retries
     run out, fail with ledger_unavailable and release the claim by its id in the background */
  atomic {
    if
    :: printf("@@ W%d   sends the claim again with claim id %d\n", w, cid); goto dclaim
    :: bgk[w] == 0 ->
       ccid[w] = 0; lc = false; bgk[w] = k + 1; bgcid[w] = cid; bgrq[w] = rq; bgrel[w] = true; res = C_LEDGER;
       printf("@@ W%d   claim retries run out: ledger_unavailable (DISPATCH-10); settles claim id %d in the background\n", w, cid);
       goto ddone
    fi
  };

dwait:
  /* LEDGER-15: claim again when the row moved, or give up at the wait bound */
  if
  :: atomic { !(rst[k] == R_INFLIGHT && rlive[k]) -> printf("@@ W%d   claims key %d again\n", w, k) };
     goto dclaim
  :: atomic { res = C_ELSEWHERE; printf("@@ W%d   wait bound reached: in_flight_elsewhere\n", w) }
  fi;
ddone:
  skip
}

/* ---------------------------------------------------------------- one turn (runTurn, §8, §9) */

/* What the failed-turn record says about the call's effect (RECORD-2). */
inline SAY_WORD() {
  if
  :: say == SAY_NONE -> printf("@@ W%d   its record lists no call (none was dispatched)\n", w)
  :: say == SAY_NOT -> printf("@@ W%d   its record says of key %d: not_happened\n", w, k)
  :: say == SAY_MAY -> printf("@@ W%d   its record says of key %d: may_have_happened\n", w, k)
  :: say == SAY_HAPPENED -> printf("@@ W%d   its record says of key %d: happened\n", w, k)
  fi
}

#ifdef SLOT
/* RECORD-7: a resumed turn's record says an earlier holder's effects may have happened, naming no key. The model
   otherwise reads it as a statement of the turn's own key (and, after a deploy, the other definition's key at the
   index); with the slot an earlier holder of turn 1 may have claimed at turn 0's index, under a key of either
   definition, so the statement is read as what it is: of every row there is, but one the ledger holds failed (a
   definite failure, RECORD-6) */
#define BLANKET(c) if :: rst[c] != R_NONE && rst[c] != R_FAILED && recd[c] < SAY_MAY -> recd[c] = SAY_MAY :: else fi
#define RESUMED_BLANKET BLANKET(0); BLANKET(1); BLANKET(2); BLANKET(3); BLANKET(4); BLANKET(5)
#define TURN_DONE wk[w] = 0; res = C_NONE; stopped = false; rq = 0; say = SAY_NONE; mine = false; definite = false; att = 0; slot = 0
#else
#define TURN_DONE wk[w] = 0; res = C_NONE; stopped = false; rq = 0; say = SAY_NONE; mine = false; definite = false; att = 0
#endif

/* After an attempt: how its stream ended, then commit, retry or fail the turn. One atomic step
 * with the store operation it leads to (compare-and-append or failMessage). */
inline END_ATTEMPT() {
  if :: SAY_OF(res) > say -> say = SAY_OF(res) :: else fi;
#if SAME_ASK
  if :: SAY_OF(res) == SAY_HAPPENED -> told[cur] = true :: else fi;   /* P_TOLD: the user is told it happened */
#endif
  if :: res == C_FAILED -> definite = true :: else fi;
  if
  :: stopped && (res == C_OK || res == C_FAILED || res == C_NONE) ->
     /* RECORD-3: message_stop seen and the call resolved with something established, or (a
        re-run's answer without the call, DIVERGES) no call to resolve */
#ifdef OLD_TURN
     /* turn-1 design: compare-and-append on the committed count only */
     if
     :: nturns == t ->
#else
     /* TURN-5: compare-and-append on the log's version, the turn-lease fence and the bound message */
     if
     :: lfence == myf && nturns == t && ms[cur] == MS_INPROG ->
#endif
#if SOLO_TURNS
        /* turn 0's commit leaves the message in progress: it goes on to turn 1 (TURN-3) */
#if TURNS3
        /* turns 0 and 1 leave the message in progress: it goes on to the next turn */
        nturns++; tmsg[t] = cur + 1; tres[t] = res; ms[cur] = (t < T - 1 -> MS_INPROG : MS_ANSWERED);
#else
        nturns++; tmsg[t] = cur + 1; tres[t] = res; ms[cur] = ((TURNS2 && t == 0) -> MS_INPROG : MS_ANSWERED);
#endif
        tk[t] = ((res == C_OK || res == C_FAILED) -> k + 1 : 0);
#ifdef SLOT
        /* RECORD-7: the committed turn's record says it was resumed: the message has a slot at its index (TURN-23) */
        if :: t == 0 -> t0res = resumed :: else fi;
#endif
#else
        nturns++; tmsg[t] = cur + 1; tres[t] = res; ms[cur] = MS_ANSWERED; VWROTE(cur + 1) VMINE(cur)
#endif
#if TOLDNOT
        if :: res == C_FAILED -> tnot[k] = true :: else fi;   /* an error result tells the user: not happened */
#endif
        if
        :: res == C_OK -> printf("@@ W%d   attempt %d: message_stop; commits turn %d answering message %d with the result\n", w, att, t, cur)
        :: res == C_FAILED -> printf("@@ W%d   attempt %d: message_stop; commits turn %d answering message %d with an error result (tool_failed)\n", w, att, t, cur)
        :: res == C_NONE ->
           /* RECORD-8: the committed turn does not answer key k. Its record lists what this runner's
              earlier attempts established of it (source 1: say) and, in a resumed turn, the key's
              row, listed right before the commit (source 2, LIST-3), the stronger statement once */
           if :: resumed && SAY_LISTED(k) > say -> say = SAY_LISTED(k) :: else fi;
#ifdef CARRY_LISTED_ONLY
           lsay = say;
#endif
#ifndef RESUME_OMITS
           /* RECORD-8 (proposed): a resumed turn's record is kept even when its listing found
              nothing: an earlier holder paused past its lease can still claim after the listing
              and die before it records anything; the record's "resumed": true says the earlier
              holder's effects may have happened (RECORD-7). Only a failed row, listed or read
              by an attempt, is terminal enough to say not_happened (RECORD-6). */
           if
           :: resumed && say < SAY_MAY && !definite && !LISTED_FAILED_AT(k) -> say = SAY_MAY;
              printf("@@ W%d   the turn was resumed from an earlier holder: its record says so, its effects may have happened\n", w)
           :: else
           fi;
#endif
           printf("@@ W%d   attempt %d: message_stop; commits turn %d answering message %d without the call of key %d\n", w, att, t, cur, k);
           /* the committed turn's record covers every effect this turn's own attempts made */
           assert(!P_RECORD || !mine || say >= SAY_MAY);           /* P_RECORD (RECORD-8) */
           /* and calls no effect that already happened not_happened (RECORD-2) */
           assert(!P_RECORD || say != SAY_NOT || effk[k] == 0);    /* P_RECORD */
#ifdef RECORD_AFTER_COMMIT
           crec = say     /* main before the fix: written by the worker's next step */
#else
           /* TURN-5: recordsWithCommit: the record is part of the commit's own write */
           if :: say > recd[k] -> recd[k] = say :: else fi;
#ifdef CARRY_LISTED_ONLY
           LISTED_REC(lsay);
#endif
           if :: say > SAY_NONE -> SAY_WORD() :: else fi
#endif
        fi;
#if TURNS2
        /* TURN-23: the runner's carried calls after turn 0's commit: the call its record lists (happened,
           may_have_happened) when the committed turn does not answer it */
#ifdef CARRY_ANSWERED
        /* a runner that keeps carrying a call once a committed turn answered it */
        if :: t == 0 -> carry = ((say >= SAY_MAY || res == C_OK) -> 2 : 1) :: else fi;
#elif defined(CARRY_LISTED_ONLY)
        /* carry.ts's withRecord: the calls the record lists, not its resumed flag */
        if :: t == 0 -> carry = ((res == C_NONE && lsay >= SAY_MAY) -> 2 + k : 1) :: else fi;
        lsay = 0;
#else
        if :: t == 0 -> carry = ((res == C_NONE && say >= SAY_MAY) -> 2 + k : 1) :: else fi;
#endif
#if TURNS3
        /* after turn 1's commit: a carried call (dispatched at turn 0's index) that it answered is no longer carried (the
           holder knows the key it dispatched under, carriedAfter); one it did not answer (refused, or a re-run without it)
           stays listed; otherwise turn 1's own unanswered call is the one its record lists */
        if
        :: t == 1 && carry >= 2 && k / M == 0 -> carry = (res != C_NONE -> 1 : carry)
        :: t == 1 && !(carry >= 2 && k / M == 0) -> carry = ((res == C_NONE && say >= SAY_MAY) -> 2 + k : 1)
        :: else
        fi;
#endif
#endif
#if DEPLOY
        /* RECORD-8: a resumed turn's record lists every row of its index the turn does not answer, the other
           definition's key's too, and its resumed statement covers what an earlier holder did there (RECORD-7) */
        if
        :: resumed ->
           say = SAY_ROW(OTHER_DEF(k / M, k));
           if :: say < SAY_MAY && !LISTED_FAILED(OTHER_DEF(k / M, k)) -> say = SAY_MAY :: else fi;
           assert(!P_RECORD || say != SAY_NOT || effk[OTHER_DEF(k / M, k)] == 0);    /* P_RECORD */
#ifdef SLOT
           if :: say > recd[OTHER_DEF(k / M, k)] -> recd[OTHER_DEF(k / M, k)] = say :: else fi;
           RESUMED_BLANKET
#else
           if :: say > recd[OTHER_DEF(k / M, k)] -> recd[OTHER_DEF(k / M, k)] = say :: else fi
#endif
        :: else
        fi;
#endif
        assert(!P_TRUTH || res != C_FAILED || effk[k] == 0)   /* P_TRUTH: RECORD-3 */
     :: else ->
        /* TURN-13: the commit is refused; the attempt's calls are kept beside the conversation, with
           the calls of the earlier attempts of the turn this runner made (RECORD-5: say is the
           strongest statement of every attempt): the model may have answered this attempt without a
           call an earlier one made, and the holder that committed saw neither */
#ifdef SUPERSEDED_OWN
        /* the runner before df13d09: the superseded record lists the refused attempt's calls only */
        say = SAY_OF(res);
#endif
        /* RECORD-7: a resumed turn's blanket "an earlier holder's effects may have happened" covers
           only a holder that died before it could record; this holder lives, so its own record
           names every effect its attempts made (P_RECORD, as for the failed-turn record) */
        printf("@@ W%d   attempt %d: message_stop; commit of turn %d refused: superseded, record kept (TURN-13)\n", w, att, t);
        if
        :: say == SAY_NONE -> printf("@@ W%d   its record lists no call of key %d\n", w, k)
        :: else -> SAY_WORD()
        fi;
        assert(!P_RECORD || !mine || say >= SAY_MAY);          /* P_RECORD (TURN-13, RECORD-7) */
        if :: say > recd[k] -> recd[k] = say :: else fi; VWROTE(0) VMINE(cur)
#ifdef CARRY_LISTED_ONLY
        LISTED_REC(say);
#endif
        gone = true
     fi;
     TURN_DONE; goto rdone
  :: else
  fi;
  if
  :: att < MAXATT && (!stopped || (res != C_UNKNOWN && res != C_NS)) ->
#ifdef OLD_TURN
     /* turn-1 design: reload; if the count moved, another attempt committed: give up */
     if
     :: nturns != t -> gone = true; printf("@@ W%d   the committed count moved: gives up turn %d\n", w, t); TURN_DONE; goto rdone
     :: else
     fi;
#endif
     /* STREAM-5: retried from any position; the ledger answers repeats */
     printf("@@ W%d   retries turn %d\n", w, t);
     res = C_NONE; stopped = false; rq = 0
  :: else ->
     /* RECORD-5: the record covers every attempt of the turn (this worker's: they are all it knows);
        RECORD-2: a call whose effect may have happened is not described as not run or failed */
     assert(!P_RECORD || !mine || say >= SAY_MAY);          /* P_RECORD */
#ifdef OLD_TURN
     if :: say > recd[k] -> recd[k] = say :: else fi;
     printf("@@ W%d   turn %d fails; the message stays pending\n", w, t);
     SAY_WORD();
#else
     if
     :: lfence == myf ->
#ifndef RESUME_SAYS_NOT
        /* TURN-15, RECORD-6: a turn resumed from an earlier holder (its message was bound under
           another turn-lease grant) may have effects from that holder's attempts, which can
           still be running (a paused process) and which this runner never saw: its record
           says so, and calls nothing "not happened" but a call whose row it read as failed
           (a definite failure is terminal: no later run can perform it). */
        if
        :: resumed && say < SAY_MAY && !definite -> say = SAY_MAY;
           printf("@@ W%d   the turn was resumed from an earlier holder: its effects may have happened\n", w)
        :: else
        fi;
#endif
        if :: say > recd[k] -> recd[k] = say :: else fi;
#ifdef CARRY_LISTED_ONLY
        LISTED_REC(say);   /* the failed turn's record, its resumed statement counted (more carried, never less) */
#endif
#ifdef SLOT
        if :: resumed -> RESUMED_BLANKET :: else fi;
#endif
        ms[cur] = MS_FAILED; FAILED_AGAIN(cur); VWROTE(cur + 1) VMINE(cur)
#if TOLDNOT
        if :: say == SAY_NOT -> tnot[k] = true :: else fi;   /* the send raises turn_failed: not happened */
#endif
#if AGING && BOUNDAT
        /* a row this run wrote ages from this failure: the margin between window and retention
           covers a run whose live holder fails it (TURN-12) */
        if :: rcur[k] -> rborn[k] = nfail[cur] :: else fi;
#endif
        printf("@@ W%d   message %d fails at turn %d (failMessage)\n", w, cur, t);
        SAY_WORD();
        /* the record that fails the message (what a re-send is answered with, TURN-12) never
           calls an effect that already happened "not happened" (RECORD-2) */
        assert(!P_RECORD || say != SAY_NOT || effk[k] == 0)    /* P_RECORD */
     :: else ->
        if :: say > recd[k] -> recd[k] = say :: else fi; VWROTE(0) VMINE(cur)
#ifdef CARRY_LISTED_ONLY
        LISTED_REC(say);
#endif
        gone = true;
        printf("@@ W%d   turn lease lost: the failed-turn record goes beside the conversation\n", w)
     fi;
#endif
     TURN_DONE; goto rdone
  fi
}

inline RUNTURN() {
  do
  :: if
     :: atomic { b_cut > 0 ->
          b_cut--; att++; stopped = false; res = C_NONE;
          printf("@@ W%d   attempt %d: stream dies before the call is complete; nothing dispatched (STREAM-2, STREAM-3)\n", w, att);
          END_ATTEMPT() }
#if DIVERGES > 0
     :: atomic { b_div > 0 && (att > 0 || resumed) ->
          /* RECORD-8: a re-run of the turn (a retry, or a resumed turn) need not answer as an
             earlier run did: the model replies without the call (plain text); message_stop */
          b_div--; att++; stopped = true; res = C_NONE;
          printf("@@ W%d   attempt %d at turn %d: the model answers without the call this time; message_stop\n", w, att, t);
          END_ATTEMPT() }
#endif
     :: atomic {
          att++;
          /* the model produces the same logical call; a replay may re-word it (IDENT-3) */
          if
          :: rq = 1
          :: b_reword > 0 -> b_reword--; rq = 2
          fi;
          printf("@@ W%d   attempt %d at turn %d: call complete (content_block_stop), dispatches key %d, request %d (STREAM-4)\n", w, att, t, k, rq) };
        DISPATCH();
        atomic {
          /* RETIRE: a copy of this dispatch's claim may still be on its way; retire its claim id in
             the background (releasing the row only if the dispatch never took it) */
          (!RETIRE || !lc || bgk[w] == 0) ->
          if
          :: RETIRE && lc ->
             bgk[w] = k + 1; bgcid[w] = cid; bgrq[w] = rq; bgrel[w] = (ccid[w] != 0);
             printf("@@ W%d   will retire claim id %d in the background\n", w, cid)
          :: else
          fi;
          ccid[w] = 0; lc = false;
          cid = 0;   /* spent: the next dispatch mints its own */
          /* STREAM-1, STREAM-6: the stream ends with message_stop, or dies; the call was waited for */
          if
          :: stopped = true
          :: b_cut > 0 -> b_cut--; stopped = false;
             printf("@@ W%d   attempt %d: stream dies after the call resolved (STREAM-1, STREAM-6)\n", w, att)
          fi;
          END_ATTEMPT() }
     fi
  od;
rdone:
#ifdef RECORD_AFTER_COMMIT
  /* main before the fix: the committed turn's record is added right after the commit, in a write
     of its own; a worker that dies before it leaves the turn committed without it for good */
  atomic {
    if
    :: crec > recd[k] -> recd[k] = crec;
       printf("@@ W%d   adds the committed turn's record after the commit (RECORD-8)\n", w); say = crec; SAY_WORD(); say = SAY_NONE
    :: else
    fi;
    crec = 0 }
#else
  skip
#endif
}

/* ---------------------------------------------------------------- turn lease grants (TURN-10) */

#if GRANTS
#ifdef LATEST_GRANT_ONLY
#define EARLIER(g) false        /* the stores on main: only the latest grant's id is kept */
#else
#define EARLIER(g) ((gearlier >> (g)) & 1)   /* the stores being changed: earlier grants' ids are kept too */
#endif
#define LEASE_LIVE (lholder != 0 && llive)

/* The store's acquireLease(conversationId, owner, leaseMs, grantId g) by worker x, one atomic step;
 * r is its answer. Grant id 0: an acquisition whose id no copy can carry (minted lazily). */
inline ACQ_STORE(g, x, r) {
  if
  :: g != 0 && g == lgrant && LEASE_LIVE ->
     /* TURN-10 (a): the live grant sent again (its reply was lost): that grant, its fence, the lease
        restarted; no second grant, the fence does not rise */
     r = AQ_SAME
  :: g != 0 && g == lgrant && !LEASE_LIVE ->
     /* TURN-10 (b): the latest grant is over (given back, released, or expired and not taken since):
        conversation_lease_lost, nothing changes; nobody learnt that fence, it is not revived */
     r = AQ_LOST
  :: g != 0 && g != lgrant && EARLIER(g) ->
     /* TURN-10: a copy of an earlier grant's acquire, landing after a later grant: refused with
        conversation_lease_lost, nothing changes (the stores keep earlier grants' ids too) */
     r = AQ_LOST
  :: (g == 0 || (g != lgrant && !EARLIER(g))) && LEASE_LIVE ->
     /* TURN-10: one holder at a time; a live lease is not handed out again, whatever the owner */
     r = AQ_HELD
  :: (g == 0 || (g != lgrant && !EARLIER(g))) && !LEASE_LIVE ->
     /* TURN-10: a new grant, a fence above every earlier one; the store keeps its grant id with it
        and the latest grant's id becomes an earlier one */
     if :: lgrant != 0 -> gearlier = gearlier | (1 << lgrant) :: else fi;
     fencectr++; lholder = x + 1; lfence = fencectr; llive = true; lgrant = g;
     r = AQ_NEW
  fi
}

/* The runner's acquire (TURN-10): one send of acquireLease with this acquisition's grant id wga[w];
 * the reply can be lost (the acquire applied or not) or the store can hold the acquire and apply it
 * later: either way the runner sees store_unavailable (aq = AQ_UNAVAIL) and still waits for it. */
#define MINT_GRANT() if :: wga[w] == 0 -> gidctr++; wga[w] = gidctr :: else fi
inline ACQ_SEND() {
  if
  :: b_lostacq > 0 ->
     b_lostacq--; MINT_GRANT(); aq = AQ_UNAVAIL;
     if
     :: printf("@@ W%d   acquire (grant id %d) is lost before the store: store_unavailable\n", w, wga[w])
     :: ACQ_STORE(wga[w], w, aq2);
        if :: aq2 == AQ_NEW -> lknown = false :: else fi;
        printf("@@ W%d   acquire (grant id %d) applied (answer %d), its reply is lost: store_unavailable\n", w, wga[w], aq2);
        aq2 = 0
     fi
  :: b_lateacq > 0 && lak == 0 ->
     b_lateacq--; MINT_GRANT(); aq = AQ_UNAVAIL; lak = 1; lag = wga[w]; law = w;
     printf("@@ W%d   acquire (grant id %d) is held by the store: store_unavailable\n", w, wga[w])
  :: true ->
     ACQ_STORE(wga[w], w, aq);
     if
     :: aq == AQ_NEW || aq == AQ_SAME ->
        lknown = true; myf = lfence; wga[w] = 0;
        if
        :: aq == AQ_SAME -> printf("@@ W%d   acquire (grant id %d) sent again: the same grant, fence %d, lease restarted (TURN-10)\n", w, lgrant, myf)
        :: else -> printf("@@ W%d   acquires the turn lease, fence %d\n", w, myf)
        fi
     :: aq == AQ_HELD ->
        /* not acquired: the send waits for the lease and starts a new acquisition */
#if !defined(NO_GIVEBACK_MARK) && !defined(LATEST_GRANT_ONLY)
        /* TURN-10: after a send whose reply was lost (the grant id was minted), an earlier copy may
           still land: the runner gives the grant id back, and the store keeps it as given back */
        if
        :: wga[w] != 0 && lgrant != wga[w] && !EARLIER(wga[w]) ->
           gearlier = gearlier | (1 << wga[w]);
           printf("@@ W%d   acquire: the lease is held; releaseLeaseGrant(grant id %d) finds no grant: kept as given back\n", w, wga[w])
        :: else
        fi;
#endif
        wga[w] = 0; printf("@@ W%d   acquire: the lease is held; waits\n", w)
     :: aq == AQ_LOST ->
        /* conversation_lease_lost: that grant applied and is over; nobody holds the lease under it */
        printf("@@ W%d   acquire (grant id %d): conversation_lease_lost: that grant is over; a new acquisition\n", w, wga[w]);
        wga[w] = 0
     fi
  fi
}
#endif

/* ---------------------------------------------------------------- send() */

#ifndef OLD_TURN

/* Hold the turn lease and answer queued messages in arrival order until m is settled. */
inline DRIVE() {
  do
  :: atomic {
       /* beginTurn: TURN-10 (the fence decides), TURN-9 (in arrival order), TURN-11 (bind),
          TURN-1 (the index is the committed count, read under the lease) */
       if
       :: lfence != myf -> printf("@@ W%d   turn lease lost\n", w); goto dend
       :: else
       fi;
       assert(!(ms[0] == MS_INPROG && ms[1] == MS_INPROG));   /* P_MODEL: one turn in flight (TURN-9) */
       cur = NOMSG;
       if
       :: ms[0] == MS_INPROG -> cur = 0
       :: ms[1] == MS_INPROG -> cur = 1
       :: else ->
          if
          :: narr > 0 && ms[order[0]] == MS_QUEUED -> cur = order[0]
          :: narr > 1 && ms[order[0]] != MS_QUEUED && ms[order[1]] == MS_QUEUED -> cur = order[1]
          :: else
          fi
       fi;
       if
       :: cur == NOMSG -> goto dend
       :: else
       fi;
#if SOLO_TURNS
       /* TURN-1, TURN-11, TURN-15 (message 0 alone, first bound at index 0): beginTurn issues index nturns, the
          committed count read under the lease; resumed exactly when that index was begun before (a holder that died or
          lost the lease there, a failed turn re-opened at its index) */
       t = nturns;
       assert(t < T);                                         /* P_MODEL: two turns */
       if
       :: ms[cur] == MS_QUEUED ->
          ms[cur] = MS_INPROG; lastBound = cur + 1;
          printf("@@ W%d   binds message %d to turn %d (TURN-11)\n", w, cur, t)
       :: else
       fi;
       if
       :: t < nbeg ->
          resumed = true; printf("@@ W%d   resumes message %d at its turn %d, begun before (TURN-15)\n", w, cur, t)
       :: else ->
          nbeg = t + 1;
          if :: t > 0 -> printf("@@ W%d   begins turn %d, message %d's next turn (TURN-3)\n", w, t, cur) :: else fi
       fi;
       if
#if DEPLOY
       :: t == 0 -> k = KEY(0, defv);   /* IDENT-4: the key derives under the definition this holder runs */
          if :: defv == 1 -> printf("@@ W%d   derives the call's key under the deployed definition: key %d\n", w, k) :: else fi
#else
       :: t == 0 -> k = KEY(0, 0)
#endif
       :: else ->
#if TURNS3
          TURN_LATER()
#else
#ifdef SLOT
          /* the key the committed turn 0 answered, as this holder knows it: the holder that committed it, the key its call
             was dispatched under; one that reads it back (carry not known here), the key stored with the turn, or with
             -DREDERIVE_ANSWERED the key it derives for the committed call under its own definition */
#ifdef REDERIVE_ANSWERED
          slot = (carry != 0 -> tk[0] : (tk[0] != 0 -> KEY(0, defv) + 1 : 0));
#else
          slot = tk[0];
#endif
#endif
          /* TURN-23: the calls turn 0 left unanswered whose effect may have happened. The holder that committed turn 0
             knows its record (carry); one that takes the message up here reads the records kept beside the
             conversation at turn 0 and the committed turn 0 (the runner's carriedBefore) */
          if
          :: carry == 0 ->
#ifdef CARRY_NO_TAKEUP_READ
             carry = 1;   /* a take-up that reads nothing back */
             printf("@@ W%d   takes the message up without reading turn 0's records back: nothing carried\n", w)
#elif defined(CARRY_ANSWERED)
             carry = (recd[0] >= SAY_MAY -> 2 : 1);   /* whether or not a committed turn answered it */
             printf("@@ W%d   reads back turn 0's records: key 0 carried: %d\n", w, carry == 2)
#elif defined(CARRY_LISTED_ONLY)
             carry = ((tres[0] == C_NONE && recl[0] >= SAY_MAY) -> 2 : 1);   /* the calls the records list (carriedBefore) */
             printf("@@ W%d   reads back the calls turn 0's records list: key 0 carried: %d\n", w, carry == 2)
#elif DEPLOY
             /* the listed call of turn 0, under either definition's key */
             carry = (tres[0] != C_NONE -> 1 : (recd[0] >= SAY_MAY -> 2 : (recd[1] >= SAY_MAY -> 3 : 1)));
             if
             :: carry >= 2 -> printf("@@ W%d   reads back turn 0's records and committed turn: key %d is carried (TURN-23)\n", w, carry - 2)
             :: else -> printf("@@ W%d   reads back turn 0's records and committed turn: nothing carried\n", w)
             fi
#else
             carry = ((tres[0] == C_NONE && recd[0] >= SAY_MAY) -> 2 : 1);
             if
             :: carry == 2 -> printf("@@ W%d   reads back turn 0's records and committed turn: key 0 is carried (TURN-23)\n", w)
             :: else -> printf("@@ W%d   reads back turn 0's records and committed turn: nothing carried\n", w)
             fi
#endif
          :: else
          fi;
          /* turn 0 committed without the call: the model, which never saw its effect, makes it again (the same ask);
             after turn 0 answered it, a first run of turn 1 makes it again (a second ask) or answers with plain text */
          if
          :: tres[0] == C_NONE || resumed
          :: tres[0] != C_NONE && !resumed
          :: tres[0] != C_NONE && !resumed -> plain = true
          fi;
#ifdef NO_CARRY
          k = KEY(1, 0);   /* turn 1's call claimed under its own turn index */
#elif DEPLOY
          /* TURN-23 across a deploy: the carried call is dispatched at turn 0's index as a re-run, under its key there as
             this holder's definition derives it (the listed key when the listed call ran under it); IDENT-10's guard
             there finds the other definition's row (DISPATCH). A call not carried is keyed at turn 1's index */
          k = ((carry >= 2 && tres[0] == C_NONE) -> KEY(0, defv) : KEY(1, defv));
#if defined(CARRY_DEPLOY_RUNS)
          /* the spec before: a stored request the new schema refuses matches nothing, and the call runs under turn 1's key */
          if :: k / M == 0 && carry - 2 != defv && !dcompat -> k = KEY(1, defv) :: else fi;
#elif defined(CARRY_DEPLOY_OWN_INDEX)
          /* a call matched across the deploy claimed at its own turn's index, not re-run at the listed call's */
          if :: k / M == 0 && carry - 2 != defv && dcompat -> k = KEY(1, defv) :: else fi;
#endif
#ifdef SLOT
          /* TURN-23's slot (pausedSlot): after a committed resumed turn 0 that answered the call, a second ask is dispatched
             at turn 0's index, at the ordinal after the one turn 0 answered when that key is the call's at ordinal 0 */
          if
          :: !plain && tres[0] != C_NONE && t0res ->
             k = (slot == KEY(0, defv) + 1 -> ORD1(defv) : KEY(0, defv))
          :: else -> slot = 0
          fi;
#endif
#elif defined(CARRY_ANSWERED)
          k = (carry == 2 -> KEY(0, 0) : KEY(1, 0));   /* carried although turn 0 answered it */
#else
          /* TURN-23: dispatched under the listed call's key while no committed turn answered it */
          k = ((carry == 2 && tres[0] == C_NONE) -> KEY(0, 0) : KEY(1, 0));
#endif
#ifdef SLOT
          if
          :: slot != 0 -> printf("@@ W%d   turn 1's call, a second ask after the resumed turn 0 answered the first under key %d (as this holder knows it): dispatched at turn 0's slot under key %d (TURN-23)\n", w, slot - 1, k)
          :: else ->
#endif
          if
          :: plain -> skip
          :: !plain && k / M == 0 && tres[0] == C_NONE -> printf("@@ W%d   turn 1's call is the call turn 0 left unanswered (listed under key %d): dispatched at turn 0's index under key %d (TURN-23)\n", w, carry - 2, k)
          :: !plain && k / M == 0 && tres[0] != C_NONE -> printf("@@ W%d   turn 1's call, a second ask (turn 0 answered the first), is carried under turn 0's key %d\n", w, k)
          :: !plain && k / M != 0 && tres[0] == C_NONE -> printf("@@ W%d   turn 1's call, made again: under turn 1's own key %d\n", w, k)
          :: !plain && k / M != 0 && tres[0] != C_NONE -> printf("@@ W%d   turn 1's call, a second ask (turn 0 answered the first): under its own key %d\n", w, k)
          fi
#ifdef SLOT
          fi
#endif
#endif
       fi;
       wk[w] = k + 1;
       if
       :: plain ->
          /* the model answers with plain text: message_stop, the commit (TURN-5) in this step, nothing to record */
#if TURNS3
          nturns++; tmsg[t] = cur + 1; tres[t] = C_NONE; tk[t] = 0; ms[cur] = (t < T - 1 -> MS_INPROG : MS_ANSWERED);
#else
          nturns++; tmsg[t] = cur + 1; tres[t] = C_NONE; tk[t] = 0; ms[cur] = MS_ANSWERED;
#endif
          printf("@@ W%d   turn %d: the model answers with plain text; commits turn %d answering message %d\n", w, t, t, cur)
       :: else
       fi;
#else
       if
       :: ms[cur] == MS_QUEUED ->
          ms[cur] = MS_INPROG; midx[cur] = nturns;
#if SAME_ASK
          /* TURN-11: bound at the index of a failed message, it takes that message's window start */
          if
          :: lastBound == 2 - cur && ms[1 - cur] == MS_FAILED && midx[1 - cur] == nturns && !inh[cur] ->
             inh[cur] = true;
             if
             :: INHERIT -> printf("@@ W%d   message %d is bound at failed message %d's index: boundAt inherited (TURN-11)\n", w, cur, 1 - cur)
             :: else -> printf("@@ W%d   message %d is bound at failed message %d's index: boundAt its own binding\n", w, cur, 1 - cur)
             fi
          :: else
          fi;
#endif
#if SAME_ASK && VSTORE
          /* P_FRESH's ghosts: the index's first message, and whether this binding issues it again */
          if
          :: ibound[nturns] == 0 -> ibound[nturns] = cur + 1
          :: ibound[nturns] != 0 && ibound[nturns] != cur + 1 && ms[ibound[nturns] - 1] != MS_FAILED -> reiss[cur] = true
          :: else
          fi;
#endif
          lastBound = cur + 1; VWROTE(0) VMINE(cur)
          printf("@@ W%d   binds message %d to turn %d (TURN-11)\n", w, cur, nturns)
       :: else ->
          resumed = true; VWROTE(0) VMINE(cur)   /* TURN-15: the store says the turn index was begun before */
          printf("@@ W%d   resumes message %d at its bound turn %d\n", w, cur, midx[cur])
       fi;
       t = nturns;
       assert(midx[cur] == t);                                /* P_MODEL: TURN-11, TURN-12 */
       k = KEY(t, CALLI(cur)); wk[w] = k + 1;
#endif
       att = 0; say = SAY_NONE; gone = false; mine = false;
#if AGING && BOUNDAT
       rcur[k] = false;   /* a new run of the message begins: its rows so far are older */
       if
       :: (resumed || !FIRST_RUN_EXEMPT) && PAST_AT_RESUME(cur) -> RESUMED_PAST_WINDOW()
       :: else
       fi
#endif
     };
#if AGING && BOUNDAT
     if
     :: past -> past = false
     :: else -> RUNTURN()
     fi;
#elif SOLO_TURNS
     if
     :: plain -> plain = false; wk[w] = 0
     :: else -> RUNTURN()
     fi;
#else
     RUNTURN();
#endif
     atomic {
       if
#if SOLO_TURNS
       /* turn 0 committed: the message goes on to turn 1 under the same lease */
       :: gone || (cur == m && SETTLED(m)) -> gone = false; resumed = false; cur = 0; t = 0; k = 0; goto dend
#else
       :: gone || cur == m -> gone = false; resumed = false; cur = 0; t = 0; k = 0; goto dend
#endif
       :: else -> resumed = false; cur = 0; t = 0; k = 0
       fi
     }
  od;
dend:
  skip
}

#if AGING && BOUNDAT
/* TURN-12: the runner that takes up a message in a resumed turn checks the window on the store's clock
 * before any attempt (from firstFailedAt for a message that failed, from boundAt for one that never
 * did); past it, it runs nothing and fails the message under its fence, with a record that carries
 * the earlier record's effects, or what the ledger lists at the index, and says that what an earlier
 * holder did is unknown (never not_happened), and goes on to the next queued message. */
inline RESUMED_PAST_WINDOW() {
  past = true;
  say = SAY_ROW(k);
  if :: say < SAY_MAY -> say = SAY_MAY :: else fi;
  if :: say > recd[k] -> recd[k] = say :: else fi;
#ifdef PAST_AT_BINDING
  /* a narrower repair of the window from the first failure: a message that never failed, failed here,
     counts its first failure from its binding (firstFailedAt = boundAt), whose window has passed */
  if
  :: nfail[cur] == 0 -> wpass[cur] = 2; if :: rpass[cur] > 0 -> rpass[cur] = 2 :: else fi
  :: else
  fi;
#endif
  ms[cur] = MS_FAILED; FAILED_AGAIN(cur);
  printf("@@ W%d   message %d: its re-send window has passed: runs nothing, fails it (past_resend_window, TURN-12)\n", w, cur);
  SAY_WORD(); TURN_DONE
}
#endif

#if TURNS3
/* Turn 1 or 2 of message 0 with -DTURNS3 (TURN-23, TURN-24): the carried call, the model's call, its key. */
/* TURN-23's listed call of turn 0 (the model's one call, under either definition's key) */
#define LISTED0(j) (recd[j] >= SAY_MAY)
/* a listed call under key j of turn 0: a record lists the key and a call was claimed under it (recd also holds a resumed
   record's statement of a key nothing claimed, RECORD-7, which names no call: not a key a record lists) */
#define LISTED_CALL0(j) (recd[j] >= SAY_MAY && rst[j] != R_NONE)
/* a committed turn before t answered the call: the model has seen it */
#define ANSWERED_BEFORE (tres[0] != C_NONE || (t == 2 && tres[1] != C_NONE))
inline TURN_LATER() {
  /* The holder that committed the turns before knows what they left carried (carry: the runner's carriedAfter); one that
     reads them back (a take-up, a re-send of a failed turn: carry not known here) finds turn 0's listed call in the records
     kept beside the conversation (a committed turn's record lists only the calls it does not answer, RECORD-8, as its
     holder knew them: tres[0]) and reads which listed call the committed turn 1 answered (the runner's carriedBefore) */
  if
  :: carry == 0 ->
     carry = (tres[0] != C_NONE -> 1 : (LISTED0(0) -> 2 : (LISTED0(1) -> 3 : 1)));
     if
     :: t == 2 && carry >= 2 ->
#ifdef REDERIVE_CARRY
        /* afterTurn before TURN-24: the key turn 1's committed call derives now, at the listed call's index under this
           holder's definition, compared with the listed keys */
        if
        :: tk[1] != 0 && LISTED_CALL0(KEY(0, defv)) -> carry = 1;
           printf("@@ W%d   reads back the committed turn 1: its call, keyed now at turn 0's index, derives key %d, a listed key: it answered the listed call\n", w, KEY(0, defv))
        :: tk[1] != 0 && !LISTED_CALL0(KEY(0, defv)) ->
           printf("@@ W%d   reads back the committed turn 1: its call, keyed now at turn 0's index, derives key %d, which no record lists (it ran under key %d): the listed call of key %d is taken for unanswered\n", w, KEY(0, defv), tk[1] - 1, carry - 2)
        :: else
        fi
#else
        /* TURN-24: the listed call under the key stored with the committed turn 1 is the one it answered, and no other */
        if
        :: tk[1] != 0 && (tk[1] - 1) / M == 0 && LISTED_CALL0(tk[1] - 1) -> carry = 1;
           printf("@@ W%d   reads back the committed turn 1: its call's stored key %d is a listed key: it answered the listed call (TURN-24)\n", w, tk[1] - 1)
        :: else
        fi
#endif
     :: t == 2 && carry < 2 ->
        /* turn 1's own call, which its record lists when the committed turn 1 does not answer it */
        carry = ((tres[1] == C_NONE && recd[KEY(1, 0)] >= SAY_MAY) -> 2 + KEY(1, 0) :
                 ((tres[1] == C_NONE && recd[KEY(1, 1)] >= SAY_MAY) -> 2 + KEY(1, 1) : 1))
     :: else
     fi;
     if
     :: carry >= 2 -> printf("@@ W%d   reads back the records and committed turns: key %d is carried (TURN-23)\n", w, carry - 2)
     :: else -> printf("@@ W%d   reads back the records and committed turns: nothing carried\n", w)
     fi
  :: else
  fi;
  /* no committed turn answered the call: the model, which never saw its effect, makes it again (the same ask); after one
     answered it, a first run of the turn makes it again (a further ask) or answers with plain text */
  if
  :: !ANSWERED_BEFORE || resumed
  :: ANSWERED_BEFORE && !resumed
  :: ANSWERED_BEFORE && !resumed -> plain = true
  fi;
  /* TURN-23 across a deploy: a carried call is dispatched at its listed index as a re-run, under its key there as this
     holder's definition derives it, through IDENT-10's guard there (DISPATCH); a call not carried is keyed at its own index */
  k = (carry >= 2 -> KEY((carry - 2) / M, defv) : KEY(t, defv));
  if
  :: plain -> skip
  :: !plain && k / M != t && !ANSWERED_BEFORE -> printf("@@ W%d   turn %d's call is the listed call of key %d: dispatched at turn %d's index under key %d (TURN-23)\n", w, t, carry - 2, k / M, k)
  :: !plain && k / M != t && ANSWERED_BEFORE -> printf("@@ W%d   turn %d's call, a further ask (a committed turn answered the call), is carried to the listed call of key %d: dispatched at turn %d's index under key %d\n", w, t, carry - 2, k / M, k)
  :: !plain && k / M == t && !ANSWERED_BEFORE -> printf("@@ W%d   turn %d's call, made again: under its own key %d\n", w, t, k)
  :: !plain && k / M == t && ANSWERED_BEFORE -> printf("@@ W%d   turn %d's call, a further ask (a committed turn answered the call): under its own key %d\n", w, t, k)
  fi
}
#endif

/* The store's append, in the same atomic step as the receipt of the delivery. */
inline APPEND() {
    /* TURN-2: idempotent on the message id; TURN-12: a failed message re-opens while nothing was bound since */
    if
    :: ms[m] == MS_NONE ->
       ms[m] = MS_QUEUED; order[narr] = m; narr++; VWROTE(0) VNEW(m) printf("@@ W%d   send(message %d): queued\n", w, m)
    :: ms[m] == MS_FAILED && lastBound == m + 1 && WINDOW_OPEN(m) ->
       ms[m] = MS_QUEUED; VWROTE(0) VMINE(m)
#if TOLDNOT
       tnot[KEY(midx[m], CALLI(m))] = false;   /* the user asks again: what the failure said is past */
#endif
       printf("@@ W%d   send(message %d): failed earlier, re-opened (TURN-12)\n", w, m)
    :: ms[m] == MS_FAILED && lastBound == m + 1 && !WINDOW_OPEN(m) ->
       /* TURN-12: past the re-send window (from the first failure): the stored failure, nothing runs */
       printf("@@ W%d   send(message %d): past its re-send window: the stored failure (past_resend_window, TURN-12)\n", w, m)
    :: else ->
       printf("@@ W%d   send(message %d): known\n", w, m)
    fi
}

inline SEND() {
  do
  :: atomic { ms[m] == MS_ANSWERED || ms[m] == MS_FAILED ->
       /* TURN-7: answered (or failed) already: read back from the store, nothing runs */
       printf("@@ W%d   send(message %d) returns what the store holds (TURN-7)\n", w, m);
       busy[w] = false; QUIET_CHECK; m = 0 };
     break
#if GRANTS
  :: atomic { (ms[m] == MS_QUEUED || ms[m] == MS_INPROG) && (lholder == 0 || !llive) ->
       /* TURN-10: the runner over a store with supports.leaseGrants acquires with a fresh grant id */
       ACQ_SEND() };
     do
     :: atomic { aq == AQ_UNAVAIL ->
          /* TURN-10: store_unavailable: the same acquire again, with the same grant id */
          printf("@@ W%d   sends its acquire again with grant id %d\n", w, wga[w]);
          ACQ_SEND() }
     :: atomic { aq == AQ_UNAVAIL && nfull(inbox) ->
          /* TURN-10: its re-send time is up: give the grant back by its grant id (releaseLeaseGrant),
             then raise store_unavailable; the send failed, so the queue delivers the message again */
#ifndef NO_GIVEBACK
          if
          :: lgrant == wga[w] && lholder != 0 ->
             lholder = 0; llive = false;
             printf("@@ W%d   gives up: releaseLeaseGrant(grant id %d) gives the lease (fence %d) back\n", w, wga[w], lfence)
          :: lgrant != wga[w] && !EARLIER(wga[w]) ->
#if !defined(NO_GIVEBACK_MARK) && !defined(LATEST_GRANT_ONLY)
             /* TURN-10: no grant carries the id (its acquire has not applied): the store keeps it as
                given back, with the earlier grants' ids, so a copy landing later is refused */
             gearlier = gearlier | (1 << wga[w]);
             printf("@@ W%d   gives up: releaseLeaseGrant(grant id %d) finds no grant: kept as given back\n", w, wga[w])
#else
             printf("@@ W%d   gives up: releaseLeaseGrant(grant id %d) finds no such grant holding the lease\n", w, wga[w])
#endif
          :: else -> printf("@@ W%d   gives up: releaseLeaseGrant(grant id %d) finds no such grant holding the lease\n", w, wga[w])
          fi;
#else
          printf("@@ W%d   gives up without giving grant id %d back\n", w, wga[w]);
#endif
          /* P_GRANT: no grant is left holding the lease under an id its acquirer stopped waiting for */
          assert(!P_GRANT || !(lgrant == wga[w] && LEASE_LIVE && !lknown));   /* P_GRANT */
          printf("@@ W%d   send(message %d) raises store_unavailable; the queue delivers it again\n", w, m);
          inbox ! m; busy[w] = false; wga[w] = 0; aq = 0; goto sdone }
     :: aq != AQ_UNAVAIL -> break
     od;
     if
     :: myf == 0 -> aq = 0   /* not acquired: wait for the lease again */
     :: else ->
     aq = 0;
#else
  :: atomic { (ms[m] == MS_QUEUED || ms[m] == MS_INPROG) && (lholder == 0 || !llive) ->
       /* TURN-10: one holder at a time, a higher fence with each grant; a sender that finds
          the lease held waits (the bound and conversation_busy + re-send are a longer wait) */
       fencectr++; lholder = w + 1; lfence = fencectr; llive = true; myf = fencectr;
       printf("@@ W%d   acquires the turn lease, fence %d\n", w, myf) };
#endif
     DRIVE();
     atomic {
       if
       :: lholder == w + 1 && lfence == myf -> lholder = 0; llive = false
       :: else
       fi;
       myf = 0;
#if SOLO_TURNS
       carry = 0;   /* the runner's carried map lives for one drive */
#endif
       if
       :: ms[m] == MS_ANSWERED || ms[m] == MS_FAILED ->
          printf("@@ W%d   send(message %d) returns\n", w, m); busy[w] = false; QUIET_CHECK; m = 0; break
       :: else
       fi
     }
#if GRANTS
     fi
#endif
  od;
#if GRANTS
sdone:
  skip
#endif
}

#else /* OLD_TURN: the turn-1 runner and store */

inline APPEND() {
    /* the user message goes straight into the log (pending) */
    if
    :: ms[m] == MS_NONE -> ms[m] = MS_QUEUED; order[narr] = m; narr++; printf("@@ W%d   send(message %d): appended to the log\n", w, m)
    :: else -> printf("@@ W%d   send(message %d): known\n", w, m)
    fi;
    turns = 0
}

inline SEND() {
  do
  :: atomic { ms[m] == MS_ANSWERED -> printf("@@ W%d   send(message %d): answered\n", w, m); busy[w] = false; QUIET_CHECK }; break
  :: atomic { ms[m] != MS_ANSWERED && turns < MAXTURNS ->
       turns++;
       /* turn-1 TURN-1: the index is the committed count, read when the turn starts */
       t = nturns;
       /* the model answers a user message of its input that has no answer yet */
       cur = NOMSG;
       if
       :: ms[0] == MS_QUEUED -> cur = 0
       :: ms[1] == MS_QUEUED -> cur = 1
       :: else
       fi;
       if
       :: cur != NOMSG -> k = KEY(t, cur); wk[w] = k + 1;
          att = 0; say = SAY_NONE; gone = false; mine = false;
          printf("@@ W%d   reads %d committed turns: turn %d; the model answers message %d\n", w, t, t, cur)
       :: else
       fi };
     if
     :: atomic { cur == NOMSG -> busy[w] = false; QUIET_CHECK }; break
     :: else -> RUNTURN()
     fi
  :: atomic { ms[m] != MS_ANSWERED && turns >= MAXTURNS -> busy[w] = false; QUIET_CHECK }; break
  od
}

#endif
