"""The invocation page's "Restart as new" button in headless Chromium against `torpor dev`.

Skipped when Playwright or a chromium binary is missing (CI installs both: see docs/ui.md).
"""

from __future__ import annotations

import re

import pytest

from adapters.local.dev import DevServer
from tests.helpers.dev import describe
from tests.ui.browser import call, require_browser

require_browser()

from playwright.sync_api import Page, expect  # noqa: E402 (after the skip)

pytestmark = pytest.mark.slow


def test_restart_as_new_opens_the_new_invocation_which_runs_again(page: Page, dev: DevServer) -> None:
    old = call(dev, "/Greeter/greet", "Ann").headers["x-restate-id"]
    page.goto(f"/ui/#/invocations/{old}")
    expect(page.locator(".title-row [data-status]")).to_have_attribute("data-status", "completed")

    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Restart as new").click()

    expect(page).not_to_have_url(re.compile(re.escape(old)))
    expect(page.get_by_test_id("invocation-output")).to_have_text("Hello, Ann!")
    new = page.get_by_test_id("invocation-id").inner_text()
    assert new != old and describe(dev, new)["status"] == "completed"
    assert describe(dev, old)["status"] == "completed"


def test_a_running_invocation_has_no_restart_button(page: Page, dev: DevServer) -> None:
    sleeping = call(dev, "/Waits/sleep/send", 60_000).json()["invocationId"]
    page.goto(f"/ui/#/invocations/{sleeping}")
    expect(page.get_by_role("button", name="Cancel")).to_be_visible()
    expect(page.get_by_role("button", name="Restart as new")).to_have_count(0)
