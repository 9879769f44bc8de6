"""Restart as new: a completed invocation run again under a new invocation id, optionally from a
prefix of its journal (`PATCH /invocations/{id}/restart-as-new?from=N&deployment=…`, as
restate-server 1.7.12 answers it).

`decide_restart_as_new` is the pure rule: from the old record and journal, what the new
invocation's journal is (the Input command alone for `from` = 0; else entries 1..`from` included,
then the completions of the commands among them that came later), and the refusals, each with
restate-server's status:

- 404 unknown invocation (the caller's `NotFound`);
- 425 not running yet (`scheduled`, or `pending` in its object key's queue);
- 409 still running (any other status but `completed`);
- 410 its journal is no longer retained (its journal retention ended);
- 422 a workflow's invocation, or `from` > 0 on an invocation that spoke service protocol < 6;
- 400 `from` past the end of the journal, a command of the prefix without its completion anywhere
  in the journal, a deployment that is not `keep`, `latest` or a known deployment id, or (with a
  prefix) one that does not speak the invocation's protocol version.

The old invocation is never changed; `Engine.restart_as_new` creates the new one.
"""

from __future__ import annotations

from dataclasses import dataclass

from control_plane.creation import Creation, Restarted
from control_plane.errors import BadRequest, Conflict, Gone, NotFound, TooEarly, Unprocessable
from control_plane.journal import Journal, completion_ids, notification_key
from control_plane.ports import InvocationRecord, Store
from control_plane.protocol import encode_frames, is_command, is_notification
from control_plane.registry import Registry

MIN_PREFIX_PROTOCOL = 6
"""The lowest service protocol version whose invocations restart from a journal prefix: `ctx.rand`
changed in version 6 (restate-server 1.7.12 refuses older ones the same way)."""

DEPLOYMENT_LATEST = "latest"
DEPLOYMENT_KEEP = "keep"


@dataclass(frozen=True, slots=True)
class RestartPlan:
    """What `decide_restart_as_new` decided: the new invocation's journal after its Input command
    (`entries`: framed, `count` of them; empty for `from` = 0), the deployment it runs on
    (`DEPLOYMENT_LATEST`, `DEPLOYMENT_KEEP` or a deployment id), and whether it keeps the old
    `random_seed` (a prefix replays `ctx.rand` values drawn before)."""

    entries: bytes
    count: int
    deployment: str
    keep_seed: bool


def check_deployment_choice(deployment: str | None) -> str:
    """The deployment a restart names: `latest` (also for None), `keep` or a deployment id (`dp_…`);
    `BadRequest` (400) for anything else, before the invocation is looked up, as restate-server
    refuses a malformed query."""
    chosen = deployment or DEPLOYMENT_LATEST
    if chosen not in (DEPLOYMENT_LATEST, DEPLOYMENT_KEEP) and not chosen.startswith("dp_"):
        raise BadRequest(f"deployment: expected keep, latest or a deployment id (dp_…), got {chosen!r}")
    return chosen


def check_restartable(status: str, service_type: str, journal_retained: bool, invocation_id: str) -> None:
    """Refuse, with restate-server's statuses, an invocation that cannot restart as new whatever the
    prefix: 425 `scheduled`/`pending`, 409 not completed, 410 journal no longer retained, 422 workflow."""
    if status in ("scheduled", "pending"):
        raise TooEarly(f"invocation {invocation_id} is {status}: it has not started yet; wait until it completes")
    if status != "completed":
        raise Conflict(
            f"invocation {invocation_id} is still running ({status}); only completed invocations restart "
            "as new: wait for it, or cancel or kill it first"
        )
    if not journal_retained:
        raise Gone(
            f"the journal of invocation {invocation_id} is no longer retained (its journal retention ended); "
            "send the request again instead"
        )
    if service_type == "WORKFLOW":
        raise Unprocessable(f"invocation {invocation_id} is a workflow's: workflows cannot be restarted as new")


def decide_restart_as_new(
    invocation_id: str,
    status: str,
    service_type: str,
    protocol_version: int,
    journal: Journal | None,
    copy_upto: int = 0,
    deployment: str | None = None,
) -> RestartPlan:
    """Decide how the completed invocation `invocation_id` restarts as new (see the module doc).

    Args:
        status, service_type, protocol_version: the old invocation record's.
        journal: its journal, None if its journal retention ended.
        copy_upto: `from`: the last journal index copied (0: the Input command alone).
        deployment: `latest` (default), `keep`, or a deployment id.

    Raises `TooEarly` (425), `Conflict` (409), `Gone` (410), `Unprocessable` (422), `BadRequest` (400).
    """
    check_restartable(status, service_type, journal is not None, invocation_id)
    assert journal is not None
    if copy_upto < 0:
        raise BadRequest(f"from: expected a journal index >= 0, got {copy_upto}")
    chosen = check_deployment_choice(deployment)
    if copy_upto == 0:
        return RestartPlan(b"", 0, chosen, keep_seed=False)
    if protocol_version < MIN_PREFIX_PROTOCOL:
        raise Unprocessable(
            f"invocation {invocation_id} ran with service protocol version {protocol_version}: only invocations "
            f"of version {MIN_PREFIX_PROTOCOL} or later restart from a journal prefix; restart it from 0"
        )
    if copy_upto >= len(journal):
        raise BadRequest(
            f"from={copy_upto} is out of range: the journal of invocation {invocation_id} has {len(journal)} "
            f"entries (indexes 0 to {len(journal) - 1})"
        )
    prefix = journal.frames[1 : copy_upto + 1]
    missing: set[int] = set()
    for entry in prefix:
        if is_command(entry.type):
            missing.update(completion_ids(entry))
        elif is_notification(entry.type):
            key = notification_key(entry)
            if key[0] == "c":
                missing.discard(int(key[1:]))
    if not missing <= journal.completions:
        raise BadRequest(
            f"the journal of invocation {invocation_id} up to from={copy_upto} (included) holds commands "
            "without their completions; choose a prefix whose commands all completed"
        )
    copied = list(prefix)
    for entry in journal.frames[copy_upto + 1 :]:
        if not missing:
            break
        if is_notification(entry.type):
            key = notification_key(entry)
            if key[0] == "c" and int(key[1:]) in missing:
                missing.discard(int(key[1:]))
                copied.append(entry)
    return RestartPlan(encode_frames(copied), len(copied), chosen, keep_seed=True)


def restart_as_new(
    store: Store, registry: Registry, creation: Creation, invocation_id: str, copy_upto: int, deployment: str | None
) -> InvocationRecord:
    """Create the new invocation of a restart as new of completed `invocation_id` (see the module
    doc): a new id; the same target, Input command (body and headers); with `copy_upto` > 0 the
    journal prefix its plan copies, the old `random_seed` and protocol version, on the deployment
    chosen (`keep`: the old one's; `latest`; or an id: 400 if unknown). One conditional creation
    (`Creation.create` with `Restarted`); the old invocation is only read. Returns the new record.

    Raises `NotFound` (404) for an unknown invocation, and the refusals of `decide_restart_as_new`.
    """
    check_deployment_choice(deployment)
    loaded = store.load_invocation(invocation_id)
    if loaded is None:
        raise NotFound(f"invocation {invocation_id} not found")
    old = loaded.record
    retained = old.status != "completed" or bool(old.journal_expires_at_ms)
    journal = Journal.load(old.input_entry, loaded.batches) if retained else None
    plan = decide_restart_as_new(
        invocation_id, old.status, old.service_type, old.protocol_version, journal, copy_upto, deployment
    )
    if plan.deployment == DEPLOYMENT_KEEP:
        deployment_id = old.deployment_id
    elif plan.deployment == DEPLOYMENT_LATEST:
        deployment_id = registry.resolve(old.service, old.handler).deployment_id
    else:
        deployment_id = plan.deployment
    try:
        chosen = registry.deployment(deployment_id)
    except NotFound as exc:
        raise BadRequest(f"deployment {deployment_id} not found; list them with torpor deployments list") from exc
    if plan.keep_seed and not chosen.min_protocol_version <= old.protocol_version <= chosen.max_protocol_version:
        raise BadRequest(
            f"invocation {invocation_id} runs with service protocol version {old.protocol_version}, which deployment "
            f"{deployment_id} does not speak ({chosen.min_protocol_version} to {chosen.max_protocol_version}); "
            "choose another deployment (keep, or latest)"
        )
    restarted = Restarted(
        input_entry=old.input_entry,
        entries=plan.entries,
        count=plan.count,
        deployment_id=deployment_id,
        random_seed=old.random_seed if plan.keep_seed else None,
        protocol_version=old.protocol_version if plan.keep_seed else None,
    )
    return creation.create(old.service, old.handler, b"", {}, key=old.key, leased=False, restart=restarted)
