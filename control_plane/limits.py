"""Concurrency limits: at most N invocations of a service or handler hold a slot at once.

A limit is set per service (`PATCH /services/{name}` `{"concurrency_limit": N}`, override
`concurrencyLimit`) or per handler (`{"handler_concurrency_limits": {"h": N}}`, override
`handlerConcurrencyLimits`). An invocation counts against every pool that applies: its service's
and its handler's (`pools_of`), and each level of a rule (below). Each pool is a lock with N holders and a queue in
arrival order, on the same item (DynamoDB) or tables (SQLite) as an object key's lock and queue, so
taking, queueing, granting and releasing a slot are the very transitions a key has (`keyed.Keys`),
with `limit` holders instead of one:

- several pools: their slots are taken one by one in one global order (`taking_order`), each held
  until the end, and all released together; waiting for the next while holding the previous never
  deadlocks, as everyone takes them in the same order;
- created: take a slot if fewer than N hold one and nobody waits (`slot_free`), else `pending` in
  the pool's queue (Restate's status for an invocation that waits its turn in a queue);
- a slot is held from the start until the invocation completes (also while it suspends or backs
  off), and released by the completing path (cancel and kill included);
- a release that finds calls waiting grants the free slot to the earliest queued one (`pump`),
  which turns `ready` and is woken.

A large pool (`SPLIT_AT` slots or more) is split into sub-pools, one DynamoDB item each, so no one
item takes every limited call's writes (`sub_pool`).

Exclusive handlers of virtual objects already run one per key; a limit never applies to them (the
admin API refuses one that would, `check_limits`).

**Rules** (Restate's rule book, `PUT /limits/rules`): a rule's `pattern` selects the scope and limit
key of calls made with them (service protocol V7 `scope`/`limitKey`): `"*"`, `"scope"`,
`"scope/*"`, `"scope/key"`, `"scope/key/sub"`, each segment a name or `*`. An invocation whose
identity is `scope[/limit key]` (the limit key may hold one `/`: two levels) counts at every level
(1, 2 or 3 segments) that an enabled rule matches (`rule_pools`): of a level's rules the one with
the fewest `*` wins; the level's pool is that prefix (`"scope/*"` gives each limit key under `scope`
its own N). Rules and a service's or handler's limits all count.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterable, Mapping
from typing import Any

from control_plane.errors import BadRequest, Conflict, Unprocessable

SERVICE_LIMIT = "concurrencyLimit"
HANDLER_LIMITS = "handlerConcurrencyLimits"
POOL_PREFIX = "~limit/"
"""Scopes of pools start with it (`~` is not allowed in a service name), so a pool never shares an
item with a virtual object's key."""


def pool_scope(service: str, handler: str | None = None) -> str:
    """The lock scope of the pool of `service` (or of its `handler`): `~limit/{service}[/{handler}]`."""
    return f"{POOL_PREFIX}{service}" if handler is None else f"{POOL_PREFIX}{service}/{handler}"


def pools_of(service: str, handler: str, overrides: Mapping[str, Any], exclusive: bool) -> list[tuple[str, int]]:
    """The `(pool scope, N)` pools an invocation of `service/handler` counts against: its service's
    limit and its handler's, each that is set (both count, as every level of a rule does). An
    exclusive object handler is never limited (it runs one per key already)."""
    if exclusive:
        return []
    pools = []
    limit = overrides.get(SERVICE_LIMIT)
    if limit:
        pools.append((pool_scope(service), int(limit)))
    per_handler = overrides.get(HANDLER_LIMITS) or {}
    if isinstance(per_handler, Mapping) and per_handler.get(handler):
        pools.append((pool_scope(service, handler), int(per_handler[handler])))
    return pools


RULE_PREFIX = POOL_PREFIX + "rule/"
_COMPONENT = re.compile(r"[a-zA-Z0-9_.-]+")
"""A pattern's segment other than `*` (restate-server 1.7.12 refuses others with 422)."""
SERVICE_RATE = "rateLimit"
HANDLER_RATES = "handlerRateLimits"
RATE_PREFIX = "~rate/"


def rate_of(service: str, handler: str, overrides: Mapping[str, Any]) -> tuple[str, float] | None:
    """`(scope of the start schedule, starts per second)` an invocation of `service/handler` is
    paced by, or None: the handler's own rate limit wins over the service's (`rateLimit`,
    `handlerRateLimits` overrides)."""
    per_handler = overrides.get(HANDLER_RATES) or {}
    if isinstance(per_handler, Mapping) and per_handler.get(handler):
        return f"{RATE_PREFIX}{service}/{handler}", float(per_handler[handler])
    rate = overrides.get(SERVICE_RATE)
    return (f"{RATE_PREFIX}{service}", float(rate)) if rate else None


def pacing(per_second: float) -> tuple[int, int]:
    """`(interval_ms, burst)` of a rate limit: one start per `1000 / per_second` ms on average, and up
    to one second's worth (at least 1) at once after a quiet spell."""
    return max(1, round(1000 / per_second)), max(1, int(per_second))


def reserve(tat_ms: int, now_ms: int, interval_ms: int, burst: int) -> tuple[int, int]:
    """The rate limit's rule (GCRA, the generic cell rate algorithm: a token bucket kept as one time).

    `tat_ms` is the pool's theoretical arrival time (0: never used). Returns `(start_ms, new tat_ms)`:
    the newcomer starts at `max(now, tat - (burst - 1) × interval)`, and the next one's reference is
    `max(tat, now) + interval`. Every arrival reserves its start in arrival order, so starts are FIFO
    and at most `burst + t / interval` start in any `t` ms."""
    start = max(now_ms, tat_ms - (burst - 1) * interval_ms)
    return start, max(tat_ms, now_ms) + interval_ms


def identity(scope: str, limit_key: str) -> list[str]:
    """The segments a rule matches: `[scope]`, `[scope, key]` or `[scope, key, sub]` ("" scope: none)."""
    if not scope:
        return []
    return [scope, *limit_key.split("/", 1)] if limit_key else [scope]


def rule_pools(rules: Mapping[str, Mapping[str, Any]], scope: str, limit_key: str) -> list[tuple[str, int]]:
    """The `(pool scope, N)` pools a call with `scope`/`limit_key` counts against: one per level of
    its identity (`scope`, `scope/key`, `scope/key/sub`) that an enabled rule with a concurrency
    limit matches, as restate-server counts a scoped call at every level with a rule. A rule of k
    segments matches the identity's first k segments (each equal, or `*`); of the rules of one level
    the one with the fewest `*` wins, then the pattern (for a stable order). The pool of level k is
    the identity's first k segments, so `"scope/*"` gives each limit key under `scope` its own N."""
    segments = identity(scope, limit_key)
    best: dict[int, tuple[int, str, int]] = {}  # level -> (-stars, pattern, N)
    for pattern, rule in rules.items():
        limit = (rule.get("limits") or {}).get("concurrency")
        if rule.get("disabled") or not limit:
            continue
        parts = pattern.split("/")
        if len(parts) > len(segments) or any(p not in ("*", s) for p, s in zip(parts, segments, strict=False)):
            continue
        rank = (-parts.count("*"), pattern, int(limit))
        current = best.get(len(parts))
        if current is None or rank[0] > current[0] or (rank[0] == current[0] and pattern < current[1]):
            best[len(parts)] = rank
    return [(RULE_PREFIX + "/".join(segments[:level]), best[level][2]) for level in sorted(best)]


SPLIT_AT = 64
"""A limit of at least this many slots is split into sub-pools (`sub_pool`); smaller ones stay one item."""
SUBPOOL_SLOTS = 16
"""About this many slots per sub-pool: its holders' set stays under 1 KB (one write unit a write)."""
MAX_SUBPOOLS = 32
SUBPOOL_MARK = "~s"
"""Between a pool's scope and its sub-pool's number: `~limit/Svc/h~s3`."""


def subpools(limit: int) -> int:
    """How many sub-pools (items) a pool of `limit` slots is split into: 1 below `SPLIT_AT`, else
    `limit // SUBPOOL_SLOTS`, at most `MAX_SUBPOOLS`."""
    return 1 if limit < SPLIT_AT else min(MAX_SUBPOOLS, limit // SUBPOOL_SLOTS)


def sub_pool(scope: str, limit: int, invocation_id: str) -> tuple[str, int]:
    """`(scope, N)` of the sub-pool an invocation takes its slot of pool `scope` (`limit` slots) in.

    No hot key on DynamoDB: one item takes about 1,000 writes per second, so one pool starts at most
    ~500 invocations per second; a large pool is split into `k = subpools(limit)` items, sub-pool `i`
    (`{scope}~s{i}`) holding `limit // k` slots, one more for the first `limit % k` (together exactly
    `limit`), and an invocation's sub-pool is its id's shard (crc32 of the id, mod k: the same hash as
    the store's shards). Each sub-pool admits in arrival order (FIFO within a sub-pool, not across
    them), and one sub-pool may be full while another has a free slot: under load the pool runs
    fewer than `limit` at times, never more."""
    k = subpools(limit)
    if k == 1:
        return scope, limit
    i = zlib.crc32(invocation_id.encode()) % k
    return f"{scope}{SUBPOOL_MARK}{i}", limit // k + (1 if i < limit % k else 0)


def taking_order(pools: Iterable[tuple[str, int]]) -> list[tuple[str, int]]:
    """The pools in the one order every invocation takes their slots in (by pool scope, each once):
    an invocation holds the slots of the pools before the one it waits for, so with one global order
    no two invocations ever wait for each other's slots (no deadlock)."""
    return sorted(dict(pools).items())


def encode_more(pools: Iterable[tuple[str, int]]) -> str:
    """The record's `more_slots`: the pools after the first, one `"N scope"` a line."""
    return "\n".join(f"{n} {scope}" for scope, n in pools)


def decode_more(text: str) -> list[tuple[str, int]]:
    """`encode_more`'s inverse: `[(scope, N)]`."""
    out = []
    for line in text.splitlines():
        n, scope = line.split(" ", 1)
        out.append((scope, int(n)))
    return out


def check_pattern(pattern: object) -> str:
    """A rule's pattern: 1 to 3 non-empty `/`-separated segments, each a name or `*`. Raises `Unprocessable`."""
    if not isinstance(pattern, str) or not pattern:
        raise Unprocessable('pattern: expected a string such as "*", "scope", "scope/*" or "scope/key"')
    parts = pattern.split("/")
    if len(parts) > 3 or any(p != "*" and not _COMPONENT.fullmatch(p) for p in parts):
        raise Unprocessable(
            f"pattern {pattern!r}: expected 1 to 3 segments separated by '/', each '*' or a name of the "
            'characters a-z A-Z 0-9 _ . - (e.g. "*", "scope", "scope/*", "scope/key", "scope/key/sub")'
        )
    return pattern


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


Rules = dict[str, dict[str, Any]]


def upsert_rules(book: Mapping[str, Mapping[str, Any]], requests: object, now_ms: int) -> tuple[Rules, list[dict[str, Any]]]:
    """Apply a `PUT /limits/rules` body (restate-server 1.7's `UpsertRuleRequest` list) to `book`:
    `(new book, the upserted rules as stored)`, all or nothing.

    Each entry: `pattern` (`check_pattern`), `limits` {`concurrency`: whole number ≥ 1 or null},
    `disabled`, `description`, `precondition` {`type`: `none` | `does_not_exist` | `matches`,
    `version`}. A rule's `version` grows by one on each upsert. Raises `Unprocessable` (422) for a
    malformed entry, `Conflict` (409) for a failed precondition."""
    if not isinstance(requests, list):
        raise Unprocessable('the body must be a JSON array of rules like [{"pattern": "scope/*", "limits": {"concurrency": 5}}]')
    new: Rules = {k: dict(v) for k, v in book.items()}
    out = []
    for entry in requests:
        if not isinstance(entry, Mapping):
            raise Unprocessable("each rule must be a JSON object with a pattern")
        pattern = check_pattern(entry.get("pattern"))
        limits = entry.get("limits") or {}
        if not isinstance(limits, Mapping) or set(limits) - {"concurrency"}:
            raise Unprocessable(f"rule {pattern!r}: limits takes only concurrency (a whole number of at least 1)")
        concurrency = limits.get("concurrency")
        if concurrency is not None and (isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1):
            raise Unprocessable(f"rule {pattern!r}: limits.concurrency must be a whole number of at least 1, or null")
        _check_precondition(pattern, new.get(pattern), entry.get("precondition"))
        current = new.get(pattern)
        rule = {
            "pattern": pattern,
            "limits": {"concurrency": concurrency},
            "disabled": bool(entry.get("disabled", False)),
            "version": (int(current["version"]) + 1) if current else 1,  # restate-server's first is 1
            "last_modified_millis_since_epoch": now_ms,
        }
        if entry.get("description") is not None:
            rule["description"] = entry["description"]
        new[pattern] = rule
        out.append(rule)
    return new, out


def _check_precondition(pattern: str, current: Mapping[str, Any] | None, precondition: object) -> None:
    if precondition is None:
        return
    kind = precondition.get("type", "none") if isinstance(precondition, Mapping) else None
    if kind == "none":
        return
    if kind == "does_not_exist":
        if current is not None:
            raise Conflict(f"rule {pattern!r} exists already (version {current['version']})")
        return
    if kind == "matches" and isinstance(precondition, Mapping) and isinstance(precondition.get("version"), int):
        if current is None or current["version"] != precondition["version"]:
            now = "absent" if current is None else f"at version {current['version']}"
            raise Conflict(f"rule {pattern!r} is {now}, not at version {precondition['version']}")
        return
    raise Unprocessable(
        f'rule {pattern!r}: precondition must be {{"type": "none"}}, {{"type": "does_not_exist"}} or '
        '{"type": "matches", "version": N}'
    )


def delete_rules(book: Mapping[str, Mapping[str, Any]], requests: object) -> tuple[Rules, list[str]]:
    """Apply a `POST /limits/rules/bulk-delete` body (`[{"pattern", "expected_version"?}]`) to `book`:
    `(new book, the patterns removed)`, all or nothing. Without `expected_version` an absent rule is
    skipped; with it the rule must be at that version (`Conflict`). `Unprocessable` if malformed."""
    if not isinstance(requests, list):
        raise Unprocessable('the body must be a JSON array like [{"pattern": "scope/*"}]')
    new: Rules = {k: dict(v) for k, v in book.items()}
    removed = []
    for entry in requests:
        if not isinstance(entry, Mapping):
            raise Unprocessable("each entry must be a JSON object with a pattern")
        pattern = check_pattern(entry.get("pattern"))
        expected = entry.get("expected_version")
        current = new.get(pattern)
        if expected is not None and (current is None or current["version"] != expected):
            now = "absent" if current is None else f"at version {current['version']}"
            raise Conflict(f"rule {pattern!r} is {now}, not at version {expected}")
        if current is not None:
            del new[pattern]
            removed.append(pattern)
    return new, removed
