"""`torpor limits list|set|delete` and the limits in `torpor services describe`, against a real
`DevServer` (moto over HTTP) and the example services, each command through click's `CliRunner`
over HTTP; what a command changed is checked through the admin API."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from adapters.local.dev import DevServer
from tests.integration.test_cli import admin_get, registered_dev, torpor


@pytest.fixture(scope="module")
def dev(moto_endpoint: str, examples_url: str) -> Iterator[DevServer]:
    with registered_dev(moto_endpoint, examples_url) as server:
        yield server


def test_limits_set_list_and_delete_edit_the_rule_book(dev: DevServer) -> None:
    empty = torpor(dev, "limits", "list")
    assert empty.exit_code == 0 and "No concurrency rules" in empty.stdout, empty.output

    made = torpor(dev, "limits", "set", "tenants/*", "5", "--description", "per tenant", "--if-new")
    assert made.exit_code == 0, made.output
    assert "Set rule tenants/* (version 1)" in made.stdout
    assert admin_get(dev, "/limits/rules")["rules"][0]["limits"] == {"concurrency": 5}

    again = torpor(dev, "limits", "set", "tenants/*", "7", "--if-new")  # exists: the precondition fails
    assert again.exit_code == 1 and "exists already" in again.output, again.output
    changed = torpor(dev, "limits", "set", "tenants/*", "7", "--if-version", "1")
    assert changed.exit_code == 0, changed.output
    torpor(dev, "limits", "set", "tenants", "20", "--disabled")

    table = torpor(dev, "limits", "list")
    assert table.exit_code == 0, table.output
    assert "tenants/*" in table.stdout and "per tenant" not in table.stdout  # the upsert replaced it
    listed = json.loads(torpor(dev, "limits", "list", "--json").stdout)["rules"]
    assert [(r["pattern"], r["limits"]["concurrency"], r["disabled"], r["version"]) for r in listed] == [
        ("tenants", 20, True, 1),
        ("tenants/*", 7, False, 2),
    ]

    stale = torpor(dev, "limits", "delete", "tenants/*", "--if-version", "1", "--yes")
    assert stale.exit_code == 1 and "not at version 1" in stale.output, stale.output
    removed = torpor(dev, "limits", "delete", "tenants/*", "tenants", "--yes")
    assert removed.exit_code == 0 and "Removed rule(s) tenants/*, tenants" in removed.stdout, removed.output
    assert admin_get(dev, "/limits/rules")["rules"] == []
    none = torpor(dev, "limits", "delete", "nothing", "--yes")
    assert none.exit_code == 0 and "No rule had the pattern(s) nothing" in none.stdout


def test_limits_set_refuses_a_bad_pattern_or_concurrency_with_the_fix(dev: DevServer) -> None:
    bad = torpor(dev, "limits", "set", "a b", "3")
    assert bad.exit_code == 1 and "expected 1 to 3 segments" in bad.output, bad.output
    zero = torpor(dev, "limits", "set", "tenants", "0")
    assert zero.exit_code == 2 and "0 is not in the range x>=1" in zero.output, zero.output


def test_services_describe_shows_the_services_limits(dev: DevServer) -> None:
    body = {"concurrency_limit": 4, "handler_concurrency_limits": {"sleep": 2}, "handler_rate_limits": {"sleep": 1.5}}
    assert httpx.patch(f"{dev.admin_url}/services/Waits", json=body, timeout=10).status_code == 200
    try:
        shown = torpor(dev, "services", "describe", "Waits")
        assert shown.exit_code == 0, shown.output
        assert "Concurrency limit" in shown.stdout and "4 running at once" in shown.stdout
        assert "sleep: 2 running at once" in shown.stdout and "sleep: 1.5 starts/s" in shown.stdout
        plain = torpor(dev, "services", "describe", "Greeter")
        assert "Concurrency limit" not in plain.stdout
    finally:
        off = {"concurrency_limit": None, "handler_concurrency_limits": {"sleep": None},
               "handler_rate_limits": {"sleep": None}}  # fmt: skip
        httpx.patch(f"{dev.admin_url}/services/Waits", json=off, timeout=10)
