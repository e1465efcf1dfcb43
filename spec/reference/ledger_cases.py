"""Data-driven ledger cases (spec §6), written to spec/vectors/ledger-transitions.json."""

from __future__ import annotations

PAY_RESULT = '{"payment_id":"pay_8Kq2","status":"succeeded"}'
DECLINED = {"name": "ToolError", "message": "card declined", "code": "card_declined"}
NOT_STORABLE = {"name": "ResultNotStorableError", "message": "result exceeds the ledger's limit", "code": "result_not_storable"}


def request_of(owner):
    """The request an attempt sends when a case does not name one: different per owner (LEDGER-21)."""
    return '{"payee":"acct_991","amount":4200,"memo":"attempt %s"}' % owner


def claim(key="k1", owner="a", effect="keyed_write", lease_ms=30000, request=None, returns=None, claim_id=None, **expect):
    """A claim sending `request` (the owner's default when None) and, when given, a claim id (LEDGER-26);
    `returns` is the request it must get back."""
    if returns is not None:
        expect["request"] = returns
    step = {"op": "claim", "key": key, "effect": effect, "owner": owner, "leaseMs": lease_ms}
    step["request"] = request if request is not None else request_of(owner)
    if claim_id is not None:
        step["claimId"] = claim_id
    step["expect"] = expect
    return step


def claimed(fence, takeover=False, **kw):
    return claim(outcome="claimed", fence=fence, takeover=takeover, **kw)


def existing(state, fence, key="k1", owner="b", effect="keyed_write", **fields):
    return claim(key=key, owner=owner, effect=effect, outcome="existing", state=state, fence=fence, **fields)


def refused(code, key="k1", owner="a", effect="keyed_write", **kw):
    """A claim the ledger refuses, raising `code` (no outcome)."""
    step = claim(key=key, owner=owner, effect=effect, **kw)
    step["expect"] = {"error": code}
    return step


# Claim ids (LEDGER-26): 16 to 64 characters from [A-Za-z0-9_-]; one per claim attempt.
CID_A = "cid-a_0123456789ABCDEF"
CID_B = "cid-b_0123456789ABCDEF"
CID_C = "cid-c_0123456789ABCDEF"


def op(name, key="k1", fence=1, expect=None, **kw):
    step = {"op": name, "key": key}
    if fence is not None:
        step["fence"] = fence
    step.update(kw)
    step["expect"] = expect if expect is not None else {"ok": True}
    return step


STALE = {"error": "stale_claim"}


def lookup(key="k1", **expect):
    return {"op": "lookup", "key": key, "expect": expect}


def hook(name, key="k1"):
    return {"op": name, "key": key}


def sweep(removed):
    return {"op": "sweep", "expect": {"removed": removed}}


def retire(claim_id, key="k1", release=None, options=None, released=False, expect=None):
    """retire(key, claimId, options) (LEDGER-28); `options` is sent as given, else {release} when release is not None."""
    step = {"op": "retire", "key": key, "claimId": claim_id}
    if options is not None:
        step["options"] = options
    elif release is not None:
        step["options"] = {"release": release}
    step["expect"] = expect if expect is not None else {"released": released}
    return step


INVALID = {"error": "invalid_ledger_input"}
CID_D = "cid-d_0123456789ABCDEF"


def repeat_result(char, count, expect):
    return {"op": "complete", "key": "k1", "fence": 1, "resultRepeat": {"char": char, "count": count}, "expect": expect}


# Operator resolution (RESOLVE-1 to RESOLVE-5, LEDGER-27): a resolve step sends {key, ...resolveRequest}.
ACTOR, WHY = "ops@example.com", "checked the processor's dashboard"


def resolve(outcome=None, key="k1", expect=None, expected_fence=None, resolution=None, result=None, error=None,
            actor=ACTOR, reason=WHY, extra=None, result_repeat=None):
    """resolve({key, resolution, actor, reason, expectedFence?}); `resolution` is sent as given when passed, else built
    from `outcome` with `result` (completed) or `error` (failed); `extra` adds members as given."""
    if resolution is None:
        resolution = {"outcome": outcome}
        if outcome == "completed" and result_repeat is None:
            resolution["result"] = result if result is not None else PAY_RESULT
        elif outcome == "failed":
            resolution["error"] = error if error is not None else DECLINED
    body = {"resolution": resolution, "actor": actor, "reason": reason}
    if expected_fence is not None:
        body["expectedFence"] = expected_fence
    body.update(extra or {})
    step = {"op": "resolve", "key": key, "resolveRequest": body}
    if result_repeat is not None:
        step["resultRepeat"] = {"char": result_repeat[0], "count": result_repeat[1]}
    step["expect"] = expect
    return step


def resolved(state, fence, **fields):
    return {"outcome": "resolved", "state": state, "fence": fence, **fields}


def audit_trail(*entries, key="k1"):
    """auditTrail(key) (RESOLVE-7): the key's entries oldest first, `at` left out (compared as non-decreasing)."""
    return {"op": "auditTrail", "key": key, "expect": {"entries": list(entries)}}


def entry(actor, action, from_state, to_state, fence, reason, outcome=None):
    e = {"actor": actor, "action": action, "fromState": from_state, "toState": to_state, "fence": fence, "reason": reason}
    if outcome is not None:
        e["outcome"] = outcome
    return e


def not_resolvable(state):
    """resolution_refused (RESOLVE-2), carrying the key it was sent and the row's state ("absent": no row)."""
    return {"error": "resolution_refused", "state": state}


def bad_input(field):
    return {"error": "invalid_ledger_input", "field": field}


def former_owner_refused(key="k1", fence=1):
    """RESOLVE-5: every write of the fence the resolution replaced is stale and changes nothing."""
    return [op("complete", key=key, fence=fence, result='{"late":true}', expect=STALE),
            op("fail", key=key, fence=fence, error=DECLINED, expect=STALE),
            op("markUnknown", key=key, fence=fence, reason="tool_error", expect=STALE),
            op("renew", key=key, fence=fence, leaseMs=30000, expect=STALE),
            op("release", key=key, fence=fence, expect=STALE)]


def ledger_cases() -> dict:
    cases = []

    def case(rule, description, *steps):
        cases.append({"id": f"LT-{len(cases) + 1:03d}", "rule": rule, "description": description, "steps": list(steps)})

    case("LEDGER-1", "the first claim of a key wins and creates an in-flight row with fence 1",
         claimed(1), lookup(state="in_flight", fence=1, owner="a"))
    case("LEDGER-6", "while the lease is live every other claim sees the in-flight row, whoever asks",
         claimed(1), existing("in_flight", 1), existing("in_flight", 1, owner="a"), lookup(state="in_flight", fence=1, owner="a"))
    case("LEDGER-1", "keys are independent",
         claimed(1), claimed(1, key="k2"), lookup(state="in_flight", fence=1), lookup(key="k2", state="in_flight", fence=1))
    case("LEDGER-3", "in_flight -> completed; later claims get the stored result",
         claimed(1), op("complete", result=PAY_RESULT), lookup(state="completed", fence=1, result=PAY_RESULT),
         existing("completed", 1, result=PAY_RESULT), existing("completed", 1, owner="c", result=PAY_RESULT))
    case("LEDGER-8", "a definite failure is recorded and replayed identically",
         claimed(1), op("fail", error=DECLINED), lookup(state="failed", fence=1, error=DECLINED),
         existing("failed", 1, error=DECLINED))
    case("LEDGER-8", "a stored failure keeps its details exactly",
         claimed(1),
         op("fail", error={**DECLINED, "details": {"decline_code": "insufficient_funds", "retry": False, "amounts": [1, 2.5], "note": "caf\u00e9"}}),
         lookup(state="failed", fence=1, error={**DECLINED, "details": {"decline_code": "insufficient_funds", "retry": False, "amounts": [1, 2.5], "note": "caf\u00e9"}}))
    case("LEDGER-3", "in_flight -> unknown by the owner; the call is never claimable again",
         claimed(1), op("markUnknown", reason="tool_error"), lookup(state="unknown", fence=1, reason="tool_error"),
         existing("unknown", 1, reason="tool_error"), existing("unknown", 1, owner="c", effect="keyed_write", reason="tool_error"))
    case("LEDGER-8", "release (not performed) leaves a released row; the next claim wins with fence 2, not a takeover",
         claimed(1), op("release"), lookup(state="released", fence=1), claimed(2, owner="b"),
         lookup(state="in_flight", fence=2, owner="b"))
    case("LEDGER-4", "fences increase over repeated release and reclaim; only the newest fence finishes the row",
         claimed(1), op("release"), claimed(2, owner="b"), op("release", fence=2), claimed(3, owner="c"),
         op("complete", fence=2, result=PAY_RESULT, expect=STALE), op("complete", fence=3, result=PAY_RESULT),
         lookup(state="completed", fence=3, result=PAY_RESULT))
    case("LEDGER-7", "an expired keyed_write claim is taken over with a new fence",
         claimed(1), hook("expire_lease"), claimed(2, takeover=True, owner="b"), lookup(state="in_flight", fence=2, owner="b"))
    case("LEDGER-5", "after a takeover the old owner is refused on every operation and changes nothing",
         claimed(1), hook("expire_lease"), claimed(2, takeover=True, owner="b"),
         op("complete", result='{"from":"a"}', expect=STALE), op("fail", error=DECLINED, expect=STALE),
         op("markUnknown", reason="tool_error", expect=STALE), op("release", expect=STALE),
         op("renew", leaseMs=30000, expect=STALE), lookup(state="in_flight", fence=2, owner="b"),
         op("complete", fence=2, result='{"from":"b"}'), lookup(state="completed", fence=2, result='{"from":"b"}'))
    case("LEDGER-4", "a chain of takeovers: fences 1, 2, 3; every earlier fence is stale",
         claimed(1), hook("expire_lease"), claimed(2, takeover=True, owner="b"), hook("expire_lease"),
         claimed(3, takeover=True, owner="c"), op("complete", fence=1, result=PAY_RESULT, expect=STALE),
         op("complete", fence=2, result=PAY_RESULT, expect=STALE), op("complete", fence=3, result=PAY_RESULT),
         lookup(state="completed", fence=3, result=PAY_RESULT))
    case("LEDGER-16", "ownership is the fence, not the owner string: the same owner re-claiming after expiry takes over with a new fence",
         claimed(1), hook("expire_lease"), claimed(2, takeover=True, owner="a"), op("complete", fence=1, result=PAY_RESULT, expect=STALE))
    case("LEDGER-7", "an expired unkeyed_write claim becomes unknown (lease_expired) and is never claimed again",
         claimed(1, effect="unkeyed_write"), hook("expire_lease"),
         existing("unknown", 1, effect="unkeyed_write", reason="lease_expired"),
         lookup(state="unknown", fence=1, reason="lease_expired"),
         op("complete", result=PAY_RESULT, expect=STALE), op("markUnknown", reason="tool_error", expect=STALE),
         existing("unknown", 1, owner="c", effect="unkeyed_write", reason="lease_expired"))
    case("LEDGER-18", "expiry follows the effect class stored in the row, not the claimant's",
         claimed(1, effect="unkeyed_write"), hook("expire_lease"),
         existing("unknown", 1, effect="keyed_write", reason="lease_expired"))
    case("LEDGER-18", "a keyed_write row is taken over even when the claimant says unkeyed_write",
         claimed(1), hook("expire_lease"), claimed(2, takeover=True, owner="b", effect="unkeyed_write"))
    case("LEDGER-17", "lookup never acts on an expired lease; the owner can still complete (LEDGER-16)",
         claimed(1, effect="unkeyed_write"), hook("expire_lease"), lookup(state="in_flight", fence=1, owner="a"),
         op("complete", result=PAY_RESULT), lookup(state="completed", fence=1, result=PAY_RESULT),
         existing("completed", 1, effect="unkeyed_write", result=PAY_RESULT))
    case("LEDGER-16", "an expired lease nobody acted on is still the owner's: renew succeeds and the row is live again",
         claimed(1), hook("expire_lease"), op("renew", leaseMs=30000), existing("in_flight", 1))
    case("LEDGER-9", "a renewed lease can itself expire and be taken over",
         claimed(1), op("renew", leaseMs=60000), existing("in_flight", 1), hook("expire_lease"),
         claimed(2, takeover=True, owner="b"))
    case("LEDGER-9", "renew after a takeover is refused; the new owner can renew",
         claimed(1), hook("expire_lease"), claimed(2, takeover=True, owner="b"),
         op("renew", fence=1, leaseMs=30000, expect=STALE), op("renew", fence=2, leaseMs=30000))
    case("LEDGER-5", "renew of a finished row is refused",
         claimed(1), op("complete", result=PAY_RESULT), op("renew", leaseMs=30000, expect=STALE),
         lookup(state="completed", fence=1, result=PAY_RESULT))
    case("LEDGER-5", "a fence that was never issued is refused and the row is unchanged",
         claimed(1), op("complete", fence=2, result=PAY_RESULT, expect=STALE), op("release", fence=0, expect=STALE),
         lookup(state="in_flight", fence=1, owner="a"))
    case("LEDGER-5", "a finished row cannot be finished again: the first result stays",
         claimed(1), op("complete", result='{"n":1}'), op("complete", result='{"n":2}', expect=STALE),
         op("fail", error=DECLINED, expect=STALE), op("markUnknown", reason="tool_error", expect=STALE),
         op("release", expect=STALE), lookup(state="completed", fence=1, result='{"n":1}'))
    case("LEDGER-5", "a failed row cannot be completed or released",
         claimed(1), op("fail", error=DECLINED), op("complete", result=PAY_RESULT, expect=STALE),
         op("release", expect=STALE), lookup(state="failed", fence=1, error=DECLINED))
    case("LEDGER-5", "a released row cannot be finished with the fence that released it",
         claimed(1), op("release"), op("release", expect=STALE), op("complete", result=PAY_RESULT, expect=STALE),
         lookup(state="released", fence=1))
    case("LEDGER-5", "every fenced operation on a key without a row is refused",
         op("complete", key="k9", result=PAY_RESULT, expect=STALE), op("fail", key="k9", error=DECLINED, expect=STALE),
         op("markUnknown", key="k9", reason="tool_error", expect=STALE), op("release", key="k9", expect=STALE),
         op("renew", key="k9", leaseMs=30000, expect=STALE), lookup(key="k9", absent=True))
    odd = ' {"b" : [1.50, 2e0 ],\n\t"a":"caf\u00e9 \U0001f600 \\u00e9", "c":null}\r\n'
    case("LEDGER-10", "a result is returned byte for byte: whitespace, number spelling, UTF-8 and \\u escapes untouched",
         claimed(1), op("complete", result=odd), lookup(state="completed", fence=1, result=odd),
         existing("completed", 1, result=odd))
    case("LEDGER-10", "a result of exactly maxResultBytes (1048576 UTF-8 bytes) is stored",
         claimed(1), repeat_result("x", 1048574, {"ok": True}), lookup(state="completed", fence=1))
    case("LEDGER-10", "one byte over the limit: result_not_storable, the claim is held (not released), the owner records the failure",
         claimed(1), repeat_result("x", 1048575, {"error": "result_not_storable"}),
         lookup(state="in_flight", fence=1, owner="a"), existing("in_flight", 1),
         op("fail", error=NOT_STORABLE), lookup(state="failed", fence=1, error=NOT_STORABLE),
         existing("failed", 1, error=NOT_STORABLE))
    case("LEDGER-10", "the limit counts UTF-8 bytes: 524287 x U+00E9 (2 bytes each) plus quotes is exactly 1048576",
         claimed(1), repeat_result("\u00e9", 524287, {"ok": True}), lookup(state="completed", fence=1))
    case("LEDGER-10", "the limit counts UTF-8 bytes: 524288 x U+00E9 is 1048578 bytes, refused",
         claimed(1), repeat_result("\u00e9", 524288, {"error": "result_not_storable"}), lookup(state="in_flight", fence=1))
    case("LEDGER-10", "a character outside the BMP counts 4 bytes (not 2 UTF-16 units): 262144 x U+1F600 is 1048578 bytes, refused",
         claimed(1), repeat_result("\U0001f600", 262144, {"error": "result_not_storable"}), lookup(state="in_flight", fence=1))
    case("LEDGER-10", "262143 x U+1F600 plus quotes is 1048574 bytes, stored",
         claimed(1), repeat_result("\U0001f600", 262143, {"ok": True}), lookup(state="completed", fence=1))
    case("LEDGER-13", "retention never removes an in-flight row, even one whose lease has expired",
         claimed(1), claimed(1, key="k2"), op("complete", key="k2", result=PAY_RESULT), hook("expire_lease"),
         hook("expire_retention", key="k2"), sweep(1), lookup(state="in_flight", fence=1, owner="a"), lookup(key="k2", absent=True))
    case("LEDGER-13", "a finished row inside its retention is kept by sweep",
         claimed(1), op("complete", result=PAY_RESULT), sweep(0), lookup(state="completed", fence=1, result=PAY_RESULT))
    case("LEDGER-19", "after retention a key is absent: the next claim starts afresh",
         claimed(1), op("complete", result=PAY_RESULT), hook("expire_retention"), sweep(1),
         lookup(absent=True), claimed(1, owner="b"))
    case("LEDGER-13", "released, unknown and failed rows are all removed once their retention has passed",
         claimed(1), op("release"), claimed(1, key="k2"), op("markUnknown", key="k2", reason="tool_error"),
         claimed(1, key="k3"), op("fail", key="k3", error=DECLINED),
         hook("expire_retention"), hook("expire_retention", key="k2"), hook("expire_retention", key="k3"),
         sweep(3), lookup(absent=True), lookup(key="k2", absent=True), lookup(key="k3", absent=True))
    case("LEDGER-8", "an unkeyed_write claim may be released (not performed) and claimed again; a later expiry is unknown",
         claimed(1, effect="unkeyed_write"), op("release"), claimed(2, owner="b", effect="unkeyed_write"),
         hook("expire_lease"), existing("unknown", 2, owner="c", effect="unkeyed_write", reason="lease_expired"))
    case("LEDGER-7", "after a takeover completes, later claimants get the completed row with the new fence",
         claimed(1), hook("expire_lease"), claimed(2, takeover=True, owner="b"), op("complete", fence=2, result=PAY_RESULT),
         existing("completed", 2, owner="c", result=PAY_RESULT))

    # LEDGER-21: every attempt sends a request of its own (request_of(owner)); the row keeps the first.
    ra, rb, rc = request_of("a"), request_of("b"), request_of("c")
    case("LEDGER-21", "the first claim stores the claimant's request and returns it; lookup returns it; a later claimant gets the stored request, not its own",
         claimed(1, returns=ra), lookup(state="in_flight", fence=1, owner="a", request=ra),
         existing("in_flight", 1, returns=ra), lookup(state="in_flight", fence=1, request=ra))
    case("LEDGER-21", "a re-claim after release keeps the first request and returns it, not the claimant's own, release after release",
         claimed(1, returns=ra), op("release"), lookup(state="released", fence=1, request=ra),
         claimed(2, owner="b", returns=ra), lookup(state="in_flight", fence=2, owner="b", request=ra),
         op("release", fence=2), claimed(3, owner="c", returns=ra), op("complete", fence=3, result=PAY_RESULT),
         lookup(state="completed", fence=3, result=PAY_RESULT, request=ra))
    case("LEDGER-21", "a keyed_write takeover keeps the first request and returns it, not the claimant's own, takeover after takeover",
         claimed(1, returns=ra), hook("expire_lease"), claimed(2, takeover=True, owner="b", returns=ra),
         lookup(state="in_flight", fence=2, owner="b", request=ra), hook("expire_lease"),
         claimed(3, takeover=True, owner="c", returns=ra), lookup(state="in_flight", fence=3, owner="c", request=ra))
    case("LEDGER-21", "a takeover of a row re-claimed after release still returns the first request",
         claimed(1, returns=ra), op("release"), claimed(2, owner="b", returns=ra), hook("expire_lease"),
         claimed(3, takeover=True, owner="c", returns=ra), op("complete", fence=3, result=PAY_RESULT),
         existing("completed", 3, owner="d", result=PAY_RESULT, returns=ra))
    case("LEDGER-21", "an expired unkeyed_write claim that turns unknown keeps the first request, whoever claims it",
         claimed(1, effect="unkeyed_write", returns=ra), hook("expire_lease"),
         existing("unknown", 1, effect="unkeyed_write", reason="lease_expired", returns=ra),
         lookup(state="unknown", fence=1, reason="lease_expired", request=ra),
         existing("unknown", 1, owner="c", effect="keyed_write", reason="lease_expired", returns=ra))
    case("LEDGER-21", "an unkeyed_write row released, re-claimed and then expired is unknown with the first request",
         claimed(1, effect="unkeyed_write", returns=ra), op("release"), claimed(2, owner="b", effect="unkeyed_write", returns=ra),
         hook("expire_lease"), existing("unknown", 2, owner="c", effect="unkeyed_write", reason="lease_expired", returns=ra))
    case("LEDGER-21", "completed, failed and unknown rows keep the request and return it to every later claimant",
         claimed(1, returns=ra), op("complete", result=PAY_RESULT),
         claimed(1, key="k2", returns=ra), op("fail", key="k2", error=DECLINED),
         claimed(1, key="k3", returns=ra), op("markUnknown", key="k3", reason="tool_error"),
         existing("completed", 1, result=PAY_RESULT, returns=ra), existing("failed", 1, key="k2", error=DECLINED, returns=ra),
         existing("unknown", 1, key="k3", reason="tool_error", returns=ra),
         lookup(state="completed", fence=1, request=ra), lookup(key="k2", state="failed", fence=1, request=ra),
         lookup(key="k3", state="unknown", fence=1, request=ra))
    case("LEDGER-21", "after retention the next claim stores its own request, not the forgotten row's (completed and released rows)",
         claimed(1, returns=ra), op("complete", result=PAY_RESULT), claimed(1, key="k2", returns=ra), op("release", key="k2"),
         hook("expire_retention"), hook("expire_retention", key="k2"), sweep(2),
         claimed(1, owner="b", returns=rb), lookup(state="in_flight", fence=1, owner="b", request=rb),
         claimed(1, key="k2", owner="c", returns=rc), lookup(key="k2", state="in_flight", fence=1, owner="c", request=rc))
    # Written the way no re-encoder writes it: JSON escapes kept escaped, raw 3- and 4-byte UTF-8, a combining
    # mark (not NFC), U+2028, odd whitespace, duplicate member names, a number spelled 1.50.
    odd_request = (' { "memo" : "caf\\u00e9 \\ud83d\\ude00 \\"q\\" \\\\ \\/", "city":"\u6771\u4eac \u2013 \u20ac12 \u2615",\n\t'
                   '"n" : 1.50, "e\u0301":"\U0001f600\u2028", "a":1, "a":2 }\r\n')
    case("LEDGER-21", "a request is stored and returned byte for byte: whitespace, duplicate names, number spelling, \\u escapes, raw 3- and 4-byte UTF-8, a combining mark, U+2028",
         claimed(1, request=odd_request, returns=odd_request), lookup(state="in_flight", fence=1, request=odd_request),
         existing("in_flight", 1, returns=odd_request), op("release"), claimed(2, owner="b", returns=odd_request),
         op("complete", fence=2, result=PAY_RESULT), existing("completed", 2, owner="c", result=PAY_RESULT, returns=odd_request),
         lookup(state="completed", fence=2, request=odd_request))
    # LEDGER-26: a claim carrying a claim id (claimId) is recognised by it, and only by it, while its row is in flight.
    case("LEDGER-26", "a claim sent again with its claim id on its own live in-flight row is the same claim: claimed, same fence, not a takeover, the stored request, whatever owner and request the copy carries",
         claimed(1, claim_id=CID_A, returns=ra), claimed(1, owner="a2", claim_id=CID_A, returns=ra),
         claimed(1, owner="b", claim_id=CID_A, returns=ra), lookup(state="in_flight", fence=1, owner="a", request=ra),
         op("complete", result=PAY_RESULT), lookup(state="completed", fence=1, result=PAY_RESULT))
    case("LEDGER-26", "the claim sent again restarts its lease: after the lease ran out it is still claimed (not a takeover), and then another claimant meets a live claim",
         claimed(1, claim_id=CID_A), hook("expire_lease"), claimed(1, claim_id=CID_A, returns=ra),
         existing("in_flight", 1, claim_id=CID_B), existing("in_flight", 1, owner="c"))
    case("LEDGER-26", "an unkeyed_write claim sent again after its lease ran out, before anyone acted on it, is the same claim, not unknown; its lease restarts",
         claimed(1, effect="unkeyed_write", claim_id=CID_A), hook("expire_lease"),
         claimed(1, effect="unkeyed_write", claim_id=CID_A, returns=ra), lookup(state="in_flight", fence=1, owner="a"),
         existing("in_flight", 1, effect="unkeyed_write", claim_id=CID_B),
         op("complete", result=PAY_RESULT), existing("completed", 1, effect="unkeyed_write", result=PAY_RESULT))
    case("LEDGER-26", "another claim id, no claim id, or the same owner string without the claim id meets a live row as existing (LEDGER-16)",
         claimed(1, claim_id=CID_A), existing("in_flight", 1, claim_id=CID_B), existing("in_flight", 1),
         existing("in_flight", 1, owner="a"), existing("in_flight", 1, owner="a", claim_id=CID_B),
         lookup(state="in_flight", fence=1, owner="a"))
    case("LEDGER-26", "a claim without a claim id is never recognised, even by a claim without one: its own copy after the lease is a takeover",
         claimed(1), hook("expire_lease"), claimed(2, takeover=True, owner="a", returns=ra))
    case("LEDGER-26", "another claim id on an expired keyed_write row is a takeover; the first claim id then meets the taker's claim",
         claimed(1, claim_id=CID_A), hook("expire_lease"), claimed(2, takeover=True, owner="b", claim_id=CID_B, returns=ra),
         existing("in_flight", 2, owner="a", claim_id=CID_A), claimed(2, owner="b", claim_id=CID_B, returns=ra),
         op("complete", fence=1, result=PAY_RESULT, expect=STALE), op("complete", fence=2, result=PAY_RESULT))
    case("LEDGER-26", "another claim id on an expired unkeyed_write row turns it unknown (LEDGER-7); the first claim id then meets unknown",
         claimed(1, effect="unkeyed_write", claim_id=CID_A), hook("expire_lease"),
         existing("unknown", 1, effect="unkeyed_write", reason="lease_expired", claim_id=CID_B),
         existing("unknown", 1, owner="a", effect="unkeyed_write", reason="lease_expired", claim_id=CID_A))
    case("LEDGER-26", "after the row finished the claim id is an ordinary claim: completed, failed and unknown rows are existing",
         claimed(1, claim_id=CID_A), op("complete", result=PAY_RESULT),
         claimed(1, key="k2", claim_id=CID_B), op("fail", key="k2", error=DECLINED),
         claimed(1, key="k3", claim_id=CID_C), op("markUnknown", key="k3", reason="tool_error"),
         existing("completed", 1, owner="a", claim_id=CID_A, result=PAY_RESULT),
         existing("failed", 1, key="k2", owner="a", claim_id=CID_B, error=DECLINED),
         existing("unknown", 1, key="k3", owner="a", claim_id=CID_C, reason="tool_error"))
    case("LEDGER-26", "release by claim id (DISPATCH-16): the claim whose reply was lost is sent again with its id, claimed with its fence, and released; the next claim re-claims with fence 2 and the first request",
         claimed(1, effect="unkeyed_write", claim_id=CID_A), claimed(1, effect="unkeyed_write", claim_id=CID_A, returns=ra),
         op("release"), lookup(state="released", fence=1, request=ra),
         claimed(2, owner="b", effect="unkeyed_write", claim_id=CID_B, returns=ra), lookup(state="in_flight", fence=2, owner="b"))
    # LEDGER-27: a released row refuses the claim id it was released under.
    case("LEDGER-27", "a late copy of a claim released by its claim id is refused with stale_claim and changes nothing; another claim id re-claims",
         claimed(1, effect="unkeyed_write", claim_id=CID_A), op("release"),
         refused("stale_claim", effect="unkeyed_write", claim_id=CID_A), lookup(state="released", fence=1, request=ra),
         refused("stale_claim", owner="z", effect="keyed_write", claim_id=CID_A), lookup(state="released", fence=1),
         claimed(2, owner="b", effect="unkeyed_write", claim_id=CID_B, returns=ra))
    case("LEDGER-27", "a released row refuses only the claim id it was released under; a re-claim stores its own id, which a later release keeps",
         claimed(1, claim_id=CID_A), op("release"), claimed(2, owner="b", claim_id=CID_B, returns=ra),
         claimed(2, owner="b", claim_id=CID_B, returns=ra), existing("in_flight", 2, owner="a", claim_id=CID_A),
         op("release", fence=2), refused("stale_claim", owner="b", claim_id=CID_B),
         claimed(3, owner="a", claim_id=CID_A, returns=ra))
    case("LEDGER-27", "a row released without a claim id refuses nobody; after retention the released claim id is forgotten with its row (LEDGER-19)",
         claimed(1), op("release"), claimed(2, owner="b", claim_id=CID_A, returns=ra),
         claimed(1, key="k2", claim_id=CID_B), op("release", key="k2"), hook("expire_retention", key="k2"), sweep(1),
         claimed(1, key="k2", owner="c", claim_id=CID_B, returns=rc))
    case("LEDGER-26", "a claim id that does not match [A-Za-z0-9_-]{16,64} is refused (invalid_ledger_input) before anything is written; 16 and 64 characters are accepted",
         refused("invalid_ledger_input", claim_id="cid-a_012345678"), refused("invalid_ledger_input", claim_id="c" * 65),
         refused("invalid_ledger_input", claim_id="cid-a_0123456789.ABC"), refused("invalid_ledger_input", claim_id="cid a_0123456789ABC"),
         refused("invalid_ledger_input", claim_id="cid-a_0123456789AB\n"), refused("invalid_ledger_input", claim_id=""),
         refused("invalid_ledger_input", claim_id="cid-a_0123456789\u00e9AB"), lookup(absent=True),
         claimed(1, claim_id="cid-a_0123456789"), claimed(1, key="k2", claim_id="C" * 64),
         claimed(1, claim_id="cid-a_0123456789"), claimed(1, key="k2", claim_id="C" * 64))
    # LEDGER-28: a retired claim id is refused for the retention, whether the key has a row or not.
    case("LEDGER-28", "retire with no row creates nothing; a late copy of the retired claim is then refused with stale_claim and creates nothing; other claim ids and none claim as before",
         retire(CID_A), lookup(absent=True), refused("stale_claim", effect="unkeyed_write", claim_id=CID_A), lookup(absent=True),
         refused("stale_claim", owner="z", claim_id=CID_A), lookup(absent=True),
         claimed(1, owner="b", claim_id=CID_B, returns=rb), refused("stale_claim", claim_id=CID_A),
         lookup(state="in_flight", fence=1, owner="b", request=rb))
    case("LEDGER-28", "retire with release on the row in flight under the claim id releases it (fence and request kept); another claim id re-claims with fence 2 and the stored request; the retired id stays refused",
         claimed(1, effect="unkeyed_write", claim_id=CID_A, returns=ra), retire(CID_A, release=True, released=True),
         lookup(state="released", fence=1, request=ra), refused("stale_claim", effect="unkeyed_write", claim_id=CID_A),
         lookup(state="released", fence=1), claimed(2, owner="b", effect="unkeyed_write", claim_id=CID_B, returns=ra),
         refused("stale_claim", effect="unkeyed_write", claim_id=CID_A), lookup(state="in_flight", fence=2, owner="b", request=ra),
         op("complete", fence=2, result=PAY_RESULT), refused("stale_claim", claim_id=CID_A),
         lookup(state="completed", fence=2, result=PAY_RESULT))
    case("LEDGER-28", "retire without release (release false, or no options) leaves the row in flight under its owner, whose fence still writes; the retired id is refused even on its own in-flight row, before LEDGER-26 recognition",
         claimed(1, claim_id=CID_A), retire(CID_A, release=False), lookup(state="in_flight", fence=1, owner="a"),
         refused("stale_claim", claim_id=CID_A), lookup(state="in_flight", fence=1, owner="a"),
         claimed(1, key="k2", claim_id=CID_B), retire(CID_B, key="k2"), lookup(key="k2", state="in_flight", fence=1, owner="a"),
         refused("stale_claim", key="k2", claim_id=CID_B), existing("in_flight", 1, claim_id=CID_C),
         op("renew", leaseMs=30000), op("complete", result=PAY_RESULT), lookup(state="completed", fence=1, result=PAY_RESULT),
         refused("stale_claim", claim_id=CID_A))
    case("LEDGER-28", "a retired claim id is refused on its own in-flight row even after its lease ran out, and changes nothing; another claim id then takes the expired keyed_write row over",
         claimed(1, claim_id=CID_A), retire(CID_A), hook("expire_lease"), refused("stale_claim", claim_id=CID_A),
         lookup(state="in_flight", fence=1, owner="a"), claimed(2, takeover=True, owner="b", claim_id=CID_B, returns=ra),
         refused("stale_claim", claim_id=CID_A), lookup(state="in_flight", fence=2, owner="b"))
    case("LEDGER-28", "release on a row in flight under another claim id, or under none, changes nothing and answers released false; that row's own claim id is still recognised",
         claimed(1, owner="b", claim_id=CID_B, returns=rb), retire(CID_A, release=True), lookup(state="in_flight", fence=1, owner="b"),
         claimed(1, owner="b", claim_id=CID_B, returns=rb), refused("stale_claim", claim_id=CID_A),
         claimed(1, key="k2", owner="c", returns=rc), retire(CID_A, key="k2", release=True),
         lookup(key="k2", state="in_flight", fence=1, owner="c"), op("release", key="k2"),
         claimed(2, key="k2", owner="d", returns=rc), lookup(key="k2", state="in_flight", fence=2, owner="d"))
    case("LEDGER-28", "a retired claim id is refused with stale_claim on completed, failed, unknown and released rows and changes none of them; retirement is per key",
         claimed(1, claim_id=CID_A), op("complete", result=PAY_RESULT), retire(CID_A, release=True),
         refused("stale_claim", claim_id=CID_A), lookup(state="completed", fence=1, result=PAY_RESULT),
         claimed(1, key="k2", claim_id=CID_A), op("fail", key="k2", error=DECLINED), retire(CID_A, key="k2"),
         refused("stale_claim", key="k2", claim_id=CID_A), lookup(key="k2", state="failed", fence=1, error=DECLINED),
         claimed(1, key="k3", effect="unkeyed_write", claim_id=CID_A), hook("expire_lease", key="k3"),
         existing("unknown", 1, key="k3", effect="unkeyed_write", reason="lease_expired"), retire(CID_A, key="k3", release=True),
         refused("stale_claim", key="k3", effect="unkeyed_write", claim_id=CID_A), lookup(key="k3", state="unknown", fence=1, reason="lease_expired"),
         claimed(1, key="k4", owner="b", claim_id=CID_B), op("release", key="k4"), retire(CID_A, key="k4"),
         refused("stale_claim", key="k4", claim_id=CID_A), lookup(key="k4", state="released", fence=1),
         claimed(2, key="k4", owner="c", claim_id=CID_C, returns=rb),
         claimed(1, key="k5", claim_id=CID_A), lookup(key="k5", state="in_flight", fence=1, owner="a"))
    case("LEDGER-28", "retiring is idempotent: the second retire with release answers released false and changes nothing; retiring twice with no row creates nothing",
         claimed(1, claim_id=CID_A), retire(CID_A, release=True, released=True), retire(CID_A, release=True),
         retire(CID_A), lookup(state="released", fence=1, request=ra), refused("stale_claim", claim_id=CID_A),
         retire(CID_B, key="k2"), retire(CID_B, key="k2", release=True), lookup(key="k2", absent=True),
         refused("stale_claim", key="k2", claim_id=CID_B), lookup(key="k2", absent=True),
         claimed(2, owner="b", claim_id=CID_C, returns=ra))
    case("LEDGER-28", "release on the claim id's row whose lease ran out releases it (not unknown, not a takeover): the next claim re-claims with fence 2 and the stored request",
         claimed(1, effect="unkeyed_write", claim_id=CID_A), hook("expire_lease"), retire(CID_A, release=True, released=True),
         lookup(state="released", fence=1, request=ra), refused("stale_claim", effect="unkeyed_write", claim_id=CID_A),
         claimed(2, owner="b", effect="unkeyed_write", claim_id=CID_B, returns=ra), lookup(state="in_flight", fence=2, owner="b"))
    case("LEDGER-28", "the owner's fence cannot write a row retire released; a retired id is not a row: lookup shows none and sweep counts none",
         claimed(1, claim_id=CID_A), retire(CID_A, release=True, released=True), op("complete", result=PAY_RESULT, expect=STALE),
         op("release", expect=STALE), lookup(state="released", fence=1),
         retire(CID_B, key="k2"), retire(CID_C, key="k2"), lookup(key="k2", absent=True), sweep(0), lookup(key="k2", absent=True))
    case("LEDGER-28", "claims without a claim id are unaffected by a retired claim id: they create, meet, and re-claim a row as before",
         retire(CID_A), claimed(1, owner="b", returns=rb), existing("in_flight", 1, owner="c"), retire(CID_A, release=True),
         lookup(state="in_flight", fence=1, owner="b"), op("release"), claimed(2, owner="c", returns=rb),
         lookup(state="in_flight", fence=2, owner="c"))
    case("LEDGER-28", "after the retention has passed from the retire, the retired claim id is forgotten: a claim with it creates or re-claims as an ordinary claim",
         retire(CID_A), hook("expire_retired"), sweep(0), claimed(1, claim_id=CID_A, returns=ra), lookup(state="in_flight", fence=1, owner="a"),
         claimed(1, key="k2", owner="b", claim_id=CID_B, returns=rb), retire(CID_B, key="k2", release=True, released=True),
         hook("expire_retention", key="k2"), hook("expire_retired", key="k2"), sweep(1),
         claimed(1, key="k2", owner="c", claim_id=CID_B, returns=rc), lookup(key="k2", state="in_flight", fence=1, owner="c", request=rc))
    case("LEDGER-28", "retire refuses, changing nothing, with invalid_ledger_input: an empty key, a malformed or non-string claim id, a release that is not a boolean, options that are not an object",
         claimed(1, claim_id=CID_A), retire(CID_A, key="", expect=INVALID), retire("cid-a_012345678", expect=INVALID),
         retire("", expect=INVALID), retire("cid-a_0123456789.ABC", expect=INVALID), retire("c" * 65, expect=INVALID),
         retire(1234567890123456, expect=INVALID), retire(None, expect=INVALID),
         retire(CID_A, options={"release": "yes"}, expect=INVALID), retire(CID_A, options={"release": 1}, expect=INVALID),
         retire(CID_A, options={"release": None}, expect=INVALID), retire(CID_A, options="release", expect=INVALID),
         lookup(state="in_flight", fence=1, owner="a"), claimed(1, claim_id=CID_A, returns=ra),
         retire(CID_D, key="k2", options={"release": "true"}, expect=INVALID), claimed(1, key="k2", claim_id=CID_D),
         retire(CID_A, options={}), refused("stale_claim", claim_id=CID_A))

    # Operator resolution (§6.12): only for a ledger whose capabilities.supports.resolve is true.
    lost = {"name": "ToolError", "message": "the processor has no record", "code": "not_found"}
    case("RESOLVE-3", "an unknown row resolved completed: stored byte for byte with fence 2, the request kept; claims then get the stored result; a second resolution is refused",
         claimed(1, returns=ra), op("markUnknown", reason="tool_error"),
         resolve("completed", result=odd, expect=resolved("completed", 2, result=odd, request=ra)),
         lookup(state="completed", fence=2, result=odd, request=ra),
         existing("completed", 2, result=odd, returns=ra), existing("completed", 2, owner="a", claim_id=CID_B, result=odd),
         resolve("completed", expect=not_resolvable("completed")), lookup(state="completed", fence=2, result=odd))
    case("RESOLVE-3", "an unknown (lease_expired) unkeyed_write row resolved failed: the error stored and replayed identically with fence 2",
         claimed(1, effect="unkeyed_write", returns=ra), hook("expire_lease"),
         existing("unknown", 1, effect="unkeyed_write", reason="lease_expired"),
         resolve("failed", error=lost, expect=resolved("failed", 2, error=lost, request=ra)),
         lookup(state="failed", fence=2, error=lost, request=ra), existing("failed", 2, effect="unkeyed_write", error=lost, returns=ra))
    case("RESOLVE-3", "an unknown row resolved not_performed is released with fence 2 and its request; the next claim wins with fence 3, not a takeover, and re-runs the stored request",
         claimed(1, effect="unkeyed_write", returns=ra), op("markUnknown", reason="tool_error"),
         resolve("not_performed", expect=resolved("released", 2, request=ra)), lookup(state="released", fence=2, request=ra),
         claimed(3, owner="b", effect="unkeyed_write", claim_id=CID_B, returns=ra), lookup(state="in_flight", fence=3, owner="b", request=ra),
         op("complete", fence=3, result=PAY_RESULT), lookup(state="completed", fence=3, result=PAY_RESULT, request=ra))
    case("RESOLVE-5", "an in-flight row whose lease expired resolved completed gets fence 2; the former owner's complete, fail, markUnknown, renew and release are refused stale and change nothing; its claim id is then an ordinary claim's",
         claimed(1, claim_id=CID_A, returns=ra), hook("expire_lease"),
         resolve("completed", expect=resolved("completed", 2, result=PAY_RESULT, request=ra)),
         *former_owner_refused(), lookup(state="completed", fence=2, result=PAY_RESULT, request=ra),
         existing("completed", 2, owner="a", claim_id=CID_A, result=PAY_RESULT, returns=ra))
    case("RESOLVE-5", "an in-flight unkeyed_write row whose lease expired resolved failed gets fence 2; the former owner's writes are refused stale; claims replay the failure",
         claimed(1, effect="unkeyed_write", claim_id=CID_A, returns=ra), hook("expire_lease"),
         resolve("failed", expect=resolved("failed", 2, error=DECLINED, request=ra)),
         *former_owner_refused(), lookup(state="failed", fence=2, error=DECLINED),
         existing("failed", 2, effect="unkeyed_write", claim_id=CID_A, error=DECLINED), existing("failed", 2, effect="unkeyed_write", error=DECLINED))
    case("LEDGER-27", "an in-flight row whose lease expired resolved not_performed is released with fence 2, keeping its request and its claim id: the former owner's writes are stale, a late copy of its claim is refused stale_claim and changes nothing, a new claim id wins with fence 3 and the stored request, and the old one then meets its claim",
         claimed(1, effect="unkeyed_write", claim_id=CID_A, returns=ra), hook("expire_lease"),
         resolve("not_performed", expect=resolved("released", 2, request=ra)), *former_owner_refused(),
         refused("stale_claim", effect="unkeyed_write", claim_id=CID_A), lookup(state="released", fence=2, request=ra),
         refused("stale_claim", owner="z", claim_id=CID_A), lookup(state="released", fence=2),
         claimed(3, owner="b", effect="unkeyed_write", claim_id=CID_B, returns=ra), existing("in_flight", 3, owner="a", claim_id=CID_A),
         lookup(state="in_flight", fence=3, owner="b", request=ra))
    case("LEDGER-27", "a keyed_write in-flight row whose lease expired resolved not_performed keeps its claim id too; a claim without a claim id re-claims it with fence 3 and the stored request",
         claimed(1, claim_id=CID_A, returns=ra), hook("expire_lease"), resolve("not_performed", expect=resolved("released", 2, request=ra)),
         refused("stale_claim", claim_id=CID_A), lookup(state="released", fence=2, request=ra),
         claimed(3, owner="c", returns=ra), lookup(state="in_flight", fence=3, owner="c", request=ra))
    case("LEDGER-27", "a row released from unknown holds no claim id: after resolve not_performed the claim id of the claim that turned unknown is an ordinary claim, fence 3, the stored request",
         claimed(1, effect="unkeyed_write", claim_id=CID_A, returns=ra), hook("expire_lease"),
         existing("unknown", 1, effect="unkeyed_write", reason="lease_expired"),
         resolve("not_performed", expect=resolved("released", 2, request=ra)),
         claimed(3, owner="a", effect="unkeyed_write", claim_id=CID_A, returns=ra), lookup(state="in_flight", fence=3, owner="a", request=ra))
    case("RESOLVE-2", "a live in-flight row is refused (resolution_refused, state in_flight) for every outcome and changes nothing; its owner still completes it",
         claimed(1, claim_id=CID_A, returns=ra), resolve("not_performed", expect=not_resolvable("in_flight")),
         resolve("completed", expect=not_resolvable("in_flight")), resolve("failed", expect=not_resolvable("in_flight")),
         lookup(state="in_flight", fence=1, owner="a", request=ra), claimed(1, claim_id=CID_A, returns=ra),
         op("complete", result=PAY_RESULT), lookup(state="completed", fence=1, result=PAY_RESULT))
    case("RESOLVE-2", "completed, failed and released rows are refused (resolution_refused with their state) and change nothing",
         claimed(1), op("complete", result=PAY_RESULT), resolve("failed", expect=not_resolvable("completed")),
         resolve("not_performed", expect=not_resolvable("completed")), lookup(state="completed", fence=1, result=PAY_RESULT),
         claimed(1, key="k2"), op("fail", key="k2", error=DECLINED), resolve("completed", key="k2", expect=not_resolvable("failed")),
         resolve("not_performed", key="k2", expect=not_resolvable("failed")), lookup(key="k2", state="failed", fence=1, error=DECLINED),
         claimed(1, key="k3", returns=ra), op("release", key="k3"), resolve("completed", key="k3", expect=not_resolvable("released")),
         resolve("not_performed", key="k3", expect=not_resolvable("released")), lookup(key="k3", state="released", fence=1, request=ra),
         claimed(2, key="k3", owner="b", returns=ra))
    case("RESOLVE-2", "a key without a row, or whose row is past its retention (LEDGER-19), is refused with resolution_refused, state absent, and no row is created",
         resolve("not_performed", expect=not_resolvable("absent")), resolve("completed", expect=not_resolvable("absent")),
         lookup(absent=True), claimed(1, owner="b", returns=rb),
         claimed(1, key="k2"), op("markUnknown", key="k2", reason="tool_error"), hook("expire_retention", key="k2"),
         resolve("failed", key="k2", expect=not_resolvable("absent")), lookup(key="k2", absent=True))
    case("RESOLVE-4", "an expectedFence other than the row's is refused with stale_claim on every state, before the state rule (a live or finished row too), and changes nothing; an absent key stays resolution_refused",
         claimed(1), op("markUnknown", reason="tool_error"), resolve("completed", expected_fence=2, expect=STALE),
         lookup(state="unknown", fence=1, reason="tool_error"),
         claimed(1, key="k2"), hook("expire_lease", key="k2"), resolve("not_performed", key="k2", expected_fence=2, expect=STALE),
         lookup(key="k2", state="in_flight", fence=1, owner="a"),
         claimed(1, key="k3"), resolve("failed", key="k3", expected_fence=2, expect=STALE), lookup(key="k3", state="in_flight", fence=1),
         claimed(1, key="k4"), op("complete", key="k4", result=PAY_RESULT), resolve("failed", key="k4", expected_fence=3, expect=STALE),
         claimed(1, key="k5"), op("fail", key="k5", error=DECLINED), resolve("completed", key="k5", expected_fence=2, expect=STALE),
         claimed(1, key="k6"), op("release", key="k6"), resolve("not_performed", key="k6", expected_fence=2, expect=STALE),
         lookup(key="k4", state="completed", fence=1), lookup(key="k5", state="failed", fence=1), lookup(key="k6", state="released", fence=1),
         resolve("completed", key="k7", expected_fence=1, expect=not_resolvable("absent")), lookup(key="k7", absent=True))
    case("RESOLVE-4", "after a takeover the fence the operator read is stale; the row's own fence resolves it, once",
         claimed(1), hook("expire_lease"), claimed(2, takeover=True, owner="b", returns=ra), hook("expire_lease"),
         resolve("not_performed", expected_fence=1, expect=STALE), lookup(state="in_flight", fence=2, owner="b"),
         resolve("not_performed", expected_fence=2, expect=resolved("released", 3, request=ra)),
         resolve("not_performed", expected_fence=2, expect=STALE), op("complete", fence=2, result=PAY_RESULT, expect=STALE),
         lookup(state="released", fence=3, request=ra), claimed(4, owner="c", returns=ra))
    case("RESOLVE-4", "with a matching expectedFence a live row is still refused by its state (resolution_refused), and an unknown row resolves",
         claimed(1), resolve("completed", expected_fence=1, expect=not_resolvable("in_flight")),
         op("markUnknown", reason="tool_error"), resolve("completed", expected_fence=1, expect=resolved("completed", 2, result=PAY_RESULT)),
         resolve("completed", expected_fence=1, expect=STALE), resolve("completed", expected_fence=2, expect=not_resolvable("completed")))
    case("RESOLVE-1", "malformed requests are refused with invalid_ledger_input naming the member (a resolution's own as resolution.<name>) and change nothing: an empty or blank actor or reason, an unknown member, a member its outcome does not have, a bad or missing outcome, a result that is not JSON text, an error that is not a stored error, a bad expectedFence",
         claimed(1, returns=ra), op("markUnknown", reason="tool_error"),
         resolve("not_performed", actor="", expect=bad_input("actor")), resolve("not_performed", reason="", expect=bad_input("reason")),
         # White space names nobody and says nothing an audit can read (RESOLVE-1).
         resolve("not_performed", actor="   ", expect=bad_input("actor")), resolve("not_performed", reason="\t", expect=bad_input("reason")),
         resolve("not_performed", extra={"expectedfence": 1}, expect=bad_input("expectedfence")),
         resolve("not_performed", extra={"fence": 1}, expect=bad_input("fence")),
         resolve(resolution={"outcome": "completed", "result": PAY_RESULT, "error": DECLINED}, expect=bad_input("resolution.error")),
         resolve(resolution={"outcome": "not_performed", "result": PAY_RESULT}, expect=bad_input("resolution.result")),
         resolve(resolution={"outcome": "failed", "error": DECLINED, "result": PAY_RESULT}, expect=bad_input("resolution.result")),
         resolve(resolution={"outcome": "performed"}, expect=bad_input("resolution.outcome")),
         resolve(resolution={"result": PAY_RESULT}, expect=bad_input("resolution.outcome")),
         resolve(resolution={"outcome": "completed"}, expect=bad_input("resolution.result")),
         resolve("completed", result="payment pay_8Kq2 succeeded", expect=bad_input("resolution.result")),
         resolve(resolution={"outcome": "completed", "result": {"payment_id": "pay_8Kq2"}}, expect=bad_input("resolution.result")),
         resolve("failed", error={"name": "ToolError"}, expect=bad_input("resolution.error")),
         resolve(resolution={"outcome": "failed", "error": "card declined"}, expect=bad_input("resolution.error")),
         resolve(resolution="not_performed", expect=bad_input("resolution")),
         resolve("not_performed", expected_fence=0, expect=bad_input("expectedFence")),
         resolve("not_performed", expected_fence="1", expect=bad_input("expectedFence")),
         lookup(state="unknown", fence=1, reason="tool_error", request=ra),
         resolve("not_performed", expected_fence=1, expect=resolved("released", 2, request=ra)))
    case("RESOLVE-3", "a completed resolution over maxResultBytes is refused with result_not_storable and changes nothing; one of exactly maxResultBytes is stored",
         claimed(1), op("markUnknown", reason="tool_error"),
         resolve("completed", result_repeat=("x", 1048575), expect={"error": "result_not_storable"}),
         resolve("completed", result_repeat=("\U0001f600", 262144), expect={"error": "result_not_storable"}),
         lookup(state="unknown", fence=1, reason="tool_error"), existing("unknown", 1, reason="tool_error"),
         resolve("completed", result_repeat=("x", 1048574), expect=resolved("completed", 2)), lookup(state="completed", fence=2))
    # RESOLVE-7: only for a ledger whose capabilities.supports.auditTrail is true as well.
    marked = entry("a", "marked_unknown", "in_flight", "unknown", 1, "tool_error")
    case("RESOLVE-7", "a resolution appends one audit entry (actor, action resolved, from and to state, the fence after, reason, outcome) after the marked_unknown entry; refused resolutions and later claims append none",
         claimed(1, effect="unkeyed_write"), op("markUnknown", reason="tool_error"), audit_trail(marked),
         resolve("not_performed", expected_fence=2, expect=STALE), resolve("not_performed", actor="", expect=bad_input("actor")),
         resolve("not_performed", expected_fence=1, expect=resolved("released", 2)),
         audit_trail(marked, entry(ACTOR, "resolved", "unknown", "released", 2, WHY, "not_performed")),
         resolve("completed", expect=not_resolvable("released")), claimed(3, owner="b", effect="unkeyed_write"),
         audit_trail(marked, entry(ACTOR, "resolved", "unknown", "released", 2, WHY, "not_performed")))
    case("RESOLVE-7", "the claimant that turns an expired unkeyed_write claim unknown is audited (lease_expired), then its resolution; an expired in-flight row resolved is audited from in_flight; a live row refused, and a key never resolved, have no entries",
         claimed(1, effect="unkeyed_write"), hook("expire_lease"), existing("unknown", 1, owner="c", effect="unkeyed_write", reason="lease_expired"),
         resolve("failed", expect=resolved("failed", 2, error=DECLINED)),
         audit_trail(entry("c", "lease_expired", "in_flight", "unknown", 1, "lease_expired"), entry(ACTOR, "resolved", "unknown", "failed", 2, WHY, "failed")),
         claimed(1, key="k2"), hook("expire_lease", key="k2"), resolve("completed", key="k2", expect=resolved("completed", 2, result=PAY_RESULT)),
         audit_trail(entry(ACTOR, "resolved", "in_flight", "completed", 2, WHY, "completed"), key="k2"),
         claimed(1, key="k3"), resolve("not_performed", key="k3", expect=not_resolvable("in_flight")), audit_trail(key="k3"),
         op("complete", key="k3", result=PAY_RESULT), audit_trail(key="k3"))
    # RESOLVE-3: the request's own checks need no row, so they come first, as RESOLVE-1's do.
    case("RESOLVE-3", "a completed resolution over maxResultBytes is refused with result_not_storable before any row is read: for an absent key, a completed row, a live in-flight row and a stale expectedFence alike",
         resolve("completed", key="k9", result_repeat=("x", 1048575), expect={"error": "result_not_storable"}),
         claimed(1), op("complete", result=PAY_RESULT),
         resolve("completed", result_repeat=("x", 1048575), expect={"error": "result_not_storable"}),
         claimed(1, key="k2"), resolve("completed", key="k2", result_repeat=("x", 1048575), expect={"error": "result_not_storable"}),
         op("markUnknown", key="k2", reason="tool_error"),
         resolve("completed", key="k2", expected_fence=5, result_repeat=("x", 1048575), expect={"error": "result_not_storable"}),
         lookup(key="k2", state="unknown", fence=1, reason="tool_error"), lookup(key="k9", absent=True))
    return {
        "description": (
            "Ledger cases (spec §6). Run each case on a fresh, empty ledger with maxResultBytes 1048576 and the "
            "default retention; run its steps in order and compare each step's result with `expect`. claim: "
            "toolName is any fixed valid name; `request` is the JSON text the claimant sends, opaque to the ledger "
            "(LEDGER-21); `claimId`, when present, is the claim's claim id (LEDGER-26), sent as given; expect "
            "{outcome:'claimed', fence, takeover} or {outcome:'existing', state, fence, ...} or {error:<code>} (the claim is "
            "refused with that code: invalid_ledger_input for a malformed claim id, stale_claim for the claim id a released "
            "row was released under or a claim id retired for the key) where "
            "result/error/reason/request, when present, MUST equal the claimed result's or the row's (result and request "
            "byte for byte, error as deep JSON equality). complete/fail/markUnknown/release/renew: expect {ok:true} or "
            "{error:<code>}. "
            "retire (LEDGER-28; only for a ledger whose capabilities.supports.retire is true: a harness reports a case "
            "with a retire step not applicable otherwise): call retire(key, claimId, options) with claimId and, when "
            "present, options sent as given (a key of \"\" is the empty string, not a label); expect {released:bool} or "
            "{error:<code>}. "
            "resolve (RESOLVE-1 to RESOLVE-5, LEDGER-27; only for a ledger whose capabilities.supports.resolve is true: a "
            "harness reports a case with a resolve step not applicable otherwise): call resolve with the object "
            "{key, ...resolveRequest}, key being the step's key and every member of `resolveRequest` (resolution, actor, "
            "reason, expectedFence, and any other) sent as given; with `resultRepeat` the request's resolution.result is "
            "the repeated string described below for complete. Expect {outcome:'resolved', state, fence, ...}: the call "
            "returned the row it wrote, compared as lookup's fields; or {error:<code>}, the call refused with that code "
            "(resolution_refused, stale_claim, invalid_ledger_input, result_not_storable), and when present `state` MUST "
            "equal the error's state (resolution_refused: the row's state, \"absent\" for no row; its key MUST be the key "
            "sent) and `field` the error's field (invalid_ledger_input: the member refused, a resolution's own member as "
            "resolution.<name>). "
            "auditTrail (RESOLVE-7; only for a ledger whose capabilities.supports.auditTrail is true, a case with an "
            "auditTrail step not applicable otherwise): call auditTrail(key); expect {entries:[...]}: as many entries, in "
            "order, each entry's members named in the expectation equal (`at` is not named: it MUST be a number, and "
            "never smaller than the entry before). "
            "complete with `resultRepeat: {char, count}` instead of `result` stores the JSON string '\"' + char "
            "repeated count times + '\"' (count + 2 characters; its UTF-8 size decides LEDGER-10). lookup: expect "
            "{absent:true} or the fields to compare (state, fence, and when present result, error, reason, owner, request). "
            "Test hooks: expire_lease moves the lease of the key's current in-flight claim into the past; "
            "expire_retention moves the retention of the key's finished or released row into the past (nothing to do if "
            "lookup already reports the key absent); expire_retired moves the end of the retention of every claim id "
            "retired for the key into the past (retire's time plus the retention); a harness MAY "
            "implement either by advancing one injected clock (never backwards), and every case is written so that "
            "its expectations hold either way. sweep: expect {removed:n}. Generated by spec/reference/generate_vectors.py."
        ),
        "cases": cases,
    }
