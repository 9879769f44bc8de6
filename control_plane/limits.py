"""Concurrency limits: at most N invocations of a service or handler hold a slot at once.

A limit is set per service (`PATCH /services/{name}` `{"concurrency_limit": N}`, override
`concurrencyLimit`) or per handler (`{"handler_concurrency_limits": {"h": N}}`, override
`handlerConcurrencyLimits`). An invocation counts against one pool: its handler's if that handler
has a limit, else its service's (`pool_of`). The pool is a lock with N holders and a queue in
arrival order, on the same item (DynamoDB) or tables (SQLite) as an object key's lock and queue, so
taking, queueing, granting and releasing a slot are the very transitions a key has (`keyed.Keys`),
with `limit` holders instead of one:

- created: take a slot if fewer than N hold one and nobody waits (`slot_free`), else `pending` in
  the pool's queue (Restate's status for an invocation that waits its turn in a queue);
- a slot is held from the start until the invocation completes (also while it suspends or backs
  off), and released by the completing path (cancel and kill included);
- a release that finds calls waiting grants the free slot to the earliest queued one (`pump`),
  which turns `ready` and is woken.

Exclusive handlers of virtual objects already run one per key; a limit never applies to them (the
admin API refuses one that would, `check_limits`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from control_plane.errors import BadRequest

SERVICE_LIMIT = "concurrencyLimit"
HANDLER_LIMITS = "handlerConcurrencyLimits"
POOL_PREFIX = "~limit/"
"""Scopes of pools start with it (`~` is not allowed in a service name), so a pool never shares an
item with a virtual object's key."""


def pool_scope(service: str, handler: str | None = None) -> str:
    """The lock scope of the pool of `service` (or of its `handler`): `~limit/{service}[/{handler}]`."""
    return f"{POOL_PREFIX}{service}" if handler is None else f"{POOL_PREFIX}{service}/{handler}"


def pool_of(service: str, handler: str, overrides: Mapping[str, Any], exclusive: bool) -> tuple[str, int] | None:
    """`(pool scope, N)` an invocation of `service/handler` counts against, or None (no limit).

    The handler's own limit wins over the service's (it is counted in one pool only). An exclusive
    object handler is never limited (it runs one per key already)."""
    if exclusive:
        return None
    per_handler = overrides.get(HANDLER_LIMITS) or {}
    if isinstance(per_handler, Mapping) and per_handler.get(handler):
        return pool_scope(service, handler), int(per_handler[handler])
    limit = overrides.get(SERVICE_LIMIT)
    if limit:
        return pool_scope(service), int(limit)
    return None


def slot_free(held: int, limit: int, waiting: bool) -> bool:
    """The admission rule: a newcomer starts ("start") if fewer than `limit` hold a slot and nobody
    waits; otherwise it queues ("queue"). Waiting calls keep their turn: a newcomer never passes them.
    A grant to the queue's head needs only `held < limit`."""
    return held < limit and not waiting


def check_limits(
    service_type: str, handlers: Iterable[Mapping[str, Any]], changes: Mapping[str, Any]
) -> None:
    """Refuse limits that would apply to exclusive object handlers (`BadRequest`, naming the fix).

    `handlers`: the service's manifest handlers (`name`, `ty`); `changes`: overrides being set."""
    exclusive = {
        str(h.get("name"))
        for h in handlers
        if service_type == "VIRTUAL_OBJECT" and h.get("ty") != "SHARED"
    }
    if changes.get(SERVICE_LIMIT) is not None and exclusive:
        raise BadRequest(
            "concurrency_limit: a virtual object's exclusive handlers run one per key already; set "
            "handler_concurrency_limits on its shared handlers instead"
        )
    for name in changes.get(HANDLER_LIMITS) or {}:
        if name in exclusive:
            raise BadRequest(
                f"handler_concurrency_limits: {name!r} is an exclusive handler, which runs one per key already"
            )
