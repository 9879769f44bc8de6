"""`POST /query` on the admin router, engine aside: which format `accept` picks, the body it needs,
and the 501 of a control plane built without the optional `query` extra."""

from __future__ import annotations

import json

import pytest

from http_api.admin import Admin
from http_api.http import HttpRequest, HttpResponse
from http_api.query import ARROW_STREAM, JSON, QueryAnswer


class RecordingEngine:
    """A `SqlEngine` that answers every query with its text, and records the format asked for."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, bool]] = []

    def run(self, sql: str, *, as_json: bool) -> QueryAnswer:
        self.asked.append((sql, as_json))
        return QueryAnswer(sql.encode(), JSON if as_json else ARROW_STREAM)


def post(admin: Admin, body: object, accept: str | None = None) -> HttpResponse:
    headers = {"accept": accept} if accept else {}
    return admin.router.dispatch(HttpRequest("POST", "/query", headers=headers, body=json.dumps(body).encode()))


def admin_with(engine: RecordingEngine | None) -> Admin:
    admin = Admin(None, None, None)  # type: ignore[arg-type]  # /query uses none of them
    admin.sql = engine
    return admin


@pytest.mark.parametrize(
    ("accept", "as_json", "content_type"),
    [
        ("application/json", True, JSON),
        ("application/json; charset=utf-8", True, JSON),
        (None, False, ARROW_STREAM),  # what `restate sql` sends
        ("*/*", False, ARROW_STREAM),
        ("application/vnd.apache.arrow.stream", False, ARROW_STREAM),
    ],
)
def test_accept_picks_json_rows_or_an_arrow_stream(accept: str | None, as_json: bool, content_type: str) -> None:
    engine = RecordingEngine()
    reply = post(admin_with(engine), {"query": "SELECT 1"}, accept)
    assert reply.status == 200
    assert reply.headers["content-type"] == content_type
    assert engine.asked == [("SELECT 1", as_json)]


@pytest.mark.parametrize("body", [{"sql": "SELECT 1"}, {"query": ""}, {"query": 7}, ["SELECT 1"], None])
def test_a_body_without_a_query_is_a_400(body: object) -> None:
    engine = RecordingEngine()
    reply = post(admin_with(engine), body)
    assert reply.status == 400
    assert json.loads(reply.body)["message"].startswith("the body must be a JSON object like")
    assert engine.asked == []


def test_without_the_query_extra_post_query_is_a_501_naming_it() -> None:
    reply = post(admin_with(None), {"query": "SELECT 1"})
    assert reply.status == 501
    body = json.loads(reply.body)
    assert body["code"] == 501
    assert "pip install 'torpor[query]'" in body["message"]


def test_the_bounds_are_settings_read_from_the_environment() -> None:
    from adapters.local.sqlite_store import SQLiteStore
    from adapters.query import sql_engine
    from control_plane.errors import BadRequest
    from control_plane.settings import Settings

    settings = Settings.from_env(
        {"TORPOR_QUERY_MAX_ROWS": "2", "TORPOR_QUERY_MEMORY_BYTES": "4096", "TORPOR_QUERY_TIMEOUT_MS": "5000"}
    )
    assert (settings.query_max_rows, settings.query_memory_bytes, settings.query_timeout_ms) == (2, 4096, 5000)
    engine = sql_engine(SQLiteStore(":memory:"), settings)
    assert engine is not None
    assert json.loads(engine.run("SELECT * FROM (VALUES (1), (2)) t(x)", as_json=True).body) == {
        "rows": [{"x": 1}, {"x": 2}]
    }
    with pytest.raises(BadRequest, match=r"more than 2 rows \(TORPOR_QUERY_MAX_ROWS\)"):
        engine.run("SELECT * FROM (VALUES (1), (2), (3)) t(x)", as_json=True)
    with pytest.raises(BadRequest, match=r"more than 4096 bytes of memory \(TORPOR_QUERY_MEMORY_BYTES\)"):
        engine.run("SELECT x FROM (VALUES (3), (1), (2)) t(x) ORDER BY x LIMIT 1", as_json=True)
    with pytest.raises(BadRequest, match="must be at least 1"):
        Settings.from_env({"TORPOR_QUERY_MAX_ROWS": "0"})
