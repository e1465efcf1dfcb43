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
  reason           text                -- unknown: why, e.g. lease_expired
);

-- sweep() walks this index; in-flight rows (expires_at NULL) are not in it.
CREATE INDEX IF NOT EXISTS "dispatch_once_ledger_expires_at"
  ON "public"."dispatch_once_ledger" (expires_at) WHERE expires_at IS NOT NULL;
