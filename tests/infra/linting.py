"""cfn-lint on a template's text, run once per text and ignore list for the whole test run.

`test_lint.py` and `test_ingress_auth.py` lint the same templates (`template.yaml` itself is the
`AWS_IAM` variant); a run takes about 2 s, so each distinct one runs once. pytest imports
`test_lint.py` a second time under another name for `test_ingress_auth.py`, so the cache lives here.
"""

from __future__ import annotations

import functools

from cfnlint.api import ManualArgs, lint

REGIONS = ["us-east-1", "eu-west-1", "ap-northeast-1"]
"""Regions to lint for (resource and property availability differs by region)."""


@functools.cache
def findings(text: str, ignore_checks: tuple[str, ...] = ()) -> tuple[str, ...]:
    """cfn-lint's findings on the template `text`, e.g. `("W3005 line 12: ...",)`; the rule ids in
    `ignore_checks` left out. Cached: the same arguments return the first run's answer."""
    matches = lint(text, config=ManualArgs(regions=REGIONS, ignore_checks=list(ignore_checks)))
    return tuple(f"{m.rule.id} line {m.linenumber}: {m.message}" for m in matches)
