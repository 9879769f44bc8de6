"""The Lambda code bundles: their requirements match pyproject.toml, and suffice to import the handlers.

The import check runs each handler's module in a fresh interpreter that may import only the standard
library, the bundle's own packages and the distributions its requirements file pulls in
(transitively, from the installed metadata): what the deployed function would have, offline.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from infra.bundling import CONTROL_PLANE, EXAMPLE_HANDLER, Bundle
from tests.infra.facts import REPO_ROOT

NOT_ON_LAMBDA = {
    "click": "the torpor CLI",
    "rich": "the torpor CLI's tables",
    "hypercorn": "the local UI proxy's HTTP server",
    "uvicorn": "torpor dev's HTTP servers",
    "httptools": "torpor dev's HTTP parser",
    "uvloop": "torpor dev's event loop",
    "werkzeug": "torpor dev's local Lambda emulator",
    "prometheus-client": "torpor dev's GET /metrics (the functions write CloudWatch EMF)",
}
"""pyproject.toml dependencies the Lambda functions never import, and who does."""

ON_LAMBDA_FROM_GCP = {"google-auth"}
"""Distributions of pyproject.toml's gcp extra the Lambda functions need: Google ID tokens for Cloud
Run deployments (workload identity federation). google-cloud-run, which looks service names up, is left out."""


def _requirements(path: Path) -> dict[str, Requirement]:
    lines = [line.strip() for line in path.read_text().splitlines()]
    requirements = [Requirement(line) for line in lines if line and not line.startswith("#")]
    return {canonicalize_name(r.name): r for r in requirements}


def _pyproject() -> dict:
    return tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]


def _same(a: Requirement, b: Requirement) -> bool:
    return (a.specifier, a.extras, a.marker) == (b.specifier, b.extras, b.marker)


def test_control_plane_requirements_are_pyproject_dependencies() -> None:
    """Each dependency is in requirements.txt with the same specifier and extras, or said not to be needed."""
    bundle = _requirements(REPO_ROOT / CONTROL_PLANE.requirements)
    project = {canonicalize_name(r.name): r for r in map(Requirement, _pyproject()["dependencies"])}
    for name, requirement in project.items():
        if name in NOT_ON_LAMBDA:
            assert name not in bundle, f"{name} is both needed and not needed on Lambda"
            continue
        assert name in bundle, f"{name} (pyproject.toml) is missing from requirements.txt, or add it to NOT_ON_LAMBDA"
        assert _same(bundle[name], requirement), f"{bundle[name]} in requirements.txt, {requirement} in pyproject.toml"
    gcp = {canonicalize_name(r.name): r for r in map(Requirement, _pyproject()["optional-dependencies"]["gcp"])}
    for name in ON_LAMBDA_FROM_GCP:  # Cloud Run deployments from AWS
        assert name in bundle, f"{name} (the gcp extra) is missing from requirements.txt"
        assert _same(bundle[name], gcp[name]), f"{bundle[name]} in requirements.txt, {gcp[name]} in pyproject.toml"
    assert set(bundle) <= set(project) | ON_LAMBDA_FROM_GCP, f"not in pyproject.toml: {set(bundle) - set(project)}"
    assert set(NOT_ON_LAMBDA) <= set(project), "NOT_ON_LAMBDA names a dependency pyproject.toml no longer has"


def test_example_handler_requirements_are_the_examples_extra() -> None:
    bundle = _requirements(REPO_ROOT / EXAMPLE_HANDLER.requirements)
    extra = {canonicalize_name(r.name): r for r in map(Requirement, _pyproject()["optional-dependencies"]["examples"])}
    assert set(bundle) == set(extra)
    for name in extra:
        assert _same(bundle[name], extra[name]), (bundle[name], extra[name])


def _make_targets() -> dict[str, str]:
    """The Makefile's `build-<logical id>` targets → the `infra.bundling` bundle each writes."""
    makefile = (REPO_ROOT / "Makefile").read_text()
    names = dict(re.findall(r"^(\w+) := (.+)$", makefile, re.MULTILINE))
    targets: dict[str, str] = {}
    for head, recipe in re.findall(r"^([^\s#][^:=]*):\n\t(.+)$", makefile, re.MULTILINE):
        bundle = re.search(r"-m infra\.bundling ([\w-]+) \"\$\(ARTIFACTS_DIR\)\"", recipe)
        if bundle is None:
            continue
        expanded = re.sub(
            r"\$\(addprefix build-,\$\((\w+)\)\)", lambda m: " ".join(f"build-{n}" for n in names[m[1]].split()), head
        )
        for target in expanded.split():
            targets[target.removeprefix("build-")] = bundle[1]
    return targets


def test_sam_builds_the_same_bundles(sam_template: dict) -> None:
    """`sam build` runs the Makefile for every function (BuildMethod makefile), whose target for each
    writes the bundle the CDK asset of that function is: only run-time packages and dependencies."""
    assert sam_template["Globals"]["Function"]["CodeUri"] == "."
    assert sam_template["Globals"]["Function"]["Runtime"] == f"python{CONTROL_PLANE.python_version}"
    targets = _make_targets()
    functions = {
        name: resource
        for name, resource in sam_template["Resources"].items()
        if resource["Type"] == "AWS::Serverless::Function"
    }
    assert len(functions) == 6
    for name, function in functions.items():
        assert function.get("Metadata") == {"BuildMethod": "makefile"}, name
        example = function["Properties"]["Handler"] == "adapters.aws.checkpoints.handler"
        bundle = EXAMPLE_HANDLER if example else CONTROL_PLANE
        assert targets.get(name) == bundle.name, f"the Makefile's build-{name} must write the {bundle.name} bundle"
        runtime = function["Properties"].get("Runtime", sam_template["Globals"]["Function"]["Runtime"])
        assert runtime == f"python{bundle.python_version}", name
    assert not [r for r in sam_template["Resources"].values() if r["Type"] == "AWS::Serverless::LayerVersion"]


@pytest.mark.slow
def test_make_writes_only_run_time_code(tmp_path: Path) -> None:
    """What `sam build` bundles for a control-plane function: `make build-IngressFunction` (pip
    installs the requirements for Lambda arm64: network or pip's cache), no tests, docs or bench."""
    out = tmp_path / "IngressFunction"
    subprocess.run(
        ["make", "-f", str(REPO_ROOT / "Makefile"), "build-IngressFunction"]
        + [f"ARTIFACTS_DIR={out}", f"PYTHON={sys.executable}"],
        cwd=tmp_path,
        check=True,
        timeout=600,
    )
    top = {path.name for path in out.iterdir()}
    assert {"control_plane", "http_api", "adapters", "boto3", "pydantic", "aws_lambda_powertools"} <= top
    assert not {"tests", "docs", "bench", "examples", "infra", "scripts", "README.md", "moto", "datafusion"} & top
    assert not list(out.rglob("__pycache__"))
    ours = sum(p.stat().st_size for name in CONTROL_PLANE.packages for p in (out / name).rglob("*") if p.is_file())
    size = sum(path.stat().st_size for path in out.rglob("*") if path.is_file())
    assert ours < 4 * 2**20, f"{ours / 2**20:.1f} MB of Torpor's own code"
    # the rest is dependencies (botocore ~31 MB, zstandard ~21 MB, cryptography ~15 MB): ~95 MB;
    # Lambda's limit is 250 MB unzipped
    assert size < 120 * 2**20, f"{size / 2**20:.0f} MB"


def test_pip_targets_lambda_arm64() -> None:
    command = CONTROL_PLANE.pip_install_command("/out", "requirements.txt")
    assert command[command.index("--python-version") + 1] == "3.13"  # python3.13 on Amazon Linux 2023 (glibc 2.34)
    assert command[command.index("--platform") + 1] == "manylinux_2_28_aarch64"
    assert "manylinux2014_aarch64" in command
    assert "--only-binary=:all:" in command
    assert EXAMPLE_HANDLER.platforms[0] == "manylinux_2_28_aarch64"


_PROBE = r"""
import importlib.abc, importlib.metadata as md, json, sys
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

requirements_file, python_version, packages, modules, attributes = json.loads(sys.argv[1])
environment = {"python_version": python_version, "python_full_version": python_version + ".0"}
wanted = [Requirement(l.strip()) for l in open(requirements_file) if l.strip() and not l.strip().startswith("#")]
extras_of = {}
while wanted:
    requirement = wanted.pop()
    name = canonicalize_name(requirement.name)
    extras = set(requirement.extras)
    if name in extras_of and extras <= extras_of[name]:
        continue
    extras_of[name] = extras_of.get(name, set()) | extras
    for line in md.distribution(name).requires or []:
        dependency = Requirement(line)
        marker = dependency.marker
        if marker is None or any(marker.evaluate({**environment, "extra": e}) for e in extras_of[name] | {""}):
            wanted.append(dependency)
top_levels = {
    module for module, dists in md.packages_distributions().items()
    if any(canonicalize_name(d) in extras_of for d in dists)
}
allowed = set(sys.stdlib_module_names) | set(packages) | top_levels
blocked = []

class OnlyTheBundle(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top in allowed or top in sys.builtin_module_names or top.startswith("_sysconfigdata"):
            return None
        blocked.append(name)
        raise ModuleNotFoundError(f"No module named {name!r} in the bundle", name=name)

sys.meta_path.insert(0, OnlyTheBundle())
found = {}
for module_name in modules:
    module = __import__(module_name, fromlist=["_"])
    for attribute in attributes.get(module_name, []):
        found[f"{module_name}.{attribute}"] = callable(getattr(module, attribute, None))
print(json.dumps({"found": found, "blocked": sorted(set(blocked)), "distributions": sorted(extras_of)}))
"""


def _probe(bundle: Bundle, modules: list[str], attributes: dict[str, list[str]]) -> dict:
    argument = json.dumps(
        [str(REPO_ROOT / bundle.requirements), bundle.python_version, list(bundle.packages), modules, attributes]
    )
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, argument],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return dict(json.loads(result.stdout.strip().splitlines()[-1]))


def test_control_plane_handlers_import_from_the_bundle_alone() -> None:
    handlers = ["ingress_handler", "admin_handler", "worker_handler", "sweeper_handler", "deploy_hook_handler"]
    modules = ["adapters.aws.lambda_app"]
    if (REPO_ROOT / "adapters" / "aws" / "lambda_invoker.py").exists():
        modules.append("adapters.aws.lambda_invoker")  # imported on the first Lambda deployment's request
    probe = _probe(CONTROL_PLANE, modules, {"adapters.aws.lambda_app": handlers})
    assert probe["found"] == {f"adapters.aws.lambda_app.{h}": True for h in handlers}
    assert "aws-xray-sdk" in probe["distributions"]  # the [tracer] extra was followed
    assert not {"moto", "hypercorn", "rich", "werkzeug", "restate-sdk"} & set(probe["distributions"])


def test_cloud_run_id_tokens_through_workload_identity_import_from_the_bundle_alone() -> None:
    modules = [
        "adapters.gcp.cloud_run",
        "adapters.gcp.workload_identity",
        "google.auth.aws",
        "google.auth.identity_pool",
        "google.auth.transport.requests",
        "google.oauth2.id_token",
    ]
    probe = _probe(CONTROL_PLANE, modules, {"adapters.gcp.workload_identity": ["workload_identity_id_token"]})
    assert probe["found"] == {"adapters.gcp.workload_identity.workload_identity_id_token": True}
    assert {"google-auth", "requests"} <= set(probe["distributions"])


def test_example_handler_imports_from_its_bundle_alone() -> None:
    modules = ["examples.app", "adapters.aws.checkpoints", "adapters.aws.dynamodb_store"]
    probe = _probe(EXAMPLE_HANDLER, modules, {"examples.app": ["app"], "adapters.aws.checkpoints": ["handler"]})
    assert probe["found"] == {"examples.app.app": True, "adapters.aws.checkpoints.handler": True}
    assert {"restate-sdk", "pynamodb", "protobuf"} <= set(probe["distributions"])


def test_probe_refuses_what_the_bundle_lacks(tmp_path: Path) -> None:
    """The same probe fails when a needed requirement is missing (here: httpx)."""
    lines = (REPO_ROOT / CONTROL_PLANE.requirements).read_text().splitlines()
    without_httpx = tmp_path / "requirements.txt"
    without_httpx.write_text("\n".join(line for line in lines if not line.startswith("httpx")))
    crippled = Bundle("crippled", CONTROL_PLANE.packages, str(without_httpx), "3.13", CONTROL_PLANE.platforms)
    with pytest.raises(AssertionError, match="No module named 'httpx' in the bundle"):
        _probe(crippled, ["adapters.aws.lambda_app"], {})
