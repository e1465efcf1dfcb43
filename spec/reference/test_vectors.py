"""Runs every vector in spec/vectors against the Python reference (keys, and the ledger cases on ledger_ref).

    python3 spec/reference/test_vectors.py

Exits non-zero on any mismatch; the last line is "N passed, M failed".
Rejection vectors whose offending value only JavaScript has (undefined, bigint, a
function, a Date) are skipped and counted; NaN, ±Infinity and cycles are
substituted, since Python has them too.
"""

from __future__ import annotations

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import dispatch_once_ref as ref  # noqa: E402
import ledger_ref  # noqa: E402

VECTORS = os.path.join(HERE, "..", "vectors")
PY_SPECIALS = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


def load(name: str) -> dict:
    with open(os.path.join(VECTORS, name), encoding="utf-8") as f:
        return json.load(f)


def set_pointer(root, pointer: str, value):
    if pointer == "":
        return value
    tokens = [t.replace("~1", "/").replace("~0", "~") for t in pointer.split("/")[1:]]
    target = root
    for t in tokens[:-1]:
        target = target[int(t)] if isinstance(target, list) else target[t]
    if isinstance(target, list):
        target[int(tokens[-1])] = value
    else:
        target[tokens[-1]] = value
    return root


def run_ledger_case(case: dict) -> list[str]:
    """One ledger case on a fresh reference ledger; returns what differed from `expect`."""
    clock = {"now": 1_000_000}
    ledger = ledger_ref.ReferenceLedger(lambda: clock["now"])
    problems: list[str] = []

    def compare(where: str, got: dict, expect: dict) -> None:
        for field, want in expect.items():
            if field != "outcome" and got.get(field) != want:
                problems.append(f"{where}: {field} {got.get(field)!r} != {want!r}")

    def refused(fn) -> dict:
        try:
            fn()
            return {"ok": True}
        except ledger_ref.LedgerError as e:
            return {"error": e.code}

    for i, step in enumerate(case["steps"]):
        where, key, want = f"step {i} {step['op']}", step.get("key", "k1"), step.get("expect")
        op = step["op"]
        if op == "claim":
            outcome: dict = {}

            def run_claim() -> None:
                outcome.update(ledger.claim(key, step["effect"], step["owner"], step["leaseMs"], step["request"], step.get("claimId")))

            answer = refused(run_claim)
            if "outcome" not in want or "error" in answer:
                if answer != want:
                    problems.append(f"{where}: {answer} != {want}")
            elif outcome["outcome"] != want["outcome"]:
                problems.append(f"{where}: outcome {outcome['outcome']}")
            elif outcome["outcome"] == "claimed":
                compare(where, outcome, {k: v for k, v in want.items() if k in ("fence", "takeover", "request")})
            else:
                compare(where, outcome["row"], want)
        elif op in ("complete", "fail", "markUnknown", "release", "renew"):
            fence = step["fence"]
            if op == "complete":
                rep = step.get("resultRepeat")
                text = f'"{rep["char"] * rep["count"]}"' if rep else step["result"]
                answer = refused(lambda: ledger.complete(key, fence, text))
            elif op == "fail":
                answer = refused(lambda: ledger.fail(key, fence, step["error"]))
            elif op == "markUnknown":
                answer = refused(lambda: ledger.mark_unknown(key, fence, step["reason"]))
            elif op == "release":
                answer = refused(lambda: ledger.release(key, fence))
            else:
                answer = refused(lambda: ledger.renew(key, fence, step["leaseMs"]))
            if answer != want:
                problems.append(f"{where}: {answer} != {want}")
        elif op == "retire":
            got: dict = {}

            def run_retire() -> None:
                got.update(ledger.retire(key, step["claimId"], step.get("options")))

            answer = refused(run_retire)
            if "error" not in answer:
                answer = got
            if answer != want:
                problems.append(f"{where}: {answer} != {want}")
        elif op == "resolve":
            # RESOLVE-1 to RESOLVE-5: {key, ...resolveRequest} as given; resultRepeat makes resolution.result.
            request = {"key": key, **json.loads(json.dumps(step["resolveRequest"]))}
            rep = step.get("resultRepeat")
            if rep:
                request["resolution"]["result"] = f'"{rep["char"] * rep["count"]}"'
            try:
                got = {"outcome": "resolved", **ledger.resolve(request)}
            except ledger_ref.LedgerError as e:
                got = {"error": e.code, **{k: v for k, v in e.details.items() if k in ("state", "field")}}
                if e.code == "resolution_refused" and e.details.get("key") != key:
                    problems.append(f"{where}: resolution_refused carries key {e.details.get('key')!r}, not {key!r}")
            if "outcome" in want and "outcome" in got:
                compare(where, got, want)
            elif "outcome" in want or "outcome" in got or {k: got.get(k) for k in want} != want:
                problems.append(f"{where}: {got} != {want}")
        elif op == "auditTrail":
            entries = ledger.audit_trail(key)
            wanted = want["entries"]
            if len(entries) != len(wanted):
                problems.append(f"{where}: {len(entries)} entries != {len(wanted)}: {entries}")
            for n, (got_entry, want_entry) in enumerate(zip(entries, wanted)):
                compare(f"{where} entry {n}", got_entry, want_entry)
                if n > 0 and got_entry["at"] < entries[n - 1]["at"]:
                    problems.append(f"{where} entry {n}: at {got_entry['at']} before the entry before")
        elif op == "expire_retired":
            # The end of the retention of every claim id retired for the key (LEDGER-28), on the one clock.
            until = max(ledger.retired.get(key, {}).values(), default=None)
            if until is not None:
                clock["now"] = max(clock["now"], until)
        elif op == "lookup":
            row = ledger.lookup(key)
            if want.get("absent"):
                if row is not None:
                    problems.append(f"{where}: expected absent, got {row['state']}")
            elif row is None:
                problems.append(f"{where}: absent")
            else:
                compare(where, row, want)
        elif op == "expire_lease":
            row = ledger.lookup(key)
            if row is None or row["state"] != "in_flight":
                problems.append(f"{where}: no in-flight row")
            else:
                clock["now"] = max(clock["now"], row["leaseExpiresAt"])
        elif op == "expire_retention":
            row = ledger.lookup(key)  # absent: an earlier clock advance already passed its retention
            if row is not None and row["state"] == "in_flight":
                problems.append(f"{where}: row is in flight")
            elif row is not None:
                clock["now"] = max(clock["now"], row["finishedAt"] + ledger_ref.DEFAULT_RETENTION_MS)
        elif op == "sweep":
            removed = ledger.sweep()
            if removed != want["removed"]:
                problems.append(f"{where}: removed {removed}")
        else:
            problems.append(f"{where}: unknown op")
    return problems


def main() -> int:
    passed, failures, skipped = 0, [], 0

    def check(vid: str, ok: bool, detail: str) -> None:
        nonlocal passed
        if ok:
            passed += 1
        else:
            failures.append(f"{vid}: {detail}")

    for v in load("canonical.json")["vectors"]:
        try:
            got = ref.canonicalize(v["input"])
        except Exception as e:  # a vector must never raise
            got = f"raised {e!r}"
        check(v["id"], got == v["canonical"], f"got {got!r}")

    for v in load("keys.json")["vectors"]:
        i = v["input"]
        ordinal = i.get("ordinal", 0)
        try:
            canonical = ref.canonicalize(i["args"])
            material = ref.key_material(i["conversationId"], i["turnIndex"], i["name"], i["args"], ordinal)
            key = ref.derive_key(i["conversationId"], i["turnIndex"], i["name"], i["args"], ordinal)
        except Exception as e:
            check(v["id"], False, f"raised {e!r}")
            continue
        check(v["id"], canonical == v["canonicalArgs"], f"canonicalArgs {canonical!r}")
        check(v["id"], material == v["material"], f"material {material!r}")
        check(v["id"], key == v["key"], f"key {key}")
        chapter = ref.chapter_idempotency_key(i["conversationId"], i["turnIndex"], i["name"], i["args"], ordinal)
        check(v["id"], chapter == v["chapterPythonKey"], f"chapterPythonKey {chapter}")
        # KEY-8: where the serialisations agree the keys MUST be equal, elsewhere they MUST differ.
        check(v["id"], (chapter == key) == v["pythonAgrees"], f"pythonAgrees is {v['pythonAgrees']} but chapter key {chapter}, key {key}")

    for v in load("rejections.json")["vectors"]:
        i = json.loads(json.dumps(v["input"]))
        special = v.get("special")
        if special is not None:
            if special == "cycle":  # Python can build a cycle too: the value at specialPath becomes args
                i["args"] = set_pointer(i["args"], v["specialPath"], i["args"])
            elif special in PY_SPECIALS:
                i["args"] = set_pointer(i["args"], v["specialPath"], PY_SPECIALS[special])
            else:
                skipped += 1
                continue
        try:
            ref.derive_key(i["conversationId"], i["turnIndex"], i["name"], i["args"], i.get("ordinal", 0))
        except (ref.InvalidKeyInput, ref.NotCanonicalizable) as e:
            want = v["error"]
            got = {"code": e.code}
            if "field" in want:
                got["field"] = getattr(e, "field", None)
            if "problem" in want:
                got["problem"] = getattr(e, "problem", None)
            if "path" in want:
                got["path"] = getattr(e, "path", None)
            check(v["id"], got == want, f"got {got}")
        except Exception as e:
            check(v["id"], False, f"raised an untyped error {e!r}")
        else:
            check(v["id"], False, "not rejected")

    for v in load("identity.json")["vectors"]:
        projection = ref.identity_projection(v["args"], v["identity"])
        i = v["input"]
        key = ref.derive_key(i["conversationId"], i["turnIndex"], i["name"], projection, i["ordinal"])
        check(v["id"], projection == v["projection"], f"projection {projection}")
        check(v["id"], ref.canonicalize(projection) == v["canonicalProjection"], "canonicalProjection")
        check(v["id"], key == v["key"], f"key {key}")

    for c in load("ledger-transitions.json")["cases"]:
        problems = run_ledger_case(c)
        check(c["id"], not problems, "; ".join(problems))

    for f in failures:
        print(f"FAIL {f}")
    print(f"skipped {skipped} rejection vectors whose value only JavaScript can hold (undefined, bigint, function, Date)")
    print(f"{passed} passed, {len(failures)} failed")
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
