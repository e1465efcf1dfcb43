-- Dispatch-Once ledger, row format v1 (@dispatch-once/ledger-postgres).
-- Times are epoch milliseconds on the SERVER clock; results are JSON text (never jsonb:
-- replays must return the stored bytes, and jsonb re-serialises).
CREATE SCHEMA IF NOT EXISTS "public";

CREATE TABLE IF NOT EXISTS "public"."dispatch_once_ledger" (
  -- fixed-width columns first, so no alignment padding is spent between them
  fence            bigint   NOT NULL,  -- fencing token of the latest claim; +1 on every claim
  claimed_at       bigint   NOT NULL,  -- when the current fence was claimed
  lease_expires_at bigint,             -- in_flight only: after this, the claim may be acted on
  finished_at      bigint,             -- completed, failed, unknown, released
  expires_at       bigint,             -- finished_at + retention: sweep() deletes after this
  v                smallint NOT NULL,  -- row format version; any other value reads as corrupt
  takeover         boolean  NOT NULL DEFAULT false,  -- current fence took over an expired claim
  key              text COLLATE "C" NOT NULL PRIMARY KEY,
  state            text     NOT NULL,  -- in_flight | completed | failed | unknown | released
  tool_name        text     NOT NULL,
  effect           text     NOT NULL,  -- keyed_write | unkeyed_write
  owner            text,               -- who holds / held the claim (diagnostics only)
  result           text,               -- completed: the result's JSON text, byte for byte
  error            text,               -- failed: the StoredError as JSON text
  reason           text,               -- unknown: why, e.g. lease_expired
  request          text,               -- the first claim's request, byte for byte (LEDGER-21)
  claim_id         text                -- the claim id of the row's claim, if it gave one (LEDGER-26); a released row refuses it (LEDGER-27); last, as when added
);

-- A table created before the request column gets it here (last, as in a new table). It is
-- nullable only so that it can be added to a table with rows: every row the ledger writes
-- has one, and a row without one (an older version's) reads as ledger_corrupt. Checked
-- first because ALTER TABLE takes an ACCESS EXCLUSIVE lock even when the column exists,
-- and claims would queue behind it on every migrate().
DO $add_request$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_attribute
                  WHERE attrelid = '"public"."dispatch_once_ledger"'::regclass AND attname = 'request' AND NOT attisdropped) THEN
    ALTER TABLE "public"."dispatch_once_ledger" ADD COLUMN request text;
  END IF;
END
$add_request$;

-- The claim id column (LEDGER-26), added to a table created before it, the same way.
DO $add_claim_id$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_attribute
                  WHERE attrelid = '"public"."dispatch_once_ledger"'::regclass AND attname = 'claim_id' AND NOT attisdropped) THEN
    ALTER TABLE "public"."dispatch_once_ledger" ADD COLUMN claim_id text;
  END IF;
END
$add_claim_id$;

-- The conversation columns (LIST-3), added to a table created before them, the same way.
DO $add_conversation$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_attribute
                  WHERE attrelid = '"public"."dispatch_once_ledger"'::regclass AND attname = 'conversation_id' AND NOT attisdropped) THEN
    ALTER TABLE "public"."dispatch_once_ledger" ADD COLUMN conversation_id text COLLATE "C", ADD COLUMN turn_index bigint;
  END IF;
END
$add_conversation$;

-- listRows() reads these (LIST-6): by state, by tool and by conversation, each in the listing's
-- order (the last transition: finish sets finished_at, a claim clears it; then the key), so a
-- filtered page is one index range, never a scan. Their price: three index writes per claim and
-- per finish (finishing is not a HOT update anyway, see the in-flight index).
CREATE INDEX IF NOT EXISTS "dispatch_once_ledger_lst_state"
  ON "public"."dispatch_once_ledger" (state, (coalesce(finished_at, claimed_at)), key);
CREATE INDEX IF NOT EXISTS "dispatch_once_ledger_lst_tool"
  ON "public"."dispatch_once_ledger" (tool_name, (coalesce(finished_at, claimed_at)), key);
CREATE INDEX IF NOT EXISTS "dispatch_once_ledger_lst_conv"
  ON "public"."dispatch_once_ledger" (conversation_id, (coalesce(finished_at, claimed_at)), key) WHERE conversation_id IS NOT NULL;

-- The audit trail (RESOLVE-7): one row per audited transition, read by key in order; sweep()
-- deletes a key's entries with its row.
CREATE TABLE IF NOT EXISTS "public"."dispatch_once_ledger_audit" (
  id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  at         bigint NOT NULL,
  fence      bigint NOT NULL,
  key        text COLLATE "C" NOT NULL,
  actor      text NOT NULL,
  action     text NOT NULL,
  from_state text NOT NULL,
  to_state   text NOT NULL,
  reason     text NOT NULL,
  outcome    text
);
CREATE INDEX IF NOT EXISTS "dispatch_once_ledger_audit_key"
  ON "public"."dispatch_once_ledger_audit" (key, id);

-- Retired claim ids (LEDGER-28): a claim carrying one is refused until retired_until (server
-- clock), whether the key has a row or not. Written only by retire() (rare: a dispatch whose
-- claim met ledger_unavailable); a claim with a claim id reads it by primary key, one without
-- never reads it. Not rows: sweep() forgets entries past retired_until without counting them.
CREATE TABLE IF NOT EXISTS "public"."dispatch_once_ledger_retired" (
  retired_until bigint NOT NULL,  -- retire time + retention: refused until then, then forgotten
  key           text COLLATE "C" NOT NULL,
  claim_id      text COLLATE "C" NOT NULL,
  PRIMARY KEY (key, claim_id)
);
CREATE INDEX IF NOT EXISTS "dispatch_once_ledger_rt_until"
  ON "public"."dispatch_once_ledger_retired" (retired_until);

-- sweep() walks this index oldest first. It is on claimed_at, which finishing a call does
-- not change; an index on expires_at would cost every finish one more index insert.
CREATE INDEX IF NOT EXISTS "dispatch_once_ledger_claimed_at"
  ON "public"."dispatch_once_ledger" (claimed_at);

-- listExpiredInFlight() reads this index: only in-flight rows are in it (the calls running now,
-- plus any expired claim nobody came back for), so it stays small and the listing never scans
-- finished rows. Its price: finishing a call changes the state, which this index's predicate reads,
-- so complete/fail/release/markUnknown (and renew) are no longer HOT updates (see the README).
CREATE INDEX IF NOT EXISTS "dispatch_once_ledger_in_flight"
  ON "public"."dispatch_once_ledger" (lease_expires_at) WHERE state = 'in_flight';

-- claim(): the whole claim rule in one round trip (see the package README). The previous
-- version's function (six arguments) wrote rows without a request: it goes.
DROP FUNCTION IF EXISTS "public"."dispatch_once_ledger_claim"(text, text, text, text, bigint, bigint);
CREATE OR REPLACE FUNCTION "public"."dispatch_once_ledger_is_retired"(p_key text, p_claim_id text, p_now_ms bigint)
RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $is_retired$
BEGIN
  RETURN EXISTS (SELECT 1 FROM "public"."dispatch_once_ledger_retired" AS d
                  WHERE d.key = p_key AND d.claim_id = p_claim_id AND d.retired_until > p_now_ms);
END
$is_retired$;
CREATE OR REPLACE FUNCTION "public"."dispatch_once_ledger_claim"(
  p_key text, p_tool_name text, p_effect text, p_owner text, p_lease_ms bigint, p_retention_ms bigint,
  p_request text, p_claim_id text, p_conversation_id text, p_turn_index bigint)
RETURNS text
LANGUAGE plpgsql VOLATILE AS $claim$
#variable_conflict use_column
DECLARE
  now_ms bigint;
  claimed_fence bigint;
  claimed_lease bigint;
  claimed_takeover boolean;
  claimed_request text;
  is_claimable boolean;
  is_own boolean;
  is_released boolean;
  is_forgotten boolean;
  is_retired boolean;
  held text;
BEGIN
  -- Inside a transaction that has written, a rollback would undo the claim after the tool
  -- ran: refuse before writing, and leave the caller's transaction as it was.
  IF pg_current_xact_id_if_assigned() IS NOT NULL THEN
    RETURN 't';
  END IF;
  FOR attempt IN 1..100 LOOP
    now_ms := floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint;

    INSERT INTO "public"."dispatch_once_ledger" AS r (key, v, state, tool_name, effect, fence, takeover, owner, claim_id, claimed_at, lease_expires_at, request, conversation_id, turn_index)
      VALUES (p_key, 1, 'in_flight', p_tool_name, p_effect, 1, false, p_owner, p_claim_id, now_ms, now_ms + p_lease_ms, p_request, p_conversation_id, p_turn_index)
      ON CONFLICT (key) DO NOTHING
      RETURNING r.lease_expires_at INTO claimed_lease;
    IF FOUND THEN
      -- A retired claim id creates nothing either (LEDGER-28). Looked up after the INSERT: a
      -- retire running meanwhile held the key, so the INSERT waited for its commit and this sees it.
      -- (A claim without a claim id tests one variable, a simple expression: no query.)
      IF p_claim_id IS NOT NULL THEN
        IF (p_claim_id IS NOT NULL AND EXISTS (SELECT 1 FROM "public"."dispatch_once_ledger_retired" AS d WHERE d.key = p_key AND d.claim_id = p_claim_id AND d.retired_until > now_ms)) THEN
          DELETE FROM "public"."dispatch_once_ledger" AS r WHERE r.key = p_key;  -- our own INSERT: undone, nothing changed
          RETURN 'r0';
        END IF;
      END IF;
      RETURN 'c1 ' || claimed_lease || ' 0';  -- the stored request is the caller's own: not sent back
    END IF;

    -- The key exists (and, if a racer was inserting it, that racer has committed: the INSERT
    -- waited for it). Read it with a fresh snapshot, without locking or writing.
    SELECT (r.v = 1 AND r.request IS NOT NULL AND (
             r.state = 'released'
          OR (r.state IN ('completed', 'failed', 'unknown') AND r.expires_at <= now_ms)
          OR (r.state = 'in_flight' AND r.effect IN ('keyed_write', 'unkeyed_write')
              AND r.lease_expires_at <= now_ms))), CASE WHEN (r.v = 1 AND r.request IS NOT NULL AND (
             r.state = 'released'
          OR (r.state IN ('completed', 'failed', 'unknown') AND r.expires_at <= now_ms)
          OR (r.state = 'in_flight' AND r.effect IN ('keyed_write', 'unkeyed_write')
              AND r.lease_expires_at <= now_ms))) IS TRUE THEN NULL ELSE to_json(r)::text END, (p_claim_id IS NOT NULL AND r.v = 1 AND r.request IS NOT NULL AND r.state = 'in_flight' AND r.claim_id IS NOT DISTINCT FROM p_claim_id), (p_claim_id IS NOT NULL AND r.v = 1 AND r.state = 'released' AND r.expires_at > now_ms AND r.claim_id IS NOT DISTINCT FROM p_claim_id), r.fence,
           r.state <> 'in_flight' AND r.expires_at <= now_ms, (p_claim_id IS NOT NULL AND EXISTS (SELECT 1 FROM "public"."dispatch_once_ledger_retired" AS d WHERE d.key = p_key AND d.claim_id = p_claim_id AND d.retired_until > now_ms))
      INTO is_claimable, held, is_own, is_released, claimed_fence, is_forgotten, is_retired
      FROM "public"."dispatch_once_ledger" AS r WHERE r.key = p_key;
    IF NOT FOUND THEN
      CONTINUE;  -- swept since the INSERT: try the INSERT again
    END IF;
    IF is_retired THEN
      -- A late copy of a claim its dispatch gave up on: whatever the row, before LEDGER-26 (LEDGER-28).
      RETURN 'r' || CASE WHEN is_forgotten IS TRUE THEN 0 ELSE claimed_fence END;
    END IF;
    IF is_released THEN
      RETURN 's' || claimed_fence;  -- a late copy of a released claim: it must not take the row again
    END IF;
    IF is_own THEN
      -- The same claim sent again (its reply was lost): it holds the row, live or expired, with
      -- its fence; the lease restarts from now (LEDGER-26). Re-checked under the row lock.
      UPDATE "public"."dispatch_once_ledger" AS r SET lease_expires_at = now_ms + p_lease_ms
        WHERE r.key = p_key AND (p_claim_id IS NOT NULL AND r.v = 1 AND r.request IS NOT NULL AND r.state = 'in_flight' AND r.claim_id IS NOT DISTINCT FROM p_claim_id) AND (p_claim_id IS NULL OR NOT "public"."dispatch_once_ledger_is_retired"(p_key, p_claim_id, now_ms))
        RETURNING r.fence, r.lease_expires_at, r.request INTO claimed_fence, claimed_lease, claimed_request;
      IF FOUND THEN
        RETURN 'c' || claimed_fence || ' ' || claimed_lease || ' 0 ' || claimed_request;
      END IF;
      CONTINUE;  -- acted on meanwhile (finished, taken over): look again
    END IF;
    IF is_claimable IS NOT TRUE THEN
      RETURN 'e' || held;  -- live in-flight, terminal within retention, or corrupt
    END IF;

    UPDATE "public"."dispatch_once_ledger" AS r SET
        state            = CASE WHEN r.state = 'in_flight' AND r.effect = 'unkeyed_write' THEN 'unknown' ELSE 'in_flight' END,
        tool_name        = CASE WHEN r.state = 'in_flight' AND r.effect = 'unkeyed_write' THEN r.tool_name ELSE p_tool_name END,
        effect           = CASE WHEN r.state = 'in_flight' AND r.effect = 'unkeyed_write' THEN r.effect ELSE p_effect END,
        fence            = CASE WHEN r.state = 'in_flight' AND r.effect = 'unkeyed_write' THEN r.fence ELSE r.fence + 1 END,
        takeover         = CASE WHEN r.state = 'in_flight' AND r.effect = 'unkeyed_write' THEN r.takeover ELSE r.state = 'in_flight' END,
        owner            = CASE WHEN r.state = 'in_flight' AND r.effect = 'unkeyed_write' THEN r.owner ELSE p_owner END,
        claim_id         = CASE WHEN r.state = 'in_flight' AND r.effect = 'unkeyed_write' THEN r.claim_id ELSE p_claim_id END,
        claimed_at       = CASE WHEN r.state = 'in_flight' AND r.effect = 'unkeyed_write' THEN r.claimed_at ELSE now_ms END,
        lease_expires_at = CASE WHEN r.state = 'in_flight' AND r.effect = 'unkeyed_write' THEN NULL ELSE now_ms + p_lease_ms END,
        finished_at      = CASE WHEN r.state = 'in_flight' AND r.effect = 'unkeyed_write' THEN now_ms END,
        expires_at       = CASE WHEN r.state = 'in_flight' AND r.effect = 'unkeyed_write' THEN now_ms + p_retention_ms END,
        reason           = CASE WHEN r.state = 'in_flight' AND r.effect = 'unkeyed_write' THEN 'lease_expired' END,
        -- kept by a re-claim, a takeover and the expiry to unknown; a row past retention
        -- (released ones too) is forgotten, so its claim stores the claimant's request (LEDGER-21)
        request          = CASE WHEN r.state <> 'in_flight' AND r.expires_at <= now_ms THEN p_request ELSE r.request END,
        -- the conversation and turn go with the request (LIST-3)
        conversation_id  = CASE WHEN r.state <> 'in_flight' AND r.expires_at <= now_ms THEN p_conversation_id ELSE r.conversation_id END,
        turn_index       = CASE WHEN r.state <> 'in_flight' AND r.expires_at <= now_ms THEN p_turn_index ELSE r.turn_index END,
        result           = NULL,
        error            = NULL
      WHERE r.key = p_key AND (r.v = 1 AND r.request IS NOT NULL AND (
             r.state = 'released'
          OR (r.state IN ('completed', 'failed', 'unknown') AND r.expires_at <= now_ms)
          OR (r.state = 'in_flight' AND r.effect IN ('keyed_write', 'unkeyed_write')
              AND r.lease_expires_at <= now_ms))) AND (p_claim_id IS NULL OR NOT "public"."dispatch_once_ledger_is_retired"(p_key, p_claim_id, now_ms))
      RETURNING r.fence, r.lease_expires_at, r.takeover, r.request,
                CASE WHEN r.state = 'in_flight' THEN NULL ELSE to_json(r)::text END
        INTO claimed_fence, claimed_lease, claimed_takeover, claimed_request, held;
    IF FOUND THEN
      IF held IS NOT NULL THEN
        -- An expired unkeyed_write claim, now unknown: audited with the transition (RESOLVE-7).
        INSERT INTO "public"."dispatch_once_ledger_audit" (key, at, actor, action, from_state, to_state, fence, reason)
          VALUES (p_key, now_ms, p_owner, 'lease_expired', 'in_flight', 'unknown', claimed_fence, 'lease_expired');
        RETURN 'e' || held;
      END IF;
      IF is_forgotten THEN
        DELETE FROM "public"."dispatch_once_ledger_audit" WHERE key = p_key;  -- a forgotten row's trail goes with it (LEDGER-19)
      END IF;
      RETURN 'c' || claimed_fence || ' ' || claimed_lease || CASE WHEN claimed_takeover THEN ' 1 ' ELSE ' 0 ' END
        || claimed_request;
    END IF;
    -- A racer acted on the claimable row first (the UPDATE re-checked and found it live): look again.
  END LOOP;
  RAISE EXCEPTION 'claim of % lost 100 races in a row', p_key USING ERRCODE = '40001';
END
$claim$;

-- retire(): LEDGER-28 in one round trip (see the package README).
CREATE OR REPLACE FUNCTION "public"."dispatch_once_ledger_retire"(p_key text, p_claim_id text, p_release boolean, p_retention_ms bigint)
RETURNS text
LANGUAGE plpgsql VOLATILE AS $retire$
#variable_conflict use_column
DECLARE
  now_ms bigint := floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint;
  held text;
BEGIN
  -- As the claim: inside a transaction that has written, a rollback would undo the retire.
  IF pg_current_xact_id_if_assigned() IS NOT NULL THEN
    RETURN 't';
  END IF;
  -- Retired for the retention from now; retiring again never shortens it.
  INSERT INTO "public"."dispatch_once_ledger_retired" AS d (retired_until, key, claim_id)
    VALUES (now_ms + p_retention_ms, p_key, p_claim_id)
    ON CONFLICT (key, claim_id) DO UPDATE SET retired_until = greatest(d.retired_until, excluded.retired_until);
  -- Hold the key (see above). A row of another format version is locked, never written.
  INSERT INTO "public"."dispatch_once_ledger" AS r (key, v, state, tool_name, effect, fence, claimed_at)
    VALUES (p_key, 0, 'retiring', '', '', 0, now_ms)
    ON CONFLICT (key) DO UPDATE SET fence = r.fence WHERE r.v = 1
    RETURNING r.state INTO held;
  IF held = 'retiring' THEN
    DELETE FROM "public"."dispatch_once_ledger" AS r WHERE r.key = p_key;  -- the placeholder: the key had no row
    RETURN '0';
  END IF;
  IF p_release THEN
    -- In flight under this claim id, lease live or expired: released as release(fence) would.
    UPDATE "public"."dispatch_once_ledger" AS r SET state = 'released', lease_expires_at = NULL, finished_at = now_ms, expires_at = now_ms + p_retention_ms
      WHERE r.key = p_key AND r.v = 1 AND r.state = 'in_flight' AND r.claim_id = p_claim_id;
    IF FOUND THEN
      RETURN '1';
    END IF;
  END IF;
  RETURN '0';
END
$retire$;

-- The previous versions' claims stay callable while processes of those versions still run, as
-- this claim without what they did not send: eight arguments (no conversation, before issue 15)
-- and seven (no claim id either). The rule is the new one (a re-claim clears the row's claim id,
-- so an old process's claim is never taken for a new process's).
DROP FUNCTION IF EXISTS "public"."dispatch_once_ledger_claim"(text, text, text, text, bigint, bigint, text, text);
CREATE FUNCTION "public"."dispatch_once_ledger_claim"(
  p_key text, p_tool_name text, p_effect text, p_owner text, p_lease_ms bigint, p_retention_ms bigint, p_request text, p_claim_id text)
RETURNS text LANGUAGE sql VOLATILE AS $claim8$
  SELECT "public"."dispatch_once_ledger_claim"(p_key, p_tool_name, p_effect, p_owner, p_lease_ms, p_retention_ms, p_request, p_claim_id, NULL::text, NULL::bigint)
$claim8$;
CREATE OR REPLACE FUNCTION "public"."dispatch_once_ledger_claim"(
  p_key text, p_tool_name text, p_effect text, p_owner text, p_lease_ms bigint, p_retention_ms bigint, p_request text)
RETURNS text LANGUAGE sql VOLATILE AS $claim7$
  SELECT "public"."dispatch_once_ledger_claim"(p_key, p_tool_name, p_effect, p_owner, p_lease_ms, p_retention_ms, p_request, NULL::text, NULL::text, NULL::bigint)
$claim7$;
