"""The HTTP APIs over the core: the ingress (call, send, attach, awakeables), the admin API (deployments,
services, invocations, schedules, SQL) and the web UI's static files. Outside `control_plane`: they
translate requests into the core's operations and its records into Restate's JSON shapes.

`HttpControlPlane` is the core's `ControlPlane` with both routers on top; the edges (`torpor dev`,
the Lambda entry points) serve `.ingress.router` and `.admin.router`.
"""

from __future__ import annotations

from control_plane.observability import Metrics, Tracer
from control_plane.ports import Clock, Invoker, Scheduler, ScheduleTrigger, Store, StoreFacts
from control_plane.runtime import ControlPlane
from control_plane.settings import Settings
from http_api.admin import Admin
from http_api.admin_schedules import add_schedule_routes
from http_api.admin_subscriptions import add_subscription_routes
from http_api.ingress import Ingress


class HttpControlPlane(ControlPlane):
    """A `ControlPlane` with its ingress (`.ingress`, Restate's ingress paths) and admin API
    (`.admin`, deployments, services, invocations, schedules) routers; arguments as `ControlPlane`'s."""

    def __init__(
        self,
        store: Store,
        invoker: Invoker,
        scheduler: Scheduler,
        *,
        facts: StoreFacts,
        clock: Clock | None = None,
        settings: Settings | None = None,
        metrics: Metrics | None = None,
        schedule_trigger: ScheduleTrigger | None = None,
        tracer: Tracer | None = None,
    ) -> None:
        super().__init__(
            store,
            invoker,
            scheduler,
            clock=clock,
            settings=settings,
            metrics=metrics,
            schedule_trigger=schedule_trigger,
            facts=facts,
            tracer=tracer,
        )
        self.ingress = Ingress(self.engine, store, self.waiters, self.settings.call_wait_ms)
        self.ingress.router.allowed_origins = frozenset(self.settings.ui_origins)
        self.admin = Admin(self.registry, store, self.engine)
        add_schedule_routes(self.admin.router, self.schedules)
        add_subscription_routes(self.admin.router, self.subscriptions)


__all__ = ["HttpControlPlane"]
