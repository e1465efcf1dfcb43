"""Independent reference ledger (spec §6): the claim rule and the owner transitions, one key at a time.

Python 3 standard library only; it shares no code with packages/core's MemoryLedger. The two
are checked against each other through spec/vectors/ledger-transitions.json
(python3 spec/reference/test_vectors.py, node --import tsx spec/reference/crosscheck_ts.mjs).
Time is an injected clock in milliseconds, so the vectors' hooks can move it.
"""

from __future__ import annotations

import copy
import re

__all__ = ["LedgerError", "ReferenceLedger", "CLAIM_ID_PATTERN", "DEFAULT_RETENTION_MS"]

# LEDGER-26: 16 to 64 characters from [A-Za-z0-9_-]; re.fullmatch, so a trailing "\n" is refused.
CLAIM_ID_PATTERN = re.compile(r"[A-Za-z0-9_-]{16,64}")
DEFAULT_RETENTION_MS = 24 * 60 * 60 * 1000  # LEDGER-13
EFFECTS = ("keyed_write", "unkeyed_write")


class LedgerError(Exception):
    """A refusal with its catalogue code: stale_claim, result_not_storable, invalid_ledger_input."""

    def __init__(self, code: str, message: str):
        super().__init__(f"{code}: {message}")
        self.code = code


class ReferenceLedger:
    """Rows are dicts with the fields a lookup returns, plus expires_at and claim_id (never shown)."""

    def __init__(self, now, max_result_bytes: int = 1_048_576, retention_ms: int = DEFAULT_RETENTION_MS):
        self.now = now
        self.max_result_bytes = max_result_bytes
        self.retention_ms = retention_ms
        self.rows: dict[str, dict] = {}
        # Retired claim ids per key, each with the time it may be forgotten (LEDGER-28); not rows.
        self.retired: dict[str, dict[str, int]] = {}

    # ---------------------------------------------------------------- claim (LEDGER-1, -6, -7, -18, -21, -26)

    def claim(self, key: str, effect: str, owner: str, lease_ms: int, request: str, claim_id: str | None = None) -> dict:
        if claim_id is not None and (not isinstance(claim_id, str) or not CLAIM_ID_PATTERN.fullmatch(claim_id)):
            raise LedgerError("invalid_ledger_input", f"claimId {claim_id!r} does not match {CLAIM_ID_PATTERN.pattern}")
        if effect not in EFFECTS:
            raise LedgerError("invalid_ledger_input", f"effect {effect!r}")
        now = self.now()
        row = self._live(key, now)
        # A late copy of a claim its dispatch gave up on changes nothing, row or not, before LEDGER-26 (LEDGER-28).
        if claim_id is not None and self.retired.get(key, {}).get(claim_id, now) > now:
            raise LedgerError("stale_claim", f"{key}: claim id {claim_id} was retired")
        if row is None:
            # Absent or past retention (LEDGER-19): a fresh row with the claimant's request; fences keep rising.
            old = self.rows.get(key)
            return self._take(key, effect, owner, lease_ms, request, claim_id, (old["fence"] if old else 0) + 1, False, now)
        if row["state"] == "released":
            # A late copy of the claim this row was released under is refused (proposed LEDGER-27).
            if claim_id is not None and row.get("claim_id") == claim_id:
                raise LedgerError("stale_claim", f"{key}: claim id {claim_id} was released")
            return self._take(key, effect, owner, lease_ms, row["request"], claim_id, row["fence"] + 1, False, now)
        if row["state"] != "in_flight":
            return {"outcome": "existing", "row": self._visible(row)}
        # The same claim sent again, its reply lost: same fence, not a takeover, lease from now (LEDGER-26).
        if claim_id is not None and row.get("claim_id") == claim_id:
            row["leaseExpiresAt"] = now + lease_ms
            return {"outcome": "claimed", "fence": row["fence"], "takeover": False, "request": row["request"]}
        if row["leaseExpiresAt"] > now:
            return {"outcome": "existing", "row": self._visible(row)}
        # Expired: the row's effect class decides (LEDGER-7, LEDGER-18), never the claimant's.
        if row["effect"] == "keyed_write":
            return self._take(key, row["effect"], owner, lease_ms, row["request"], claim_id, row["fence"] + 1, True, now)
        self._finish(row, "unknown", now, reason="lease_expired")
        return {"outcome": "existing", "row": self._visible(row)}

    # ---------------------------------------------------------------- owner transitions (LEDGER-3, -5, -8, -9, -10)

    def renew(self, key: str, fence: int, lease_ms: int) -> None:
        row = self._owned(key, fence)
        row["leaseExpiresAt"] = self.now() + lease_ms

    def complete(self, key: str, fence: int, result: str) -> None:
        row = self._owned(key, fence)
        if len(result.encode("utf-8")) > self.max_result_bytes:
            # LEDGER-10: refused, and the claim stays held for the owner to record the failure.
            raise LedgerError("result_not_storable", f"{key}: result over {self.max_result_bytes} bytes")
        self._finish(row, "completed", self.now(), result=result)

    def fail(self, key: str, fence: int, error: dict) -> None:
        self._finish(self._owned(key, fence), "failed", self.now(), error=copy.deepcopy(error))

    def mark_unknown(self, key: str, fence: int, reason: str) -> None:
        self._finish(self._owned(key, fence), "unknown", self.now(), reason=reason)

    def release(self, key: str, fence: int) -> None:
        # The released row keeps its claim id (proposed LEDGER-27); every other finish drops it.
        row = self._owned(key, fence)
        kept = row.get("claim_id")
        self._finish(row, "released", self.now())
        if kept is not None:
            row["claim_id"] = kept

    def retire(self, key, claim_id, options=None) -> dict:
        """LEDGER-28: refuse claim_id for the key for the retention from now; with release, release its in-flight row."""
        if not isinstance(key, str) or key == "":
            raise LedgerError("invalid_ledger_input", "key must be a non-empty string")
        if not isinstance(claim_id, str) or not CLAIM_ID_PATTERN.fullmatch(claim_id):
            raise LedgerError("invalid_ledger_input", f"claimId {claim_id!r} does not match {CLAIM_ID_PATTERN.pattern}")
        release = False
        if options is not None:
            if not isinstance(options, dict):
                raise LedgerError("invalid_ledger_input", "options must be an object")
            release = options.get("release", False)
            if not isinstance(release, bool):
                raise LedgerError("invalid_ledger_input", f"release {release!r} is not a boolean")
        now = self.now()
        self.retired.setdefault(key, {})[claim_id] = now + self.retention_ms
        row = self._live(key, now)
        if not release or row is None or row["state"] != "in_flight" or row.get("claim_id") != claim_id:
            return {"released": False}
        # Expired lease or live: the dispatch never took the claim, so nobody ran the tool under it (LEDGER-8).
        self._finish(row, "released", now)
        row["claim_id"] = claim_id
        return {"released": True}

    # ---------------------------------------------------------------- reads and retention (LEDGER-13, -17, -19)

    def lookup(self, key: str) -> dict | None:
        row = self._live(key, self.now())
        return None if row is None else self._visible(row)

    def sweep(self) -> int:
        now = self.now()
        for k in list(self.retired):
            self.retired[k] = {cid: until for cid, until in self.retired[k].items() if until > now}
            if not self.retired[k]:
                del self.retired[k]
        doomed = [k for k, row in self.rows.items() if self._retention_passed(row, now)]
        for k in doomed:
            del self.rows[k]
        return len(doomed)

    # ---------------------------------------------------------------- internals

    def _live(self, key: str, now: int) -> dict | None:
        row = self.rows.get(key)
        return None if row is None or self._retention_passed(row, now) else row

    @staticmethod
    def _retention_passed(row: dict, now: int) -> bool:
        return row["state"] != "in_flight" and row["expires_at"] <= now

    def _take(self, key, effect, owner, lease_ms, request, claim_id, fence, takeover, now) -> dict:
        self.rows[key] = {
            "state": "in_flight", "fence": fence, "effect": effect, "owner": owner, "claimedAt": now,
            "leaseExpiresAt": now + lease_ms, "request": request, "claim_id": claim_id,
        }
        return {"outcome": "claimed", "fence": fence, "takeover": takeover, "request": request}

    def _owned(self, key: str, fence: int) -> dict:
        row = self.rows.get(key)
        if row is None or row["state"] != "in_flight" or row["fence"] != fence:
            raise LedgerError("stale_claim", f"{key}: fence {fence} does not hold the row")
        return row

    def _finish(self, row: dict, state: str, now: int, **fields) -> None:
        for gone in ("owner", "leaseExpiresAt", "claim_id"):
            row.pop(gone, None)
        row.update(state=state, finishedAt=now, expires_at=now + self.retention_ms, **fields)

    @staticmethod
    def _visible(row: dict) -> dict:
        return {k: copy.deepcopy(v) for k, v in row.items() if k not in ("expires_at", "claim_id")}
