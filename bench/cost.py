"""Cost model: a 10-step workflow with one 1-hour sleep, on Torpor, Step Functions and Lambda durable functions.

    python -m bench.cost [--runs 5] [--steps 10] [--memory-mb 512] [--quick]

Torpor's side is counted, not estimated: `Bench/steps_sleep_steps` (`examples/fixtures/bench.py`: 5 `ctx.run`
steps, a 1-hour `ctx.sleep`, 5 more steps) runs through the control plane's Lambda functions on this
machine with `bench.aws_requests`'s harness (moto for DynamoDB, SQS and EventBridge Scheduler, the
local Lambda emulator for the handler, `LocalFunctions` as API Gateway and the SQS event source).
The sleep goes the way it goes on AWS: the suspended invocation's EventBridge Scheduler schedule is
read back from moto and its message put on the wake queue as if the schedule fired (60 s before the
due time, the control plane's clock moved there, as `tests/integration/test_aws_lambda_functions.py`
moves it); the worker re-delays the remaining minute through SQS, and SQS delivers that message a
real minute later, when the moved clock is past the due time. Runs go one after the other (each
about a minute), so no batch of the event source holds two runs' messages. Requests made on AWS's side are
added by hand: the schedule's SendMessage to the queue. Prices: `control_plane.observability.PRICES_USD`.
DynamoDB is priced by its write and read units, metered at the wire by `bench.partitions`' proxy
(1 write unit per started KB of the larger item image, index writes included, transactions twice;
1 read unit per 4 KB read, half for eventually consistent reads).

The other two are priced from their published list prices (us-east-1, see bench/README.md):

- Step Functions Standard: $25 per million state transitions; the equivalent state machine is
  `steps` Task states (each invoking a Lambda function) and one Wait state. AWS counts a transition
  for each state executed; with the start and the end counted too, two more.
- Lambda durable functions: $8.00 per million durable operations (each step and the wait; whether
  the execution's start is one more operation, the sources found do not say), $0.25 per GB of data
  written, $0.15 per GB-month retained (default retention 14 days); the function is invoked twice
  (start, and resume after the wait). Data written is taken as the journal bytes Torpor stored for
  the same run (same inputs and step results).

Free tiers are ignored; the handler's own compute time (GB-s) is left out everywhere.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from typing import Any

import boto3

from adapters.aws import lambda_app
from bench.aws_requests import REGION, aws_on_this_machine, cost_per_million, per_run, snapshot
from bench.common import load
from control_plane.observability import PRICES_USD

SLEEP_MS = 3_600_000
SCHEDULE_LEAD_MS = 60_000  # a schedule lands this long before the due time (adapters/aws/timers.py)
SFN_TRANSITION = 25.0e-6  # Step Functions Standard, per state transition
DURABLE_OPERATION = 8.00e-6  # Lambda durable functions, per durable operation
DURABLE_WRITTEN_GB = 0.25  # per GB of data written
DURABLE_RETAINED_GB_MONTH = 0.15  # per GB-month of data retained
DURABLE_RETENTION_DAYS = 14  # the default retention period
DYNAMODB_GB_MONTH = 0.25  # DynamoDB Standard table storage, per GB-month
TORPOR_JOURNAL_RETENTION_DAYS = 1  # Torpor's default journal retention (24 h)


def run_workflow(env: Any, steps: int) -> int:
    """Send one workflow and drive it through its sleep with a moved clock; its journal's size in bytes."""
    functions, poll, _, _ = env
    body = {"steps": steps, "sleep_ms": SLEEP_MS}
    status, answer, _ = functions.http("ingress", "POST", "/Bench/steps_sleep_steps/send", body)
    if status != 202:
        raise SystemExit(f"send: HTTP {status} {answer}")
    invocation_id = str(answer["invocationId"])

    def status_is(wanted: str) -> bool:
        record = poll.get_invocation(invocation_id)
        return record is not None and record.status == wanted

    functions.until(lambda: status_is("suspended"), 60, "the steps before the sleep")
    scheduler = boto3.client("scheduler", region_name=REGION)  # ours: not counted
    [name] = [s["Name"] for s in scheduler.list_schedules()["Schedules"] if invocation_id in s["Name"]]
    message = scheduler.get_schedule(Name=name, GroupName="default")["Target"]["Input"]
    due_ms = int(json.loads(message)["due_ms"])
    plane = lambda_app.build_control_plane()
    real_now = plane.clock.now_ms
    offset = {"ms": due_ms - SCHEDULE_LEAD_MS - real_now()}  # the schedule fires: its target sends
    plane.clock.now_ms = lambda: real_now() + offset["ms"]  # type: ignore[method-assign]
    try:
        functions.sqs.send_message(QueueUrl=functions.queue_url, MessageBody=message)
        functions.until(lambda: functions.work(wait_s=1), 30, "the schedule's message")  # re-delayed 60 s
        offset["ms"] = due_ms + 1_000 - real_now() - SCHEDULE_LEAD_MS  # due when the re-delayed one arrives
        functions.until(lambda: status_is("completed"), 120, "the steps after the sleep (a real minute)")
    finally:
        del plane.clock.now_ms  # back to the real clock
    loaded = poll.load_invocation(invocation_id)
    return len(loaded.record.input_entry) + sum(len(b.entries) for b in loaded.batches)


def main(argv: list[str] | None = None) -> int:
    """Run the workflow `--runs` times, count, price, and print the tables."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="workflow runs, one after the other (default 3)")
    parser.add_argument("--steps", type=int, default=10, help="ctx.run steps in the workflow (default 10)")
    parser.add_argument("--memory-mb", type=int, default=512, help="control-plane function memory (default 512)")
    parser.add_argument("--quick", action="store_true", help="1 run")
    args = parser.parse_args(argv)
    if args.quick:
        args.runs = 1
    for name in ("werkzeug", "torpor"):  # moto's request log, the functions' JSON logs
        logging.getLogger(name).setLevel(logging.WARNING)
    print(f"before: {load()}", flush=True)
    with aws_on_this_machine(metered=True) as env:
        functions, _, emulator, calls = env
        assert functions.meter is not None
        before = snapshot(functions, emulator, calls)
        functions.meter.take()
        journal_bytes = [run_workflow(env, args.steps) for _ in range(args.runs)]
        counts = per_run(before, snapshot(functions, emulator, calls), args.runs)
        reading = functions.meter.take()
    index_units = sum(w.units for w in reading.writes if w.where != "table")
    counts["dynamodb write units"] = reading.write_units / args.runs  # table and indexes
    counts["dynamodb write units in indexes"] = index_units / args.runs
    counts["dynamodb read units"] = reading.read_units / args.runs
    counts["control plane seconds"] -= reading.proxy_seconds / args.runs  # the meter's own reads, not Torpor's
    counts["sqs SendMessage by the schedule"] = 1  # AWS's side: the schedule's target delivery
    print(f"after: {load()}")
    print_tables(args, counts, sum(journal_bytes) / len(journal_bytes))
    return 0


def print_tables(args: argparse.Namespace, counts: dict[str, float], journal_bytes: float) -> None:
    """Requests per run, then dollars per million runs for the three services."""
    print(f"\n## Torpor on AWS: requests per run ({args.runs} runs of {args.steps} steps + one 1-hour sleep)\n")
    print("| request | per run |\n| --- | --- |")
    for key in sorted(counts):
        if key != "control plane seconds":
            print(f"| {key} | {counts[key]:.2f} |")
    print(f"| control-plane Lambda time, s (at {args.memory_mb} MB) | {counts.get('control plane seconds', 0):.3f} |")
    torpor = cost_per_million(counts, args.memory_mb)
    gb = journal_bytes / 1e9
    torpor_storage = gb * DYNAMODB_GB_MONTH * TORPOR_JOURNAL_RETENTION_DAYS / 30 * 1e6
    torpor_orchestration = sum(v for k, v in torpor.items() if k != "handler Lambda requests") + torpor_storage
    torpor_invokes = counts.get("lambda handler Invoke", 0)
    transitions, transitions_with_ends = args.steps + 1, args.steps + 3
    durable_ops = args.steps + 1
    durable_data = gb * (DURABLE_WRITTEN_GB + DURABLE_RETAINED_GB_MONTH * DURABLE_RETENTION_DAYS / 30) * 1e6
    durable = durable_ops * DURABLE_OPERATION * 1e6 + durable_data
    lam = PRICES_USD["lambda_request"] * 1e6
    print("\nTorpor's orchestration per million runs: " + ", ".join(f"{k} ${v:.2f}" for k, v in torpor.items()))
    estimated = cost_per_million({k: v for k, v in counts.items() if " units" not in k}, args.memory_mb)["DynamoDB"]
    print(f"DynamoDB from metered units ${torpor['DynamoDB']:.2f}; estimated from requests ${estimated:.2f}")
    print(
        f"journal: {journal_bytes:.0f} bytes per run (DynamoDB storage for its 24 h retention: ${torpor_storage:.4f})"
    )
    print("\n## Cost per million runs, USD (list prices, us-east-1; handler compute time not included)\n")
    sfn, sfn_with_ends = transitions * SFN_TRANSITION * 1e6, transitions_with_ends * SFN_TRANSITION * 1e6
    print("| | Torpor (measured) | Step Functions Standard | Lambda durable functions |\n| --- | --- | --- | --- |")
    print(
        f"| orchestration | {torpor_orchestration:.2f} | {sfn:.2f} ({transitions} transitions); "
        f"{sfn_with_ends:.2f} ({transitions_with_ends}, with start and end) "
        f"| {durable:.2f} ({durable_ops} operations + {journal_bytes:.0f} bytes written and kept 14 days) |"
    )
    print(
        f"| handler Lambda requests | {torpor_invokes * lam:.2f} ({torpor_invokes:.0f} invocations) "
        f"| {args.steps * lam:.2f} ({args.steps}) | {2 * lam:.2f} (2) |"
    )
    print(
        f"| total | {torpor_orchestration + torpor_invokes * lam:.2f} "
        f"| {sfn + args.steps * lam:.2f} to {sfn_with_ends + args.steps * lam:.2f} | {durable + 2 * lam:.2f} |"
    )


if __name__ == "__main__":
    start = time.monotonic()
    code = main()
    print(f"\n({time.monotonic() - start:.0f} s)")
    raise SystemExit(code)
