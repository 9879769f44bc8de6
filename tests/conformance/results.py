"""Turn conformance runs (pytest `--junitxml` files, one per runtime) into a Markdown table.

    python -m tests.conformance.results OUT.md torpor=.cache/conformance-results/torpor.xml \\
        restate=.cache/conformance-results/restate.xml

Rows: class (upstream `sdk-tests` name) and case; columns: language and runtime, `pass` / `FAIL` /
`skip` / `error` (`—` when the case did not run). Failures are listed under the table with the first
line of their message.
"""

from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

from tests.conformance.harness import LANGS

CLASSES = {
    "test_state": "State",
    "test_sleep": "Sleep",
    "test_sleep_with_failures": "SleepWithFailures",
    "test_call_ordering": "CallOrdering",
    "test_combinators": "Combinators",
    "test_signals": "Signals",
    "test_service_to_service": "ServiceToServiceCommunication",
    "test_workflow_api": "WorkflowAPI",
    "test_ingress": "Ingress",
    "test_run_flush": "RunFlush",
    "test_cancellation": "Cancellation",
    "test_kill_invocation": "KillInvocation",
    "test_kill_runtime": "KillRuntime / StopRuntime",
    "test_non_determinism_errors": "NonDeterminismErrors",
    "test_user_errors": "UserErrors",
    "test_run_retry": "RunRetry",
    "test_proxy_request_signing": "ProxyRequestSigning",
    "test_service_to_service_scope_concurrency": "ServiceToServiceScopeConcurrency",
}
"""Test module → the upstream class it ports (and the order of the table)."""

Outcome = tuple[str, str]  # (pass|FAIL|error|skip, message)


def read_junit(path: Path) -> dict[tuple[str, str, str], Outcome]:
    """`(module, case, lang) → outcome` from one junit XML file; a case without a language runs once (lang `""`)."""
    outcomes: dict[tuple[str, str, str], Outcome] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        module = case.get("classname", "").rsplit(".", 1)[-1]
        name = case.get("name", "")
        match = re.fullmatch(r"(\w+)(?:\[(.*)\])?", name)
        base, params = (match.group(1), match.group(2) or "") if match else (name, "")
        parts = params.split("-") if params else []
        lang = next((p for p in parts if p in LANGS), "")
        rest = "-".join(p for p in parts if p != lang)
        label = f"{base}[{rest}]" if rest else base
        outcome: Outcome = ("pass", "")
        for tag, word in (("failure", "FAIL"), ("error", "error"), ("skipped", "skip")):
            element = case.find(tag)
            if element is not None:
                message = (element.get("message") or element.text or "").strip().splitlines()
                outcome = (word, message[0][:300] if message else "")
                break
        outcomes[(module, label, lang)] = outcome
    return outcomes


def render(columns: dict[str, Path]) -> str:
    """The Markdown: one table row per (class, case), a column per language and runtime."""
    runs = {runtime: read_junit(path) for runtime, path in columns.items()}
    cases: dict[tuple[str, str], None] = {}
    for outcomes in runs.values():
        for module, label, _lang in outcomes:
            cases[(module, label)] = None
    order = list(CLASSES)
    rows = sorted(cases, key=lambda c: (order.index(c[0]) if c[0] in order else len(order), c[0]))
    headers = [f"{lang} / {runtime}" for lang in LANGS for runtime in columns]
    lines = ["| class | case | " + " | ".join(headers) + " |", "| --- | --- |" + " --- |" * len(headers)]
    notes: list[str] = []
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for module, label in rows:
        cells = []
        for lang in LANGS:
            for runtime, outcomes in runs.items():
                outcome = outcomes.get((module, label, lang)) or outcomes.get((module, label, ""))
                if outcome is None:
                    cells.append("—")
                    continue
                word, message = outcome
                cells.append(word)
                column = f"{lang} / {runtime}"
                if word != "skip":
                    totals[column][1] += 1
                    totals[column][0] += word == "pass"
                if word == "skip":
                    notes.append(f"- {CLASSES.get(module, module)} `{label}` (skip everywhere it ran): {message}")
                elif word != "pass" and message:
                    notes.append(f"- {CLASSES.get(module, module)} `{label}` ({column}, {word}): {message}")
        lines.append(f"| {CLASSES.get(module, module)} | `{label}` | " + " | ".join(cells) + " |")
    summary = ", ".join(f"{column}: {ok}/{total}" for column, (ok, total) in totals.items())
    out = [*lines, "", f"Passed of applicable (not skipped): {summary}."]
    if notes:
        out += ["", "Not passing:", "", *dict.fromkeys(notes)]
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    """`OUT.md RUNTIME=JUNIT.xml ...`: write the table (without a heading) to OUT.md."""
    if len(argv) < 2 or not all("=" in a for a in argv[1:]):
        print(__doc__, file=sys.stderr)
        return 2
    columns = {name: Path(path) for name, path in (a.split("=", 1) for a in argv[1:])}
    Path(argv[0]).write_text(render(columns))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
