"""The completing UpdateItem sets `status` after the output and failure it completes with.

moto (the AWS-path tests' DynamoDB) applies an UpdateItem's actions one at a time to the live item,
so a concurrent GetItem can see part of it; a reader that saw `completed` before the failure was set
answered an attach of a cancelled invocation with 200. DynamoDB itself applies them at once.
"""

from __future__ import annotations

from pynamodb.expressions.update import Update

from adapters.aws.store_items import InvocationItem, bind, invocation_update_actions


def _set_order(changes: dict[str, object]) -> list[str]:
    class Meta:
        table_name = "t"
        region = "us-east-1"

    model = bind(InvocationItem, Meta, None)  # type: ignore[arg-type]
    actions = invocation_update_actions(model, "inv_1", changes, shards=1, caller="test")
    names: dict[str, str] = {}
    expression = Update(*actions).serialize(names, {})
    by_placeholder = {placeholder: name for name, placeholder in names.items()}
    set_clause = expression.split("SET ", 1)[1].split(" REMOVE ", 1)[0]
    return [by_placeholder[part.split(" = ")[0].strip()] for part in set_clause.split(", ")]


def test_status_is_set_after_the_failure_and_the_output() -> None:
    order = _set_order({"status": "completed", "failure": {"code": 409, "message": "cancelled"}, "output": b"x"})
    assert order.index("status") > order.index("failure")
    assert order.index("status") > order.index("output")
