"""The model-checked rules table: spec/model/rules-coverage.json against spec/rules.json and the model.

    python3 spec/model/check_coverage.py             check; exit 1 and list every problem
    python3 spec/model/check_coverage.py --markdown  print the rule -> property table for the spec

Checks that every rule the table lists exists; that every MUST rule of sections 4, 6 and 7 whose
subject is turn, ledger or dispatcher is listed; that each entry either names properties the model
asserts (and checks run.mjs runs) or says why the rule is not modelled; that the model's source cites
every rule the table says it covers, and cites no rule that does not exist; and, when
dispatch-once.md carries the table between <!-- model-coverage:start --> and <!-- model-coverage:end -->,
that the copy there is the table generated from the JSON. Called by spec/check.py. Standard library only.
"""

from __future__ import annotations

import json
import os
import re
import sys

MODEL = os.path.dirname(os.path.abspath(__file__))
SPEC = os.path.dirname(MODEL)
TABLE = os.path.join(MODEL, "rules-coverage.json")
RULES = os.path.join(SPEC, "rules.json")
DOC = os.path.join(SPEC, "dispatch-once.md")
RUNNER = os.path.join(MODEL, "run.mjs")

SECTIONS = ("4", "6", "7")
SUBJECTS = ("turn", "ledger", "dispatcher")
ID_RE = re.compile(r"\b(?:KEY|TURN|EFFECT|IDENT|LEDGER|DISPATCH|STREAM|RECORD|CONF|ERR|RECON|OTEL|MCP|AISDK|ATR|LIST|RESOLVE|THREAD|LANGGRAPH)-\d+\b")
START = "<!-- model-coverage:start -->"
END = "<!-- model-coverage:end -->"


def _load():
    with open(TABLE, encoding="utf-8") as f:
        table = json.load(f)
    with open(RULES, encoding="utf-8") as f:
        rules = {r["id"]: r for r in json.load(f)}
    return table, rules


def _model_source() -> str:
    return "\n".join(
        open(os.path.join(MODEL, name), encoding="utf-8").read()
        for name in sorted(os.listdir(MODEL))
        if name.endswith(".pml")
    )


def markdown(table: dict | None = None) -> str:
    """The rule -> property table, as the spec's "Model-checked properties" section shows it."""
    if table is None:
        table, _ = _load()
    lines = ["| Rule | Model property | How the model covers it |", "|---|---|---|"]
    for entry in table["rules"]:
        rule = f"[{entry['rule']}](#{entry['rule']})"
        if "not_modelled" in entry:
            lines.append(f"| {rule} | not modelled | {entry['not_modelled']} |")
        else:
            props = ", ".join(entry["covered_by"])
            checks = ", ".join(f"`{c}`" for c in entry["checks"])
            lines.append(f"| {rule} | {props} | {entry['how']} Checks: {checks}. |")
    return "\n".join(lines)


def coverage_problems() -> list[str]:
    problems: list[str] = []
    where = "model/rules-coverage.json"
    try:
        table, rules = _load()
    except (OSError, ValueError, KeyError) as error:
        return [f"{where}: cannot be read: {error}"]
    source = _model_source()
    asserted = set(re.findall(r"^bit (P_[A-Z]+) = ", source, re.M))
    properties = table.get("properties", {})
    for prop in properties:
        if prop not in asserted:
            problems.append(f"{where}: property {prop} is not asserted in the model (no `bit {prop}`)")
    with open(RUNNER, encoding="utf-8") as f:
        checks = set(re.findall(r'^\s+name: "([a-z0-9-]+)",', f.read(), re.M))

    listed: set[str] = set()
    for entry in table.get("rules", []):
        rule = entry.get("rule")
        if rule in listed:
            problems.append(f"{where}: {rule} listed twice")
        listed.add(rule)
        if rule not in rules:
            problems.append(f"{where}: {rule} is not a rule of rules.json")
        covered, excluded = "covered_by" in entry, "not_modelled" in entry
        if covered == excluded:
            problems.append(f"{where}: {rule} needs exactly one of covered_by or not_modelled")
            continue
        if excluded:
            if not str(entry["not_modelled"]).strip():
                problems.append(f"{where}: {rule} says not modelled without saying why")
            continue
        if not entry["covered_by"]:
            problems.append(f"{where}: {rule} covered by no property")
        for prop in entry["covered_by"]:
            if prop not in properties:
                problems.append(f"{where}: {rule} names unknown property {prop}")
        if not str(entry.get("how", "")).strip():
            problems.append(f"{where}: {rule} does not say how the model covers it")
        if not entry.get("checks"):
            problems.append(f"{where}: {rule} names no check of run.mjs")
        for check in entry.get("checks", []):
            if check not in checks:
                problems.append(f"{where}: {rule} names check {check!r}, which run.mjs does not run")
        if not re.search(rf"\b{re.escape(rule)}\b", source):
            problems.append(f"{where}: {rule} is said to be covered, but the model's source never cites it")

    for rule_id, rule in rules.items():
        if (
            rule["level"] == "MUST"
            and rule["section"].split(".")[0] in SECTIONS
            and rule["subject"] in SUBJECTS
            and rule_id not in listed
        ):
            problems.append(f"{where}: MUST rule {rule_id} (§{rule['section']}, {rule['subject']}) is not listed")
    for cited in sorted(set(ID_RE.findall(source))):
        if cited not in rules:
            problems.append(f"model/*.pml: cites {cited}, which is not a rule of rules.json")

    if os.path.exists(DOC):
        with open(DOC, encoding="utf-8") as f:
            doc = f.read()
        if START in doc or END in doc:
            found = re.search(re.escape(START) + r"\n(.*?)\n" + re.escape(END), doc, re.S)
            if found is None:
                problems.append("dispatch-once.md: model-coverage markers malformed (want start, table, end)")
            elif found.group(1).strip() != markdown(table).strip():
                problems.append(
                    "dispatch-once.md: the model-coverage table differs from model/rules-coverage.json "
                    "(regenerate: python3 spec/model/check_coverage.py --markdown)"
                )
    return problems


def main() -> int:
    if "--markdown" in sys.argv[1:]:
        print(markdown())
        return 0
    problems = coverage_problems()
    for p in problems:
        print(f"FAIL {p}")
    table, _ = _load()
    print(f"{len(table['rules'])} rules in the model coverage table; {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
