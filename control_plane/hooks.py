"""What the effects and the operations need of each other and of the engine, as protocols they own.

`Effects` (control_plane/effects.py) works for one `Engine` and calls back into it to create a
callee and name it (`EngineHooks`). `Operations` (control_plane/operations.py) holds no engine:
it is built over the ports and parts, with the effects as `Notifies` and the endings as `Ends`.
They depend on these protocols, not on the engine's module, so the core's imports run one way:
`invocation` imports `effects` and `operations`, neither imports `invocation`. `Engine` satisfies
`EngineHooks` (mypy checks it where the engine hands itself over).
"""

from __future__ import annotations

from typing import Any, Protocol

from control_plane.held import Held
from control_plane.keyed import Keys
from control_plane.ports import Clock, InvocationRecord, Scheduler, Store, StoredNotification
from control_plane.registry import Registry
from control_plane.retention import Retention
from control_plane.settings import Settings
from control_plane.timers import Timers
from control_plane.waiters import CompletionWaiters


class Notifies(Protocol):
    """The part of `Effects` the operations use."""

    def notify(self, invocation_id: str, notification: StoredNotification) -> bool:
        """`Effects.notify`: store a notification for an invocation, ring its doorbell, wake it."""
        ...

    def callee_id(self, held: Held, index: int) -> str:
        """`Effects.callee_id`: the invocation id the Call or OneWayCall at journal `index` names."""
        ...


class Ends(Protocol):
    """The part of `Endings` the operations use: what every completion does around its write."""

    def tell_callers(self, record: InvocationRecord, told: frozenset[str] = frozenset()) -> frozenset[str]:
        """`Endings.tell_callers`: store the result of `record` for each of its callers."""
        ...

    def ended(self, record: InvocationRecord, told: frozenset[str] = frozenset()) -> None:
        """`Endings.ended`: what follows a completing write (wake waiters, hand the key on, ...)."""
        ...


class Cancels(Protocol):
    """The part of `Operations` the effects use."""

    def cancel(self, invocation_id: str) -> None:
        """`Operations.cancel`: deliver the cancel signal (or cancel a not-started invocation)."""
        ...


class EngineHooks(Protocol):
    """The engine as `Effects` and `Operations` see it: its ports and parts, and the calls back."""

    store: Store
    clock: Clock
    scheduler: Scheduler
    registry: Registry
    keys: Keys
    settings: Settings
    waiters: CompletionWaiters
    retention: Retention
    timers: Timers

    @property
    def effects(self) -> Notifies:
        """The engine's `Effects`."""
        ...

    @property
    def operations(self) -> Cancels:
        """The engine's `Operations`."""
        ...

    def create(self, *args: Any, **kwargs: Any) -> Any:
        """`Engine.create`: create an invocation (a callee, a delayed send)."""
        ...

    def knock(self, invocation_id: str) -> None:
        """`Engine.knock`: make a lease holder in this process re-read the invocation."""
        ...

    def workflow_run_id(self, workflow: str, workflow_id: str) -> str:
        """`Engine.workflow_run_id`: the invocation id of a workflow's run."""
        ...

    def idempotent_invocation_id(self, service: str, handler: str, key: str, idempotency_key: str) -> str:
        """`Engine.idempotent_invocation_id`: the invocation id of a request with an idempotency key."""
        ...
