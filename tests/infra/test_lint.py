"""cfn-lint on `template.yaml` and on the CDK-synthesized template: no error, no unexplained warning."""

from __future__ import annotations

import json
from typing import Any

from tests.infra.facts import SAM_TEMPLATE
from tests.infra.linting import findings

CDK_IGNORED = {
    # aws-cdk-lib's lambda.Function always adds `DependsOn: <its role>` beside the `Fn::GetAtt` of the
    # role's ARN; the duplicate dependency is harmless, and not ours to remove.
    "W3005": "dependency already enforced by a GetAtt (CDK's lambda.Function)",
}


def _findings(text: str, ignore: dict[str, str] | None = None) -> list[str]:
    return list(findings(text, tuple(sorted(ignore or {}))))


def test_sam_template_lints_clean() -> None:
    assert _findings(SAM_TEMPLATE.read_text()) == []


def test_cdk_template_lints_clean(cdk_template: dict[str, Any]) -> None:
    assert _findings(json.dumps(cdk_template, indent=1), CDK_IGNORED) == []


def test_cdk_template_has_the_ignored_warning_for_the_reason_given(cdk_template: dict[str, Any]) -> None:
    """The ignored rule fires only where CDK puts the duplicate dependency: on functions, for their roles."""
    found = _findings(json.dumps(cdk_template, indent=1))
    assert found, "nothing to ignore any more: drop CDK_IGNORED"
    assert all(f.startswith("W3005") and "Role" in f and "/Properties/Role" in f for f in found), found


def test_lint_finds_a_broken_template() -> None:
    """The same call reports errors: an SQS batch above 10,000 messages and an unknown billing mode."""
    broken = (
        SAM_TEMPLATE.read_text()
        .replace("      BatchSize: 10\n", "      BatchSize: 100000\n", 1)
        .replace("      BillingMode: PAY_PER_REQUEST\n", "      BillingMode: ON_DEMAND\n", 1)
    )
    assert broken != SAM_TEMPLATE.read_text()
    found = _findings(broken)
    assert any("100000" in f for f in found), found
    assert any("ON_DEMAND" in f for f in found), found
