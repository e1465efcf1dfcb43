"""Independent reference ledger (spec §6): the claim rule, the owner transitions and the operator's resolve (§6.12), one key at a time.

Python 3 standard library only; it shares no code with packages/core's MemoryLedger. The two
are checked against each other through spec/vectors/ledger-transitions.json
(python3 spec/reference/test_vectors.py, node --import tsx spec/reference/crosscheck_ts.mjs).
Time is an injected clock in milliseconds, so the vectors' hooks can move it.
"""

from __future__ import annotations

import copy
import json
import re

__all__ = ["LedgerError", "ReferenceLedger", "CLAIM_ID_PATTERN", "DEFAULT_RETENTION_MS"]

# LEDGER-26: 16 to 64 characters from [A-Za-z0-9_-]; re.fullmatch, so a trailing "\n" is refused.
CLAIM_ID_PATTERN = re.compile(r"[A-Za-z0-9_-]{16,64}")
DEFAULT_RETENTION_MS = 24 * 60 * 60 * 1000  # LEDGER-13
EFFECTS = ("keyed_write", "unkeyed_write")


class LedgerError(Exception):
    """A refusal with its catalogue code: stale_claim, result_not_storable, invalid_ledger_input,
    resolution_refused; `details` are the error's members (field, key, state)."""

    def __init__(self, code: str, message: str, **details):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.details = details


class ReferenceLedger:
    """Rows are dicts with the fields a lookup returns, plus expires_at and claim_id (never shown)."""

    def __init__(self, now, max_result_bytes: int = 1_048_576, retention_ms: int = DEFAULT_RETENTION_MS):
        self.now = now
        self.max_result_bytes = max_result_bytes
        self.retention_ms = retention_ms
        self.rows: dict[str, dict] = {}
        # Retired claim ids per key, each with the time it may be forgotten (LEDGER-28); not rows.
        self.retired: dict[str, dict[str, int]] = {}
        # Audit entries per key, oldest first (RESOLVE-7); dropped with the row.
        self.audits: dict[str, list[dict]] = {}

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
            self.audits.pop(key, None)
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
        self._audit(key, now, owner, "lease_expired", row["fence"], "lease_expired")
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
        row = self._owned(key, fence)
        owner, now = row["owner"], self.now()
        self._finish(row, "unknown", now, reason=reason)
        self._audit(key, now, owner, "marked_unknown", fence, reason)

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

    # ---------------------------------------------------------------- operator resolution (RESOLVE-1 to RESOLVE-5)

    def resolve(self, request) -> dict:
        """resolve({key, resolution, actor, reason, expectedFence?, action?}), the request as given; returns the row written."""
        _check_resolve_request(request)
        key, resolution = request["key"], request["resolution"]
        outcome = resolution["outcome"]
        # RESOLVE-3, LEDGER-10: a result the ledger can never store is the request's fault, found without a row.
        if outcome == "completed" and len(resolution["result"].encode("utf-8")) > self.max_result_bytes:
            raise LedgerError("result_not_storable", f"{key}: result over {self.max_result_bytes} bytes")
        now = self.now()
        row = self._live(key, now)
        if row is None:
            raise LedgerError("resolution_refused", f"{key}: no row", key=key, state="absent")
        expected = request.get("expectedFence")
        # RESOLVE-4 before RESOLVE-2: the operator decided on a view that is no longer current, whatever the state.
        if expected is not None and row["fence"] != expected:
            raise LedgerError("stale_claim", f"{key}: the row's fence is {row['fence']}, not {expected}")
        if not (row["state"] == "unknown" or (row["state"] == "in_flight" and row["leaseExpiresAt"] <= now)):
            raise LedgerError("resolution_refused", f"{key}: a {row['state']} row", key=key, state=row["state"])
        from_state, kept = row["state"], row.get("claim_id")
        row.pop("reason", None)  # a settled row carries its outcome, not why it was unknown
        if outcome == "completed":
            self._finish(row, "completed", now, result=resolution["result"])
        elif outcome == "failed":
            self._finish(row, "failed", now, error=copy.deepcopy(resolution["error"]))
        else:
            # not_performed: released, the request kept (LEDGER-21); from in_flight the claim id too (LEDGER-27).
            self._finish(row, "released", now)
            if from_state == "in_flight" and kept is not None:
                row["claim_id"] = kept
        row["fence"] += 1  # RESOLVE-5: the former owner's late writes are stale
        self.audits.setdefault(key, []).append({
            "at": now, "actor": request["actor"], "action": request.get("action", "resolved"), "fromState": from_state,
            "toState": row["state"], "fence": row["fence"], "reason": request["reason"], "outcome": outcome,
        })
        return self._visible(row)

    # ---------------------------------------------------------------- reads and retention (LEDGER-13, -17, -19)

    def audit_trail(self, key: str) -> list[dict]:
        """RESOLVE-7: the key's entries, oldest first."""
        return copy.deepcopy(self.audits.get(key, []))

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
            self.audits.pop(k, None)
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

    def _audit(self, key: str, now: int, actor: str, action: str, fence: int, reason: str) -> None:
        # A transition into unknown (RESOLVE-7): fromState in_flight, toState unknown, no outcome.
        self.audits.setdefault(key, []).append({
            "at": now, "actor": actor, "action": action, "fromState": "in_flight", "toState": "unknown", "fence": fence, "reason": reason,
        })

    @staticmethod
    def _visible(row: dict) -> dict:
        return {k: copy.deepcopy(v) for k, v in row.items() if k not in ("expires_at", "claim_id")}


RESOLVE_MEMBERS = ("key", "resolution", "actor", "reason", "expectedFence", "action")
# The members each outcome's resolution has (RESOLVE-1).
RESOLUTION_MEMBERS = {"completed": ("outcome", "result"), "failed": ("outcome", "error"), "not_performed": ("outcome",)}


def _invalid(field: str, message: str) -> LedgerError:
    return LedgerError("invalid_ledger_input", f"{field}: {message}", field=field)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _no_constant(name):
    raise ValueError(name)


def _check_resolve_request(request) -> None:
    """RESOLVE-1: a refusal names the member (resolution's own members as resolution.<name>), changing nothing."""
    if not isinstance(request, dict):
        raise _invalid("request", "must be an object")
    for member in request:
        # A misspelt expectedFence read as absent would settle whatever claim holds the row (RESOLVE-4).
        if member not in RESOLVE_MEMBERS:
            raise _invalid(member, "is not a member of a resolve request")
    if not isinstance(request.get("key"), str) or request["key"] == "":
        raise _invalid("key", "must be a non-empty string")
    for member in ("actor", "reason"):
        if not isinstance(request.get(member), str) or request[member].strip() == "":
            raise _invalid(member, "must be a non-empty string")
    fence = request.get("expectedFence")
    if fence is not None and (not _is_int(fence) or not 1 <= fence <= 2**53 - 1):
        raise _invalid("expectedFence", "must be a positive integer")
    if request.get("action", "resolved") not in ("resolved", "reconciled"):
        raise _invalid("action", "must be resolved or reconciled")
    resolution = request.get("resolution")
    if not isinstance(resolution, dict):
        raise _invalid("resolution", "must be an object")
    outcome = resolution.get("outcome")
    members = RESOLUTION_MEMBERS.get(outcome) if isinstance(outcome, str) else None
    if members is None:
        raise _invalid("resolution.outcome", "must be completed, failed or not_performed")
    for member in resolution:
        if member not in members:
            raise _invalid(f"resolution.{member}", f"is not a member of a {outcome} resolution")
    if outcome == "completed":
        result = resolution.get("result")
        try:
            if not isinstance(result, str):
                raise ValueError
            json.loads(result, parse_constant=_no_constant)  # JSON text: NaN and Infinity are not JSON
        except ValueError:
            raise _invalid("resolution.result", "must be JSON text") from None
    elif outcome == "failed":
        error = resolution.get("error")
        if not isinstance(error, dict) or not isinstance(error.get("name"), str) or not isinstance(error.get("message"), str):
            raise _invalid("resolution.error", "must be a stored error {name, message}")
