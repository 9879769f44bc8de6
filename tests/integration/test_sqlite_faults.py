"""Faults of the SQLite store's file and disk, as `torpor dev` users meet them: a full disk, corrupt
pages, an empty file, an invocation row that cannot be decoded.

The disk fills deterministically with SQLite's `PRAGMA max_page_count` on the dev server's own
connection (SQLite then answers `SQLITE_FULL`, as on a full disk); pages are damaged by overwriting
bytes in the middle of a closed file; a row is damaged with a raw `UPDATE`. The example services run
under hypercorn (real restate-sdk handlers).
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from adapters.local.dev import SQLITE_FILE, DevServer, DevServerError
from adapters.local.sqlite_store import SQLiteStore
from control_plane import ids
from control_plane.settings import Settings
from tests.helpers.dev import wait_completed
from tests.helpers.records import invocation
from tests.helpers.services import REPO_ROOT, free_port

SETTINGS = Settings(inactivity_timeout_ms=10_000, lease_margin_ms=2_000, call_wait_ms=20_000)


@pytest.fixture
def dev(tmp_path: Path) -> Iterator[DevServer]:
    server = DevServer(ingress_port=0, admin_port=0, data_dir=tmp_path / "data", settings=SETTINGS)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_a_full_disk_answers_507_naming_the_disk_logs_one_line_and_loses_nothing(
    dev: DevServer, examples_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    assert httpx.post(f"{dev.admin_url}/deployments", json={"uri": examples_url}, timeout=30).status_code == 201
    store = dev.store
    assert isinstance(store, SQLiteStore)
    caplog.set_level(logging.DEBUG)
    with store._lock:  # the disk is full from now on: the file may not grow by one page
        pages = store._db.execute("PRAGMA page_count").fetchone()[0]
        store._db.execute(f"PRAGMA max_page_count = {pages}")

    answers = [
        httpx.post(f"{dev.ingress_url}/Greeter/greet/send", json=f"{i}" + "x" * 20_000, timeout=30) for i in range(12)
    ]

    statuses = [a.status_code for a in answers]
    assert 507 in statuses, statuses
    first_full = statuses.index(507)
    assert set(statuses[first_full:]) == {507}, statuses  # never a 500, never a half-written invocation
    body = answers[-1].json()
    assert body["code"] == 507
    assert "is full" in body["message"]
    assert str(Path(dev.data_dir or "").resolve()) in body["message"]
    full_lines = [r for r in caplog.records if "is full" in r.getMessage() and r.levelno >= logging.WARNING]
    assert len(full_lines) == 1, [r.getMessage() for r in full_lines]
    assert [r.getMessage() for r in caplog.records if r.exc_info] == []  # no traceback

    with store._lock:  # space again: every accepted invocation completes, nothing was lost
        store._db.execute("PRAGMA max_page_count = 1073741823")
    for answer in answers[:first_full]:
        assert answer.status_code == 202, answer.text
        completed = wait_completed(dev.admin_url, answer.json()["invocationId"], 60)
        assert completed["completion_kind"] == "succeeded", completed
    again = httpx.post(f"{dev.ingress_url}/Greeter/greet", json="Ann", timeout=30)
    assert again.status_code == 200
    assert again.json() == "Hello, Ann!"
    assert any("takes writes again" in r.getMessage() for r in caplog.records)


def damaged_store(data_dir: Path) -> Path:
    """A Torpor store of a few hundred invocations, closed, with 8 KB of its middle overwritten."""
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / SQLITE_FILE
    store = SQLiteStore(path)
    for i in range(300):
        store.create_invocation(
            invocation(f"inv_{i:04}", status="completed", completion="succeeded", input_entry=bytes(2_000))
        )
    store.close()
    with sqlite3.connect(path) as raw:  # everything into the main file
        raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    size = path.stat().st_size
    with path.open("r+b") as file:
        file.seek(size // 2)
        file.write(b"\xa5" * 8192)
    return path


def test_a_store_with_corrupt_pages_is_refused_at_start_in_one_line(tmp_path: Path) -> None:
    damaged_store(tmp_path / "data")

    with pytest.raises(DevServerError, match=r"cannot open the SQLite store .* is damaged"):
        DevServer(ingress_port=0, admin_port=0, data_dir=tmp_path / "data", settings=SETTINGS).start()

    started = subprocess.run(
        [sys.executable, "-m", "adapters.cli", "dev", "--data-dir", str(tmp_path / "data"),
         "--ingress-port", str(free_port()), "--admin-port", str(free_port())],
        cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert started.returncode != 0
    assert "Traceback" not in started.stderr, started.stderr
    assert "is damaged" in started.stderr, started.stderr
    assert "move it away to start afresh" in started.stderr, started.stderr


def test_an_empty_file_starts_as_an_empty_store_and_says_so(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / SQLITE_FILE).touch()
    caplog.set_level(logging.INFO)

    with DevServer(ingress_port=0, admin_port=0, data_dir=tmp_path / "data", settings=SETTINGS) as server:
        listed = httpx.get(f"{server.admin_url}/invocations", timeout=10)
        assert listed.status_code == 200
        assert listed.json()["invocations"] == []

    said = [r.getMessage() for r in caplog.records if "empty file (0 bytes)" in r.getMessage()]
    assert len(said) == 1, said
    assert SQLITE_FILE in said[0], said
    assert "new, empty store" in said[0], said
    with DevServer(ingress_port=0, admin_port=0, data_dir=tmp_path / "data", settings=SETTINGS):
        pass  # the file is a store now: no word the second time
    assert len([r for r in caplog.records if "empty file" in r.getMessage()]) == 1


@pytest.mark.parametrize("garbage", ["{not json", '{"invocation_id": "someone else"}', "[1, 2]", '{"epoch": "one"}'])
def test_an_unreadable_invocation_row_is_named_and_the_others_are_listed(
    dev: DevServer, tmp_path: Path, garbage: str
) -> None:
    made = [ids.new_invocation_id() for _ in range(8)]
    for i, invocation_id in enumerate(made):
        dev.store.create_invocation(
            invocation(invocation_id, status="completed", completion="succeeded", created_at_ms=1_000 + i)
        )
    broken_id = made[5]
    with sqlite3.connect(tmp_path / "data" / SQLITE_FILE) as raw:
        stored = raw.execute("SELECT record FROM invocations WHERE invocation_id = ?", (broken_id,)).fetchone()[0]
        if garbage.startswith('{"epoch"'):  # a record Torpor wrote, with one field of the wrong type
            garbage = json.dumps({**json.loads(stored), "epoch": "one"})
        raw.execute("UPDATE invocations SET record = ? WHERE invocation_id = ?", (garbage, broken_id))
    readable = [made[i] for i in (7, 6, 4, 3, 2, 1, 0)]

    listed = httpx.get(f"{dev.admin_url}/invocations", timeout=10)
    assert listed.status_code == 200, listed.text
    body = listed.json()
    assert [i["id"] for i in body["invocations"]] == readable
    [broken] = body["unreadable"]
    assert broken["invocation_id"] == broken_id
    assert "cannot be read" in broken["message"]

    seen, token = [], None  # pages of 2 step over it and still reach the oldest
    while True:
        page = httpx.get(
            f"{dev.admin_url}/invocations", params={"limit": 2, **({"page_token": token} if token else {})}, timeout=10
        )
        assert page.status_code == 200, page.text
        seen += [i["id"] for i in page.json()["invocations"]]
        token = page.json().get("next_page_token")
        if token is None:
            break
    assert seen == readable

    by_status = httpx.get(f"{dev.admin_url}/invocations", params={"status": "completed"}, timeout=10).json()
    assert [i["id"] for i in by_status["invocations"]] == readable
    assert by_status["unreadable"][0]["invocation_id"] == broken_id

    cli = subprocess.run(
        [sys.executable, "-m", "adapters.cli", "--admin-url", dev.admin_url, "invocations", "list"],
        cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "COLUMNS": "250"},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert cli.returncode == 0, cli.stderr
    assert readable[0] in cli.stdout
    assert readable[-1] in cli.stdout
    assert broken_id in cli.stderr
    assert "cannot be read" in cli.stderr


def test_a_query_over_an_unreadable_invocation_row_answers_the_others_and_logs_it_once_by_name(
    dev: DevServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    made = [ids.new_invocation_id() for _ in range(4)]
    for i, invocation_id in enumerate(made):
        dev.store.create_invocation(
            invocation(invocation_id, status="completed", completion="succeeded", created_at_ms=1_000 + i)
        )
    with sqlite3.connect(tmp_path / "data" / SQLITE_FILE) as raw:
        raw.execute("UPDATE invocations SET record = '{not json' WHERE invocation_id = ?", (made[2],))

    with caplog.at_level(logging.WARNING):
        reply = httpx.post(
            f"{dev.admin_url}/query",
            json={"query": "SELECT id FROM sys_invocation ORDER BY created_at"},
            headers={"accept": "application/json"},
            timeout=30,
        )
    assert reply.status_code == 200, reply.text
    assert [row["id"] for row in reply.json()["rows"]] == [made[0], made[1], made[3]]
    named = [r.getMessage() for r in caplog.records if made[2] in r.getMessage()]
    assert len(named) == 1  # one line, by the store
    assert made[2] in named[0]
    assert "cannot be read" in named[0]


def test_an_unreadable_row_does_not_stop_the_retention_sweep_of_the_others(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / SQLITE_FILE)
    made = [ids.new_invocation_id() for _ in range(3)]
    for i, invocation_id in enumerate(made):
        store.create_invocation(
            invocation(invocation_id, status="completed", completion="succeeded", expires_at_s=10 + i)
        )
    with sqlite3.connect(tmp_path / SQLITE_FILE) as raw:
        raw.execute("UPDATE invocations SET record = '{not json' WHERE invocation_id = ?", (made[1],))

    assert [due.invocation_id for due in store.due_retention(60_000)] == [made[0], made[2]]
    store.close()
