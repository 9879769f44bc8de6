"""dynalite (npm) for race tests: unlike moto, it serialises conditional writes like DynamoDB does.

`scripts/test.sh` installs it into `.cache/dynalite` with npm; `TORPOR_DYNALITE_CLI` may point at
another `dynalite/cli.js`. Each server gets its own LevelDB data directory.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.helpers.moto import DUMMY_AWS_ENV
from tests.helpers.services import REPO_ROOT, free_port

DEFAULT_CLI = REPO_ROOT / ".cache" / "dynalite" / "node_modules" / "dynalite" / "cli.js"
SURVIVE_ABORTS = Path(__file__).with_name("dynalite_survive_aborts.js")


def dynalite_cli() -> Path:
    """Path of dynalite's `cli.js`. Raises FileNotFoundError naming the fix if it is not installed."""
    cli = Path(os.environ.get("TORPOR_DYNALITE_CLI", DEFAULT_CLI))
    if not cli.is_file() or shutil.which("node") is None:
        raise FileNotFoundError(
            f"dynalite is not installed at {cli} (or node is missing): run scripts/test.sh, which installs it "
            "with `npm install --prefix .cache/dynalite dynalite`"
        )
    return cli


@contextmanager
def dynalite_server(*, survive_aborts: bool = False) -> Iterator[str]:
    """Run dynalite on a free loopback port with a temporary data directory; yields its URL.

    `survive_aborts`: run it through `dynalite_survive_aborts.js`, which keeps the server up when a
    client dies mid-request (plain dynalite exits: a test that SIGKILLs its clients needs this).
    """
    data_dir = tempfile.mkdtemp(prefix="torpor-dynalite-")
    port = free_port()
    wrapper = [str(SURVIVE_ABORTS)] if survive_aborts else []
    process = subprocess.Popen(
        ["node", *wrapper, str(dynalite_cli()), "--port", str(port), "--path", data_dir, "--createTableMs", "0",
         "--deleteTableMs", "0", "--updateTableMs", "0"],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    saved = {name: os.environ.get(name) for name in DUMMY_AWS_ENV}
    os.environ.update(DUMMY_AWS_ENV)
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, "dynalite exited at start-up"
            try:
                httpx.get(url, timeout=1)
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        yield url
        assert process.poll() is None, f"dynalite exited with status {process.returncode} (its stderr is above)"
    finally:
        process.terminate()
        process.wait(10)
        shutil.rmtree(data_dir, ignore_errors=True)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
