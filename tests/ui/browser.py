"""Headless Chromium for the web UI's tests and screenshots: Playwright driving Debian's chromium.

Playwright's own browser download is not used: `launch_chromium` starts the system's binary
(`apt-get install chromium`), found by `chromium_path`.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from adapters.local.dev import DevServer
from tests.helpers.dev import describe, wait_for

if TYPE_CHECKING:
    from playwright.sync_api import Browser

CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/lib/chromium/chromium")
"""Where Debian and Ubuntu put chromium; `TORPOR_CHROMIUM` names another binary."""


def require_browser() -> None:
    """Skip the calling test module (call it at import) unless Playwright and a chromium binary are
    there; CI installs both (docs/ui.md)."""
    pytest.importorskip("playwright.sync_api", reason="the web UI tests need playwright: pip install -e '.[test]'")
    if chromium_path() is None:
        pytest.skip(
            "the web UI tests need a chromium binary: apt-get install -y chromium (or set TORPOR_CHROMIUM)",
            allow_module_level=True,
        )


def chromium_path() -> str | None:
    """The chromium binary to drive: `$TORPOR_CHROMIUM`, a usual Debian path, or one on PATH; None if none."""
    explicit = os.environ.get("TORPOR_CHROMIUM")
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    for candidate in CHROMIUM_CANDIDATES:
        if os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("chromium") or shutil.which("chromium-browser")


@contextmanager
def launch_chromium() -> Iterator[Browser]:
    """A headless Chromium (the system's binary) under Playwright, closed on exit.

    Raises:
        RuntimeError: No chromium binary is installed.
    """
    from playwright.sync_api import sync_playwright

    executable = chromium_path()
    if executable is None:
        raise RuntimeError("no chromium binary: apt-get install -y chromium, or set TORPOR_CHROMIUM")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, headless=True)
        try:
            yield browser
        finally:
            browser.close()


def call(dev: DevServer, path: str, body: Any, **kwargs: Any) -> httpx.Response:
    """`POST {ingress}{path}` with a JSON body (asserts a 2xx answer)."""
    reply = httpx.post(f"{dev.ingress_url}{path}", json=body, timeout=30, **kwargs)
    assert reply.is_success, reply.text
    return reply


def send_and_wait(dev: DevServer, path: str, body: Any, status: str = "suspended") -> dict[str, Any]:
    """Send `path` (a `.../send` ingress path) and wait until its invocation has `status`; its description."""
    invocation_id = call(dev, path, body).json()["invocationId"]
    return wait_for(  # type: ignore[no-any-return]
        lambda: (d := describe(dev, invocation_id))["status"] == status and d, 15, f"{invocation_id} {status}"
    )
