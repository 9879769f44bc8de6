"""The Lambda checkpoint wrapper (`adapters.aws.checkpoints`) on every restate-sdk release it supports.

The wrapper relies on private names of the SDK (its module doc lists them), so each release in
`TESTED_SDK_VERSIONS` gets a virtualenv of its own, `.cache/restate-sdk-venvs/py3.X-restate-sdk-V/`
(git-ignored; built once, 10 to 25 s each from the local package mirror, then reused: the file then
runs in about 30 s) holding `restate-sdk[serde]==V` and what pip brings with it; this interpreter's
site-packages come after them, for Torpor's own dependencies. There `tests/helpers/sdk_probe.py`
loads the wrapper as Lambda does and drives, on service protocol V5, V6 and V7, a handler of two
`ctx.run`s (sync and async) and a sleep: both runs are committed in the function, the SDK suspends
on the sleep, the second Invoke ends the handler. The same probe with the run task's name broken
shows the runs left to the orchestrator, so the test can tell. An SDK outside `SUPPORTED_SDK` is
refused in one line.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from adapters.aws.checkpoints import SUPPORTED_SDK, TESTED_SDK_VERSIONS, UnsupportedSDK, check_sdk_version

REPO_ROOT = Path(__file__).resolve().parents[2]
VENVS = REPO_ROOT / ".cache" / "restate-sdk-venvs"
PY = f"py{sys.version_info.major}.{sys.version_info.minor}"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on `path` (two test runs must not build the same venv at once)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def sdk_python(version: str) -> Path:
    """The interpreter of the cached virtualenv holding restate-sdk `version` (built if missing)."""
    root = VENVS / f"{PY}-restate-sdk-{version}"
    python, ready = root / "bin" / "python", root / ".torpor-ready"
    with _locked(VENVS / f".{root.name}.lock"):
        if not ready.exists():  # absent or half-built: start over
            shutil.rmtree(root, ignore_errors=True)
            subprocess.run([sys.executable, "-m", "venv", str(root)], check=True, timeout=120)
            install = [str(python), "-m", "pip", "install", "-q", f"restate-sdk[serde]=={version}"]
            subprocess.run(install, check=True, timeout=600)
            ready.write_text(version)
    return python


def probe(python: Path, store: Path, *args: str) -> dict[str, Any]:
    """Run tests/helpers/sdk_probe.py in `python` (this interpreter's site-packages last on its path)."""
    fallback = sysconfig.get_paths()["purelib"]
    bootstrap = (
        f"import sys, runpy; sys.path.append({fallback!r}); "
        "runpy.run_module('tests.helpers.sdk_probe', run_name='__main__', alter_sys=True)"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "AWS_LAMBDA_FUNCTION_NAME")}
    done = subprocess.run(
        [str(python), "-c", bootstrap, str(store), *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.slow
@pytest.mark.parametrize("protocol", [5, 6, 7])  # V5/V6: the wrapper acks with a RunCompletion; V7: an ack
@pytest.mark.parametrize("version", TESTED_SDK_VERSIONS)
def test_the_wrapper_commits_runs_and_suspends_with_each_supported_sdk(
    version: str, protocol: int, tmp_path: Path
) -> None:
    python = sdk_python(version)
    report = probe(python, tmp_path / "store.sqlite", "--protocol-version", str(protocol))
    assert report["sdk_version"] == version
    assert report["protocol_version"] == protocol
    assert report["restate_file"].startswith(str(python.parent.parent))  # that venv's SDK, not this one's
    assert report["discovery_status"] == 200
    first = report["first"]
    assert first["status"] == 200
    assert first["stored"] == ["Input", "Run", "RunCompletion", "Run", "RunCompletion"]  # committed in the function
    assert first["committed_length"] == "5"
    assert "ProposeRunCompletion" not in first["answer"]  # nothing left for the orchestrator to commit
    assert "Sleep" in first["answer"]
    assert first["answer"][-1] == "Suspension"  # the body closed once only the sleep was awaited
    second = report["second"]
    assert second["status"] == 200
    assert second["answer"][-2:] == ["Output", "End"]
    assert second["output"] == [1, 2]


@pytest.mark.slow
@pytest.mark.parametrize("version", TESTED_SDK_VERSIONS)
def test_the_probe_tells_when_the_run_task_is_not_found(version: str, tmp_path: Path) -> None:
    """Should the SDK's run task be named differently, the wrapper closes the body while the first
    run executes: no commit in the function, the proposal goes back to the orchestrator."""
    report = probe(sdk_python(version), tmp_path / "store.sqlite", "--break-run-detection")
    first = report["first"]
    assert first["committed_length"] is None
    assert first["stored"] == ["Input"]
    assert first["answer"][-2:] == ["ProposeRunCompletion", "Suspension"]


def test_pyproject_declares_the_supported_range_and_pins_inside_it() -> None:
    """The `checkpoints` extra is what users install; the pinned extras (the example handler's
    bundle, the tests) and every tested release lie in it."""
    extras = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    sdk = {
        extra: next(r for r in map(Requirement, requirements) if r.name == "restate-sdk")
        for extra, requirements in extras.items()
        if any(Requirement(r).name == "restate-sdk" for r in requirements)
    }
    assert sdk["checkpoints"].specifier == SpecifierSet(SUPPORTED_SDK)
    for extra in ("examples", "test"):
        [pin] = sdk[extra].specifier
        assert pin.operator == "==", (extra, pin)
        assert pin.version in sdk["checkpoints"].specifier, (extra, pin)
        check_sdk_version(pin.version, env={})
    assert all(v in sdk["checkpoints"].specifier for v in TESTED_SDK_VERSIONS)


@pytest.mark.parametrize("version", ["1.2.0", "1.2.7", "1.3.0", "1.3.12rc1"])
def test_supported_versions_pass(version: str) -> None:
    assert check_sdk_version(version, env={}) == version


@pytest.mark.parametrize("version", ["1.1.0", "1.4.0", "1.4.0rc1", "0.18.1", "2.0.0", "nightly"])
def test_other_versions_are_refused_in_one_line(version: str) -> None:
    with pytest.raises(UnsupportedSDK) as raised:
        check_sdk_version(version, env={})
    message = str(raised.value)
    assert "\n" not in message
    assert f"restate-sdk {version} is installed" in message
    assert f"restate-sdk{SUPPORTED_SDK}" in message
    assert "TORPOR_ALLOW_UNTESTED_SDK=1" in message


def test_an_untested_version_may_be_allowed_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    assert check_sdk_version("1.4.0", env={"TORPOR_ALLOW_UNTESTED_SDK": "1"}) == "1.4.0"
    assert "restate-sdk 1.4.0 is installed" in caplog.text
    with pytest.raises(UnsupportedSDK):
        check_sdk_version("1.4.0", env={"TORPOR_ALLOW_UNTESTED_SDK": "0"})


def _fake_sdk_metadata(root: Path, version: str) -> Path:
    """A directory whose `restate_sdk-VERSION.dist-info` makes importlib.metadata report `version`."""
    dist_info = root / f"restate_sdk-{version}.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: restate-sdk\nVersion: {version}\n")
    return root


def test_an_unsupported_sdk_fails_the_import_and_the_emulator_in_one_line(tmp_path: Path) -> None:
    """On Lambda an ImportError at init is `Runtime.ImportModuleError` with its message alone; the
    local Lambda emulator (`torpor dev --lambda`) prints the same line and exits 2."""
    assert issubclass(UnsupportedSDK, ImportError)
    fake = _fake_sdk_metadata(tmp_path / "fake", "1.1.0")
    env = {**os.environ, "PYTHONPATH": f"{fake}{os.pathsep}{REPO_ROOT}"}
    env.pop("TORPOR_ALLOW_UNTESTED_SDK", None)
    imported = subprocess.run(
        [sys.executable, "-c", "import adapters.aws.checkpoints"], env=env, capture_output=True, text=True, timeout=60
    )
    assert imported.returncode == 1
    last = imported.stderr.strip().splitlines()[-1]
    assert last.startswith("adapters.aws.checkpoints.UnsupportedSDK: restate-sdk 1.1.0 is installed")
    function = "Paced=tests.helpers.checkpoint_app:app"
    emulator = subprocess.run(
        [sys.executable, "-m", "adapters.local.lambda_emulator", "--function", function],
        env={**env, "TORPOR_SQLITE": str(tmp_path / "store.sqlite")},
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert emulator.returncode == 2
    assert "Traceback" not in emulator.stderr
    assert emulator.stderr.splitlines()[-1:] == [  # after the INFO lines of its logging, if any
        f"restate-sdk 1.1.0 is installed, but Torpor's Lambda checkpoint wrapper (adapters.aws.checkpoints) supports "
        f"restate-sdk{SUPPORTED_SDK} (tested: 1.2.0, 1.3.0): install 'restate-sdk[serde]{SUPPORTED_SDK}', "
        "or set TORPOR_ALLOW_UNTESTED_SDK=1 to try this one"
    ]
