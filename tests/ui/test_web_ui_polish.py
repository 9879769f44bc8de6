"""The web UI's details a new user tripped over: a finished sleep, a cancel in the journal, a paused
invocation's facts, the playground's key, an object's keys on the state page, the list's order, a
step's duration. Headless Chromium against `torpor dev` (see test_web_ui.py)."""

from __future__ import annotations

import httpx
import pytest

from adapters.local.dev import DevServer
from tests.helpers.dev import describe, wait_for
from tests.ui.browser import call, require_browser, send_and_wait

require_browser()

from playwright.sync_api import Page, expect  # noqa: E402 (after the skip)

pytestmark = pytest.mark.slow


def test_a_finished_sleep_says_when_it_woke_up_not_when_it_wakes_up(page: Page, dev: DevServer) -> None:
    invocation_id = call(dev, "/Waits/sleep", 10).headers["x-restate-id"]
    page.goto(f"/ui/#/invocations/{invocation_id}")
    wake = page.locator("[data-testid=journal-entry][data-type=Sleep]").get_by_test_id("wake-up")
    expect(wake).to_contain_text("woke up at")
    expect(wake).not_to_contain_text("wakes up")


def test_a_cancel_shows_as_a_cancel_in_the_journal(page: Page, dev: DevServer) -> None:
    invocation_id = send_and_wait(dev, "/Waits/sleep/send", 60_000)["id"]
    assert httpx.patch(f"{dev.admin_url}/invocations/{invocation_id}/cancel").status_code == 202
    wait_for(lambda: describe(dev, invocation_id)["status"] == "completed", 15, "the cancel")
    page.goto(f"/ui/#/invocations/{invocation_id}")
    signal = page.locator("[data-testid=journal-entry][data-type=Signal]")
    expect(signal.locator("strong")).to_have_text("Cancel")
    expect(signal).not_to_contain_text("signal 1")
    # the sleep the cancel cut short was never reached
    expect(page.locator("[data-testid=journal-entry][data-type=Sleep]")).to_contain_text("was to wake up at")


def test_a_paused_invocation_has_no_empty_wake_up_fact(page: Page, dev: DevServer) -> None:
    invocation_id = send_and_wait(dev, "/Waits/sleep/send", 60_000)["id"]
    assert httpx.patch(f"{dev.admin_url}/invocations/{invocation_id}/pause").status_code == 202
    page.goto(f"/ui/#/invocations/{invocation_id}")
    expect(page.locator(".title-row [data-status]")).to_have_attribute("data-status", "paused")
    expect(page.locator("dl.facts")).to_contain_text("Attempts")
    expect(page.locator("dl.facts dt", has_text="Wakes up at")).to_have_count(0)
    httpx.patch(f"{dev.admin_url}/invocations/{invocation_id}/kill")


def test_the_playground_asks_for_a_key_on_a_keyed_service(page: Page, dev: DevServer) -> None:
    page.goto("/ui/#/playground?service=Counter&handler=add")
    page.locator("textarea[name=body]").fill("1")
    page.get_by_role("button", name="Invoke").click()
    expect(page.locator("input[name=key]:invalid")).to_have_count(1)  # the form is not sent without one
    expect(page.get_by_test_id("playground-result")).to_be_empty()
    page.goto("/ui/#/playground?service=Greeter&handler=greet")
    expect(page.locator("input[name=key]")).to_be_hidden()
    expect(page.locator("input[name=key]:invalid")).to_have_count(0)


def test_the_state_page_lists_an_objects_keys(page: Page, dev: DevServer) -> None:
    for key in ("polish-a", "polish-b"):
        call(dev, f"/Counter/{key}/add", 2)
    page.goto("/ui/#/state?service=Counter")
    links = page.get_by_test_id("known-keys").get_by_test_id("key-link")
    expect(links.filter(has_text="polish-a")).to_have_count(1)
    expect(links.filter(has_text="polish-b")).to_have_count(1)
    links.filter(has_text="polish-b").click()
    expect(page.get_by_test_id("state").locator("pre")).to_have_text("2")


def test_the_invocation_list_is_newest_first_by_creation(page: Page, dev: DevServer) -> None:
    made = [call(dev, "/Greeter/greet", name).headers["x-restate-id"] for name in ("one", "two", "three")]
    page.goto("/ui/#/invocations?service=Greeter&limit=500")
    expect(page.locator("h1")).to_contain_text("newest first by creation time")
    rows = page.locator("[data-testid=invocation-row]")
    expect(rows.first).to_have_attribute("data-id", made[-1])
    shown = rows.evaluate_all("rows => rows.map((r) => r.dataset.id)")
    created = {i: describe(dev, i)["created_at"] for i in shown[:10]}
    assert [created[i] for i in shown[:10]] == sorted(created.values(), reverse=True)
    assert [i for i in shown if i in made] == made[::-1]


def test_the_timeline_shows_how_long_each_step_took(page: Page, dev: DevServer) -> None:
    invocation_id = call(dev, "/Steps/slow_steps", {"n": 2, "step_ms": 300}).headers["x-restate-id"]
    page.goto(f"/ui/#/invocations/{invocation_id}")
    durations = page.locator("[data-testid=journal-entry][data-type=RunCompletion]").get_by_test_id("step-duration")
    expect(durations).to_have_count(2)
    for text in durations.all_inner_texts():  # "took ≈ 312 ms" or "took ≈ 1.2 s"
        number, unit = text.removeprefix("took ≈ ").split()
        assert float(number) * (1000 if unit == "s" else 1) >= 300, text
