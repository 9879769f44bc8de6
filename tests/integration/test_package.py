"""Torpor as a package: a wheel built from this tree, installed into a fresh virtualenv (no extras).

What a user of `pip install torpor` (or `pipx install .`) gets: `torpor --version` from the installed
metadata, `torpor dev` run from outside the repository serving its web UI (package data) and running
an example service registered with it (the services run from the test's own environment, as a
user's app would run from its own), no moto, cfn-lint or sympy (the `moto` extra), and
`torpor dev --moto` naming that extra. Slow: pip builds the wheel and installs its dependencies
(from the package index or pip's cache), about a minute.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import tomllib
import venv
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import httpx
import pytest

from tests.helpers.dev import wait_for
from tests.helpers.services import serve_examples

pytestmark = pytest.mark.slow

REPO_ROOT = Path(__file__).resolve().parents[2]

ONLY_IN_EXTRAS = {
    "moto": "moto",  # torpor dev --moto
    "cfn-lint": "moto",  # pulled in by moto[server]
    "sympy": "moto",  # pulled in by cfn-lint
    "docker": "moto",
    "datafusion": "query",  # SQL introspection
    "pyarrow": "query",
    "restate-sdk": "examples",
    "aws-cdk-lib": "test",
}
"""Distributions a plain install must not have, and the extra that brings each."""

_LISTENING = re.compile(r"torpor dev: ingress (http://\S+), admin (http://\S+) ")


def _version() -> str:
    return str(tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["version"])


def _setuptools_major() -> int:
    try:
        return int(metadata.version("setuptools").split(".")[0])
    except (metadata.PackageNotFoundError, ValueError):
        return 0


def _clean_env() -> dict[str, str]:
    """This environment without what would let the installed `torpor` import the source tree."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The `bin/` of a fresh virtualenv where pip installed the wheel built from this tree."""
    root = tmp_path_factory.mktemp("package")
    wheels = root / "wheels"
    # this environment's setuptools when it is new enough for pyproject.toml (saves pip a minute)
    no_isolation = ["--no-build-isolation"] if _setuptools_major() >= 77 else []
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", *no_isolation, "--wheel-dir", str(wheels)]
        + [str(REPO_ROOT)],
        check=True,
        timeout=300,
        env=_clean_env(),
    )
    (wheel,) = wheels.glob("torpor-*.whl")
    venv.EnvBuilder(with_pip=True).create(root / "venv")
    bin_dir = root / "venv" / "bin"
    subprocess.run(
        [str(bin_dir / "python"), "-m", "pip", "install", "--quiet", str(wheel)],
        check=True,
        timeout=300,
        env=_clean_env(),
        cwd=root,
    )
    return bin_dir


def _run(installed: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(installed / "torpor"), *args],
        cwd=cwd,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_plain_install_has_no_extras(installed: Path) -> None:
    listed = subprocess.run(
        [str(installed / "python"), "-m", "pip", "list", "--format=json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    names = {entry["name"].lower().replace("_", "-") for entry in json.loads(listed.stdout)}
    assert "torpor" in names
    present = {name: extra for name, extra in ONLY_IN_EXTRAS.items() if name in names}
    assert not present, f"a plain install pulled in what its extras should: {present}"


def test_version_comes_from_the_installed_metadata(installed: Path, tmp_path: Path) -> None:
    done = _run(installed, "--version", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"torpor {_version()}\n"


def test_dev_moto_without_the_extra_names_it(installed: Path, tmp_path: Path) -> None:
    done = _run(installed, "dev", "--moto", "--ingress-port", "0", "--admin-port", "0", cwd=tmp_path)
    assert done.returncode != 0
    assert "pip install 'torpor[moto]'" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.fixture
def installed_dev(installed: Path, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """The installed `torpor dev` (its SQLite store in `tmp_path/.torpor`), run from `tmp_path`."""
    process = subprocess.Popen(
        [str(installed / "torpor"), "dev", "--ingress-port", "0", "--admin-port", "0"],
        cwd=tmp_path,
        env=_clean_env(),
        stderr=subprocess.PIPE,
    )
    urls: list[tuple[str, str]] = []

    def copy_stderr() -> None:
        assert process.stderr is not None
        for raw in process.stderr:
            line = raw.decode(errors="replace")
            sys.stderr.write(line)
            if not urls and (match := _LISTENING.search(line)):
                urls.append((match[1], match[2]))

    threading.Thread(target=copy_stderr, name="installed-dev-stderr", daemon=True).start()
    try:
        wait_for(lambda: urls or process.poll() is not None, 60, "the installed torpor dev to listen")
        assert process.poll() is None, "the installed torpor dev exited"
        yield urls[0]
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait(15)


def test_installed_dev_serves_the_ui_and_runs_a_registered_service(
    installed_dev: tuple[str, str], tmp_path: Path
) -> None:
    ingress, admin = installed_dev
    assert (tmp_path / ".torpor" / "torpor.sqlite3").exists()  # its store, under the working directory
    # restate-server's shape (Restate's UI reads it), Torpor's own version after "+torpor."
    assert httpx.get(f"{admin}/version", timeout=10).json()["version"].endswith(f"+torpor.{_version()}")
    page = httpx.get(f"{admin}/ui/", timeout=10)
    assert page.status_code == 200
    assert "<html" in page.text.lower()
    static = sorted(path.name for path in (REPO_ROOT / "http_api" / "ui" / "static").iterdir() if path.is_file())
    assert "app.js" in static
    for name in static:  # every file of the source tree's UI came with the wheel
        assert httpx.get(f"{admin}/ui/{name}", timeout=10).status_code == 200, name
    with serve_examples() as (examples_url, _):
        registered = httpx.post(f"{admin}/deployments", json={"uri": examples_url}, timeout=30)
        assert registered.status_code == 201, registered.text
        answer = httpx.post(f"{ingress}/Greeter/greet", json="Ann", timeout=30)
        assert answer.status_code == 200, answer.text
        assert answer.json() == "Hello, Ann!"
