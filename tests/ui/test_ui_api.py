"""What the web UI reads from the admin API: when each journal entry was stored, wake-up times,
notifications waiting outside the journal, awaited awakeables, and the ingress URL."""

from __future__ import annotations

from datetime import datetime

import httpx

from adapters.local.dev import DevServer
from tests.helpers.dev import describe, wait_for
from tests.ui.browser import call, send_and_wait


def ms(rfc3339: str) -> float:
    return datetime.fromisoformat(rfc3339).timestamp() * 1000


def test_each_journal_entry_has_the_time_it_was_stored_and_a_sleep_its_wake_up_time(dev: DevServer) -> None:
    sleeping = send_and_wait(dev, "/Waits/sleep/send", 60_000)
    journal = sleeping["journal"]
    assert [e["type"] for e in journal] == ["Input", "Sleep"]
    assert journal[0]["stored_at"] == sleeping["created_at"]
    assert ms(journal[0]["stored_at"]) <= ms(journal[1]["stored_at"]) <= ms(sleeping["modified_at"])
    assert journal[1]["wake_up_at"] == sleeping["wake_up_at"]
    assert 59_000 <= ms(journal[1]["wake_up_at"]) - ms(journal[1]["stored_at"]) <= 61_000
    assert sleeping["pending_notifications"] == []
    assert sleeping["awaiting_awakeables"] == []


def test_a_notification_delivered_while_paused_waits_outside_the_journal_until_resumed(dev: DevServer) -> None:
    waiting = send_and_wait(dev, "/Waits/awakeable/send", None)
    (awakeable,) = waiting["awaiting_awakeables"]
    assert awakeable.startswith("sign_1")
    assert httpx.patch(f"{dev.admin_url}/invocations/{waiting['id']}/pause").status_code == 202
    wait_for(lambda: describe(dev, waiting["id"])["status"] == "paused", 10, "paused")

    call(dev, f"/restate/awakeables/{awakeable}/resolve", "x")

    paused = describe(dev, waiting["id"])
    (pending,) = paused["pending_notifications"]
    assert pending["key"] == "s17"
    assert (pending["kind"], pending["type"]) == ("notification", "Signal")
    assert pending["value"] == "x"
    assert pending["stored_at"] is not None
    assert httpx.patch(f"{dev.admin_url}/invocations/{waiting['id']}/resume").status_code == 202
    reply = httpx.get(f"{dev.ingress_url}/restate/invocation/{waiting['id']}/attach", timeout=30)
    assert reply.json() == "got x"
    done = describe(dev, waiting["id"])
    assert done["pending_notifications"] == []
    assert [e.get("value") for e in done["journal"] if e["type"] == "Signal"] == ["x"]


def test_the_ui_config_names_the_dev_ingress_and_the_ingress_allows_the_ui_origin(dev: DevServer) -> None:
    assert httpx.get(f"{dev.admin_url}/ui/config.json").json() == {"ingress_url": dev.ingress_url}
    reply = httpx.post(f"{dev.ingress_url}/Greeter/greet", json="Ann", headers={"origin": dev.admin_url})
    assert reply.json() == "Hello, Ann!"
    assert reply.headers["access-control-allow-origin"] == dev.admin_url
    assert reply.headers["access-control-expose-headers"] == "x-restate-id"
    other = httpx.post(f"{dev.ingress_url}/Greeter/greet", json="Ann", headers={"origin": "https://evil.example"})
    assert "access-control-allow-origin" not in other.headers
