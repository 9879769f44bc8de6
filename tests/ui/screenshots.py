"""Screenshots of the web UI's main pages, for docs/ui.md: `python -m tests.ui.screenshots [OUT_DIR]`.

The debugging views (docs/ui.md, "Debugging") are saved as `torpor-ui-*.png`.

Starts a moto server, the example services and `torpor dev`, makes a few invocations (completed,
sleeping, cancelled, an object with state), and saves PNGs of the pages in OUT_DIR (default
docs/screenshots). Needs Playwright and a chromium binary, like the UI tests.
"""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
from playwright.sync_api import Browser, Page, expect

from adapters.local.dev import DevServer
from control_plane.settings import Settings
from tests.helpers.dev import describe, dev_with_examples, wait_for
from tests.helpers.moto import moto_server
from tests.helpers.services import REPO_ROOT, serve_examples
from tests.ui.browser import call, launch_chromium, send_and_wait

VIEWPORT = {"width": 1280, "height": 760}


def seed(dev: DevServer) -> dict[str, str]:
    """Make the invocations the screenshots show; returns the id of the one whose timeline is shown."""
    call(dev, "/Greeter/greet", "Ann")
    call(dev, "/Counter/alice/add", 5)
    call(dev, "/Counter/alice/add", 3)
    call(dev, "/Steps/ten_steps", "x")
    cancelled = send_and_wait(dev, "/Waits/sleep/send", 60_000)["id"]
    httpx.patch(f"{dev.admin_url}/invocations/{cancelled}/cancel", timeout=10).raise_for_status()
    wait_for(lambda: dev.store.get_invocation(cancelled).status == "completed", 15, "the cancel")  # type: ignore[union-attr]
    send_and_wait(dev, "/Waits/awakeable/send", None)
    booking = send_and_wait(dev, "/Waits/booking/send", 60_000)["id"]
    send_and_wait(dev, "/Waits/sleep/send", 90_000)
    hourly = {"name": "hourly-greeting", "cron": "0 * * * *", "target": "Greeter/greet", "body": "team"}
    httpx.post(f"{dev.admin_url}/schedules", json=hourly, timeout=10).raise_for_status()
    nightly = {"name": "nightly-reset", "cron": "0 2 * * *", "target": "Counter/reset", "key": "alice"}
    httpx.post(f"{dev.admin_url}/schedules", json=nightly, timeout=10).raise_for_status()
    return {"timeline": booking}


def seed_debug(dev: DevServer) -> dict[str, str]:
    """Make what the debugging screenshots show: a completed call (its caller and callee), a caller
    suspended on a call, and a failure with a message of several lines."""
    caller = call(dev, "/Waits/call_sleep", 1500).headers["x-restate-id"]
    callee = next(e["invocation_id"] for e in describe(dev, caller)["journal"] if e.get("invocation_id"))
    send_and_wait(dev, "/Waits/call_sleep/send", 120_000)
    message = "payment declined for order 17:\n  card ending 4242 expired 2026-11\n  ask the customer for another"
    failed = httpx.post(f"{dev.ingress_url}/Steps/fail_terminal", json=message, timeout=30).headers["x-restate-id"]
    return {"caller": caller, "callee": callee, "failed": failed}


def take_debug(browser: Browser, dev: DevServer, out: Path, seeded: dict[str, str]) -> list[Path]:
    """Save the debugging views as `torpor-ui-*.png`; returns their paths."""
    context = browser.new_context(base_url=dev.admin_url, viewport=VIEWPORT)  # type: ignore[arg-type]
    page = context.new_page()
    saved = [
        shoot(
            page, f"/ui/#/invocations/{seeded['caller']}", out, "torpor-ui-timeline", "[data-testid=callee-link]",
            full_page=True,
        ),
        shoot(page, f"/ui/#/invocations/{seeded['callee']}", out, "torpor-ui-invoked-by", "[data-testid=invoked-by]"),
        shoot(page, "/ui/#/invocations?status=suspended", out, "torpor-ui-waiting-for", "[data-testid=waiting-for]"),
        shoot(page, f"/ui/#/invocations/{seeded['failed']}", out, "torpor-ui-error", "[data-testid=error-text]"),
    ]
    page.goto("/ui/#/sql")
    page.get_by_label("SQL query").fill(
        "SELECT id, target, status, invoked_by_id FROM sys_invocation\n"
        "WHERE target_service_name = 'Waits' ORDER BY created_at DESC"
    )
    page.get_by_role("button", name="Run").click()
    saved.append(shoot(page, None, out, "torpor-ui-sql", "[data-testid=sql-result]"))
    page.goto("/ui/#/state?service=Counter&key=alice")
    page.get_by_role("button", name="Edit state").click()
    page.get_by_role("button", name="Add entry").click()
    page.get_by_test_id("state-editor").locator("tr").last.get_by_label("name").fill("note")
    page.get_by_test_id("state-editor").locator("tr").last.locator("textarea").fill('"checked by support"')
    saved.append(shoot(page, None, out, "torpor-ui-state-edit", "[data-testid=state-editor]"))
    context.close()
    return saved


def shoot(page: Page, path: str | None, out: Path, name: str, ready: str, *, full_page: bool = False) -> Path:
    """Open `path` (under the admin URL; None: stay), wait for `ready` (a selector), save `out/name.png`."""
    if path is not None:
        page.goto(path)
    expect(page.locator(ready).first).to_be_visible(timeout=30_000)  # a loaded machine answers slowly
    page.wait_for_timeout(300)  # let the fonts and the last layout settle: a picture, not a test
    target = out / f"{name}.png"
    page.screenshot(path=str(target), full_page=full_page)
    return target


def take(browser: Browser, dev: DevServer, out: Path, seeded: dict[str, str]) -> list[Path]:
    """Save the screenshots of the main pages; returns their paths."""
    out.mkdir(parents=True, exist_ok=True)
    context = browser.new_context(base_url=dev.admin_url, viewport=VIEWPORT)  # type: ignore[arg-type]
    page = context.new_page()
    saved = [
        shoot(page, "/ui/#/invocations", out, "invocations", "[data-testid=invocation-row]"),
        shoot(page, f"/ui/#/invocations/{seeded['timeline']}", out, "invocation", "[data-type=Sleep]", full_page=True),
        shoot(page, "/ui/#/services", out, "services", "[data-testid=service-row]"),
        shoot(page, "/ui/#/services/Counter", out, "service", "tr[data-option]", full_page=True),
        shoot(page, "/ui/#/state?service=Counter&key=alice", out, "state", "[data-testid=state]"),
        shoot(page, "/ui/#/schedules", out, "schedules", "[data-schedule]"),
    ]
    page.goto("/ui/#/playground?service=Greeter&handler=greet")
    page.locator("textarea[name=body]").fill('"Ann"')
    page.get_by_role("button", name="Invoke").click()
    saved.append(shoot(page, None, out, "playground", "[data-testid=result-body]"))
    context.close()
    return saved


def main(argv: list[str] | None = None) -> int:
    """Take the screenshots into `argv[0]` (default docs/screenshots); 0 on success."""
    args = sys.argv[1:] if argv is None else argv
    out = Path(args[0]) if args else REPO_ROOT / "docs" / "screenshots"
    with (
        moto_server() as moto_endpoint,
        serve_examples() as (examples_url, _process),
        dev_with_examples(moto_endpoint, examples_url, Settings()) as dev,
        launch_chromium() as browser,
    ):
        for path in take(browser, dev, out, seed(dev)):
            print(path)
        for path in take_debug(browser, dev, out, seed_debug(dev)):
            print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
