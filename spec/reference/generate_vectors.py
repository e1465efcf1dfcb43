"""Writes spec/vectors/*.json. Expected values come from the Python reference
(dispatch_once_ref.py); the TypeScript implementation is then checked against the files
(crosscheck_ts.mjs). Run: python3 spec/reference/generate_vectors.py
"""

from __future__ import annotations

import json
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import dispatch_once_ref as ref  # noqa: E402

VECTORS = os.path.join(HERE, "..", "vectors")


def write(name: str, doc: dict, ascii_only: bool = False) -> None:
    path = os.path.join(VECTORS, name)
    # A deeply nested input (the KEY-6 depth-limit vectors) is written on one line: indented,
    # 513 levels would take half a megabyte of spaces.
    flat: dict[str, str] = {}
    text = json.dumps(_flatten_deep(doc, flat, ascii_only), ensure_ascii=ascii_only, indent=2, allow_nan=False)
    for marker, compact in flat.items():
        text = text.replace(json.dumps(marker), compact)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text + "\n")
    # The file must read back to exactly the values it was generated from.
    with open(path, encoding="utf-8") as f:
        assert json.load(f) == json.loads(json.dumps(doc)), name


def _height(value: object) -> int:
    """Nesting of lists and dicts ("[]" is 1); iterative, so any depth is measured."""
    best, work = 0, [(value, 0)]
    while work:
        item, depth = work.pop()
        if isinstance(item, (list, dict)):
            best = max(best, depth + 1)
            work.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return best


def _flatten_deep(value: object, flat: dict[str, str], ascii_only: bool, limit: int = 16) -> object:
    """A copy of the document where each vector `input` nested more than `limit` deep is a
    marker string, recorded in `flat` with its compact JSON text."""
    if isinstance(value, dict):
        copy = {}
        for k, v in value.items():
            if k == "input" and _height(v) > limit:
                marker = f"@@deep-input-{len(flat)}@@"
                flat[marker] = json.dumps(v, ensure_ascii=ascii_only, separators=(",", ":"), allow_nan=False)
                copy[k] = marker
            else:
                copy[k] = _flatten_deep(v, flat, ascii_only, limit)
        return copy
    if isinstance(value, list):
        return [_flatten_deep(v, flat, ascii_only, limit) for v in value]
    return value


def nested_arrays(levels: int) -> list:
    """An empty array inside levels - 1 arrays: "[]" for 1, "[[]]" for 2."""
    value: list = []
    for _ in range(levels - 1):
        value = [value]
    return value


def nested_objects(levels: int, name: str = "a") -> dict:
    """An empty object inside levels - 1 objects, each the only member of its parent."""
    value: dict = {}
    for _ in range(levels - 1):
        value = {name: value}
    return value


def double(hex_bits: str) -> float:
    return struct.unpack(">d", bytes.fromhex(hex_bits))[0]


# ------------------------------------------------------------------ canonical.json

RFC8785_NUMBERS = [  # RFC 8785 Appendix B: IEEE-754 bit pattern -> expected text
    ("0000000000000000", "0"),
    ("8000000000000000", "0"),
    ("0000000000000001", "5e-324"),
    ("8000000000000001", "-5e-324"),
    ("7fefffffffffffff", "1.7976931348623157e+308"),
    ("ffefffffffffffff", "-1.7976931348623157e+308"),
    ("4340000000000000", "9007199254740992"),
    ("c340000000000000", "-9007199254740992"),
    ("4430000000000000", "295147905179352830000"),
    ("44b52d02c7e14af5", "9.999999999999997e+22"),
    ("44b52d02c7e14af6", "1e+23"),
    ("44b52d02c7e14af7", "1.0000000000000001e+23"),
    ("444b1ae4d6e2ef4e", "999999999999999700000"),
    ("444b1ae4d6e2ef4f", "999999999999999900000"),
    ("444b1ae4d6e2ef50", "1e+21"),
    ("3eb0c6f7a0b5ed8c", "9.999999999999997e-7"),
    ("3eb0c6f7a0b5ed8d", "0.000001"),
    ("41b3de4355555553", "333333333.3333332"),
    ("41b3de4355555554", "333333333.33333325"),
    ("41b3de4355555555", "333333333.3333333"),
    ("41b3de4355555556", "333333333.3333334"),
    ("41b3de4355555557", "333333333.33333343"),
    ("becbf647612f3696", "-0.0000033333333333333333"),
    ("43143ff3c1cb0959", "1424953923781206.2"),
]


def canonical_vectors() -> dict:
    vectors = []

    def add(rule: str, description: str, value: object, expected: str | None = None) -> None:
        got = ref.canonicalize(value)
        if expected is not None:
            assert got == expected, (description, got, expected)
        vectors.append(
            {
                "id": f"CAN-{len(vectors) + 1:03d}",
                "rule": rule,
                "description": description,
                "input": value,
                "canonical": got,
            }
        )

    for bits, text in RFC8785_NUMBERS:
        add("KEY-5", f"RFC 8785 Appendix B number, IEEE-754 bits {bits}", double(bits), text)
    add("KEY-5", "a number written 1e21 is printed 1e+21 (exponent form starts at 1e21)", 1e21, "1e+21")
    add("KEY-5", "1e20 is printed in full", 1e20, "100000000000000000000")
    add("KEY-5", "1e-7 uses exponent form", 1e-7, "1e-7")
    add("KEY-5", "0.000001 stays positional (exponent form starts below 1e-6)", 0.000001, "0.000001")
    add("KEY-5", "an integer literal beyond 2^53 is rounded to the nearest double first", 123456789012345678901, "123456789012345680000")
    add("KEY-5", "2^53 + 1 rounds to 2^53", 9007199254740993, "9007199254740992")
    add("KEY-5", "-0 (JSON text -0.0; JSON.parse gives -0) serialises as 0", -0.0, "0")
    add("KEY-5", "1.0 is the number 1", 1.0, "1")
    add("KEY-5", "4.50 is 4.5; trailing zeros vanish", 4.5, "4.5")
    add("KEY-5", "0.1 + 0.2 keeps its shortest round-trip digits", 0.1 + 0.2, "0.30000000000000004")
    add("KEY-5", "negative fraction", -2.25, "-2.25")
    add("KEY-5", "1e16 is printed in full, unlike Python's repr", 1e16, "10000000000000000")
    add(
        "KEY-5",
        "RFC 8785 §3.2.2 sample object (numbers, escapes, literals)",
        {
            "numbers": [333333333.33333329, 1e30, 4.50, 2e-3, 0.000000000000000000000000001],
            "string": "\u20ac$\u000f\u000aA'\u0042\u0022\u005c\\\"/",
            "literals": [None, True, False],
        },
        '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
        '"string":"\u20ac$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}',
    )
    add(
        "KEY-5",
        "RFC 8785 §3.2.3 sorting sample: member names ordered by UTF-16 code units",
        {
            "\u20ac": "Euro Sign",
            "\r": "Carriage Return",
            "\ufb33": "Hebrew Letter Dalet With Dagesh",
            "1": "One",
            "\U0001f600": "Emoji: Grinning Face",
            "\u0080": "Control",
            "\u00f6": "Latin Small Letter O With Diaeresis",
        },
        '{"\\r":"Carriage Return","1":"One","\u0080":"Control","\u00f6":"Latin Small Letter O With Diaeresis",'
        '"\u20ac":"Euro Sign","\U0001f600":"Emoji: Grinning Face","\ufb33":"Hebrew Letter Dalet With Dagesh"}',
    )
    add(
        "KEY-5",
        "a non-BMP member name (UTF-16 D83D DE00) sorts before U+E000, though its code point is larger",
        {"\ue000": 1, "\U0001f600": 2},
        '{"\U0001f600":2,"\ue000":1}',
    )
    add(
        "KEY-5",
        "U+FFFF sorts after a non-BMP name; U+D7FF sorts before it",
        {"\uffff": "c", "\U00010000": "b", "\ud7ff": "a"},
        '{"\ud7ff":"a","\U00010000":"b","\uffff":"c"}',
    )
    add("KEY-5", "upper case sorts before lower case; digits before letters", {"b": 1, "a": 2, "B": 3, "A": 4, "1": 5}, '{"1":5,"A":4,"B":3,"a":2,"b":1}')
    add("KEY-5", "numeric-looking names sort as strings, not numbers", {"10": "ten", "2": "two", "1": "one"}, '{"1":"one","10":"ten","2":"two"}')
    add("KEY-5", "a name that is a prefix of another sorts first", {"ab": 1, "a": 2, "": 3}, '{"":3,"a":2,"ab":1}')
    add(
        "KEY-5",
        "nested objects are sorted at every level; arrays keep their order",
        {"z": {"y": [3, {"b": 1, "a": 2}, 1], "x": None}, "a": {"d": True, "c": False}},
        '{"a":{"c":false,"d":true},"z":{"x":null,"y":[3,{"a":2,"b":1},1]}}',
    )
    add("KEY-5", "empty object", {}, "{}")
    add("KEY-5", "empty array", [], "[]")
    add("KEY-5", "empty containers nested", {"a": {}, "b": [], "c": [[], {}]}, '{"a":{},"b":[],"c":[[],{}]}')
    add("KEY-5", "empty string and empty member name", {"": ""}, '{"":""}')
    add("KEY-5", "top-level null", None, "null")
    add("KEY-5", "top-level true", True, "true")
    add("KEY-5", "top-level string", "x", '"x"')
    add("KEY-5", "top-level zero", 0, "0")
    add(
        "KEY-5",
        "control characters: short escapes for \\b \\t \\n \\f \\r, \\u00XX (lower-case hex) for the rest",
        "\u0000\u0001\u0008\u0009\u000a\u000b\u000c\u000d\u001f",
        '"\\u0000\\u0001\\b\\t\\n\\u000b\\f\\r\\u001f"',
    )
    add("KEY-5", "quote and backslash are escaped; solidus is not", 'say "hi" \\ a/b', '"say \\"hi\\" \\\\ a/b"')
    add("KEY-5", "U+007F (DEL) is emitted as is", "a\u007fb", '"a\u007fb"')
    add("KEY-5", "U+2028 and U+2029 are emitted as is", "a\u2028b\u2029c", '"a\u2028b\u2029c"')
    add("KEY-5", "non-ASCII text is emitted as UTF-8, never \\u-escaped", "Zo\u00eb \u4e2d\u6587 \U0001f389", '"Zo\u00eb \u4e2d\u6587 \U0001f389"')
    add("KEY-5", "non-ASCII member name", {"\u540d\u524d": "\u5024"}, '{"\u540d\u524d":"\u5024"}')
    add("KEY-5", "a valid surrogate pair written as \\ud83d\\ude00 is one character", "\U0001f600", '"\U0001f600"')
    add("KEY-5", "mixed array keeps element order", [1, "1", True, None, {}, []], '[1,"1",true,null,{},[]]')
    add(
        "KEY-5",
        "a chapter-style payment: members sorted, no whitespace",
        {"payee": "acct_991", "amount": 4200, "currency": "EUR", "reference": "INV-2024-113"},
        '{"amount":4200,"currency":"EUR","payee":"acct_991","reference":"INV-2024-113"}',
    )
    limit = ref.MAX_CANONICAL_DEPTH
    add(
        "KEY-6",
        f"arrays nested exactly MAX_CANONICAL_DEPTH ({limit}) deep are accepted (one more is too_deep, rejections.json)",
        nested_arrays(limit),
        "[" * limit + "]" * limit,
    )
    add(
        "KEY-6",
        f"objects count as levels like arrays: an object chain {limit} deep, beside a shallow array, is accepted",
        {"a": nested_objects(limit - 1, "b"), "z": [nested_arrays(1)]},
        '{"a":' + '{"b":' * (limit - 2) + "{}" + "}" * (limit - 2) + ',"z":[[]]}',
    )
    # RFC 8785 does not normalise Unicode, and neither does KEY-5: canonically equivalent
    # spellings stay different texts (a tool absorbs them in its schema, spec section 5.3).
    add("KEY-5", "NFC: U+00E9 is written as itself", {"payee": "Caf\u00e9"}, '{"payee":"Caf\u00e9"}')
    add("KEY-5", "NFD: e + U+0301 is written as given, not composed (no normalisation)", {"payee": "Cafe\u0301"},
        '{"payee":"Cafe\u0301"}')
    return {
        "description": (
            "RFC 8785 (JCS) serialisation vectors for spec KEY-5. `input` is a JSON value; `canonical` is the exact "
            "expected text. Numbers are IEEE-754 doubles: an implementation parses `input` with a standard JSON parser "
            "(JSON.parse, json.loads then int->float) before canonicalising, so 1.0 is 1, an integer literal beyond 2^53 "
            "is rounded to the nearest double, and -0.0 is minus zero. The KEY-6 vectors pin the depth limit from "
            f"below: nesting of exactly MAX_CANONICAL_DEPTH ({ref.MAX_CANONICAL_DEPTH}) is accepted (written on one "
            "line). Generated by spec/reference/generate_vectors.py."
        ),
        "vectors": vectors,
    }


# ------------------------------------------------------------------ keys.json

PAYMENT = {"payee": "acct_991", "amount": 4200, "currency": "EUR", "reference": "INV-2024-113"}
CONV = "conv_01HZX3QK7D"


def key_vectors() -> dict:
    vectors = []

    def add(rule: str, description: str, agrees: bool, conversation_id=CONV, turn_index=4, name="send_payment", args=None, ordinal=0, omit_ordinal=False):
        args = PAYMENT if args is None else args
        inp = {"conversationId": conversation_id, "turnIndex": turn_index, "name": name, "args": args}
        if not omit_ordinal:
            inp["ordinal"] = ordinal
        material = ref.key_material(conversation_id, turn_index, name, args, 0 if omit_ordinal else ordinal)
        key = ref.derive_key(conversation_id, turn_index, name, args, 0 if omit_ordinal else ordinal)
        chapter = ref.chapter_idempotency_key(conversation_id, turn_index, name, args, 0 if omit_ordinal else ordinal)
        assert (chapter == key) == agrees, (description, chapter, key)
        vectors.append(
            {
                "id": f"KV-{len(vectors) + 1:03d}",
                "rule": rule,
                "description": description,
                "input": inp,
                "canonicalArgs": ref.canonicalize(args),
                "material": material,
                "key": key,
                "chapterPythonKey": chapter,
                "pythonAgrees": chapter == key,
            }
        )
        return key

    # ---- the ASCII domain: identical to the chapter's function (KEY-8)
    base = add("KEY-1", "the chapter's send_payment call", True)
    assert add("KEY-1", "same call, members in another order: same key", True,
               args={"reference": "INV-2024-113", "currency": "EUR", "amount": 4200, "payee": "acct_991"}) == base
    assert add("KEY-1", "same call, members in a third order: same key", True,
               args={"amount": 4200, "reference": "INV-2024-113", "payee": "acct_991", "currency": "EUR"}) == base
    assert add("KEY-7", "ordinal omitted: defaults to 0, same key as ordinal 0", True, omit_ordinal=True) == base
    assert add("TURN-4", "second identical call in the turn: ordinal 1, new key", True, ordinal=1) != base
    add("TURN-4", "third identical call in the turn: ordinal 2", True, ordinal=2)
    assert add("TURN-1", "the same call in the next turn: new key", True, turn_index=5) != base
    add("TURN-1", "first turn of a conversation", True, turn_index=0)
    add("KEY-1", "another conversation: new key", True, conversation_id="conv_01HZX3QK7E")
    add("KEY-1", "another tool with the same arguments: new key", True, name="void_payment")
    add("KEY-1", "amount differs by one cent: new key", True, args={**PAYMENT, "amount": 4201})
    add("KEY-4", "largest turn index and ordinal (2^53 - 1)", True, turn_index=9007199254740991, ordinal=9007199254740991)
    add("KEY-2", "conversation id using every allowed punctuation mark", True, conversation_id="tenant-7:user_42.conv~2024-05")
    add("KEY-2", "conversation id of the maximum length (256)", True, conversation_id="c" * 256)
    add("KEY-3", "tool name of the maximum length (64)", True, name="t" * 63 + "_")
    add("KEY-3", "one-character tool name with a hyphen alphabet", True, name="a", args={"q": "x"})
    add("KEY-5", "nested objects and arrays", True, name="create_order",
        args={"order": {"items": [{"sku": "A-1", "qty": 2}, {"sku": "B-7", "qty": 1}], "ship": {"zip": "69001", "city": "Lyon"}}})
    add("KEY-5", "booleans and null", True, name="create_ticket", args={"notify": True, "dry_run": False, "assignee": None})
    add("KEY-5", "empty arguments", True, name="rotate_keys", args={})
    add("KEY-5", "arguments that are an array", True, name="bulk_tag", args=[3, 1, 2])
    add("KEY-5", "safe integers at both ends and zero", True, name="adjust",
        args={"max": 9007199254740991, "min": -9007199254740991, "zero": 0, "neg": -17})
    add("KEY-8", "2^53 itself is printed identically by both", True, name="adjust", args={"n": 9007199254740992})
    add("KEY-5", "escapes both serialisations agree on: quote, backslash, newline, tab, solidus", True, name="post_note",
        args={"text": 'line one\nline "two"\tend \\ a/b'})
    add("KEY-5", "control characters below U+0020 escaped alike", True, name="post_note", args={"text": "\u0001\u001f\u0008\u000c\r"})
    add("KEY-5", "upper-case, digits and underscore sort alike in both", True, name="set_flags", args={"a": 1, "A": 2, "_": 3, "0": 4, "Z": 5})
    add("KEY-5", "numeric-looking member names sort as strings in both", True, name="set_flags", args={"10": "ten", "2": "two", "1": "one"})
    add("KEY-7", "a '|' inside the arguments cannot shift a separator", True, name="post_note", args={"text": "a|b||c"})
    add("KEY-7", "arguments that imitate key material", True, name="post_note", args={"text": "conv_01HZX3QK7D|4|send_payment|0|{}"})
    add("KEY-5", "empty member name and empty string", True, name="post_note", args={"": ""})
    add("KEY-5", "member names containing spaces, '~' and '/'", True, name="post_note", args={"first name": "Ada", "a/b": 1, "c~d": 2})
    add("KEY-5", "deep nesting", True, name="post_note", args={"a": {"b": {"c": {"d": {"e": {"f": {"g": {"h": [[[[]]]]}}}}}}}})
    add("KEY-8", "binary fractions both print the same way", True, name="adjust", args={"half": 0.5, "neg": -2.25, "pi": 3.14159})
    add("KEY-8", "an exponent both print the same way (1e+21, -1.5e-10)", True, name="adjust", args={"big": 1e21, "tiny": -1.5e-10})

    # ---- where JCS and the chapter's json.dumps differ (KEY-8, Appendix A)
    add("KEY-8", "non-ASCII payee: JCS emits UTF-8, Python escapes \\u00e9", False, args={**PAYMENT, "payee": "Soci\u00e9t\u00e9 G\u00e9n\u00e9rale"})
    add("KEY-8", "CJK member name and value", False, name="post_note", args={"\u540d\u524d": "\u5024"})
    add("KEY-8", "emoji (outside the BMP)", False, name="post_note", args={"text": "paid \U0001f389"})
    add("KEY-8", "U+2028 inside a string", False, name="post_note", args={"text": "a\u2028b"})
    add("KEY-8", "U+007F (DEL): Python escapes it as \\u007f, JCS does not", False, name="post_note", args={"text": "a\u007fb"})
    add("KEY-8", "amount 42.0: JCS prints 42, Python 42.0", False, args={**PAYMENT, "amount": 42.0})
    add("KEY-8", "100.0: JCS 100, Python 100.0", False, name="adjust", args={"n": 100.0})
    add("KEY-8", "1e-7: JCS 1e-7, Python 1e-07", False, name="adjust", args={"n": 1e-7})
    add("KEY-8", "0.000001: JCS 0.000001, Python 1e-06", False, name="adjust", args={"n": 0.000001})
    add("KEY-8", "1e16: JCS 10000000000000000, Python 1e+16", False, name="adjust", args={"n": 1e16})
    add("KEY-8", "2^53 + 1: JCS rounds to the double 9007199254740992, Python keeps the integer", False, name="adjust", args={"n": 9007199254740993})
    add("KEY-8", "21-digit integer: JCS 123456789012345680000", False, name="adjust", args={"n": 123456789012345678901})
    add("KEY-8", "-0.0: JCS 0, Python -0.0", False, name="adjust", args={"n": -0.0})
    add("KEY-8", "a non-BMP member name vs U+E000: JCS sorts by UTF-16 units, Python by code point (and escapes both)", False,
        name="post_note", args={"\ue000": 1, "\U0001f600": 2})
    add("KEY-4", "turn index written 3.0 in JSON is the number 3 (the chapter's f-string prints 3.0)", False, turn_index=3.0)

    # ---- KEY-5 does not normalise Unicode: an NFC and an NFD spelling of one payee are two keys
    # (the schema's .normalize("NFC") makes them one, spec section 5.3)
    nfc = add("KEY-5", "payee in NFC (U+00E9)", False, args={**PAYMENT, "payee": "Caf\u00e9"})
    nfd = add("KEY-5", "the same payee in NFD (e + U+0301): another key, no normalisation", False,
              args={**PAYMENT, "payee": "Cafe\u0301"})
    assert nfc != nfd
    return {
        "description": (
            "Key derivation vectors (spec §3). input.args is a JSON value parsed with a standard JSON parser "
            "(numbers are doubles: see canonical.json). `material` is the exact UTF-8 text that is hashed, `key` the "
            "first 32 hex digits of its SHA-256. `chapterPythonKey` is the chapter's Python idempotency_key over the "
            "same JSON input as json.loads returns it (ordinal 0 when input.ordinal is absent); `pythonAgrees` is "
            "true when it equals `key` (KEY-8). Generated by spec/reference/generate_vectors.py."
        ),
        "vectors": vectors,
    }


# ------------------------------------------------------------------ rejections.json


def rejection_vectors() -> dict:
    vectors = []
    ok = {"conversationId": CONV, "turnIndex": 4, "name": "send_payment", "args": PAYMENT, "ordinal": 0}

    def add(rule: str, description: str, error: dict, special: str | None = None, special_path: str | None = None, **overrides):
        inp = {**ok, **overrides}
        entry = {"id": f"REJ-{len(vectors) + 1:03d}", "rule": rule, "description": description, "input": inp}
        if special is not None:
            entry["special"] = special
            entry["specialPath"] = special_path
        entry["error"] = error
        if special in (None, "NaN", "Infinity", "-Infinity"):  # verify with the Python reference
            args = substitute(inp["args"], special, special_path) if special else inp["args"]
            try:
                ref.derive_key(inp["conversationId"], inp["turnIndex"], inp["name"], args, inp.get("ordinal", 0))
            except (ref.InvalidKeyInput, ref.NotCanonicalizable) as e:
                got = {"code": e.code}
                if isinstance(e, ref.InvalidKeyInput):
                    got["field"] = e.field
                else:
                    got["problem"], got["path"] = e.problem, e.path
                assert got == error, (description, got, error)
            else:
                raise AssertionError(f"not rejected: {description}")
        vectors.append(entry)

    def bad_field(field: str) -> dict:
        return {"code": "invalid_key_input", "field": field}

    def bad_value(problem: str, path: str) -> dict:
        return {"code": "not_canonicalizable", "problem": problem, "path": path}

    cid = "conversationId"
    add("KEY-2", "empty conversation id", bad_field(cid), conversationId="")
    add("KEY-2", "conversation id containing '|'", bad_field(cid), conversationId="conv|1")
    add("KEY-2", "conversation id containing a space", bad_field(cid), conversationId="conv 1")
    add("KEY-2", "conversation id with a trailing newline", bad_field(cid), conversationId="conv_1\n")
    add("KEY-2", "conversation id with a non-ASCII letter", bad_field(cid), conversationId="conv_\u00e9")
    add("KEY-2", "conversation id with '/'", bad_field(cid), conversationId="tenant/conv")
    add("KEY-2", "conversation id of 257 characters", bad_field(cid), conversationId="c" * 257)
    add("KEY-2", "conversation id that is a number", bad_field(cid), conversationId=12345)
    add("KEY-2", "conversation id null", bad_field(cid), conversationId=None)
    add("KEY-3", "empty tool name", bad_field("name"), name="")
    add("KEY-3", "tool name with a space", bad_field("name"), name="send payment")
    add("KEY-3", "tool name with '.' (allowed in conversation ids, not in tool names)", bad_field("name"), name="payments.send")
    add("KEY-3", "tool name with '|'", bad_field("name"), name="send|payment")
    add("KEY-3", "tool name with ':'", bad_field("name"), name="mcp:send_payment")
    add("KEY-3", "tool name of 65 characters", bad_field("name"), name="t" * 65)
    add("KEY-3", "tool name with a non-ASCII letter", bad_field("name"), name="pay\u00e9")
    add("KEY-4", "negative turn index", bad_field("turnIndex"), turnIndex=-1)
    add("KEY-4", "fractional turn index", bad_field("turnIndex"), turnIndex=1.5)
    add("KEY-4", "turn index 2^53 (not a safe integer)", bad_field("turnIndex"), turnIndex=9007199254740992)
    add("KEY-4", "turn index given as a string", bad_field("turnIndex"), turnIndex="3")
    add("KEY-4", "turn index true", bad_field("turnIndex"), turnIndex=True)
    add("KEY-4", "turn index null", bad_field("turnIndex"), turnIndex=None)
    add("KEY-4", "negative ordinal", bad_field("ordinal"), ordinal=-1)
    add("KEY-4", "fractional ordinal", bad_field("ordinal"), ordinal=0.5)
    add("KEY-4", "ordinal 2^53", bad_field("ordinal"), ordinal=9007199254740992)
    add("KEY-4", "ordinal given as a string", bad_field("ordinal"), ordinal="0")
    add("KEY-4", "ordinal null (only an absent ordinal defaults to 0)", bad_field("ordinal"), ordinal=None)
    add("KEY-6", "NaN amount", bad_value("non_finite_number", "/amount"), "NaN", "/amount", args={**PAYMENT, "amount": None})
    add("KEY-6", "Infinity amount", bad_value("non_finite_number", "/amount"), "Infinity", "/amount", args={**PAYMENT, "amount": None})
    add("KEY-6", "-Infinity inside an array", bad_value("non_finite_number", "/limits/1"), "-Infinity", "/limits/1", name="adjust", args={"limits": [0, None]})
    add("KEY-6", "NaN as the whole arguments", bad_value("non_finite_number", ""), "NaN", "", name="adjust", args=None)
    add("KEY-6", "lone high surrogate in a string", bad_value("lone_surrogate", "/memo"), args={**PAYMENT, "memo": "abc\ud800"})
    add("KEY-6", "lone low surrogate in a string", bad_value("lone_surrogate", "/memo"), args={**PAYMENT, "memo": "\udc00xyz"})
    add("KEY-6", "surrogates in the wrong order", bad_value("lone_surrogate", "/memo"), args={**PAYMENT, "memo": "\ude00\ud83d"})
    add("KEY-6", "lone surrogate in a member name", bad_value("lone_surrogate", "/\ud800"), name="post_note", args={"\ud800": 1})
    add("KEY-6", "lone surrogate deep inside, with '/' and '~' escaped in the pointer", bad_value("lone_surrogate", "/a~1b/c~0d/0"),
        name="post_note", args={"a/b": {"c~d": ["\udfff"]}})
    add("KEY-6", "lone surrogate as the whole arguments", bad_value("lone_surrogate", ""), name="post_note", args="\udbff")
    add("KEY-6", "undefined in an array", bad_value("unsupported_type", "/tags/1"), "undefined_in_array", "/tags/1", name="bulk_tag", args={"tags": ["a", None]})
    add("KEY-6", "bigint amount", bad_value("unsupported_type", "/amount"), "bigint", "/amount", args={**PAYMENT, "amount": None})
    add("KEY-6", "function value", bad_value("unsupported_type", "/callback"), "function", "/callback", name="post_note", args={"callback": None})
    add("KEY-6", "Date value (not plain JSON data)", bad_value("unsupported_type", "/when"), "date", "/when", name="post_note", args={"when": None})
    add("KEY-6", "object that contains itself", bad_value("cycle", "/self"), "cycle", "/self", name="post_note", args={"self": None})
    add("KEY-6", "array that contains its parent object", bad_value("cycle", "/list/0"), "cycle", "/list/0", name="post_note", args={"list": [None]})
    limit = ref.MAX_CANONICAL_DEPTH
    add("KEY-6", f"arrays nested {limit + 1} deep as the whole arguments (MAX_CANONICAL_DEPTH is {limit})",
        bad_value("too_deep", "/0" * limit), name="post_note", args=nested_arrays(limit + 1))
    add("KEY-6", f"arrays under a member: the arguments object is level 1, the innermost array level {limit + 1}",
        bad_value("too_deep", "/tree" + "/0" * (limit - 1)), name="post_note", args={"note": "x", "tree": nested_arrays(limit)})
    add("KEY-6", f"objects nested {limit + 1} deep: objects count as levels like arrays",
        bad_value("too_deep", "/a" * limit), name="post_note", args=nested_objects(limit + 1))
    return {
        "description": (
            "Inputs that MUST be rejected (spec KEY-2..KEY-4, KEY-6). `error` lists what the error MUST carry: "
            "code; field for invalid_key_input; problem and path (a JSON Pointer into args, \"\" for args itself) for "
            "not_canonicalizable. Each input has exactly one problem. When `special` is present, JSON cannot carry the "
            "offending value: the harness replaces the value at `specialPath` (a JSON Pointer into args; \"\" means args "
            "itself) with NaN, Infinity, -Infinity, undefined (undefined_in_array), the bigint 1n (bigint), the function "
            "() => 1 (function), new Date(0) (date), or, for cycle, a reference to args itself (so the value at "
            "specialPath contains itself). Strings with lone surrogates are written with \\u escapes. Arrays and "
            f"objects nested deeper than MAX_CANONICAL_DEPTH ({ref.MAX_CANONICAL_DEPTH}; \"[]\" is at depth 1) are "
            "rejected with too_deep; those vectors are written on one line. "
            "Generated by spec/reference/generate_vectors.py."
        ),
        "vectors": vectors,
    }


def substitute(args, special, pointer):
    value = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}[special]
    if pointer == "":
        return value
    args = json.loads(json.dumps(args))
    tokens = [t.replace("~1", "/").replace("~0", "~") for t in pointer.split("/")[1:]]
    target = args
    for t in tokens[:-1]:
        target = target[int(t)] if isinstance(target, list) else target[t]
    last = tokens[-1]
    if isinstance(target, list):
        target[int(last)] = value
    else:
        target[last] = value
    return args


# ------------------------------------------------------------------ identity.json

IDENTITY = ["payee", "amount", "currency", "reference"]


def identity_vectors() -> dict:
    vectors = []
    inp = {"conversationId": CONV, "turnIndex": 4, "name": "send_payment", "ordinal": 0}

    def add(rule, description, args, identity=IDENTITY, **overrides):
        i = {**inp, **overrides}
        projection = ref.identity_projection(args, identity)
        key = ref.derive_key(i["conversationId"], i["turnIndex"], i["name"], projection, i["ordinal"])
        vectors.append({
            "id": f"ID-{len(vectors) + 1:03d}", "rule": rule, "description": description, "identity": identity,
            "args": args, "projection": projection, "input": i,
            "canonicalProjection": ref.canonicalize(projection), "key": key,
        })
        return key

    pay = {**PAYMENT, "memo": "Invoice 113, thanks!"}
    k1 = add("IDENT-1", "payment with a memo: the memo is not part of the key", pay)
    assert add("IDENT-3", "retry re-worded the memo: same key", {**PAYMENT, "memo": "Paying invoice INV-2024-113 as discussed"}) == k1
    assert add("IDENT-3", "retry dropped the memo: same key", dict(PAYMENT)) == k1
    assert add("IDENT-1", "members in another order: same key",
               {"memo": "x", "reference": "INV-2024-113", "currency": "EUR", "amount": 4200, "payee": "acct_991"}) == k1
    assert add("IDENT-2", "amount differs: different key", {**pay, "amount": 4300}) != k1
    assert add("IDENT-2", "currency differs: different key", {**pay, "currency": "USD"}) != k1
    assert add("IDENT-2", "reference differs: different key", {**pay, "reference": "INV-2024-114"}) != k1
    assert add("IDENT-2", "payee differs: different key", {**pay, "payee": "acct_992"}) != k1
    add("IDENT-1", "an identity field that is absent is omitted from the projection", {"payee": "acct_991", "amount": 4200, "currency": "EUR", "memo": "no reference"})
    add("IDENT-1", "an identity field's value is kept whole, nested members included",
        {"payee": {"iban": "FR7630006000011234567890189", "name": "Lyon SARL"}, "amount": 4200, "currency": "EUR", "reference": "R-1", "memo": "m"})
    assert add("IDENT-2", "the risk: a field left out of the identity (execute_on) cannot tell two payments apart",
               {**PAYMENT, "execute_on": "2025-01-31"}) == k1
    assert add("TURN-4", "second identical call in the turn still gets its own key through the ordinal", pay, ordinal=1) != k1
    assert add("TURN-1", "same payment in a later turn: different key", pay, turnIndex=5) != k1
    return {
        "description": (
            "Call identity vectors (spec §5.2, IDENT-1..IDENT-3). The key is deriveKey({ ...input, args: projection }) "
            "where projection keeps the top-level members of args named in identity (absent names omitted). "
            "`canonicalProjection` is the JCS text that enters the key material. Generated by "
            "spec/reference/generate_vectors.py."
        ),
        "vectors": vectors,
    }


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    from ledger_cases import ledger_cases

    write("canonical.json", canonical_vectors())
    write("keys.json", key_vectors())
    write("rejections.json", rejection_vectors(), ascii_only=True)
    write("identity.json", identity_vectors())
    write("ledger-transitions.json", ledger_cases())
    print("wrote", ", ".join(sorted(os.listdir(VECTORS))))
