"""Consistency check for the Dispatch-Once specification.

    python3 spec/check.py

Checks that rules.json and the anchored rules in dispatch-once.md describe the same rules
(id, section, level), that every rule id of the authoritative catalogue exists, that every
rule id cited anywhere is defined, that every vector file is linked from the text and every
vector names a defined rule, and that the compliance-matrix markers are in place.
Exits 1 and lists every problem on any mismatch.
"""

from __future__ import annotations

import json
import os
import re
import sys

SPEC = os.path.dirname(os.path.abspath(__file__))
DOC = os.path.join(SPEC, "dispatch-once.md")
RULES = os.path.join(SPEC, "rules.json")
README = os.path.join(SPEC, "README.md")
VECTORS = os.path.join(SPEC, "vectors")

# The authoritative catalogue: these ids MUST exist (the spec may add, never rename).
CATALOGUE = (
    [f"KEY-{i}" for i in range(1, 10)]
    + [f"TURN-{i}" for i in range(1, 7)]
    + [f"EFFECT-{i}" for i in range(1, 6)]
    + [f"IDENT-{i}" for i in range(1, 4)]
    + [f"LEDGER-{i}" for i in range(1, 16)]
    + [f"DISPATCH-{i}" for i in range(1, 8)]
    + [f"STREAM-{i}" for i in range(1, 7)]
    + [f"RECORD-{i}" for i in range(1, 4)]
    + ["CONF-1", "CONF-2", "ERR-1"]
)
LEVELS = {"MUST": 3, "SHOULD": 2, "MAY": 1}
SUBJECTS = {"key", "turn", "registry", "ledger", "dispatcher", "runner", "record", "conformance", "errors", "reconciler", "telemetry", "profile"}
PREFIXES = ("KEY", "TURN", "EFFECT", "IDENT", "LEDGER", "DISPATCH", "STREAM", "RECORD", "CONF", "ERR", "RECON", "OTEL", "MCP", "AISDK", "ATR", "LIST", "RESOLVE", "THREAD", "LANGGRAPH")
ID_RE = re.compile(r"\b(?:%s)-\d+\b" % "|".join(PREFIXES))
ANCHOR_RE = re.compile(r'^<a id="([A-Z]+-\d+)"></a>\*\*([A-Z]+-\d+)\*\* (.+)$')
HEADING_RE = re.compile(r"^(#{2,4}) (\d+(?:\.\d+)*) ")
# BCP 14 keywords, strongest first; "NOT RECOMMENDED" counts as SHOULD (NOT).
KEYWORDS = [
    ("MUST", re.compile(r"\b(MUST|MUST NOT|REQUIRED|SHALL|SHALL NOT)\b")),
    ("SHOULD", re.compile(r"\b(SHOULD|SHOULD NOT|RECOMMENDED|NOT RECOMMENDED)\b")),
    ("MAY", re.compile(r"\b(MAY|OPTIONAL)\b")),
]


def strongest_keyword(text: str) -> str | None:
    for level, pattern in KEYWORDS:
        if pattern.search(text):
            return level
    return None


def main() -> int:
    problems: list[str] = []
    with open(DOC, encoding="utf-8") as f:
        doc_lines = f.read().split("\n")

    # ---- anchored rules in the text
    anchored: dict[str, dict] = {}
    section = None
    in_code = False
    in_matrix = False
    for number, line in enumerate(doc_lines, 1):
        if line.startswith("```"):
            in_code = not in_code
            continue
        if in_code:
            continue
        # The generated compliance matrix quotes each rule's level (MUST, SHOULD); it is not prose.
        if line.startswith(("<!-- compliance-matrix:", "<!-- conversation-matrix:")):
            in_matrix = line.startswith(("<!-- compliance-matrix:start", "<!-- conversation-matrix:start"))
            continue
        if in_matrix:
            continue
        heading = HEADING_RE.match(line)
        if heading:
            section = heading.group(2)
            continue
        if line.startswith("## Appendix"):
            section = "appendix"
        if '<a id="' not in line:
            # Only rule paragraphs are normative: BCP 14 keywords elsewhere blur what a rule is.
            if strongest_keyword(line) and not line.startswith('The key words "MUST"'):
                problems.append(f"dispatch-once.md:{number}: BCP 14 keyword outside a rule paragraph")
            continue
        match = ANCHOR_RE.match(line)
        if not match:
            problems.append(f"dispatch-once.md:{number}: malformed rule anchor (want <a id=\"X-n\"></a>**X-n** text)")
            continue
        rule_id, bold_id, text = match.groups()
        if rule_id != bold_id:
            problems.append(f"dispatch-once.md:{number}: anchor {rule_id} labelled {bold_id}")
        if rule_id in anchored:
            problems.append(f"dispatch-once.md:{number}: {rule_id} anchored twice")
        level = strongest_keyword(text)
        if level is None:
            problems.append(f"dispatch-once.md:{number}: {rule_id} has no BCP 14 keyword")
        if section in (None, "appendix"):
            problems.append(f"dispatch-once.md:{number}: {rule_id} is outside a numbered section")
        anchored[rule_id] = {"section": section, "level": level, "line": number}

    # ---- rules.json
    with open(RULES, encoding="utf-8") as f:
        rules = json.load(f)
    listed: dict[str, dict] = {}
    if not isinstance(rules, list):
        problems.append("rules.json: must be a JSON array")
        rules = []
    for entry in rules:
        rule_id = entry.get("id")
        if rule_id in listed:
            problems.append(f"rules.json: {rule_id} listed twice")
        listed[rule_id] = entry
        if set(entry) != {"id", "section", "level", "subject", "summary"}:
            problems.append(f"rules.json: {rule_id} has fields {sorted(entry)}")
        if entry.get("level") not in LEVELS:
            problems.append(f"rules.json: {rule_id} level {entry.get('level')!r}")
        if entry.get("subject") not in SUBJECTS:
            problems.append(f"rules.json: {rule_id} subject {entry.get('subject')!r}")
        if not isinstance(entry.get("summary"), str) or not entry["summary"].strip():
            problems.append(f"rules.json: {rule_id} has no summary")
        text = anchored.get(rule_id)
        if text is None:
            problems.append(f"rules.json: {rule_id} is not anchored in dispatch-once.md")
            continue
        if entry.get("section") != text["section"]:
            problems.append(f"rules.json: {rule_id} section {entry.get('section')!r}, text has it in §{text['section']}")
        if entry.get("level") != text["level"]:
            problems.append(f"rules.json: {rule_id} level {entry.get('level')!r}, text's strongest keyword is {text['level']}")
    for rule_id, text in anchored.items():
        if rule_id not in listed:
            problems.append(f"dispatch-once.md:{text['line']}: {rule_id} is missing from rules.json")
    for rule_id in CATALOGUE:
        if rule_id not in anchored:
            problems.append(f"catalogue rule {rule_id} is not defined")
    order = [entry.get("id") for entry in rules]
    if order != sorted(order, key=lambda r: (PREFIXES.index(r.split("-")[0]) if r and r.split("-")[0] in PREFIXES else 99, int(r.split("-")[1]) if r else 0)):
        problems.append("rules.json: entries are not in catalogue order (prefix, then number)")

    # ---- every cited id is defined
    texts = {"dispatch-once.md": "\n".join(doc_lines)}
    if os.path.exists(README):
        with open(README, encoding="utf-8") as f:
            texts["README.md"] = f.read()
    for name, text in texts.items():
        for cited in sorted(set(ID_RE.findall(text))):
            if cited not in anchored:
                problems.append(f"{name}: cites {cited}, which is not defined")

    # ---- vectors: linked from the text, rules defined, ids unique
    doc_text = texts["dispatch-once.md"]
    vector_files = sorted(f for f in os.listdir(VECTORS) if f.endswith(".json"))
    for name in vector_files:
        if f"](vectors/{name})" not in doc_text:
            problems.append(f"vectors/{name} is not linked from dispatch-once.md")
        with open(os.path.join(VECTORS, name), encoding="utf-8") as f:
            data = json.load(f)
        items = data.get("vectors", data.get("cases", []))
        if not data.get("description"):
            problems.append(f"vectors/{name}: no description")
        seen = set()
        for item in items:
            if item.get("id") in seen:
                problems.append(f"vectors/{name}: {item.get('id')} twice")
            seen.add(item.get("id"))
            if item.get("rule") not in anchored:
                problems.append(f"vectors/{name}: {item.get('id')} names undefined rule {item.get('rule')!r}")
    for linked in sorted(set(re.findall(r"\]\(vectors/([^)#]+)\)", doc_text))):
        if not os.path.exists(os.path.join(VECTORS, linked)):
            problems.append(f"dispatch-once.md links vectors/{linked}, which does not exist")

    # ---- compliance matrix markers
    start = doc_text.count("<!-- compliance-matrix:start -->")
    end = doc_text.count("<!-- compliance-matrix:end -->")
    if start != 1 or end != 1 or doc_text.index("<!-- compliance-matrix:start -->") > doc_text.index("<!-- compliance-matrix:end -->"):
        problems.append("dispatch-once.md: want exactly one compliance-matrix:start marker followed by one :end marker")

    # ---- the model-checked rules table (spec/model)
    sys.path.insert(0, os.path.join(SPEC, "model"))
    from check_coverage import coverage_problems

    problems += coverage_problems()

    for p in problems:
        print(f"FAIL {p}")
    print(f"{len(anchored)} rules anchored, {len(listed)} in rules.json, {len(vector_files)} vector files; {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
