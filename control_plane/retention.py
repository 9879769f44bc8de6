"""Retention: when a completed invocation's journal, and then its record, are removed.

The completing write stores the two times (`changes`) and puts the invocation in the store's
retention order (`Store.due_retention`); the sweep (`ControlPlane.sweep_due`) then calls `retire`
for what is due, so no timer is armed per invocation. A new request with an idempotency key whose
invocation's retention ended removes it first (`drop_if_expired`), so the key runs anew; where the
store may not delete (the AWS ingress) the worker removes it, woken by a timer due now. Defaults
are Restate's: journal, idempotency and workflow retention each 24 h (service options
`journalRetention`, `idempotencyRetention`, `workflowCompletionRetention`).
"""

from __future__ import annotations

import time
from typing import Protocol

from control_plane.keyed import is_workflow_run
from control_plane.ports import Clock, InvocationRecord, InvocationStore, KeyStore, RetentionDue, StoreFacts
from control_plane.registry import Registry
from control_plane.settings import Settings
from control_plane.timers import Timers

HAND_OFF_WAIT_MS = 5_000
"""How long `drop_if_expired` waits for the worker to remove an expired invocation it cannot remove itself."""

_HAND_OFF_POLL_S = 0.05


class RetainedStore(InvocationStore, KeyStore, Protocol):
    """The families retention reads and removes from: invocations (their retention order, journals
    and records) and keys (a workflow run's state and promises go with it)."""


class Retention:
    """Retention times of completed invocations, and their removal (see the module doc).

    Args:
        store: Where completed invocations and a workflow's keyed items are.
        registry: The services' retention options.
        clock: Wall clock (ms).
        settings: Torpor's default retention.
        timers: Wakes the worker to remove what this process may not (`drop_if_expired`).
        facts: Whether this process may delete (`StoreFacts.may_delete`).
    """

    def __init__(
        self,
        store: RetainedStore,
        registry: Registry,
        clock: Clock,
        settings: Settings,
        timers: Timers,
        facts: StoreFacts,
    ) -> None:
        self.store = store
        self.facts = facts
        self.registry = registry
        self.clock = clock
        self.settings = settings
        self.timers = timers

    def changes(self, record: InvocationRecord, now_ms: int) -> dict[str, int]:
        """The retention fields the completing write of `record` (completed at `now_ms`) sets.

        The journal goes after the journal retention (service option, else Torpor's
        `completed_retention_ms`; 0 removes it at the next sweep). The record (status, output) stays
        as long as the journal, or the idempotency retention if the request had an idempotency key,
        or the workflow retention for a workflow's run, whichever is longest. Returns the changes
        `expires_at_s` (the record's TTL, seconds) and `journal_expires_at_ms`.
        """
        options = self.registry.pinned_options(record.deployment_id, record.service, record.handler)
        journal_ms = options.journal_retention_ms
        if journal_ms is None:
            journal_ms = self.settings.completed_retention_ms
        record_ms = journal_ms
        if record.idempotency_key:
            record_ms = max(record_ms, options.idempotency_retention_ms or self.settings.completed_retention_ms)
        if is_workflow_run(record):
            record_ms = max(record_ms, options.workflow_retention_ms or self.settings.workflow_retention_ms)
        return {"expires_at_s": -(-(now_ms + record_ms) // 1000), "journal_expires_at_ms": now_ms + journal_ms}

    def retire(self, due: RetentionDue) -> bool:
        """Remove what a completed invocation's retention says is due: its journal, then its record.

        `due` comes from `Store.due_retention` (the sweep). At `journal_expires_at_ms` the journal
        batches and notifications go (the record stays for attach, output and idempotency, and moves
        to its own expiry in the store's retention order); at `expires_at_s` the whole invocation
        goes, so its id (an idempotency key's, a workflow's run) is free again, and a workflow run's
        state and promises with it. Returns True if something was removed.
        """
        now = self.clock.now_ms()
        if due.expires_at_s and due.expires_at_s * 1000 <= now + 1000:  # TTL is whole seconds
            record = self.store.get_invocation(due.invocation_id)  # a stale index entry must not remove a new run
            if record is None or record.status != "completed" or record.expires_at_s != due.expires_at_s:
                return False
            self.remove(record)
            return True
        if due.journal_expires_at_ms and due.journal_expires_at_ms <= now:
            return self.store.remove_journal(due)
        return False

    def drop_if_expired(self, invocation_id: str) -> bool:
        """Delete a completed invocation whose retention has ended but which the sweep has not removed
        yet, so its id can be used again; True if it was removed (or is gone).

        Where the store may not delete (`StoreFacts.may_delete` False: the AWS ingress) the worker removes
        it: a timer due now wakes it there (`Engine.wake` removes what `expired` says), and
        this waits up to `HAND_OFF_WAIT_MS`, reading the record every 50 ms. False if it is still
        there then: the request is answered as the old invocation's, as until the sweep removes it.
        """
        record = self.store.get_invocation(invocation_id)
        if record is None or not self.expired(record):
            return False
        if self.facts.may_delete:
            self.remove(record)
            return True
        self.timers.hop(invocation_id, record.expires_at_s * 1000)  # no record: the sweep removes it anyway
        deadline = time.monotonic() + HAND_OFF_WAIT_MS / 1000
        while time.monotonic() < deadline:
            time.sleep(_HAND_OFF_POLL_S)
            found = self.store.get_invocation(invocation_id)
            if found is None or found.created_at_ms != record.created_at_ms:
                return found is None
        return False

    def expired(self, record: InvocationRecord) -> bool:
        """True if `record` completed and its retention (`expires_at_s`) has ended."""
        return record.status == "completed" and 0 < record.expires_at_s * 1000 <= self.clock.now_ms()

    def remove(self, record: InvocationRecord) -> None:
        """Delete a completed invocation, and a workflow run's state and promises with it.

        The workflow's items go first: while the run's record exists no new run with its id can be
        created, so none takes the key or reads a promise of the partition being emptied (one that
        waited for the record to go, `drop_if_expired`, would otherwise start from the old run's).
        `record` may have been read a while ago: what was created under its id since (after another
        removal) is kept, its record (`Store.delete_invocation` with `created_at_ms`) and a new
        run's items (the run's record is read again first).
        """
        if is_workflow_run(record):
            current = self.store.get_invocation(record.invocation_id)
            if current is None or current.created_at_ms != record.created_at_ms:
                return  # removed meanwhile, its workflow's items first
            self.store.delete_keyed(record.service, record.key)
        self.store.delete_invocation(record.invocation_id, record.created_at_ms)  # read earlier: a new one stays
