"""Restate's web UI over `torpor dev` for the tests and screenshots (`python -m tests.ui.restate_ui [OUT_DIR]`).

Restate's UI files are read from the restate-server binary the tests install (`scripts/test.sh`:
`.cache/conformance-restate`), never committed: they are Restate's. `torpor dev --restate-ui` is
`DevServer(restate_ui=...)` here, on an in-memory store with the example services registered.
"""

from __future__ import annotations

import glob
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from adapters.local.dev import DevServer
from adapters.local.restate_ui import RestateUiFiles, load_restate_ui
from control_plane.settings import Settings
from tests.helpers.dev import describe, wait_for
from tests.helpers.services import REPO_ROOT, serve_examples

RESTATE_SERVER = sorted(
    glob.glob(str(REPO_ROOT / ".cache/conformance-restate/node_modules/@restatedev")
              + "/restate-server-linux-*/bin/restate-server")
)
"""restate-server 1.7.12's binary as `scripts/test.sh` installs it (empty list: not installed)."""

VIEWPORT = {"width": 1280, "height": 800}
LOADED_S = 90
"""How long a page of Restate's UI may take to show its data (s): its app is 20 MB of JavaScript,
slow on a loaded 2-core machine."""


def restate_ui_files() -> RestateUiFiles:
    """Restate's web UI, read from the installed restate-server binary."""
    return load_restate_ui(RESTATE_SERVER[0])


@contextmanager
def dev_with_restate_ui(files: RestateUiFiles) -> Iterator[DevServer]:
    """`torpor dev --in-memory --restate-ui` on free ports with the example services registered."""
    with (
        serve_examples() as (examples_url, _process),
        DevServer(
            ingress_port=0, admin_port=0, in_memory=True, settings=Settings(), restate_ui=files, restate_ui_port=0
        ) as dev,
    ):
        reply = httpx.post(f"{dev.admin_url}/deployments", json={"uri": examples_url}, timeout=30)
        assert reply.status_code == 201, reply.text
        yield dev


def seed(dev: DevServer) -> dict[str, str]:
    """A suspended `Signup/alice` workflow (state `email`, `stage`; waits on the promise
    `confirmation`) and the object `Counter/bob` with state `count`: `{"workflow": its id}`."""
    reply = httpx.post(f"{dev.ingress_url}/Signup/alice/run/send", json="alice@example.com", timeout=30)
    assert reply.is_success, reply.text
    workflow = reply.json()["invocationId"]
    assert httpx.post(f"{dev.ingress_url}/Counter/bob/add", json=5, timeout=30).json() == 5
    wait_for(lambda: describe(dev, workflow)["status"] == "suspended", 30, "the workflow suspended")
    return {"workflow": workflow}


def main(argv: list[str] | None = None) -> int:
    """Save screenshots of Restate's UI on Torpor into `argv[0]` (default docs/screenshots)."""
    from playwright.sync_api import expect

    from tests.ui.browser import launch_chromium

    args = sys.argv[1:] if argv is None else argv
    out = Path(args[0]) if args else REPO_ROOT / "docs" / "screenshots"
    out.mkdir(parents=True, exist_ok=True)
    with dev_with_restate_ui(restate_ui_files()) as dev, launch_chromium() as browser:
        seeded = seed(dev)
        context = browser.new_context(base_url=dev.restate_ui_url, viewport=VIEWPORT)  # type: ignore[arg-type]
        context.set_default_timeout(LOADED_S * 1000)
        page = context.new_page()
        shots = [
            (f"/ui/invocations/{seeded['workflow']}", '"confirmation"', "restate-ui-invocation"),
            ("/ui/state/Counter", "count", "restate-ui-state"),
            ("/ui/overview", "Signup", "restate-ui-overview"),
        ]
        for path, ready, name in shots:
            page.goto(path)
            expect(page.get_by_text(ready).first).to_be_visible(timeout=LOADED_S * 1000)
            page.wait_for_timeout(1000)  # the last layout and fonts: a picture, not a test
            target = out / f"{name}.png"
            page.screenshot(path=str(target), animations="disabled")
            print(target)
        context.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
