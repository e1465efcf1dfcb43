"""Independent reference implementation of Dispatch-Once key derivation (spec §3).

Python 3 standard library only. It shares no code with the TypeScript implementation
in packages/core: the two are checked against each other through spec/vectors/.

Inputs are the values json.loads produces (dict, list, str, int, float, bool, None).
Because the vectors are JSON and JSON numbers are IEEE-754 doubles for JCS, an int is
first converted to the nearest double, exactly as JSON.parse does in ECMAScript.
"""

from __future__ import annotations

import hashlib
import json
import math
import re

__all__ = [
    "InvalidKeyInput",
    "NotCanonicalizable",
    "canonicalize",
    "MAX_CANONICAL_DEPTH",
    "number_to_string",
    "key_material",
    "derive_key",
    "identity_projection",
    "chapter_idempotency_key",
    "CONVERSATION_ID_PATTERN",
    "TOOL_NAME_PATTERN",
]

# KEY-2, KEY-3. re.fullmatch with ASCII classes; "$" alone would accept a trailing "\n".
CONVERSATION_ID_PATTERN = re.compile(r"[A-Za-z0-9_.:~-]{1,256}")
TOOL_NAME_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,64}")
MAX_SAFE_INTEGER = 2**53 - 1
# KEY-6: arrays and objects nested deeper than this are refused with problem "too_deep" ("[]" is
# at depth 1). Far beyond any tool schema, and below the roughly 1000 levels at which Python's own
# json module stops at its default recursion limit, so accepted arguments stay readable by peers.
MAX_CANONICAL_DEPTH = 512


class InvalidKeyInput(ValueError):
    """code invalid_key_input (KEY-2..KEY-4)."""

    code = "invalid_key_input"

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class NotCanonicalizable(ValueError):
    """code not_canonicalizable (KEY-6); path is a JSON Pointer into the arguments."""

    code = "not_canonicalizable"

    def __init__(self, problem: str, path: str, message: str) -> None:
        super().__init__(f"{message} at {path or '(root)'}")
        self.problem = problem
        self.path = path


# ---------------------------------------------------------------- numbers (RFC 8785 §3.2.2.3)


def _shortest_digits(x: float) -> tuple[str, int]:
    """Digits s and exponent n with x == int(s) * 10**(n - len(s)), s shortest round-trip.

    Python's repr is David Gay's shortest round-trip conversion (the correctly rounded
    candidate nearest to x when several are equally short), which is what ECMAScript's
    Number::toString requires of s, k and n (ECMA-262 §6.1.6.1.20, step 5).
    """
    text = repr(x)
    mantissa, _, exp = text.partition("e")
    exponent = int(exp) if exp else 0
    whole, _, frac = mantissa.partition(".")
    digits = whole + frac
    exponent += len(whole)  # value = 0.<digits> * 10**exponent
    stripped = digits.lstrip("0")
    exponent -= len(digits) - len(stripped)
    stripped = stripped.rstrip("0")
    return stripped, exponent


def number_to_string(x: float) -> str:
    """ECMAScript Number::toString(x) for a finite double (radix 10)."""
    if math.isnan(x) or math.isinf(x):
        raise ValueError("not finite")
    if x == 0:
        return "0"  # covers -0: RFC 8785 serialises minus zero as 0
    if x < 0:
        return "-" + number_to_string(-x)
    s, n = _shortest_digits(x)
    k = len(s)
    if k <= n <= 21:
        return s + "0" * (n - k)
    if 0 < n <= 21:
        return s[:n] + "." + s[n:]
    if -6 < n <= 0:
        return "0." + "0" * (-n) + s
    e = n - 1
    sign = "+" if e >= 0 else "-"
    head = s if k == 1 else s[0] + "." + s[1:]
    return f"{head}e{sign}{abs(e)}"


# ---------------------------------------------------------------- strings (RFC 8785 §3.2.2.2)

_SHORT_ESCAPES = {0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0C: "\\f", 0x0D: "\\r", 0x22: '\\"', 0x5C: "\\\\"}


def _check_well_formed(text: str, path: str) -> None:
    # json.loads joins a valid \uD83D\uDE00 pair into one code point; any surrogate code
    # point left in a Python str is therefore unpaired (not valid Unicode).
    for ch in text:
        if 0xD800 <= ord(ch) <= 0xDFFF:
            raise NotCanonicalizable("lone_surrogate", path, "a string with a lone surrogate is not valid Unicode")


def _serialize_string(text: str, path: str) -> str:
    _check_well_formed(text, path)
    out = ['"']
    for ch in text:
        c = ord(ch)
        if c in _SHORT_ESCAPES:
            out.append(_SHORT_ESCAPES[c])
        elif c < 0x20:
            out.append(f"\\u{c:04x}")
        else:
            out.append(ch)  # everything else verbatim, including U+007F and U+2028
    out.append('"')
    return "".join(out)


def _utf16_units(name: str) -> bytes:
    # Big-endian UTF-16 bytes compare like the sequence of 16-bit code units (RFC 8785 §3.2.3).
    return name.encode("utf-16-be", "surrogatepass")


def _pointer_token(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


# ---------------------------------------------------------------- values (RFC 8785 §3.2)


def canonicalize(value: object) -> str:
    """RFC 8785 (JCS) text of a JSON value; raises NotCanonicalizable (KEY-6).

    Iterative, so that nesting is bounded by MAX_CANONICAL_DEPTH and never by Python's
    recursion limit: a work list of pending steps, last in first out.
    """
    out: list[str] = []
    ancestors: set[int] = set()  # ids of the containers being written (cycle detection)
    # Steps: ("value", v, path, depth) writes a value that has `depth` containers around it;
    # ("name", name, path) writes a member name and its colon; ("text", s) writes s;
    # ("leave", id) ends a container.
    work: list[tuple] = [("value", value, "", 0)]
    while work:
        step = work.pop()
        kind = step[0]
        if kind == "text":
            out.append(step[1])
        elif kind == "name":
            out.append(_serialize_string(step[1], step[2]) + ":")
        elif kind == "leave":
            ancestors.discard(step[1])
        else:
            _, item, path, depth = step
            if isinstance(item, (list, dict)):
                _open(item, path, depth, ancestors, work)
            else:
                out.append(_scalar(item, path))
    return "".join(out)


def _open(container, path: str, depth: int, ancestors: set[int], work: list[tuple]) -> None:
    """Checks a list or dict and schedules its text: bracket, members in order, bracket."""
    if id(container) in ancestors:
        raise NotCanonicalizable("cycle", path, "the value contains a cycle")
    if depth + 1 > MAX_CANONICAL_DEPTH:
        raise NotCanonicalizable("too_deep", path, f"arrays and objects are nested deeper than {MAX_CANONICAL_DEPTH} levels")
    ancestors.add(id(container))
    steps: list[tuple] = []
    if isinstance(container, list):
        steps.append(("text", "["))
        for i, item in enumerate(container):
            if i:
                steps.append(("text", ","))
            steps.append(("value", item, f"{path}/{i}", depth + 1))
        steps.append(("text", "]"))
    else:
        for name in container:
            if not isinstance(name, str):
                raise NotCanonicalizable("unsupported_type", path, "member names must be strings")
        steps.append(("text", "{"))
        for i, name in enumerate(sorted(container, key=_utf16_units)):
            member_path = f"{path}/{_pointer_token(name)}"
            if i:
                steps.append(("text", ","))
            steps.append(("name", name, member_path))
            steps.append(("value", container[name], member_path, depth + 1))
        steps.append(("text", "}"))
    steps.append(("leave", id(container)))
    work.extend(reversed(steps))


def _scalar(value: object, path: str) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        try:
            as_double = float(value)  # nearest double, ties to even, as JSON.parse does
        except OverflowError:
            raise NotCanonicalizable("non_finite_number", path, f"{value} overflows a double") from None
        return number_to_string(as_double)
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise NotCanonicalizable("non_finite_number", path, f"{value!r} has no JSON form")
        return number_to_string(value)
    if isinstance(value, str):
        return _serialize_string(value, path)
    raise NotCanonicalizable("unsupported_type", path, f"a {type(value).__name__} is not JSON")


# ---------------------------------------------------------------- key (spec §3)


def _check_index(field: str, value: object) -> str:
    # JSON.parse turns 3.0 into the number 3, so an integral float is the same input.
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidKeyInput(field, f"must be a non-negative safe integer, got {value!r}")
    if isinstance(value, float):
        if not value.is_integer():
            raise InvalidKeyInput(field, f"must be a non-negative safe integer, got {value!r}")
        value = int(value)
    if value < 0 or value > MAX_SAFE_INTEGER:
        raise InvalidKeyInput(field, f"must be a non-negative safe integer, got {value!r}")
    return str(value)  # shortest decimal: no sign, no leading zeros, no exponent (KEY-4)


def key_material(conversation_id: object, turn_index: object, name: object, args: object, ordinal: object = 0) -> str:
    """The exact text that is hashed (KEY-1): conversation_id|turn_index|name|ordinal|canonical_args."""
    if not isinstance(conversation_id, str) or not CONVERSATION_ID_PATTERN.fullmatch(conversation_id):
        raise InvalidKeyInput("conversationId", f"outside the alphabet: {conversation_id!r}")
    if not isinstance(name, str) or not TOOL_NAME_PATTERN.fullmatch(name):
        raise InvalidKeyInput("name", f"outside the alphabet: {name!r}")
    turn = _check_index("turnIndex", turn_index)
    nth = _check_index("ordinal", ordinal)
    return f"{conversation_id}|{turn}|{name}|{nth}|{canonicalize(args)}"


def derive_key(conversation_id: object, turn_index: object, name: object, args: object, ordinal: object = 0) -> str:
    """First 32 lowercase hex digits of SHA-256 over the UTF-8 material (KEY-1)."""
    material = key_material(conversation_id, turn_index, name, args, ordinal)
    return hashlib.sha256(material.encode("utf-8")).hexdigest()[:32]


def identity_projection(args: dict, identity: list[str]) -> dict:
    """IDENT-1: the top-level members named by the identity; absent names are omitted."""
    return {field: args[field] for field in identity if field in args}


# ---------------------------------------------------------------- the chapter's function, verbatim in behaviour


def chapter_idempotency_key(conversation_id: str, turn_index: int, name: str, args: dict, ordinal: int = 0) -> str:
    """The book chapter's idempotency_key, for comparison only (KEY-8, Appendix A)."""
    canonical = json.dumps(args, sort_keys=True, separators=(",", ":"))
    material = f"{conversation_id}|{turn_index}|{name}|{ordinal}|{canonical}"
    return hashlib.sha256(material.encode()).hexdigest()[:32]


if __name__ == "__main__":
    import sys

    doc = json.load(sys.stdin)
    print(derive_key(doc["conversationId"], doc["turnIndex"], doc["name"], doc["args"], doc.get("ordinal", 0)))
