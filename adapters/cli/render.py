"""Rich renderings of the admin API's JSON: deployments, services, handlers, invocations, journals.

Every function takes the API's JSON (`http_api/admin.py` shapes) and returns a rich
renderable. Values from the API go into cells as `Text`, never as markup, so a value like
`[bold]` is shown as written.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rich.table import Table
from rich.text import Text

PREVIEW_CHARS = 80
FIRST_AWAKEABLE_SIGNAL = 17  # signals 0..16 are built in (1: cancel); awakeables use 17 and up
_BUILT_IN_SIGNALS = {1: "cancel"}
_MANIFEST_SERVICE_TYPES = {"SERVICE": "Service", "VIRTUAL_OBJECT": "VirtualObject", "WORKFLOW": "Workflow"}


def compact(value: Any, limit: int = PREVIEW_CHARS) -> str:
    """A JSON value on one line, cut to `limit` characters with `…`."""
    text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _cell(value: Any) -> Text:
    if value is None:
        return Text("")
    return Text(value if isinstance(value, str) else compact(value))


def _failure(failure: Mapping[str, Any]) -> str:
    return f"{failure.get('code')}: {failure.get('message')}"


def details(rows: Iterable[tuple[str, Any]]) -> Table:
    """Two columns, label and value, one row per pair whose value is not None or empty."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    for label, value in rows:
        if value is None or value == "" or value == [] or value == {}:
            continue
        grid.add_row(label, _cell(value))
    return grid


def _service_names(services: Sequence[Any]) -> list[str]:
    """Service names from a deployment's `services`: `{"name", "revision"}` (list) or service objects (describe)."""
    return [s if isinstance(s, str) else str(s.get("name")) for s in services]


def deployments_table(deployments: Sequence[Mapping[str, Any]]) -> Table:
    """`GET /deployments`: one row per deployment."""
    table = Table(title=f"Deployments ({len(deployments)})", title_justify="left")
    table.add_column("ID", no_wrap=True)
    table.add_column("URI", overflow="fold")
    table.add_column("SERVICES", overflow="fold")
    table.add_column("PROTOCOL", no_wrap=True)
    table.add_column("CREATED", no_wrap=True)
    for d in deployments:
        table.add_row(
            _cell(d.get("id")),
            _cell(d.get("uri") or d.get("arn")),
            _cell(", ".join(_service_names(d.get("services") or []))),
            _cell(_protocol(d)),
            _cell(d.get("created_at")),
        )
    return table


def _protocol(deployment: Mapping[str, Any]) -> str:
    low, high = deployment.get("min_protocol_version"), deployment.get("max_protocol_version")
    versions = f"v{low}" if low == high else f"v{low}-v{high}"
    return f"{deployment.get('protocol_type', '')} {versions}".strip()


def deployment_details(deployment: Mapping[str, Any]) -> Table:
    """`GET /deployments/{id}`'s fields other than its services."""
    headers = deployment.get("additional_headers") or {}
    return details(
        [
            ("ID", deployment.get("id")),
            ("URI", deployment.get("uri") or deployment.get("arn")),
            ("Protocol", _protocol(deployment)),
            ("SDK", deployment.get("sdk_version")),
            ("Created", deployment.get("created_at")),
            ("Headers", ", ".join(f"{k}: {v}" for k, v in headers.items())),
            ("Metadata", deployment.get("metadata") or None),
        ]
    )


def services_table(services: Sequence[Mapping[str, Any]], title: str = "Services") -> Table:
    """Services as `GET /services` shows them: name, type, handlers, revision, deployment."""
    table = Table(title=f"{title} ({len(services)})", title_justify="left")
    table.add_column("NAME", no_wrap=True)
    table.add_column("TYPE", no_wrap=True)
    table.add_column("HANDLERS", overflow="fold")
    table.add_column("REVISION", justify="right", no_wrap=True)
    table.add_column("DEPLOYMENT", no_wrap=True)
    table.add_column("PUBLIC", no_wrap=True)
    for s in services:
        handlers = [str(h.get("name")) for h in s.get("handlers") or []]
        table.add_row(
            _cell(s.get("name")),
            _cell(s.get("ty")),
            _cell(", ".join(handlers)),
            _cell(str(s.get("revision", ""))),
            _cell(s.get("deployment_id")),
            _cell("yes" if s.get("public", True) else "no"),
        )
    return table


def discovered_table(services: Sequence[Mapping[str, Any]], registered: set[str]) -> Table:
    """A dry run's services (as `GET /services/{name}` shows them; a manifest's `SERVICE`... types also read), each
    marked new or an update of a registered one."""
    table = Table(title="Services the deployment serves", title_justify="left")
    table.add_column("", no_wrap=True)
    table.add_column("NAME", no_wrap=True)
    table.add_column("TYPE", no_wrap=True)
    table.add_column("HANDLERS", overflow="fold")
    for s in services:
        name = str(s.get("name"))
        handlers = [str(h.get("name")) for h in s.get("handlers") or []]
        table.add_row(
            Text("update" if name in registered else "new", style="yellow" if name in registered else "green"),
            _cell(name),
            _cell(_MANIFEST_SERVICE_TYPES.get(str(s.get("ty")), s.get("ty"))),
            _cell(", ".join(handlers)),
        )
    return table


def service_details(service: Mapping[str, Any]) -> Table:
    """`GET /services/{name}`'s fields other than its handlers."""
    return details(
        [
            ("Name", service.get("name")),
            ("Type", service.get("ty")),
            ("Revision", service.get("revision")),
            ("Deployment", service.get("deployment_id")),
            ("Public", "yes" if service.get("public", True) else "no"),
            ("Documentation", service.get("documentation")),
            *limit_rows(service.get("config") or {}),
        ]
    )


def limit_rows(config: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """`(label, text)` of a service's concurrency and rate limits (`GET /services/{name}`'s `config`:
    `concurrencyLimit`, `handlerConcurrencyLimits`, `rateLimit`, `handlerRateLimits`); none unset."""
    def value(option: str) -> Any:
        entry = config.get(option)
        return entry.get("value") if isinstance(entry, Mapping) else None

    def per_handler(option: str, unit: str) -> str | None:
        found = value(option)
        if not isinstance(found, Mapping) or not found:
            return None
        return ", ".join(f"{h}: {n}{unit}" for h, n in sorted(found.items()))

    rows: list[tuple[str, Any]] = []
    if value("concurrencyLimit") is not None:
        rows.append(("Concurrency limit", f"{value('concurrencyLimit')} running at once"))
    if (handlers := per_handler("handlerConcurrencyLimits", " running at once")) is not None:
        rows.append(("Handler concurrency limits", handlers))
    if value("rateLimit") is not None:
        rows.append(("Rate limit", f"{value('rateLimit')} starts/s"))
    if (handlers := per_handler("handlerRateLimits", " starts/s")) is not None:
        rows.append(("Handler rate limits", handlers))
    return rows


def handlers_table(handlers: Sequence[Mapping[str, Any]]) -> Table:
    """A service's handlers: name, type (shared, exclusive, workflow), input and output content types."""
    table = Table(title=f"Handlers ({len(handlers)})", title_justify="left")
    table.add_column("NAME", no_wrap=True)
    table.add_column("TYPE", no_wrap=True)
    table.add_column("INPUT", overflow="fold")
    table.add_column("OUTPUT", overflow="fold")
    documented = any(h.get("documentation") for h in handlers)
    if documented:
        table.add_column("DOCUMENTATION", overflow="fold")
    for h in handlers:
        row = [
            _cell(h.get("name")),
            _cell(h.get("ty")),
            _cell(h.get("input_description")),
            _cell(h.get("output_description")),
        ]
        if documented:
            row.append(_cell(h.get("documentation")))
        table.add_row(*row)
    return table


def invocations_table(invocations: Sequence[Mapping[str, Any]]) -> Table:
    """`GET /invocations`: one row per invocation, newest first as the API lists them."""
    table = Table(title=f"Invocations ({len(invocations)})", title_justify="left")
    table.add_column("ID", no_wrap=True)
    table.add_column("TARGET", overflow="fold")
    table.add_column("STATUS", no_wrap=True)
    table.add_column("ATTEMPTS", justify="right", no_wrap=True)
    table.add_column("CREATED", no_wrap=True)
    table.add_column("MODIFIED", no_wrap=True)
    for inv in invocations:
        table.add_row(
            _cell(inv.get("id")),
            _cell(inv.get("target")),
            _cell(_status(inv)),
            _cell(str(inv.get("attempts", ""))),
            _cell(inv.get("created_at")),
            _cell(inv.get("modified_at")),
        )
    return table


def _status(invocation: Mapping[str, Any]) -> str:
    status = str(invocation.get("status", ""))
    result = invocation.get("completion_kind") or invocation.get("completion_result")
    return f"{status} ({result})" if result else status


def invocation_details(invocation: Mapping[str, Any]) -> Table:
    """`GET /invocations/{id}` without its journal: status, target, attempts, failures, wake-up and waits."""
    last_failure = invocation.get("last_failure")
    last_failure_text = None
    if last_failure:
        attempt = last_failure.get("attempt")
        last_failure_text = _failure(last_failure) + (f" (attempt {attempt})" if attempt else "")
        if last_failure.get("related_command_name") or last_failure.get("related_command_type"):
            related = [last_failure.get("related_command_type"), last_failure.get("related_command_name")]
            index = last_failure.get("related_command_index")
            words = " ".join(str(w) for w in related if w)
            last_failure_text += f"\nat command {words}" + (f" (command #{index})" if index is not None else "")
        if last_failure.get("stacktrace"):
            last_failure_text += "\n" + str(last_failure["stacktrace"]).rstrip("\n")
    completion_failure = invocation.get("completion_failure")
    retries = invocation.get("retry_count")
    attempts = invocation.get("attempts")
    return details(
        [
            ("ID", invocation.get("id")),
            ("Target", invocation.get("target")),
            ("Status", _status(invocation)),
            ("Deployment", invocation.get("deployment_id")),
            ("Attempts", f"{attempts} (retry count {retries})" if retries else attempts),
            ("Last failure", last_failure_text),
            ("Next retry at", invocation.get("next_retry_at")),
            ("Starts at", invocation.get("execution_time")),
            ("Wakes up at", invocation.get("wake_up_at")),
            ("Waiting on", waiting_on_text(invocation)),
            ("Awakeables", awakeables_text(invocation.get("awaiting_awakeables") or [])),
            ("Key held by", invocation.get("waiting_for_key_holder")),
            ("DEADLOCK", (invocation.get("deadlock") or {}).get("message")),
            ("Output", compact(invocation["completion_output"]) if "completion_output" in invocation else None),
            ("Failure", _failure(completion_failure) if completion_failure else None),
            ("Idempotency key", invocation.get("idempotency_key")),
            ("AWS requests", requests_text(invocation.get("aws_requests") or {})),
            ("AWS cost", cost_text(invocation.get("aws_cost_usd") or {})),
            ("Trace id", invocation.get("trace_id")),
            ("Created", invocation.get("created_at")),
            ("Modified", invocation.get("modified_at")),
            ("Completed", invocation.get("completed_at")),
        ]
    )


def awakeables_text(ids: Sequence[str]) -> str | None:
    """The ids of the awakeables a suspended invocation awaits, with the command that completes one."""
    if not ids:
        return None
    return "\n".join(ids) + "\n(complete one with: torpor awakeables resolve ID [JSON] | reject ID REASON)"


def waiting_on_text(invocation: Mapping[str, Any]) -> str | None:
    """What a suspended invocation waits for, in words, naming the journal entry of each completion."""
    waiting = invocation.get("waiting_on")
    if not waiting:
        return None
    by_completion = {
        e["result_completion_id"]: e for e in invocation.get("journal") or [] if "result_completion_id" in e
    }
    parts: list[str] = []
    for completion_id in waiting.get("completions") or []:
        entry = by_completion.get(completion_id)
        if entry is None:
            parts.append(f"completion {completion_id}")
            continue
        label = f"{entry.get('type')} #{entry.get('index')}"
        if entry.get("name"):
            label += f" {entry['name']!r}"
        if entry.get("details"):
            label += f" {entry['details']}"
        elif entry.get("wake_up_time"):
            label += f" until {entry['wake_up_time']}"
        parts.append(label)
    for signal in waiting.get("signals") or []:
        if signal >= FIRST_AWAKEABLE_SIGNAL:
            parts.append(f"awakeable (signal {signal})")
        else:
            parts.append(f"{_BUILT_IN_SIGNALS.get(signal, 'signal')} (signal {signal})")
    parts.extend(f"signal {name!r}" for name in waiting.get("named_signals") or [])
    return "; ".join(parts) or None


def entry_preview(entry: Mapping[str, Any]) -> str:
    """One journal entry's cell: what it touches (`details`: `key email`, `promise approval`,
    `→ Tally/w1/add inv_1…`, `wakes up at …`, `awakeable sign_1…`), then its value or failure."""
    parts: list[str] = []
    details = entry.get("details")
    if "wake_up_time" in entry:
        parts.append(f"wakes up at {entry['wake_up_time']}")
    elif details:
        parts.append(f"→ {details}" if "target" in entry else str(details))
    elif "target" in entry:  # an admin API without `details`
        target = str(entry["target"])
        if entry.get("key"):
            service, _, handler = target.partition("/")
            target = f"{service}/{entry['key']}/{handler}"
        parts.append(f"→ {target}")
    if "value" in entry:
        parts.append(compact(entry["value"]))
    if "failure" in entry:
        parts.append("failure " + _failure(entry["failure"]))
    return "  ".join(parts)


def journal_table(journal: Sequence[Mapping[str, Any]]) -> Table:
    """The decoded journal, one row per entry: index, entry type, name, and what it touches (state
    key, promise, call target and callee, wake-up time, awakeable) with a value preview."""
    count = f"{len(journal)} entry" if len(journal) == 1 else f"{len(journal)} entries"
    table = Table(title=f"Journal ({count})", title_justify="left")
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("ENTRY", no_wrap=True)
    table.add_column("NAME", overflow="fold")
    table.add_column("DETAILS", overflow="fold")
    for entry in journal:
        kind = entry.get("kind")
        entry_type = Text(str(entry.get("type", "")))
        if kind == "notification":
            entry_type.stylize("dim")
        table.add_row(
            _cell(str(entry.get("index", ""))),
            entry_type,
            _cell(entry.get("name")),
            _cell(entry_preview(entry)),
        )
    return table


def requests_text(requests: Mapping[str, int]) -> str | None:
    """AWS requests by service, e.g. "dynamodb 8 (PutItem 5, UpdateItem META 2, GetItem 1), sqs 2"."""
    by_service: dict[str, dict[str, int]] = {}
    for kind, n in requests.items():
        service, _, operation = kind.partition(" ")
        by_service.setdefault(service, {})[operation] = n
    parts = []
    for service, operations in sorted(by_service.items()):
        detail = ", ".join(f"{op} {n}" for op, n in sorted(operations.items()))
        parts.append(f"{service} {sum(operations.values())} ({detail})")
    return "; ".join(parts) or None


def cost_text(cost: Mapping[str, float]) -> str | None:
    """The list-price cost of an invocation's AWS requests: total and per million such invocations."""
    total = sum(cost.values())
    if not total:
        return None
    return f"${total:.7f} (${total * 1_000_000:.2f} per million; control-plane Lambda time not included)"
