"""The AWS price model: what the requests an invocation caused cost, at AWS list prices.

The counts come from `control_plane.observability.record` (kinds such as "dynamodb PutItem META",
"sqs SendMessage", "lambda Invoke"); the admin API shows each invocation's estimate
(`aws_cost_usd`) and `bench.cost` prices whole workloads with the same table.
"""

from __future__ import annotations

from collections.abc import Mapping

PRICES_USD = {
    "dynamodb_write_unit": 0.625e-6,  # on-demand write request unit
    "dynamodb_read_unit": 0.125e-6,  # on-demand read request unit
    "sqs_request": 0.40e-6,  # standard queue, per 64 KB chunk
    "scheduler_invocation": 1.00e-6,  # EventBridge Scheduler, per schedule that fires
    "lambda_request": 0.20e-6,  # per function invocation (duration billed apart)
    "api_gateway_request": 1.00e-6,  # HTTP API
}
"""AWS list prices, us-east-1, on demand (checked 2026-11), in USD per request or request unit."""

_DYNAMODB_WRITES = ("PutItem", "UpdateItem", "DeleteItem")
_DYNAMODB_READS = ("GetItem", "Query", "Scan", "DescribeTable", "DescribeTimeToLive")


def cost_usd(requests: Mapping[str, int]) -> dict[str, float]:
    """What `requests` (kinds as `record` names them) cost at `PRICES_USD`, by service, in USD.

    DynamoDB units are estimated from requests: a write is 1 write unit per item up to 1 KB, and a
    write to an invocation record (kind ending in " META") 3, as it also moves the record's entry in
    the status index (a delete and a put there); a BatchWriteItem is counted as the items it wrote
    (kind "dynamodb BatchWriteItem" counts items, not requests); a read or query page is 1 read unit
    per 4 KB. Larger items cost proportionally more, so these are lower bounds for big journals.
    A wake-up sent as an asynchronous Invoke of the worker (kind "lambda WakeInvoke", `TORPOR_WAKE=invoke`)
    is priced as the Lambda request it is (`lambda_wake_requests`), as a wake-up's SendMessage is under
    `sqs`. Control-plane Lambda time is not included (it is shared by many invocations).
    """
    writes = reads = sqs = scheduler = invokes = wakes = 0
    for kind, n in requests.items():
        service, _, operation = kind.partition(" ")
        verb = operation.split(" ")[0]
        if service == "dynamodb":
            if verb in _DYNAMODB_WRITES or verb == "BatchWriteItem":
                writes += n * (3 if operation.endswith("META") else 1)
            elif verb in _DYNAMODB_READS:
                reads += n
        elif service == "sqs":
            sqs += n
        elif service == "scheduler" and verb == "CreateSchedule":
            scheduler += n
        elif service == "lambda" and verb == "Invoke":
            invokes += n
        elif service == "lambda" and verb == "WakeInvoke":
            wakes += n
    return {
        "dynamodb": writes * PRICES_USD["dynamodb_write_unit"] + reads * PRICES_USD["dynamodb_read_unit"],
        "sqs": sqs * PRICES_USD["sqs_request"],
        "scheduler": scheduler * PRICES_USD["scheduler_invocation"],
        "lambda_handler_requests": invokes * PRICES_USD["lambda_request"],
        "lambda_wake_requests": wakes * PRICES_USD["lambda_request"],
    }
