"""The web UI's Schedules page in headless Chromium against `torpor dev` (DynamoDB on moto).

Skipped when Playwright or a chromium binary is missing (CI installs both: see docs/ui.md).
"""

from __future__ import annotations

import httpx
import pytest

from adapters.local.dev import DevServer
from tests.helpers.dev import unique, wait_for
from tests.ui.browser import require_browser

require_browser()

from playwright.sync_api import Page, expect  # noqa: E402 (after the skip)

pytestmark = pytest.mark.slow


def test_the_schedules_page_lists_next_ticks_and_pauses_resumes_and_deletes(page: Page, dev: DevServer) -> None:
    name = unique("ui")
    reply = httpx.post(
        f"{dev.admin_url}/schedules",
        json={"name": name, "cron": "0 * * * *", "target": "Greeter/greet", "body": "from the UI test"},
        timeout=10,
    )
    assert reply.status_code == 201, reply.text
    next_tick = reply.json()["next_tick"]

    page.goto("/ui/#/schedules")
    row = page.locator(f'tr[data-schedule="{name}"]')
    expect(row).to_contain_text("cron 0 * * * * (UTC)")
    expect(row).to_contain_text("Greeter/greet")
    expect(row.locator(".next-tick time")).to_have_attribute("datetime", next_tick)

    row.get_by_role("button", name="Pause").click()
    expect(row).to_contain_text("paused")
    wait_for(lambda: dev.control_plane.schedules.get(name).paused, 5, "the pause")
    row.get_by_role("button", name="Resume").click()
    expect(row).to_contain_text("active")
    assert dev.control_plane.schedules.get(name).paused is False

    page.once("dialog", lambda dialog: dialog.accept())
    row.get_by_role("button", name="Delete").click()
    expect(row).to_have_count(0)
    assert dev.store.get_schedule(name) is None
