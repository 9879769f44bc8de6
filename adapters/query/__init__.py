"""SQL introspection on Apache DataFusion (`POST /query`, `torpor sql`): the optional `query` extra.

`sql_engine(store)` gives the engine for the admin API, or None when DataFusion is not installed
(`pip install 'torpor[query]'`); the admin API then answers `POST /query` with 501 naming the extra.
"""

from __future__ import annotations

import importlib.util
import threading

from control_plane.ports import Store
from control_plane.settings import Settings
from http_api.query import QueryAnswer, SqlEngine


def sql_engine(store: Store, settings: Settings | None = None) -> SqlEngine | None:
    """A DataFusion engine over `store`, or None if the `query` extra (datafusion, pyarrow) is missing.

    Its bounds are `settings`' `query_max_rows`, `query_memory_bytes` and `query_timeout_ms`
    (`TORPOR_QUERY_*`; the defaults without `settings`).

    DataFusion and pyarrow are imported at the first query, not here (~1 s at every start of
    `torpor dev` and every cold start of the admin function otherwise)."""
    if importlib.util.find_spec("datafusion") is None or importlib.util.find_spec("pyarrow") is None:
        return None
    return _LazyEngine(store, settings or Settings())


class _LazyEngine:
    """`DataFusionQuery(store, …settings)`, built at the first `run` (see `sql_engine`)."""

    def __init__(self, store: Store, settings: Settings) -> None:
        self._store = store
        self._settings = settings
        self._engine: SqlEngine | None = None
        self._lock = threading.Lock()

    def run(self, sql: str, *, as_json: bool) -> QueryAnswer:
        """`SqlEngine.run` on the DataFusion engine (imported and built on first use)."""
        if self._engine is None:
            with self._lock:
                if self._engine is None:
                    from adapters.query.engine import DataFusionQuery

                    self._engine = DataFusionQuery(
                        self._store,
                        max_rows=self._settings.query_max_rows,
                        memory_bytes=self._settings.query_memory_bytes,
                        timeout_s=self._settings.query_timeout_ms / 1000,
                    )
        return self._engine.run(sql, as_json=as_json)
