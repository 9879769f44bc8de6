"""The web UI where debugging happens (issue 25, item 4): the journal timeline with durations, a call
linked to its callee and back, search by invocation id, editing an object's state, the SQL page, what
a suspended invocation waits for in the list, multi-line errors. Headless Chromium against `torpor
dev` with the example services (see test_web_ui.py)."""

from __future__ import annotations

import re

import httpx
import pytest

from adapters.local.dev import DevServer
from control_plane.ports import JournalBatch
from control_plane.protocol import encode_frames, frame
from control_plane.protocol import protocol_pb2 as pb
from tests.helpers.dev import describe, wait_for
from tests.ui.browser import call, require_browser, send_and_wait

require_browser()

from playwright.sync_api import Locator, Page, expect  # noqa: E402 (after the skip)

pytestmark = pytest.mark.slow


def row(page: Page, invocation_id: str) -> Locator:
    """The invocation list's row of `invocation_id`."""
    return page.locator(f'[data-testid=invocation-row][data-id="{invocation_id}"]')


def ms(text: str) -> float:
    """`"completed after 1.2 s"`, `"took ≈ 312 ms"` -> milliseconds."""
    number, unit = re.search(r"([0-9.]+) (ms|s)\b", text).groups()  # type: ignore[union-attr]
    return float(number) * (1000 if unit == "s" else 1)


def test_the_timeline_shows_how_long_each_awaited_command_took_with_a_bar_on_a_time_axis(
    page: Page, dev: DevServer
) -> None:
    invocation_id = call(dev, "/Waits/sleep", 700).headers["x-restate-id"]
    page.goto(f"/ui/#/invocations/{invocation_id}")

    sleep = page.locator("[data-testid=journal-entry][data-type=Sleep]")
    expect(sleep.get_by_test_id("entry-duration")).to_contain_text("completed after")
    assert ms(sleep.get_by_test_id("entry-duration").inner_text()) >= 700
    # every entry has its mark on the axis; the sleep's bar spans most of the invocation
    entries = page.get_by_test_id("journal-entry")
    expect(page.get_by_test_id("timeline-bar")).to_have_count(entries.count())
    width = sleep.get_by_test_id("timeline-bar").evaluate("bar => bar.getBoundingClientRect().width")
    track = sleep.locator(".track").evaluate("track => track.getBoundingClientRect().width")
    assert width > 0.5 * track, (width, track)
    assert ms(page.get_by_test_id("invocation-duration").inner_text()) >= 700


def test_a_call_links_to_its_callee_and_the_callee_links_back_to_its_caller(page: Page, dev: DevServer) -> None:
    caller = send_and_wait(dev, "/Waits/call_sleep/send", 60_000)
    callee_id = next(w["invocation_id"] for w in caller["waiting_for"] if w["kind"] == "call")
    page.goto(f"/ui/#/invocations/{caller['id']}")

    the_call = page.locator("[data-testid=journal-entry][data-type=Call]")
    expect(the_call).to_contain_text("→ Waits/sleep")
    expect(the_call).to_contain_text("waiting")
    expect(the_call.get_by_test_id("entry-duration")).to_contain_text("so far")
    the_call.get_by_test_id("callee-link").click()

    expect(page).to_have_url(re.compile(f"#/invocations/{callee_id}$"))
    expect(page.locator(".title-row h1")).to_have_text("Waits/sleep")
    invoked_by = page.get_by_test_id("invoked-by")
    expect(invoked_by).to_contain_text(f"{caller['id']} (Waits/call_sleep)")
    invoked_by.get_by_role("link").click()
    expect(page).to_have_url(re.compile(f"#/invocations/{caller['id']}$"))
    expect(page.locator(".title-row h1")).to_have_text("Waits/call_sleep")
    httpx.patch(f"{dev.admin_url}/invocations/{callee_id}/kill", timeout=10)


def test_a_one_way_send_links_to_the_invocation_it_created(page: Page, dev: DevServer) -> None:
    sender = call(dev, "/Waits/send_later", 60_000)
    sent_id = sender.json()
    page.goto(f"/ui/#/invocations/{sender.headers['x-restate-id']}")

    send = page.locator("[data-testid=journal-entry][data-type=OneWayCall]")
    expect(send).to_contain_text("→ Waits/stamp")
    expect(send).to_contain_text(f"sent {sent_id}")
    send.get_by_test_id("callee-link").click()
    expect(page.locator(".title-row h1")).to_have_text("Waits/stamp")
    expect(page.locator(".title-row [data-status]")).to_have_attribute("data-status", "scheduled")
    expect(page.get_by_test_id("invoked-by")).to_have_count(0)  # a send's callee does not know its sender
    httpx.patch(f"{dev.admin_url}/invocations/{sent_id}/kill", timeout=10)


def test_the_search_box_opens_an_invocation_by_its_id(page: Page, dev: DevServer) -> None:
    invocation_id = call(dev, "/Greeter/greet", "Searched").headers["x-restate-id"]
    page.goto("/ui/#/services")

    search = page.get_by_role("search").get_by_label("invocation id")
    search.fill(f"  {invocation_id} ")
    search.press("Enter")

    expect(page).to_have_url(re.compile(f"#/invocations/{invocation_id}$"))
    expect(page.get_by_test_id("invocation-output")).to_have_text("Hello, Searched!")
    # something that is no invocation id is refused by the form, and the page stays
    search.fill("bob")
    search.press("Enter")
    expect(page).to_have_url(re.compile(f"#/invocations/{invocation_id}$"))
    expect(page.locator("form.search input:invalid")).to_have_count(1)


def test_editing_an_object_s_state_writes_it(page: Page, dev: DevServer) -> None:
    call(dev, "/Counter/edit-me/add", 4)
    page.goto("/ui/#/state?service=Counter&key=edit-me")
    expect(page.get_by_test_id("state").locator("pre")).to_have_text("4")

    page.get_by_role("button", name="Edit state").click()
    editor = page.get_by_test_id("state-editor")
    editor.get_by_label("value of count").fill("41")
    page.get_by_role("button", name="Add entry").click()
    editor.locator("tr").last.get_by_label("name").fill("note")
    editor.locator("tr").last.locator("textarea").fill('"set from the UI"')
    page.get_by_role("button", name="Save").click()

    expect(page.get_by_text("State saved.")).to_be_visible()
    expect(page.get_by_test_id("state")).to_contain_text("set from the UI")
    state = httpx.get(f"{dev.admin_url}/services/Counter/state/edit-me", timeout=10).json()["state"]
    assert state == {"count": 41, "note": "set from the UI"}
    # the handler reads what the UI wrote
    assert call(dev, "/Counter/edit-me/add", 1).json() == 42


def test_a_state_value_that_is_not_json_is_refused_before_anything_is_written(page: Page, dev: DevServer) -> None:
    call(dev, "/Counter/edit-bad/add", 3)
    page.goto("/ui/#/state?service=Counter&key=edit-bad")
    page.get_by_role("button", name="Edit state").click()
    page.get_by_test_id("state-editor").get_by_label("value of count").fill("three")
    page.get_by_role("button", name="Save").click()
    expect(page.locator(".notice.error")).to_contain_text("“count” is not JSON")
    assert httpx.get(f"{dev.admin_url}/services/Counter/state/edit-bad", timeout=10).json()["state"] == {"count": 3}


def test_the_sql_page_runs_a_query_and_shows_its_rows(page: Page, dev: DevServer) -> None:
    invocation_id = call(dev, "/Greeter/greet", "Sql").headers["x-restate-id"]
    page.goto("/ui/#/sql")
    page.get_by_label("SQL query").fill(f"SELECT id, target, status FROM sys_invocation WHERE id = '{invocation_id}'")
    page.get_by_role("button", name="Run").click()

    expect(page.get_by_test_id("sql-count")).to_contain_text("1 row")
    result = page.get_by_test_id("sql-result")
    expect(result.locator("th")).to_have_text(["id", "target", "status"])
    expect(result.get_by_test_id("sql-row")).to_have_text(re.compile(f"{invocation_id}\\s*Greeter/greet\\s*completed"))
    # the query is in the URL; a bad one shows the engine's message
    expect(page).to_have_url(re.compile(r"#/sql\?q=SELECT"))
    page.get_by_label("SQL query").fill("SELECT nope FROM sys_invocation")
    page.get_by_role("button", name="Run").click()
    expect(page.get_by_test_id("sql-error")).to_contain_text("nope")


def test_the_list_says_what_each_suspended_invocation_waits_for(page: Page, dev: DevServer) -> None:
    sleeping = send_and_wait(dev, "/Waits/sleep/send", 60_000)
    until = sleeping["journal"][1]["wake_up_at"]
    awaiting = send_and_wait(dev, "/Waits/awakeable/send", None)
    (awakeable,) = awaiting["awaiting_awakeables"]
    calling = send_and_wait(dev, "/Waits/call_sleep/send", 60_000)
    callee_id = next(w["invocation_id"] for w in calling["waiting_for"] if w["kind"] == "call")

    page.goto("/ui/#/invocations?status=suspended&limit=500")

    # compact: a sleep's time and the long ids are whole in their tooltips
    sleep = row(page, sleeping["id"]).get_by_test_id("waiting-for").locator("[data-wait=sleep]")
    expect(sleep).to_have_text(re.compile(r"^Sleep #1: wakes up in (\d+ s|1 min)$"))
    expect(sleep).to_have_attribute("title", until)
    awakeable_wait = row(page, awaiting["id"]).get_by_test_id("waiting-for").locator("[data-wait=awakeable]")
    expect(awakeable_wait).to_have_text(f"awakeable {awakeable[:14]}…")
    expect(awakeable_wait).to_have_attribute("title", awakeable)
    waits = row(page, calling["id"]).get_by_test_id("waiting-for")
    expect(waits).to_contain_text("Call #1 to Waits/sleep inv_")
    expect(waits.get_by_test_id("waits-callee")).to_have_attribute("title", callee_id)
    waits.get_by_test_id("waits-callee").click()
    expect(page).to_have_url(re.compile(f"#/invocations/{callee_id}$"))
    for invocation_id in (sleeping["id"], awaiting["id"], calling["id"], callee_id):
        httpx.patch(f"{dev.admin_url}/invocations/{invocation_id}/kill", timeout=10)


def test_a_multi_line_error_shows_its_lines(page: Page, dev: DevServer) -> None:
    message = "order 17 declined:\n  card expired\n  retry with another card"
    reply = httpx.post(f"{dev.ingress_url}/Steps/fail_terminal", json=message, timeout=30)
    assert reply.status_code == 422
    invocation_id = reply.headers["x-restate-id"]

    page.goto(f"/ui/#/invocations/{invocation_id}")
    shown = page.get_by_role("alert").get_by_test_id("error-text")
    expect(shown).to_have_text(message)
    lines = shown.evaluate("pre => pre.getBoundingClientRect().height / parseFloat(getComputedStyle(pre).lineHeight)")
    assert lines >= 3, lines  # three lines, not one
    # the list shows the first line, the whole message as a tooltip
    page.goto("/ui/#/invocations?service=Steps&limit=500")
    hint = row(page, invocation_id).locator("td").last
    expect(hint).to_have_text("order 17 declined: …")
    expect(hint.locator("span")).to_have_attribute("title", message)


def test_a_retrying_invocation_s_stack_trace_is_shown_bounded(page: Page, dev: DevServer) -> None:
    # GIVEN an invocation whose last failed attempt left a long stack trace (as the SDK sends one)
    cp = dev.control_plane
    record = cp.engine.create("Greeter", "greet", b'"x"', {}, leased=True)
    trace = "\n".join(f'  File "app.py", line {n}, in step_{n}' for n in range(200))
    failure = {"code": 500, "message": "boom\nsecond line", "at_ms": 1, "attempt": 3, "stacktrace": trace}
    cp.store._update_invocation(
        record.invocation_id, record.epoch, lease_until_ms=0, status="paused", last_failure=failure
    )
    wait_for(lambda: describe(dev, record.invocation_id)["status"] == "paused", 5, "the paused record")

    page.goto(f"/ui/#/invocations/{record.invocation_id}")
    notice = page.locator(".notice.warn")
    expect(notice.get_by_test_id("error-text")).to_have_text("boom\nsecond line")
    shown = notice.get_by_test_id("failure-stacktrace")
    expect(shown).to_contain_text("in step_199")
    height, scroll = shown.evaluate("pre => [pre.clientHeight, pre.scrollHeight]")
    assert height < scroll, (height, scroll)  # bounded: it scrolls
    cp.engine.operations.kill(record.invocation_id)


def test_the_admin_api_says_what_a_suspended_invocation_waits_for_and_who_invoked_it(dev: DevServer) -> None:
    calling = send_and_wait(dev, "/Waits/call_sleep/send", 60_000)
    (waiting,) = calling["waiting_for"]
    assert waiting["kind"] == "call" and waiting["target"] == "Waits/sleep" and waiting["index"] == 1
    callee = describe(dev, waiting["invocation_id"])
    assert callee["invoked_by_id"] == calling["id"]
    assert callee["invoked_by_target"] == "Waits/call_sleep"
    assert calling["invoked_by_id"] is None
    listed = httpx.get(f"{dev.admin_url}/invocations?service=Waits&status=suspended&waiting_for=true", timeout=10)
    rows = {i["id"]: i for i in listed.json()["invocations"]}
    assert rows[calling["id"]]["waiting_for"] == calling["waiting_for"]
    assert rows[callee["id"]]["waiting_for"][0]["kind"] == "sleep"
    plain = httpx.get(f"{dev.admin_url}/invocations?service=Waits&status=suspended", timeout=10).json()
    assert all("waiting_for" not in i for i in plain["invocations"])  # read only when asked for
    for invocation_id in (calling["id"], callee["id"]):
        httpx.patch(f"{dev.admin_url}/invocations/{invocation_id}/kill", timeout=10)


def test_the_state_answer_has_on_request_the_whole_raw_values_and_their_version(dev: DevServer) -> None:
    call(dev, "/Counter/raw-key/add", 9)
    base = f"{dev.admin_url}/services/Counter/state/raw-key"
    plain = httpx.get(base, timeout=10).json()
    assert plain == {"key": "raw-key", "state": {"count": 9}, "version": plain["version"]}  # no raw without ?raw
    raw = httpx.get(f"{base}?raw=true", timeout=10).json()
    assert raw["raw"] == {"count": "OQ=="}  # b"9"
    stale = {"object_key": "raw-key", "new_state": {"count": [49]}, "version": raw["version"]}
    call(dev, "/Counter/raw-key/add", 1)
    reply = httpx.post(f"{dev.admin_url}/services/Counter/state", json=stale, timeout=10)
    assert reply.status_code == 409  # changed since it was read: the editor's save is refused
