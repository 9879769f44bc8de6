"""SQL introspection on Apache DataFusion (`POST /query`, `torpor sql`): the optional `query` extra.

`sql_engine(store)` gives the engine for the admin API, or None when DataFusion is not installed
(`pip install 'torpor[query]'`); the admin API then answers `POST /query` with 501 naming the extra.
"""

from __future__ import annotations

import importlib.util

from control_plane.ports import Store
from control_plane.query import SqlEngine


def sql_engine(store: Store) -> SqlEngine | None:
    """A DataFusion engine over `store`, or None if the `query` extra (datafusion, pyarrow) is missing."""
    if importlib.util.find_spec("datafusion") is None or importlib.util.find_spec("pyarrow") is None:
        return None
    from adapters.query.engine import DataFusionQuery

    return DataFusionQuery(store)
