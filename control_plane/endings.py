"""What every completion of an invocation does around its completing write, whoever completes it
(the executor: the handler's Output, a terminal failure, the retry policy giving up; the operations:
a cancel or kill from outside).

Before the write, `tell_callers` stores each caller's CallCompletion (first per key wins, so telling
again changes nothing): a crash before the write leaves the invocation not completed, so it is
recovered and tells again. After it, `ended` wakes waiting callers, tells the callers attached
meanwhile, hands the object key on and starts the retention of a workflow's state and promises.
"""

from __future__ import annotations

import logging

from control_plane.effects import Effects
from control_plane.held import log_fields
from control_plane.keyed import Keys, is_workflow_run, takes_turn
from control_plane.observability import NO_TRACER, Metrics, Tracer
from control_plane.ports import Clock, InvocationRecord, Store
from control_plane.registry import Registry
from control_plane.settings import Settings
from control_plane.waiters import CompletionWaiters

log = logging.getLogger("torpor.invocation")

_OUTCOMES = {"succeeded": "success", "failed": "failure", "cancelled": "cancelled", "killed": "killed"}


def outcome_of(record: InvocationRecord) -> str:
    """The `outcome` label of a completed invocation's metrics: `success`, `failure`, `cancelled` or
    `killed` (from `InvocationRecord.completion`; a record without it: by its failure). Four values,
    so the label's cardinality stays bounded whatever codes handlers fail with."""
    return _OUTCOMES.get(record.completion) or ("success" if record.failure is None else "failure")


class Endings:
    """Tells callers before a completing write, and carries out what follows it (see the module doc).

    Args:
        store, registry, clock, settings, metrics, waiters, keys: the engine's ports and parts.
        effects: how a caller is told (`Effects.tell_caller`).
    """

    def __init__(
        self,
        store: Store,
        registry: Registry,
        clock: Clock,
        settings: Settings,
        metrics: Metrics,
        waiters: CompletionWaiters,
        keys: Keys,
        effects: Effects,
    ) -> None:
        self.store = store
        self.registry = registry
        self.clock = clock
        self.settings = settings
        self.metrics = metrics
        self.waiters = waiters
        self.keys = keys
        self.effects = effects
        self.tracer: Tracer = NO_TRACER  # `Engine.use_tracer`

    def tell_callers(self, record: InvocationRecord, told: frozenset[str] = frozenset()) -> frozenset[str]:
        """Tell every caller of `record` (as it will be stored completed: its `output` or `failure`
        set) its result: the invocation whose Call created it and those attached later (`callers`),
        each a CallCompletion stored through `Effects.notify` (first per key wins, so telling again
        changes nothing). Those in `told` ("{caller_id}/{completion_id}") are passed over. Returns
        every caller `record` names, in that form.

        Called BEFORE the completing write (`complete`, `fail_terminally`, the terminal branch of
        `failed`, `Operations._finish_now`): a crash before the write leaves the invocation not
        completed, so it is recovered (or the operation retried) and tells again; after the write
        every caller it knew of was told already. A worker's completing write fails if a caller
        attached meanwhile (`Executor.completing_write`); a kill's cannot, and tells such a caller after the
        write (`ended`, from the record the write read back)."""
        callers = set(record.callers)
        if record.caller_id:
            callers.add(f"{record.caller_id}/{record.caller_completion_id}")
        for caller in sorted(callers - told):
            caller_id, _, completion_id = caller.rpartition("/")
            self.effects.tell_caller(record, caller_id, int(completion_id))
        return frozenset(callers)

    def ended(self, record: InvocationRecord, told: frozenset[str] = frozenset()) -> None:
        """After the invocation completed (`record` as the completing write left it): wake waiting
        callers, tell the callers not in `told` (attached after they were told, before the write),
        hand its object key on, and start the retention of a workflow's state and promises.
        Its journal and record go when the sweep finds their retention ended (`retire`): the
        completing write put the invocation in the store's retention order, no timer is armed."""
        self.waiters.notify(record.invocation_id)
        outcome = outcome_of(record)
        self.metrics.count("invocations_completed", service=record.service, handler=record.handler, outcome=outcome)
        if record.completed_at_ms:
            self.metrics.observe(
                "invocation_duration",
                record.completed_at_ms - record.created_at_ms,
                service=record.service,
                handler=record.handler,
                outcome=outcome,
            )
        if self.tracer.enabled and record.trace_id:
            self.tracer.invocation_ended(record)
        level = logging.DEBUG if record.failure is None else logging.INFO  # a success a line only when debugging
        if log.isEnabledFor(level):
            shown = outcome if record.failure is None else f"{outcome} {dict(record.failure).get('code', 500)}"
            log.log(level, "%s completed: %s", record.invocation_id, shown, extra=log_fields(record))
        self.tell_callers(record, told)
        if takes_turn(record):
            self.keys.release(record)
        if is_workflow_run(record):
            options = self.registry.pinned_options(record.deployment_id, record.service, record.handler)
            retention_ms = options.workflow_retention_ms or self.settings.workflow_retention_ms
            self.store.expire_keyed(record.service, record.key, (self.clock.now_ms() + retention_ms) // 1000)
