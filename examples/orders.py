"""An order workflow made of durable steps with visible side effects.

``OrderService.place`` validates the order, then runs three ``ctx.run`` steps — "reserve stock",
"charge payment" and "create shipment". Each step creates a random suffix *inside* the closure,
so the value only stays stable across replays because it is journaled: a summary whose ids differ
between attempts means a step ran twice. Each closure also appends one line to the
side-effects file (see ``examples.side_effects``), so tests can count real executions.

An order without ``"id"`` or with a non-positive ``"amount"`` is rejected with a terminal error
(status 400) before any step runs.
"""

from __future__ import annotations

import uuid
from typing import Any

import restate
from restate import TerminalError

from examples.side_effects import record_side_effect

orders = restate.Service("OrderService")

SERVICE = "OrderService"


def _validate(order: Any) -> tuple[str, float]:
    """Check an order's shape and return its id and amount.

    Args:
        order: The handler input.

    Returns:
        The order id (as a string) and the amount.

    Raises:
        TerminalError: With status 400 when the order is not an object, has no ``"id"``, or
            has a missing, non-numeric or non-positive ``"amount"``.
    """
    if not isinstance(order, dict):
        raise TerminalError("an order must be a JSON object", status_code=400)
    order_id = order.get("id")
    if order_id is None or order_id == "":
        raise TerminalError("an order needs an 'id'", status_code=400)
    amount = order.get("amount")
    if isinstance(amount, bool) or not isinstance(amount, int | float) or amount <= 0:
        raise TerminalError(f"order {order_id}: 'amount' must be a positive number, got {amount!r}", status_code=400)
    return str(order_id), amount


@orders.handler()
async def place(ctx: restate.Context, order: dict) -> dict:
    """Place an order: reserve stock, charge the payment, create the shipment.

    Args:
        ctx: The Restate context.
        order: ``{"id": str | int, "amount": number, ...}``; other keys are ignored.

    Returns:
        ``{"order_id", "reservation", "payment", "shipment", "status": "placed"}``.

    Raises:
        TerminalError: Status 400 for an order without ``"id"`` or with a non-positive amount.
    """
    order_id, _amount = _validate(order)
    invocation_id = ctx.request().id

    def reserve_stock() -> str:
        record_side_effect(SERVICE, "place", invocation_id, "reserve stock")
        return f"res-{order_id}-{uuid.uuid4().hex[:8]}"

    def charge_payment() -> str:
        record_side_effect(SERVICE, "place", invocation_id, "charge payment")
        return f"pay-{order_id}-{uuid.uuid4().hex[:8]}"

    def create_shipment() -> str:
        record_side_effect(SERVICE, "place", invocation_id, "create shipment")
        return f"ship-{order_id}-{uuid.uuid4().hex[:8]}"

    reservation = await ctx.run_typed("reserve stock", reserve_stock)
    payment = await ctx.run_typed("charge payment", charge_payment)
    shipment = await ctx.run_typed("create shipment", create_shipment)
    return {
        "order_id": order_id,
        "reservation": reservation,
        "payment": payment,
        "shipment": shipment,
        "status": "placed",
    }
