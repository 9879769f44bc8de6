"""Restate's own web UI (its files read from the restate-server binary) in headless Chromium,
served by `torpor dev --restate-ui` over Torpor's admin API (issue 25 item 3, docs/ui.md).

Skipped without Playwright, a chromium binary, or restate-server in .cache/ (`scripts/test.sh`
installs all three).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest

from adapters.local.dev import DevServer
from adapters.local.restate_ui import RestateUiError, RestateUiFiles, load_restate_ui
from tests.ui.browser import require_browser
from tests.ui.restate_ui import LOADED_S, RESTATE_SERVER, VIEWPORT, dev_with_restate_ui, restate_ui_files, seed

require_browser()
if not RESTATE_SERVER:
    pytest.skip(
        "restate-server is not installed in .cache/conformance-restate: run scripts/test.sh", allow_module_level=True
    )

from playwright.sync_api import Browser, Page, expect  # noqa: E402 (after the skip)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def files() -> RestateUiFiles:
    return restate_ui_files()


@pytest.fixture(scope="module")
def restate_dev(files: RestateUiFiles) -> Iterator[tuple[DevServer, dict[str, str]]]:
    with dev_with_restate_ui(files) as dev:
        yield dev, seed(dev)


@pytest.fixture
def restate_page(browser: Browser, restate_dev: tuple[DevServer, dict[str, str]]) -> Iterator[Page]:
    """A page on Restate's UI port; every request the UI makes to the admin API must succeed."""
    dev, _ = restate_dev
    context = browser.new_context(base_url=dev.restate_ui_url, viewport=VIEWPORT)  # type: ignore[arg-type]
    context.set_default_timeout(LOADED_S * 1000)
    page = context.new_page()
    failed: list[str] = []
    page.on("response", lambda r: failed.append(f"{r.status} {r.request.method} {r.url}") if r.status >= 400 else None)
    yield page
    context.close()
    assert not failed, f"requests of Restate's UI that Torpor refused: {failed}"


def test_the_files_read_from_the_binary_are_the_app_and_every_asset_its_page_names(files: RestateUiFiles) -> None:
    index = files.files["index.html"].decode()
    named = {name.split("#")[0] for name in re.findall(r'"/ui/(assets/[^"]+)"', index)}
    assert index.startswith("<!DOCTYPE html>") and len(named) > 3
    assert named <= set(files.files)
    assert sum(name.startswith("assets/") for name in files.files) > 100


def test_a_suspended_workflows_page_shows_its_journal_with_state_keys_and_the_promise_it_waits_for(
    restate_page: Page, restate_dev: tuple[DevServer, dict[str, str]]
) -> None:
    _, seeded = restate_dev
    restate_page.goto(f"/ui/invocations/{seeded['workflow']}")

    # GetPromise, by name
    expect(restate_page.get_by_text('"confirmation"').first).to_be_visible(timeout=LOADED_S * 1000)
    for key in ('"email"', '"stage"'):  # SetState, by key
        expect(restate_page.get_by_text(key).first).to_be_visible(timeout=LOADED_S * 1000)
    expect(restate_page.get_by_text("Suspended").first).to_be_visible(timeout=LOADED_S * 1000)
    assert "could not be loaded" not in restate_page.inner_text("body")


def test_the_state_page_lists_an_objects_keys(restate_page: Page) -> None:
    restate_page.goto("/ui/state/Counter")

    expect(restate_page.get_by_text("bob").first).to_be_visible(timeout=LOADED_S * 1000)
    expect(restate_page.get_by_text("count").first).to_be_visible(timeout=LOADED_S * 1000)


def test_the_overview_counts_invocations_by_service_and_status(restate_page: Page) -> None:
    restate_page.goto("/ui/overview")

    expect(restate_page.get_by_text("Signup").first).to_be_visible(timeout=LOADED_S * 1000)
    expect(restate_page.get_by_text("Restate server").first).to_be_visible(timeout=LOADED_S * 1000)


def test_the_ui_port_serves_the_apps_routes_redirects_and_passes_the_rest_to_the_admin_api(
    restate_dev: tuple[DevServer, dict[str, str]],
) -> None:
    dev, seeded = restate_dev
    with httpx.Client(base_url=dev.restate_ui_url, timeout=10) as client:
        assert client.get("/").headers["location"] == "/ui/"
        page = client.get(f"/ui/invocations/{seeded['workflow']}")  # the app's own route: its page
        assert page.headers["content-type"].startswith("text/html") and b"<!DOCTYPE html>" in page.content
        version = client.get("/version").json()
        assert version["version"].startswith("1.7.12+torpor.") and version["max_admin_api_version"] == 4
        refused = client.post("/query", json={"query": "SELECT 1"}, headers={"origin": "http://evil.example"})
        assert refused.status_code == 403  # the admin API's guard holds on this port too


def test_a_path_without_the_ui_is_refused_naming_the_fix(tmp_path: object) -> None:
    with pytest.raises(RestateUiError, match="index.html"):
        load_restate_ui(str(tmp_path))
    not_elf = tmp_path / "restate-server"  # type: ignore[operator]
    not_elf.write_bytes(b"#!/bin/sh\n")
    with pytest.raises(RestateUiError, match="found no web UI"):
        load_restate_ui(str(not_elf))
