"""The web UI in headless Chromium against `torpor dev` with the example services.

Skipped when Playwright or a chromium binary is missing (CI installs both: see docs/ui.md).
"""

from __future__ import annotations

import re

import httpx
import pytest

from adapters.local.dev import DevServer
from control_plane.ports import JournalBatch
from control_plane.protocol import encode_frames, frame
from control_plane.protocol import protocol_pb2 as pb
from tests.helpers.dev import describe, unique, wait_for
from tests.ui.browser import call, require_browser, send_and_wait

require_browser()

from playwright.sync_api import Locator, Page, expect  # noqa: E402 (after the skip)

pytestmark = pytest.mark.slow


def row(page: Page, invocation_id: str) -> Locator:
    """The invocation list's row of `invocation_id`."""
    return page.locator(f'[data-testid=invocation-row][data-id="{invocation_id}"]')


def test_the_admin_root_redirects_to_the_ui_which_lists_running_and_completed_invocations(
    page: Page, dev: DevServer
) -> None:
    done = call(dev, "/Greeter/greet", "Ann").headers["x-restate-id"]
    sleeping = send_and_wait(dev, "/Waits/sleep/send", 60_000)["id"]

    page.goto("/")

    expect(page).to_have_url(re.compile(r"/ui/"))
    expect(row(page, sleeping)).to_have_attribute("data-status", "suspended")
    expect(row(page, sleeping)).to_contain_text("Waits/sleep")
    expect(row(page, sleeping)).to_contain_text("wakes up in")
    expect(row(page, done)).to_have_attribute("data-status", "completed")
    expect(row(page, done)).to_contain_text("Greeter/greet")

    # filters: only suspended invocations
    page.locator("select[name=status]").select_option("suspended")
    page.get_by_role("button", name="Apply").click()
    expect(page).to_have_url(re.compile(r"#/invocations\?status=suspended"))
    expect(row(page, sleeping)).to_be_visible()
    expect(row(page, done)).to_have_count(0)

    # paging: one per page, newest first, the older one on the next page
    call(dev, "/Greeter/greet", "Bob")
    page.goto("/ui/#/invocations?service=Greeter&limit=1")
    expect(page.locator("[data-testid=invocation-row]")).to_have_count(1)
    expect(row(page, done)).to_have_count(0)  # the newest (Bob's) comes first
    page.get_by_role("link", name="Older ⟶").click()
    expect(row(page, done)).to_be_visible()


def test_the_journal_timeline_shows_a_sleep_with_its_wake_up_time(page: Page, dev: DevServer) -> None:
    sleeping = send_and_wait(dev, "/Waits/sleep/send", 60_000)
    sleep_entry = sleeping["journal"][1]
    assert sleep_entry["type"] == "Sleep"

    page.goto(f"/ui/#/invocations/{sleeping['id']}")

    expect(page.locator(".title-row h1")).to_have_text("Waits/sleep")
    entry = page.locator("[data-testid=journal-entry][data-type=Sleep]")
    expect(entry.get_by_test_id("wake-up")).to_contain_text(f"wakes up at {sleep_entry['wake_up_at']}")
    expect(entry).to_contain_text("waiting")
    expect(entry).to_contain_text(f"stored {sleep_entry['stored_at']}")
    expect(page.locator("dl.facts")).to_contain_text(f"Sleep #1 until {sleep_entry['wake_up_at']}")


def test_cancel_from_the_ui_ends_the_invocation_with_409_and_purge_removes_it(page: Page, dev: DevServer) -> None:
    invocation_id = send_and_wait(dev, "/Waits/sleep/send", 60_000)["id"]
    page.goto(f"/ui/#/invocations/{invocation_id}")
    status = page.locator(".title-row [data-status]")
    expect(status).to_have_attribute("data-status", "suspended")

    page.get_by_role("button", name="Cancel").click()

    # the page refreshes by itself until the invocation completes
    expect(status).to_have_attribute("data-status", "completed")
    expect(status).to_have_text("cancelled")
    expect(status).to_have_attribute("data-completion", "cancelled")
    expect(page.get_by_role("heading", name="Cancelled")).to_be_visible()
    final = describe(dev, invocation_id)
    assert final["completion_failure"]["code"] == 409

    # the list filters by how an invocation ended
    page.goto("/ui/#/invocations")
    page.locator("select[name=completion]").select_option("cancelled")
    page.get_by_role("button", name="Apply").click()
    expect(page).to_have_url(re.compile(r"#/invocations\?completion=cancelled"))
    expect(row(page, invocation_id)).to_be_visible()
    page.goto(f"/ui/#/invocations/{invocation_id}")

    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Purge").click()
    expect(page).to_have_url(re.compile(r"#/invocations$"))
    wait_for(lambda: dev.store.get_invocation(invocation_id) is None, 10, "the purge")


def test_an_awaited_awakeable_is_resolved_from_the_invocation_page(page: Page, dev: DevServer) -> None:
    waiting = send_and_wait(dev, "/Waits/awakeable/send", None)
    (awakeable,) = waiting["awaiting_awakeables"]
    page.goto(f"/ui/#/invocations/{waiting['id']}")
    expect(page.locator(".awakeable code")).to_have_text(awakeable)

    page.locator(".awakeable input[aria-label='value (JSON)']").fill('"from the UI"')
    page.get_by_role("button", name="Resolve").click()

    expect(page.get_by_test_id("invocation-output")).to_have_text("got from the UI")


def test_the_playground_invokes_a_handler_and_shows_its_result(page: Page, dev: DevServer) -> None:
    page.goto("/ui/#/playground?service=Greeter&handler=greet")
    page.locator("textarea[name=body]").fill('"Ann"')
    page.get_by_role("button", name="Invoke").click()

    expect(page.get_by_test_id("result-status")).to_have_text("HTTP 200")
    expect(page.get_by_test_id("result-body")).to_have_text("Hello, Ann!")
    # the x-restate-id header (exposed by the ingress's CORS headers) links to the invocation
    page.get_by_test_id("playground-result").locator("a").click()
    expect(page.locator(".title-row h1")).to_have_text("Greeter/greet")
    expect(page.get_by_test_id("invocation-output")).to_have_text("Hello, Ann!")


def test_the_playground_calls_an_object_by_key_and_the_state_viewer_shows_its_state(page: Page, dev: DevServer) -> None:
    page.goto("/ui/#/playground?service=Counter&handler=add&key=ui%20key")
    page.locator("textarea[name=body]").fill("5")
    page.get_by_role("button", name="Invoke").click()
    expect(page.get_by_test_id("result-body")).to_have_text("5")

    page.goto("/ui/#/state?service=Counter&key=ui%20key")
    expect(page.get_by_test_id("state")).to_contain_text("count")
    expect(page.get_by_test_id("state").locator("pre")).to_have_text("5")


def test_the_service_page_shows_handlers_and_each_option_with_its_source(page: Page, dev: DevServer) -> None:
    page.goto("/ui/#/services")
    page.get_by_role("link", name="Greeter", exact=True).click()

    expect(page.locator(".title-row h1")).to_have_text("Greeter")
    expect(page.get_by_role("cell", name="greet", exact=True)).to_be_visible()
    timeout = page.locator("tr[data-option=inactivityTimeout]")
    expect(timeout).to_contain_text("1 min")
    expect(timeout).to_contain_text("built-in")


def test_the_service_page_shows_the_services_limits(page: Page, dev: DevServer) -> None:
    limits = {"concurrency_limit": 4, "handler_concurrency_limits": {"sleep": 2}, "rate_limit": 3}
    assert httpx.patch(f"{dev.admin_url}/services/Waits", json=limits, timeout=10).status_code == 200
    try:
        page.goto("/ui/#/services/Waits")
        expect(page.get_by_test_id("limits")).to_have_text(
            "at most 4 running at once; sleep: at most 2 running; 3 starts/s"
        )
        expect(page.locator("tr[data-option=handlerConcurrencyLimits]")).to_contain_text("sleep: 2 running")
        page.goto("/ui/#/services/Greeter")
        expect(page.get_by_test_id("limits")).to_have_text("none")
    finally:
        off = {"concurrency_limit": None, "handler_concurrency_limits": {"sleep": None}, "rate_limit": None}
        httpx.patch(f"{dev.admin_url}/services/Waits", json=off, timeout=10)


def test_the_invocation_page_shows_the_aws_requests_it_caused_and_their_cost(page: Page, dev: DevServer) -> None:
    reply = httpx.post(f"{dev.ingress_url}/Greeter/greet", json="Cost", timeout=30)
    invocation = describe(dev, reply.headers["x-restate-id"])
    page.goto(f"/ui/#/invocations/{invocation['id']}")
    section = page.get_by_test_id("aws-cost")
    expect(section).to_contain_text("dynamodb PutItem META")
    total = sum(invocation["aws_cost_usd"].values())
    line = section.get_by_test_id("aws-cost-total")
    expect(line).to_contain_text(" per million such invocations")
    # the page sums and rounds in JavaScript: the last cent may differ from Python's rounding
    shown = float(re.search(r"\$([0-9.]+) per million", line.inner_text()).group(1))
    assert abs(shown - total * 1e6) <= 0.011, (shown, total * 1e6)


def test_a_journal_mismatch_shows_the_command_sent_and_the_one_recorded(page: Page, dev: DevServer) -> None:
    # GIVEN an invocation whose journal records a Call where the handler now runs a step
    cp = dev.control_plane
    record = cp.engine.create("Steps", "one_step", b"1", {}, leased=True)
    cp.store._update_invocation(record.invocation_id, record.epoch, lease_until_ms=0, status="ready")
    recorded = pb.CallCommandMessage(
        service_name="Greeter", handler_name="greet", parameter=b'"x"', result_completion_id=1, name="ask"
    )
    cp.store.append_batch(record.invocation_id, JournalBatch(1, encode_frames([frame(recorded)]), record.epoch, 1))
    cp.advance(record.invocation_id)
    cp.engine.operations.pause(record.invocation_id)

    page.goto(f"/ui/#/invocations/{record.invocation_id}")

    expect(page.get_by_test_id("failure-command")).to_have_text("at command Run #1 'add-one'")
    expect(page.get_by_test_id("failure-recorded-command")).to_have_text(
        "the journal recorded Call #1 'ask' to Greeter/greet"
    )
    cp.engine.operations.kill(record.invocation_id)


def test_a_failure_s_metadata_is_shown_with_the_result_and_in_the_journal(page: Page, dev: DevServer) -> None:
    # GIVEN an invocation whose step failed with metadata, and which failed with it
    cp = dev.control_plane
    record = cp.engine.create("Greeter", "greet", b'"x"', {}, leased=True)
    failure = pb.Failure(code=422, message="declined", metadata=[pb.FailureMetadata(key="step", value="charge")])
    entries = [
        frame(pb.RunCommandMessage(result_completion_id=1, name="charge")),
        frame(pb.RunCompletionNotificationMessage(completion_id=1, failure=failure)),
        frame(pb.OutputCommandMessage(failure=failure)),
    ]
    cp.store.append_batch(record.invocation_id, JournalBatch(1, encode_frames(entries), record.epoch, 1))
    cp.store._update_invocation(record.invocation_id, record.epoch, lease_until_ms=0, status="ready")
    cp.advance(record.invocation_id)
    invocation = describe(dev, record.invocation_id)
    assert invocation["completion_failure"]["metadata"] == {"step": "charge"}
    assert invocation["journal"][2]["failure"] == {"code": 422, "message": "declined", "metadata": {"step": "charge"}}

    page.goto(f"/ui/#/invocations/{record.invocation_id}")

    expect(page.get_by_test_id("failure-metadata")).to_have_count(3)  # the result; the RunCompletion and Output entries
    expect(page.get_by_test_id("failure-metadata").first).to_have_text("step=charge")


def test_the_journal_names_state_keys_and_promises_and_a_failure_shows_its_stack_trace(
    page: Page, dev: DevServer
) -> None:
    workflow = send_and_wait(dev, f"/Signup/names-{unique('wf')}/run/send", "ann@example.com")

    page.goto(f"/ui/#/invocations/{workflow['id']}")

    set_state = page.locator("[data-testid=journal-entry][data-type=SetState]").first
    expect(set_state.get_by_test_id("entry-details")).to_have_text("key email")
    get_promise = page.locator("[data-testid=journal-entry][data-type=GetPromise]")
    expect(get_promise.get_by_test_id("entry-details")).to_have_text("promise confirmation")
    expect(page.locator("dl.facts")).to_contain_text("GetPromise #3 promise confirmation")

    failing = call(dev, "/Steps/flaky/send", 1_000).json()["invocationId"]
    wait_for(lambda: (describe(dev, failing).get("last_failure") or {}).get("stacktrace"), 15, "a failed attempt")
    try:
        page.goto(f"/ui/#/invocations/{failing}")
        trace = page.get_by_test_id("failure-stacktrace")
        expect(trace).to_contain_text("Traceback (most recent call last):")
        expect(trace).to_contain_text("Exception: flaky: attempt")
    finally:
        httpx.patch(f"{dev.admin_url}/invocations/{failing}/kill", timeout=10)
