"""The AWS requests one run of an example makes through the control plane's Lambda functions, and
their orchestration cost per million runs at list prices.

    python -m bench.aws_requests [--runs 20] [--memory-mb 512]

Everything runs on this machine: DynamoDB, SQS and EventBridge Scheduler on a moto server, the
example services on the local Lambda emulator (registered by ARN, invoked through boto3), the
ingress and worker functions driven by `tests.helpers.aws_functions.LocalFunctions` as API
Gateway and the SQS event source mapping would, and, with `wake="invoke"` (`TORPOR_WAKE`), as
Lambda runs the worker's asynchronous invokes (the emulator holds them for the harness).
Requests are counted where they are made: DynamoDB by the store (per operation), SQS and Scheduler by botocore hooks on the control plane's
clients, handler invocations by the emulator's call log, control-plane function invocations and
their duration by the harness. The polling that waits for a run to end uses its own store and is
not counted.

Prices are `http_api.prices.PRICES_USD` (us-east-1 list prices, on demand) and DynamoDB
units are estimated as `cost_usd` says; Lambda time at $0.0000133334 per GB-s (arm64), measured as
the wall time of the control-plane functions in this process. Free tiers are ignored.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import boto3
from moto.server import ThreadedMotoServer

from adapters.aws import lambda_app
from adapters.aws.dynamodb_store import DynamoDBStore
from adapters.local.lambda_emulator import LambdaEmulatorProcess
from bench.partitions import Meter, MeterProxy
from http_api.prices import PRICES_USD, cost_usd
from tests.helpers.aws_functions import WORKER_ARN, WORKER_NAME, LocalFunctions

REGION = "us-east-1"
ARN = "arn:aws:lambda:us-east-1:123456789012:function:examples:1"
SCHEDULER_ROLE = "arn:aws:iam::123456789012:role/torpor-scheduler"
LAMBDA_GB_S = 0.0000133334  # arm64, USD per GB-second


class Counted(LocalFunctions):
    """`LocalFunctions` that counts control-plane function invocations and their wall time (s)."""

    def __init__(
        self,
        sqs: Any,
        queue_url: str,
        timer_queue_url: str | None = None,
        invokes: Callable[[], list[Any]] | None = None,
    ) -> None:
        super().__init__(sqs, queue_url, timer_queue_url, invokes)
        self.invocations: Counter[str] = Counter()
        self.seconds = 0.0
        self.meter: Meter | None = None
        self.handler_meter: Meter | None = None  # the handler's own commits (checkpoints), metered apart

    def http(self, api: str, method: str, path: str, body: object = None, **headers: str) -> tuple[int, Any, dict]:
        started = time.perf_counter()
        try:
            return super().http(api, method, path, body, **headers)
        finally:
            self.seconds += time.perf_counter() - started
            self.invocations[api] += 1

    def run_worker(self, event: Any) -> Any:
        """One asynchronous invocation of the worker (an Invoke's or a schedule's): its Lambda request is
        the wake-up's only request, counted as the worker's invocation."""
        started = time.perf_counter()
        try:
            return super().run_worker(event)
        finally:
            self.seconds += time.perf_counter() - started
            self.invocations["worker"] += 1

    def work_queue(self, queue_url: str, wait_s: int) -> int:
        started = time.perf_counter()
        handled = super().work_queue(queue_url, wait_s)
        if handled:
            self.seconds += time.perf_counter() - started
            self.invocations["worker"] += 1
            self.invocations["sqs_receive_delete"] += 2  # the event source mapping's receive and delete
        return handled


@contextmanager
def aws_on_this_machine(
    metered: bool = False,
    checkpoints: bool = False,
    endpoint: str | None = None,
    dynamodb_endpoint: str | None = None,
    timer_queue: bool = False,
    wake: str = "sqs",
) -> Iterator[tuple[Counted, DynamoDBStore, LambdaEmulatorProcess, Counter[str]]]:
    """A moto server, a table, a wake queue, the emulator with the examples, the env of the functions.

    `metered`: the functions reach DynamoDB through `bench.partitions.MeterProxy`, whose `Meter`
    (write and read units) is `functions.meter`; otherwise that is None.
    `checkpoints`: the examples run with in-process checkpoints (`adapters.aws.checkpoints`, their
    commits metered too, through a proxy of their own: `functions.handler_meter`, so that the time
    the proxy adds to them is known apart); otherwise request/response, the SDK's own Lambda handler.
    `endpoint`: a moto server already running (in its own process: `bench.common.moto`); None
    starts one in this process (a thread, sharing this process's GIL).
    `dynamodb_endpoint`: DynamoDB somewhere else than `endpoint` (dynalite: `bench.common.dynalite`);
    None: on `endpoint` too.
    `timer_queue`: a timer queue beside the wake queue, as the stack has (`TORPOR_TIMER_QUEUE_URL`,
    `functions.timer_queue_url`); False: every wake-up on the wake queue.
    `wake`: `TORPOR_WAKE`: `sqs` (wake-ups now on the wake queue, schedules to the queue) or `invoke`
    (asynchronous invokes of the worker, held by the emulator and run by `functions.work`; schedules
    target the worker, `WORKER_ARN`).
    """
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": REGION}
    os.environ.update(env)
    server = None
    if endpoint is None:
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
    dynamodb = dynamodb_endpoint or endpoint
    table = f"torpor-bench-{uuid.uuid4().hex[:8]}"
    proxy = MeterProxy(dynamodb).__enter__() if metered else None
    handler_proxy = MeterProxy(dynamodb).__enter__() if metered and checkpoints else None
    poll_store = DynamoDBStore(table, region=REGION, endpoint_url=dynamodb)
    poll_store.ensure_schema()
    sqs = boto3.client("sqs", region_name=REGION, endpoint_url=endpoint)
    queue_url = sqs.create_queue(QueueName="wake")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    timer_url = sqs.create_queue(QueueName="timers")["QueueUrl"] if timer_queue else None
    dlq_url = sqs.create_queue(QueueName="schedules-dlq")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    try:
        store = {"TORPOR_TABLE": table, "TORPOR_DYNAMODB_ENDPOINT": handler_proxy.url if handler_proxy else dynamodb}
        with LambdaEmulatorProcess(
            {"examples": "examples.app:app"}, env=store if checkpoints else None, hold=[WORKER_NAME]
        ) as emulator:
            os.environ.update(
                {
                    "TORPOR_TABLE": table,
                    "TORPOR_WAKE_QUEUE_URL": queue_url,
                    "TORPOR_WAKE_QUEUE_ARN": queue_arn,  # waits over 15 min: EventBridge Scheduler schedules
                    "TORPOR_TIMER_QUEUE_URL": timer_url or "",
                    "TORPOR_SCHEDULER_ROLE_ARN": SCHEDULER_ROLE,
                    "TORPOR_SCHEDULE_DLQ_ARN": dlq_arn,
                    "TORPOR_WAKE": wake,
                    "TORPOR_WAKE_FUNCTION": WORKER_ARN,
                    "AWS_ENDPOINT_URL_DYNAMODB": proxy.url if proxy else dynamodb,
                    "AWS_ENDPOINT_URL_SQS": endpoint,
                    "AWS_ENDPOINT_URL_SCHEDULER": endpoint,
                    "AWS_ENDPOINT_URL_LAMBDA": emulator.url,
                    "POWERTOOLS_METRICS_DISABLED": "true",
                    "POWERTOOLS_LOG_LEVEL": "WARNING",
                }
            )
            lambda_app.reset()
            held = functools.partial(emulator.held, WORKER_NAME) if wake == "invoke" else None
            functions = Counted(sqs, queue_url, timer_url, held)
            functions.meter = proxy.meter if proxy else None
            functions.handler_meter = handler_proxy.meter if handler_proxy else None
            status, body, _ = functions.http("admin", "POST", "/deployments", {"arn": ARN})
            if status != 201:
                raise SystemExit(f"registering {ARN} failed: {body}")
            calls: Counter[str] = Counter()
            for plane in planes():
                scheduler: Any = plane.scheduler
                # the worker's asynchronous invokes are counted as its invocations ("lambda worker"),
                # their Lambda request priced there: "wake Invoke" is for the table only
                clients = ((scheduler._sqs, "sqs"), (scheduler._scheduler, "scheduler"), (scheduler._lambda, "wake"))
                for client, name in clients:
                    if client is not None:
                        client.meta.events.register(
                            f"before-call.{client.meta.service_model.endpoint_prefix}",
                            lambda model, name=name, **_: calls.update([f"{name} {model.name}"]),
                        )
            yield functions, poll_store, emulator, calls
    finally:
        lambda_app.reset()
        for meter_proxy in (proxy, handler_proxy):
            if meter_proxy is not None:
                meter_proxy.__exit__()
        if server is not None:
            server.stop()


def planes() -> list[Any]:
    """The functions' control planes: the ingress's (its store never deletes) and the others' one."""
    return [lambda_app.build_control_plane(may_delete=may_delete) for may_delete in (False, True)]


def snapshot(functions: Counted, emulator: LambdaEmulatorProcess, calls: Counter[str]) -> dict[str, float]:
    """Every counter, flattened: DynamoDB per operation, SQS/Scheduler calls, Lambda invocations."""
    out: dict[str, float] = {}
    for plane in planes():
        store: Any = plane.store
        for op, n in store.request_counts.items():
            out[f"dynamodb {op}"] = out.get(f"dynamodb {op}", 0) + n
    out.update(calls)
    out.update({f"lambda {name}": n for name, n in functions.invocations.items() if name != "sqs_receive_delete"})
    out["sqs event source receive+delete"] = functions.invocations["sqs_receive_delete"]
    out["lambda handler Invoke"] = sum(len(v) for v in emulator.calls().values())
    out["control plane seconds"] = functions.seconds
    return out


def per_run(before: dict[str, float], after: dict[str, float], runs: int) -> dict[str, float]:
    return {k: (after.get(k, 0) - before.get(k, 0)) / runs for k in after if after.get(k, 0) != before.get(k, 0)}


def cost_per_million(counts: dict[str, float], memory_mb: int) -> dict[str, float]:
    """Dollars per million runs, by service, from per-run counts (`control_plane.observability` prices)."""
    requests = {k: v for k, v in counts.items() if k.startswith(("dynamodb ", "sqs ", "scheduler "))}
    requests["lambda Invoke"] = counts.get("lambda handler Invoke", 0)
    # the event source's receives and deletes are in `requests` already (a key starting "sqs "):
    # priced once (they were counted twice before issue 24)
    priced = {k: v * 1_000_000 for k, v in cost_usd(requests).items()}  # type: ignore[arg-type]
    if "dynamodb write units" in counts:  # metered by `bench.partitions`' proxy, not estimated from requests
        units = counts["dynamodb write units"] * PRICES_USD["dynamodb_write_unit"]
        priced["dynamodb"] = (units + counts["dynamodb read units"] * PRICES_USD["dynamodb_read_unit"]) * 1_000_000
    functions = sum(n for k, n in counts.items() if k.startswith("lambda ") and k != "lambda handler Invoke")
    seconds = counts.get("control plane seconds", 0)
    return {
        "API Gateway": counts.get("lambda ingress", 0) * PRICES_USD["api_gateway_request"] * 1_000_000,
        "DynamoDB": priced["dynamodb"],
        "SQS": priced["sqs"],
        "Scheduler": priced["scheduler"],
        "control-plane Lambda": (functions * PRICES_USD["lambda_request"] + seconds * memory_mb / 1024 * LAMBDA_GB_S)
        * 1_000_000,
        "handler Lambda requests": priced["lambda_handler_requests"],
    }


def run_scenario(
    name: str,
    runs: int,
    start: Callable[[int], str],
    done: Callable[[str], bool],
    env: tuple[Counted, DynamoDBStore, LambdaEmulatorProcess, Counter[str]],
    memory_mb: int,
) -> None:
    functions, _poll, emulator, calls = env
    before = snapshot(functions, emulator, calls)
    for i in range(runs):
        invocation_id = start(i)
        deadline = time.monotonic() + 60
        while not done(invocation_id):
            if time.monotonic() > deadline:
                raise SystemExit(f"{name}: run {i} ({invocation_id}) did not complete in 60 s")
            functions.work(wait_s=1)
    counts = per_run(before, snapshot(functions, emulator, calls), runs)
    costs = cost_per_million(counts, memory_mb)
    print(f"\n## {name} ({runs} runs)\n")
    print("| requests per run | count |\n| --- | --- |")
    for key in sorted(counts):
        if key != "control plane seconds":
            print(f"| {key} | {counts[key]:.2f} |")
    print(f"| control-plane Lambda time, s (at {memory_mb} MB) | {counts.get('control plane seconds', 0):.3f} |")
    print("\n| cost per million runs | USD |\n| --- | --- |")
    for key, usd in costs.items():
        print(f"| {key} | {usd:.2f} |")
    orchestration = sum(v for k, v in costs.items() if k != "handler Lambda requests")
    print(f"| **orchestration total** (all but the handler's own Lambda) | **{orchestration:.2f}** |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=20, help="Runs per scenario (default 20).")
    parser.add_argument("--memory-mb", type=int, default=512, help="Control-plane function memory (default 512).")
    args = parser.parse_args(argv)
    for name in ("werkzeug", "torpor"):  # moto's request log, the functions' JSON logs
        logging.getLogger(name).setLevel(logging.WARNING)
    with aws_on_this_machine() as env:
        functions, poll, _, _ = env

        def completed(invocation_id: str) -> bool:
            record = poll.get_invocation(invocation_id)
            return record is not None and record.status == "completed"

        def order(i: int) -> str:
            status, body, headers = functions.http("ingress", "POST", "/OrderService/place", {"id": i, "amount": 5})
            if status != 200:
                raise SystemExit(f"order {i}: HTTP {status} {body}")
            return str(headers["x-restate-id"])

        def sleep(i: int) -> str:
            status, body, _ = functions.http("ingress", "POST", "/Waits/sleep/send", 1000)
            if status != 202:
                raise SystemExit(f"sleep {i}: HTTP {status} {body}")
            return str(body["invocationId"])

        run_scenario(
            "order workflow: OrderService/place (3 ctx.run steps), one call",
            args.runs,
            order,
            completed,
            env,
            args.memory_mb,
        )
        run_scenario(
            "a 1 s sleep: Waits/sleep sent, woken through SQS",
            max(1, args.runs // 2),
            sleep,
            completed,
            env,
            args.memory_mb,
        )


if __name__ == "__main__":
    main()
