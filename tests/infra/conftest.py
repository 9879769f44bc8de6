"""Fixtures for the infrastructure tests: `template.yaml` parsed, the CDK app synthesized, offline.

The CDK stack is environment-agnostic and synthesized without bundling (the `aws:cdk:bundling-stacks`
context empty), so no AWS credentials, no network, no Docker and no pip run are needed.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:  # `tests` and `infra` are not on sys.path under the venv's pytest
    sys.path.insert(0, str(REPO_ROOT))

# jsii prints a banner on stderr for Node versions it no longer supports; the synthesis is the same.
os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "1")
os.environ.setdefault("JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION", "1")

from cfnlint.decode.cfn_yaml import load as load_cfn_yaml  # noqa: E402

from tests.infra.facts import SAM_TEMPLATE, Facts  # noqa: E402


@pytest.fixture(scope="session")
def sam_template() -> dict[str, Any]:
    """`template.yaml` as cfn-lint reads it (`!Ref` → `{"Ref": ...}`), as plain dicts and lists."""
    return json.loads(json.dumps(load_cfn_yaml(str(SAM_TEMPLATE))))


@pytest.fixture(scope="session")
def cdk_app(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    """`infra.app`'s app and stack `(app, stack)`, built as `cdk synth` would, without bundling."""
    from infra.app import build_app

    app, stack = build_app(bundle=False, outdir=str(tmp_path_factory.mktemp("cdk.out")))
    return app, stack


@pytest.fixture(scope="session")
def cdk_assertions(cdk_app: Any) -> Any:
    """`aws_cdk.assertions.Template.from_stack` of the app's stack."""
    from aws_cdk.assertions import Template

    return Template.from_stack(cdk_app[1])


@pytest.fixture(scope="session")
def cdk_template(cdk_assertions: Any) -> dict[str, Any]:
    """The CDK-synthesized CloudFormation template, as a dict."""
    return dict(cdk_assertions.to_json())


@pytest.fixture(scope="session", params=["sam", "cdk"])
def facts(request: pytest.FixtureRequest) -> Facts:
    """The facts of `template.yaml`, then of the CDK template: each test runs on both."""
    return Facts(request.getfixturevalue(f"{request.param}_template"))
