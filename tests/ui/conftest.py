"""Fixtures for the web UI's tests: a `DevServer` with the example services, and headless Chromium.

The browser fixtures import Playwright when used, so the UI's HTTP tests run without it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

# ``tests`` is not a package on sys.path when pytest runs from the venv's entry point.
_REPO_ROOT = str(Path(__file__).resolve().parents[2])
if _REPO_ROOT not in sys.path:
    sys.path.insert(0, _REPO_ROOT)

from adapters.local.dev import DevServer  # noqa: E402
from control_plane.settings import Settings  # noqa: E402
from tests.helpers.dev import dev_with_examples  # noqa: E402
from tests.helpers.moto import moto_server  # noqa: E402
from tests.helpers.services import serve_examples  # noqa: E402
from tests.ui.browser import launch_chromium  # noqa: E402

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page


@pytest.fixture(scope="module")
def dev() -> Iterator[DevServer]:
    """`torpor dev` on a moto server, with the example services registered, for the module."""
    with (
        moto_server() as moto_endpoint,
        serve_examples() as (examples_url, _process),
        dev_with_examples(moto_endpoint, examples_url, Settings()) as server,
    ):
        yield server


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Headless Chromium (the system's binary) for the module."""
    with launch_chromium() as chromium:
        yield chromium


@pytest.fixture
def page(browser: Browser, dev: DevServer) -> Iterator[Page]:
    """A fresh browser page (its own storage) whose errors fail the test."""
    context = browser.new_context(base_url=dev.admin_url, viewport={"width": 1280, "height": 900})
    context.set_default_timeout(15_000)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    yield page
    context.close()
    assert not errors, f"JavaScript errors in the page: {errors}"
