"""A call that ends is one durable transition (issue 24, `Executor.end`): the completing write
carries the journal batch with the Output command, and the journal reads back as before (the
admin API's SQL `sys_journal`, the engine's own load)."""

from __future__ import annotations

from pathlib import Path

import httpx

from adapters.local.dev import DevServer
from adapters.local.sqlite_store import SQLiteStore
from control_plane.journal import Journal
from control_plane.settings import Settings
from tests.helpers.services import serve_examples

SETTINGS = Settings(inactivity_timeout_ms=5_000, lease_margin_ms=1_000, call_wait_ms=30_000)


def test_a_call_without_steps_writes_its_record_twice_and_its_journal_still_ends_with_its_output(
    tmp_path: Path,
) -> None:
    with serve_examples(side_effects_file=tmp_path / "effects.jsonl") as (services_url, _services):
        dev = DevServer(ingress_port=0, admin_port=0, data_dir=tmp_path / "data", settings=SETTINGS)
        dev.start()
        try:
            assert httpx.post(f"{dev.admin_url}/deployments", json={"uri": services_url}, timeout=30).status_code == 201
            store = dev.store
            assert isinstance(store, SQLiteStore)
            httpx.post(f"{dev.ingress_url}/Greeter/greet", json="warm", timeout=30).raise_for_status()
            before = store.request_counts

            # WHEN a call without steps runs to its end
            answer = httpx.post(f"{dev.ingress_url}/Greeter/greet", json="one", timeout=30)

            # THEN its store writes are the creation (with its lease) and the completion, which
            # carried the Output: no journal batch written apart
            assert (answer.status_code, answer.json()) == (200, "Hello, one!")
            after = store.request_counts
            writes = {
                name: after.get(name, 0) - before.get(name, 0)
                for name in ("create_invocation", "acquire_lease", "append_batch", "update_invocation")
            }
            assert writes == {"create_invocation": 1, "acquire_lease": 0, "append_batch": 0, "update_invocation": 1}

            # AND its journal reads back with the Output, through SQL and the engine's load
            invocation_id = answer.headers["x-restate-id"]
            sql = f"SELECT index, entry_type FROM sys_journal WHERE id = '{invocation_id}' ORDER BY index"
            reply = httpx.post(f"{dev.admin_url}/query", json={"query": sql}, headers={"accept": "application/json"})
            assert reply.json()["rows"] == [
                {"index": 0, "entry_type": "Command: Input"},
                {"index": 1, "entry_type": "Command: Output"},
            ]
            loaded = store.load_invocation(invocation_id)
            assert loaded is not None and loaded.record.journal_length == 2
            output = Journal.load(loaded.record.input_entry, loaded.batches).output()
            assert output is not None and output.value.content == b'"Hello, one!"'
        finally:
            dev.stop()
