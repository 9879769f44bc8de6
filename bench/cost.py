"""Cost model: a 10-step workflow with one 1-hour sleep, on Torpor, Step Functions and Lambda durable functions.

    python -m bench.cost [--runs 5] [--steps 10] [--memory-mb 512] [--wake invoke|sqs] [--quick]

Torpor's side is counted, not estimated: `Bench/steps_sleep_steps` (`examples/fixtures/bench.py`: 5 `ctx.run`
steps, a 1-hour `ctx.sleep`, 5 more steps) runs through the control plane's Lambda functions on this
machine with `bench.aws_requests`'s harness (moto for DynamoDB, SQS and EventBridge Scheduler, the
local Lambda emulator for the handler, `LocalFunctions` as API Gateway and the SQS event source).
The sleep goes the way it goes on AWS: the suspended invocation's EventBridge Scheduler schedule is
read back from moto and delivered as if it fired (60 s before the due time, the control plane's
clock moved there, as `tests/integration/test_aws_lambda_functions.py` moves it): with `--wake
invoke` (`TORPOR_WAKE`, the stacks' default) the schedule invokes the worker with its Input, and a
wake-up now is an asynchronous Invoke of the worker (the emulator holds it, the harness runs the
worker on it: one Lambda request, the worker's invocation); with `--wake sqs` its message goes on
the wake queue, and wake-ups now are messages there too. The worker re-delays the remaining minute
through SQS, and SQS delivers that message a real minute later, when the moved clock is past the
due time. Runs go one after the other (each
about a minute), so no batch of the event source holds two runs' messages. Requests made on AWS's side are
added by hand: with `--wake sqs`, the schedule's SendMessage to the queue. Prices: `http_api.prices.PRICES_USD`.
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

Torpor runs in both its modes for Lambda handlers, one after the other: request/response (the SDK's
own Lambda handler: one Invoke per `ctx.run`, each replaying the journal) and in-process checkpoints
(`adapters.aws.checkpoints`: the function commits each run result itself, one Invoke per
suspension). Handler compute is counted: each Invoke's duration on the local Lambda emulator (its
call log), as GB-s at `--memory-mb` (512 MB, arm64 price). In checkpoint mode the function's own
commits wait on moto here (tens of ms a request on this machine, through the metering proxy): the
handler time counted takes each step's write and each Invoke's fence read at DynamoDB's in-region
latency (5 ms each) instead of the time the function measured in them (its `x-torpor-commit-ms`,
in the call log); the worker, which waits for the handler's Invoke, is counted with the same
handler time (its own requests to DynamoDB stay at moto's speed). Each mode first runs
`Steps/one_step` once, uncounted, so no run pays the function's cold start. For Step Functions and
durable functions, which run the same step code without replay, the handler time is taken as
Torpor's checkpointed one.

Free tiers are ignored.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from typing import Any

import boto3

from adapters.aws import lambda_app
from bench.aws_requests import LAMBDA_GB_S, REGION, aws_on_this_machine, cost_per_million, per_run, snapshot
from bench.common import load
from bench.partitions import Reading
from http_api.prices import PRICES_USD

SLEEP_MS = 3_600_000
SCHEDULE_LEAD_MS = 60_000  # a schedule lands this long before the due time (adapters/aws/timers.py)
SFN_TRANSITION = 25.0e-6  # Step Functions Standard, per state transition
DURABLE_OPERATION = 8.00e-6  # Lambda durable functions, per durable operation
DURABLE_WRITTEN_GB = 0.25  # per GB of data written
DURABLE_RETAINED_GB_MONTH = 0.15  # per GB-month of data retained
DURABLE_RETENTION_DAYS = 14  # the default retention period
DYNAMODB_GB_MONTH = 0.25  # DynamoDB Standard table storage, per GB-month
TORPOR_JOURNAL_RETENTION_DAYS = 1  # Torpor's default journal retention (24 h)


def run_workflow(env: Any, steps: int, wake: str = "invoke") -> int:
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
        if wake == "invoke":  # the schedule's target is the worker: EventBridge Scheduler invokes it
            functions.run_worker(json.loads(message))  # re-delayed 60 s
        else:  # the schedule's target is the queue: EventBridge Scheduler sends the message
            functions.sqs.send_message(QueueUrl=functions.queue_url, MessageBody=message)
            functions.until(lambda: functions.work(wait_s=1), 30, "the schedule's message")  # re-delayed 60 s
        offset["ms"] = due_ms + 1_000 - real_now() - SCHEDULE_LEAD_MS  # due when the re-delayed one arrives
        functions.until(lambda: status_is("completed"), 120, "the steps after the sleep (a real minute)")
    finally:
        del plane.clock.now_ms  # back to the real clock
    loaded = poll.load_invocation(invocation_id)
    return len(loaded.record.input_entry) + sum(len(b.entries) for b in loaded.batches)


MODES = {"request/response": False, "in-process checkpoints": True}
"""Torpor's two ways to run a Lambda handler: the SDK's own handler (one Invoke per `ctx.run`), or
`adapters.aws.checkpoints` (one Invoke per suspension, run results committed in the function)."""


def handler_seconds(emulator: Any) -> tuple[float, float]:
    """Seconds the example function ran, and of those spent committing run results itself (its
    `x-torpor-commit-ms`), summed over the emulator's call log."""
    calls = [c for c in emulator.calls()["calls"] if c["function"] == "examples"]
    ran = sum(max(0, c["ended_at_ms"] - c["started_at_ms"]) for c in calls) / 1000
    return ran, sum(c.get("commit_ms") or 0 for c in calls) / 1000


DYNAMODB_WRITE_S = 0.005
"""A DynamoDB request's latency within a region (AWS: single-digit milliseconds), in place of moto's."""


def measure(args: argparse.Namespace, checkpoints: bool) -> tuple[dict[str, float], float]:
    """Run the workflow `--runs` times in one mode; per-run counts (with `handler seconds`) and journal bytes."""
    with aws_on_this_machine(metered=True, checkpoints=checkpoints, wake=args.wake) as env:
        functions, _, emulator, calls = env
        assert functions.meter is not None
        status, answer, _ = functions.http("ingress", "POST", "/Steps/one_step", 1)  # warm: not counted
        if status != 200:
            raise SystemExit(f"warm-up Steps/one_step: HTTP {status} {answer}")
        before = snapshot(functions, emulator, calls)
        seconds_before = handler_seconds(emulator)
        functions.meter.take()
        if functions.handler_meter is not None:
            functions.handler_meter.take()
        journal_bytes = [run_workflow(env, args.steps, args.wake) for _ in range(args.runs)]
        counts = per_run(before, snapshot(functions, emulator, calls), args.runs)
        ran, committing = handler_seconds(emulator)
        ran, committing = (ran - seconds_before[0]) / args.runs, (committing - seconds_before[1]) / args.runs
        reading = functions.meter.take()
        handler_reading = functions.handler_meter.take() if functions.handler_meter is not None else Reading()
    counts["handler seconds on moto"] = ran
    counts["handler seconds committing on moto"] = committing
    # the function's own commits waited on moto (and the metering proxy): count DynamoDB's latency
    # instead, a write per step and a fence read per Invoke; the worker waited for the same Invoke
    requests = args.steps + counts.get("lambda handler Invoke", 0) if checkpoints else 0
    moto_excess = committing - requests * DYNAMODB_WRITE_S if checkpoints else 0.0
    counts["handler seconds"] = ran - moto_excess
    # the worker's time less what its own requests spent in the meter; the function's commits are in
    # `committing` (moto and the meter's time): counted at DynamoDB's latency instead, as above
    worker = counts["control plane seconds"] - reading.proxy_seconds / args.runs
    counts["control plane seconds measured"] = worker - handler_reading.proxy_seconds / args.runs
    counts["control plane seconds"] = worker - moto_excess
    writes = [*reading.writes, *handler_reading.writes]
    counts["dynamodb write units"] = sum(w.units for w in writes) / args.runs  # table and indexes, the function's too
    counts["dynamodb write units in indexes"] = sum(w.units for w in writes if w.where != "table") / args.runs
    counts["dynamodb write units by the handler"] = handler_reading.write_units / args.runs
    counts["dynamodb read units"] = (reading.read_units + handler_reading.read_units) / args.runs
    if args.wake == "sqs":  # AWS's side: the schedule's target delivery (with invoke: the worker's invocation)
        counts["sqs SendMessage by the schedule"] = 1
    return counts, sum(journal_bytes) / len(journal_bytes)


def main(argv: list[str] | None = None) -> int:
    """Run the workflow `--runs` times in each mode, count, price, and print the tables."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="workflow runs per mode, one after the other (default 3)")
    parser.add_argument("--steps", type=int, default=10, help="ctx.run steps in the workflow (default 10)")
    parser.add_argument("--memory-mb", type=int, default=512, help="function memory, control plane and handler (512)")
    parser.add_argument(
        "--wake",
        choices=("invoke", "sqs"),
        default="invoke",
        help="TORPOR_WAKE: wake-ups now and schedules invoke the worker (default, the stacks'), or go through SQS",
    )
    parser.add_argument("--quick", action="store_true", help="1 run per mode")
    args = parser.parse_args(argv)
    if args.quick:
        args.runs = 1
    for name in ("werkzeug", "torpor"):  # moto's request log, the functions' JSON logs
        logging.getLogger(name).setLevel(logging.WARNING)
    print(f"before: {load()}", flush=True)
    measured = {mode: measure(args, checkpoints) for mode, checkpoints in MODES.items()}
    print(f"after: {load()}")
    print_tables(args, measured)
    return 0


def print_tables(args: argparse.Namespace, measured: dict[str, tuple[dict[str, float], float]]) -> None:
    """Requests per run for each Torpor mode, then dollars per million runs for the four ways."""
    print(
        f"\n## Torpor on AWS: requests per run ({args.runs} runs of {args.steps} steps + one 1-hour sleep, "
        f"wake-ups by {args.wake})\n"
    )
    modes = list(measured)
    print("| request | " + " | ".join(modes) + " |\n| --- |" + " --- |" * len(modes))
    timed = {
        "control plane seconds",
        "control plane seconds measured",
        "handler seconds",
        "handler seconds on moto",
        "handler seconds committing on moto",
    }
    keys = sorted({k for counts, _ in measured.values() for k in counts} - timed)
    for key in keys:
        print(f"| {key} | " + " | ".join(f"{measured[m][0].get(key, 0):.2f}" for m in modes) + " |")
    for key, label in (
        ("control plane seconds measured", "control-plane Lambda time measured, s"),
        ("control plane seconds", "control-plane Lambda time counted (handler's commits at 5 ms), s"),
        ("handler seconds on moto", "handler time measured, s"),
        ("handler seconds committing on moto", "of which committing on moto, s"),
        ("handler seconds", "handler time counted (commits at 5 ms a request), s"),
    ):
        print(
            f"| {label} (at {args.memory_mb} MB) | "
            + " | ".join(f"{measured[m][0].get(key, 0):.3f}" for m in modes)
            + " |"
        )
    lam = PRICES_USD["lambda_request"] * 1e6
    gb_s = LAMBDA_GB_S * 1e6 * args.memory_mb / 1024
    rows: dict[str, dict[str, float]] = {}
    notes: dict[str, str] = {}
    for mode, (counts, journal_bytes) in measured.items():
        torpor = cost_per_million(counts, args.memory_mb)
        storage = journal_bytes / 1e9 * DYNAMODB_GB_MONTH * TORPOR_JOURNAL_RETENTION_DAYS / 30 * 1e6
        invokes, seconds = counts.get("lambda handler Invoke", 0), counts.get("handler seconds", 0)
        rows[f"Torpor, {mode} (measured)"] = {
            "orchestration": sum(v for k, v in torpor.items() if k != "handler Lambda requests") + storage,
            "handler requests": invokes * lam,
            "handler compute": seconds * gb_s,
        }
        notes[f"Torpor, {mode} (measured)"] = f"{invokes:.0f} Invokes, {seconds * 1000:.0f} ms"
        print(
            f"\nTorpor {mode}, orchestration per million runs: " + ", ".join(f"{k} ${v:.2f}" for k, v in torpor.items())
        )
        print(f"journal: {journal_bytes:.0f} bytes per run (DynamoDB storage for its 24 h retention: ${storage:.4f})")
    counts, journal_bytes = measured["in-process checkpoints"]
    # the other two run the same step code: their handler time is taken as the checkpointed handler's
    # (no replay, one checkpoint per step), split over their invocations
    seconds = counts.get("handler seconds", 0)
    gb = journal_bytes / 1e9
    transitions = args.steps + 1
    rows["Step Functions Standard"] = {
        "orchestration": transitions * SFN_TRANSITION * 1e6,
        "handler requests": args.steps * lam,
        "handler compute": seconds * gb_s,
    }
    notes["Step Functions Standard"] = (
        f"{transitions} transitions ({transitions + 2} with start and end), {args.steps} Invokes"
    )
    durable_data = gb * (DURABLE_WRITTEN_GB + DURABLE_RETAINED_GB_MONTH * DURABLE_RETENTION_DAYS / 30) * 1e6
    rows["Lambda durable functions"] = {
        "orchestration": (args.steps + 1) * DURABLE_OPERATION * 1e6 + durable_data,
        "handler requests": 2 * lam,
        "handler compute": seconds * gb_s,
    }
    notes["Lambda durable functions"] = (
        f"{args.steps + 1} operations + {journal_bytes:.0f} bytes kept 14 days, 2 Invokes"
    )
    print(f"\n## Cost per million runs, USD (list prices, us-east-1; handler compute at {args.memory_mb} MB arm64)\n")
    print(
        "| | orchestration | handler requests | handler compute (GB-s) | total | counted |\n"
        "| --- | --- | --- | --- | --- | --- |"
    )
    for name, row in rows.items():
        total = sum(row.values())
        print(
            f"| {name} | {row['orchestration']:.2f} | {row['handler requests']:.2f} | {row['handler compute']:.2f} "
            f"| {total:.2f} | {notes[name]} |"
        )


if __name__ == "__main__":
    start = time.monotonic()
    code = main()
    print(f"\n({time.monotonic() - start:.0f} s)")
    raise SystemExit(code)
