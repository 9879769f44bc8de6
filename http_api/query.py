"""SQL introspection (`POST /query` on the admin API): the port the admin API calls, and its route.

The engine itself (Apache DataFusion, the SQL engine restate-server embeds, so the same dialect) is
an adapter (`adapters/query/`), optional because it is large: `pip install 'torpor[query]'`. Without
it `POST /query` answers 501 naming the extra.

Wire shape, as restate-server 1.7's admin API: the body is `{"query": "SELECT …"}`; with
`accept: application/json` the answer is `{"rows": [{column: value, …}, …]}` (`content-type:
application/json`, null columns left out, times as RFC 3339 strings); with any other `accept` it is
an Arrow IPC stream (`application/vnd.apache.arrow.stream`), what the `restate sql` CLI reads. A query
that does not parse or plan (unknown table or column, a syntax error) is a 400 `{"code", "message"}`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from control_plane.errors import BadRequest, TorporError
from http_api.http import HttpRequest, HttpResponse

JSON = "application/json"
ARROW_STREAM = "application/vnd.apache.arrow.stream"


@dataclass(frozen=True, slots=True)
class QueryAnswer:
    """A query's result, encoded: `body` bytes of `content_type` (`JSON` or `ARROW_STREAM`)."""

    body: bytes
    content_type: str


class SqlEngine(Protocol):
    """Runs one SQL query over the introspection tables (`sys_invocation`, `sys_journal`, `state`, …)."""

    def run(self, sql: str, *, as_json: bool) -> QueryAnswer:
        """Plan and run `sql`; the rows as JSON (`{"rows": [...]}`) if `as_json`, else an Arrow IPC stream.

        Raises:
            BadRequest: (400) the query does not parse, names an unknown table or column, or fails
                on the values it reads (a bad cast); the message is the engine's.
        """
        ...


class QueryUnavailable(TorporError):
    """`POST /query` on a control plane built without the SQL engine (HTTP 501)."""

    status = 501
    code = "not_implemented"


def serve_query(engine: SqlEngine | None, request: HttpRequest) -> HttpResponse:
    """`POST /query`: run the body's `query` with `engine`, answering in the format `accept` asks for.

    Raises:
        BadRequest: (400) the body is not `{"query": "<SQL>"}`, or the query is bad (see `SqlEngine.run`).
        QueryUnavailable: (501) no engine: the optional `query` extra (DataFusion) is not installed.
    """
    body = request.json()
    if not isinstance(body, dict) or not isinstance(body.get("query"), str) or not body["query"].strip():
        raise BadRequest('the body must be a JSON object like {"query": "SELECT id, status FROM sys_invocation"}')
    if engine is None:
        raise QueryUnavailable(
            "SQL introspection is not installed in this control plane: install the optional extra "
            "with pip install 'torpor[query]' (Apache DataFusion) and restart it"
        )
    as_json = request.headers.get("accept", "").split(";")[0].strip().lower() == JSON
    answer = engine.run(body["query"], as_json=as_json)
    return HttpResponse(200, answer.body, {"content-type": answer.content_type})
