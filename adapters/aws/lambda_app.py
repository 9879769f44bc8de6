"""The control plane as AWS Lambda functions (aws-lambda-powertools: event handler, Logger, Metrics, Tracer).

| function | handler | fed by |
| --- | --- | --- |
| ingress | `ingress_handler` | API Gateway HTTP API (payload v2): `/{service}/{handler}`, `/restate/...` |
| admin | `admin_handler` | API Gateway HTTP API (payload v2) with IAM authorization: the admin API |
| worker | `worker_handler` | SQS batches (partial batch failures); its own Invokes, schedules; subscriptions' events |
| sweeper | `sweeper_handler` | an EventBridge schedule, every minute: `ControlPlane.sweep_due` |
| deploy hook | `deploy_hook_handler` | a CloudFormation custom resource registering a function version |

Each container builds one `ControlPlane` (`build_control_plane`) on first use, from the environment
(the ingress's on a store that may not delete items, as its role has no `dynamodb:DeleteItem`: what
it would remove it expires or hands to the worker, `StoreFacts.may_delete`):
`TORPOR_TABLE` (DynamoDB table), `TORPOR_WAKE_QUEUE_URL`, `TORPOR_TIMER_QUEUE_URL` (the timer queue:
every timer's wake-up, so that due timers never queue behind a burst of starts; unset: the wake
queue), and for long waits through EventBridge Scheduler `TORPOR_SCHEDULER_ROLE_ARN`,
`TORPOR_TIMER_QUEUE_ARN` (else `TORPOR_WAKE_QUEUE_ARN`: the schedules' target), `TORPOR_SCHEDULE_DLQ_ARN`,
`TORPOR_SCHEDULE_GROUP`; `TORPOR_WAKE_HOLD_MS` (`WAKE_HOLD_MS`); `TORPOR_WAKE` (`sqs`, the default, or
`invoke`: a wake-up now is an asynchronous Invoke of the worker, and schedules invoke it directly;
`WAKE_TRANSPORTS`) with `TORPOR_WAKE_FUNCTION` (the worker's ARN; the worker takes its own from its
Lambda context); `TORPOR_INGRESS_URL` (the admin
function: the web UI's playground posts there); `TORPOR_*` settings as in `control_plane.settings`;
the request identity key that signs every request to deployments, from `TORPOR_REQUEST_IDENTITY_KEY_SSM_PARAMETER`,
`TORPOR_REQUEST_IDENTITY_KEY_SECRET_ARN` (or the other variables `adapters.request_identity` reads),
read once per container. Endpoints come from
boto3's own `AWS_ENDPOINT_URL_<SERVICE>` variables (tests point them at a moto server and the local
Lambda emulator). Nothing in memory outlives a request that matters: every state change is in
DynamoDB, every wake-up a message.

The ingress API authorizes callers as `TORPOR_INGRESS_AUTH` says (`AWS_IAM`, `JWT` or `NONE`, the
stack's `IngressAuth`); the ingress function refuses, 401, an event API Gateway did not authorize so
(`ingress_authorization_refusal`), in case a route is ever added or changed without it.

API Gateway ends an integration after 29 s, so an ingress call waits at most
`INGRESS_CALL_WAIT_MS` for its result and then answers `202` with the invocation id (attach with
`/restate/invocation/{id}/attach`); the worker goes on with it.
"""

from __future__ import annotations

import asyncio
import base64
import contextvars
import functools
import json
import os
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any, cast

import boto3
import httpx
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import AsyncBatchProcessor, EventType, async_process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from adapters.aws.blobs import blob_store_from_env
from adapters.aws.dynamodb_store import DynamoDBStore
from adapters.aws.emf import EmfMetrics
from adapters.aws.schedules import EventBridgeSchedules
from adapters.aws.subscriptions import handle_subscription_event, is_subscription_event
from adapters.aws.timers import MAX_HOLD_MS, SqsScheduler, handle_wake_message
from adapters.http.invoker import HttpInvoker
from adapters.invokers import RoutingInvoker, cloud_run_invoker
from adapters.otel import OtelTracer, tracer_from_env
from adapters.query import sql_engine
from adapters.request_identity import signer_from_environment
from control_plane.errors import BadRequest, Conflict, NotFound, TorporError
from control_plane.ports import Invoker, SystemClock
from control_plane.settings import Settings
from http_api import HttpControlPlane
from http_api.http import HttpRequest, Router

__all__ = [
    "INGRESS_AUTH_MODES",
    "INGRESS_CALL_WAIT_MS",
    "admin_handler",
    "build_control_plane",
    "deploy_hook_handler",
    "ingress_authorization_refusal",
    "ingress_handler",
    "sweeper_handler",
    "worker_handler",
]

INGRESS_CALL_WAIT_MS = 25_000
"""Longest an ingress call waits for its result on Lambda: under API Gateway's 29 s limit."""

WAKE_HOLD_MS = 0
"""`SqsScheduler.hold_ms` of the functions unless `TORPOR_WAKE_HOLD_MS` says otherwise (0 to 1,000).
At 1,000 a timer's message arrives up to 1 s early and the worker holds it until due, so a sleep
resumes on time rather than up to 1 s late (SQS delays are whole seconds), for up to 1 s of the
worker's billed time per batch. Off by default: on average `hold_ms² / 2000` ms held per batch (500
at 1,000), and a sleep of whole seconds would be held for nearly all of it (a 1 s sleep armed 20 ms
after it was issued gets no delay and waits 980 ms in the worker, where without holding it arrives
20 ms late); bench/README.md section 8."""

WAKE_TRANSPORTS = ("sqs", "invoke")
"""`TORPOR_WAKE` values: how a wake-up now and a schedule reach the worker (`adapters.aws.timers`,
"Wake-ups now: SQS or Invoke"). `sqs`: a message on the wake queue (a schedule: on the timer queue);
`invoke`: an asynchronous Invoke of the worker function (a schedule invokes it). Timers up to 15
minutes are SQS delay messages either way."""

INGRESS_AUTH_MODES = ("AWS_IAM", "JWT", "NONE")
"""`TORPOR_INGRESS_AUTH` values: the API Gateway authorization the ingress route requires."""

logger = Logger(service=os.environ.get("POWERTOOLS_SERVICE_NAME", "torpor"))
metrics = Metrics(namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE", "Torpor"))
tracer = Tracer()
copy_config_to_registered_loggers(source_logger=logger, include={"torpor"})  # the core's logs, as JSON

_built: dict[bool, HttpControlPlane] = {}  # by `may_delete`: the ingress's, the others'
_otel: list[OtelTracer] = []  # the OpenTelemetry tracers of `_built`, flushed before each handler returns
_build_lock = threading.Lock()


class ConfigurationError(RuntimeError):
    """A required environment variable is missing; the message names it."""


def _required(environ: Mapping[str, str], name: str) -> str:
    value = environ.get(name)
    if not value:
        raise ConfigurationError(f"{name} is not set: the function's environment must name it (see template.yaml)")
    return value


def _hold_ms(environ: Mapping[str, str]) -> int:
    """`TORPOR_WAKE_HOLD_MS` (ms, 0 to `MAX_HOLD_MS`), else `WAKE_HOLD_MS`. Raises `ConfigurationError`
    naming the variable for another value (it was a bare `ValueError` of `int()` or of `SqsScheduler`)."""
    raw = (environ.get("TORPOR_WAKE_HOLD_MS") or "").strip()
    if not raw:
        return WAKE_HOLD_MS
    if not raw.isdigit() or int(raw) > MAX_HOLD_MS:
        raise ConfigurationError(f"TORPOR_WAKE_HOLD_MS is {raw!r}: set whole milliseconds from 0 to {MAX_HOLD_MS}")
    return int(raw)


def build_control_plane(environ: Mapping[str, str] | None = None, *, may_delete: bool = True) -> HttpControlPlane:
    """This container's `ControlPlane`, built on first use from `environ` (default `os.environ`).

    `may_delete=False` builds the ingress function's: its store never deletes an item
    (`DynamoDBStore(may_delete=False)`), as the ingress role allows no `dynamodb:DeleteItem` or
    `BatchWriteItem`. One of each kind is kept (a test process hosts every function).

    Raises `ConfigurationError` naming a missing variable (`TORPOR_TABLE`, `TORPOR_WAKE_QUEUE_URL`),
    a `TORPOR_WAKE` other than `WAKE_TRANSPORTS` or a `TORPOR_WAKE_HOLD_MS` out of 0..1000,
    `RequestIdentityKeyError` if the request identity key the environment names cannot be read.
    """
    with _build_lock:
        if may_delete in _built:
            return _built[may_delete]
        env = os.environ if environ is None else environ
        region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1"
        settings = Settings.load(env)
        store = DynamoDBStore(
            _required(env, "TORPOR_TABLE"),
            region=region,
            shards=settings.store_shards,
            may_delete=may_delete,
            blobs=blob_store_from_env(env, region),
        )
        sqs = boto3.client("sqs", region_name=region)
        role = env.get("TORPOR_SCHEDULER_ROLE_ARN")
        clock = SystemClock()  # one clock for the core and the scheduler (tests move it)
        timer_queue_url = env.get("TORPOR_TIMER_QUEUE_URL") or None
        transport = (env.get("TORPOR_WAKE") or "sqs").strip().lower()
        if transport not in WAKE_TRANSPORTS:
            raise ConfigurationError(f"TORPOR_WAKE is {transport!r}: set one of {', '.join(WAKE_TRANSPORTS)}")
        invokes = transport == "invoke"
        # the schedules' target: the timer queue's ARN (looked up if not given), else the wake queue's
        target_arn = env.get("TORPOR_TIMER_QUEUE_ARN") if timer_queue_url else env.get("TORPOR_WAKE_QUEUE_ARN")
        scheduler = SqsScheduler(
            sqs,
            _required(env, "TORPOR_WAKE_QUEUE_URL"),
            timer_queue_url=timer_queue_url,
            scheduler_client=boto3.client("scheduler", region_name=region) if role else None,
            schedule_target_role_arn=role,
            queue_arn=target_arn or None,
            dead_letter_arn=env.get("TORPOR_SCHEDULE_DLQ_ARN"),
            schedule_group=env.get("TORPOR_SCHEDULE_GROUP") or "default",
            hold_ms=_hold_ms(env),
            clock=clock,
            lambda_client=boto3.client("lambda", region_name=region) if invokes else None,
            wake_function_arn=env.get("TORPOR_WAKE_FUNCTION") or None,
        )
        settings = replace(settings, call_wait_ms=min(settings.call_wait_ms, INGRESS_CALL_WAIT_MS))

        def lambda_invoker() -> Invoker:
            from adapters.aws.lambda_invoker import LambdaInvoker

            return LambdaInvoker(region=region)

        signer = signer_from_environment(env, region=region)
        if signer is not None:
            logger.info("request identity public key: %s", signer.public_key)
        invoker = RoutingInvoker(
            HttpInvoker(max_answer_bytes=settings.max_answer_bytes),
            lambda_factory=lambda_invoker,
            cloud_run_factory=cloud_run_invoker,
            signer=signer,
        )
        schedule_trigger = None  # without EventBridge Scheduler: a schedule's ticks are SQS timers
        if role:
            schedule_trigger = EventBridgeSchedules(
                boto3.client("scheduler", region_name=region),
                queue_arn=scheduler.queue_arn if invokes or not target_arn else target_arn,
                role_arn=role,
                dead_letter_arn=env.get("TORPOR_SCHEDULE_DLQ_ARN"),
                group=env.get("TORPOR_SCHEDULE_GROUP") or "default",
            )
        otel = tracer_from_env(env)  # OTLP spans if OTEL_EXPORTER_OTLP_ENDPOINT is set (docs/observability.md)
        if otel is not None:
            _otel.append(otel)
        built = HttpControlPlane(
            store,
            invoker,
            scheduler,
            clock=clock,
            settings=settings,
            metrics=EmfMetrics(metrics),
            schedule_trigger=schedule_trigger,
            facts=store.facts,  # may it delete, may the table hold 16-byte ids, what a write costs
            tracer=otel,
        )
        built.admin.ingress_url = env.get("TORPOR_INGRESS_URL")  # for the web UI's playground
        built.admin.sql = sql_engine(store, settings)  # POST /query; None (501) unless the bundle has the `query` extra
        _built[may_delete] = built
        return built


def reset() -> None:
    """Forget this container's `ControlPlane` (tests build one per environment)."""
    with _build_lock:
        _built.clear()
        for otel in _otel:
            otel.shutdown()
        _otel.clear()


def flushes_spans(handler: Any) -> Any:
    """Wrap a Lambda handler so that the spans its event made are exported before it returns (with
    tracing on; the function's environment is frozen after it returns, its batch thread with it)."""

    @functools.wraps(handler)
    def flushing(event: Any, context: Any) -> Any:
        try:
            return handler(event, context)
        finally:
            for otel in list(_otel):
                otel.flush()

    return flushing


# --- HTTP: API Gateway HTTP API (payload format 2.0) ------------------------------------------------


def _request(raw: Mapping[str, Any]) -> HttpRequest:
    """Our `HttpRequest` from an HTTP API v2 event: the raw (percent-encoded) path and query."""
    body = raw.get("body") or ""
    payload = base64.b64decode(body) if raw.get("isBase64Encoded") else body.encode()
    headers = {k.lower(): v for k, v in (raw.get("headers") or {}).items()}
    method = ((raw.get("requestContext") or {}).get("http") or {}).get("method", "GET")
    return HttpRequest(method, raw.get("rawPath") or "/", raw.get("rawQueryString") or "", headers, payload)


def _serve(router: Router, resolver: APIGatewayHttpResolver, api: str) -> Response[str | bytes]:
    request = _request(resolver.current_event.raw_event)
    answer = router.dispatch(request)
    invocation_id = answer.headers.get("x-restate-id")
    logger.info(
        "%s %s %s -> %d",
        api,
        request.method,
        request.path,
        answer.status,
        extra={"invocation_id": invocation_id} if invocation_id else None,
    )
    metrics.add_metric(name=f"{api.title()}Requests", unit=MetricUnit.Count, value=1)
    if answer.status >= 500:
        metrics.add_metric(name=f"{api.title()}Errors", unit=MetricUnit.Count, value=1)
    headers = {k: v for k, v in answer.headers.items() if k != "content-type"}
    content_type = answer.headers.get("content-type")
    body: str | bytes = answer.body
    if content_type and "json" in content_type:  # powertools would serialize a non-str JSON body again
        try:
            body = answer.body.decode()
        except UnicodeDecodeError:
            content_type = "application/octet-stream"  # not text: sent base64-encoded, as it is
    return Response(answer.status, content_type, body, headers)


_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
_ingress_api = APIGatewayHttpResolver()
_admin_api = APIGatewayHttpResolver()


@_ingress_api.route(".+", method=_METHODS)
def _ingress_route() -> Response[str | bytes]:
    return _serve(build_control_plane(may_delete=False).ingress.router, _ingress_api, "ingress")


@_admin_api.route(".+", method=_METHODS)
def _admin_route() -> Response[str | bytes]:
    return _serve(build_control_plane().admin.router, _admin_api, "admin")


def _refusal(status: int, message: str) -> dict[str, Any]:
    return {
        "statusCode": status,
        "headers": {"content-type": "application/json"},
        "body": json.dumps({"code": status, "message": message}),
        "isBase64Encoded": False,
    }


def ingress_authorization_refusal(event: Mapping[str, Any], mode: str | None) -> dict[str, Any] | None:
    """The answer refusing `event` if API Gateway did not authorize it as `mode` requires, else None.

    `mode` is `TORPOR_INGRESS_AUTH` (None or empty: `NONE`). `AWS_IAM` needs the SigV4 caller API
    Gateway verified, `requestContext.authorizer.iam` (HTTP API payload 2.0); `JWT` needs the
    verified token's claims, `requestContext.authorizer.jwt.claims`. The check is defence in depth:
    API Gateway already refused an unauthorized request (401/403) before the function ran.

    Returns:
        None to serve the event; a proxy response `401 {"code": 401, "message"}` (the ingress's error
        shape), or `500 {"code": 500, ...}` for a mode other than `INGRESS_AUTH_MODES` (fail closed).
    """
    required = (mode or "NONE").strip().upper()
    if required == "NONE":
        return None
    if required not in INGRESS_AUTH_MODES:
        return _refusal(500, f"TORPOR_INGRESS_AUTH is {mode!r}: set one of {', '.join(INGRESS_AUTH_MODES)}")
    authorizer = (event.get("requestContext") or {}).get("authorizer") or {}
    if required == "AWS_IAM" and (authorizer.get("iam") or {}).get("accessKey"):
        return None
    if required == "JWT" and (authorizer.get("jwt") or {}).get("claims"):
        return None
    how = "a SigV4-signed request (AWS_IAM)" if required == "AWS_IAM" else "a bearer token (JWT)"
    return _refusal(401, f"the ingress takes {how}; this request was not authorized so")


@metrics.log_metrics
@tracer.capture_lambda_handler
@logger.inject_lambda_context
@flushes_spans
def ingress_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """The Restate ingress behind an HTTP API: call, send, attach, output, awakeables.

    Takes an API Gateway HTTP API v2 event; returns its proxy response (bodies base64-encoded).
    A call still running after `INGRESS_CALL_WAIT_MS` answers `202 {"invocationId"}`. An event
    without the authorization `TORPOR_INGRESS_AUTH` requires is refused before anything is read or
    written (`ingress_authorization_refusal`).
    """
    refused = ingress_authorization_refusal(event, os.environ.get("TORPOR_INGRESS_AUTH"))
    if refused is not None:
        logger.warning("ingress request refused: %s", json.loads(refused["body"])["message"])
        metrics.add_metric(name="IngressRefused", unit=MetricUnit.Count, value=1)
        return refused
    return _ingress_api.resolve(event, context)


@metrics.log_metrics
@tracer.capture_lambda_handler
@logger.inject_lambda_context
@flushes_spans
def admin_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """The admin API (deployments, services, invocations) behind an IAM-authorized HTTP API."""
    return _admin_api.resolve(event, context)


# --- worker: SQS wake-ups ---------------------------------------------------------------------------


WORKER_BATCH_SIZE = 10
"""The wake queue's event source batch size (template.yaml `BatchSize`): a batch's messages all run at once."""

_wake_threads = ThreadPoolExecutor(max_workers=WORKER_BATCH_SIZE, thread_name_prefix="torpor-wake")
"""The worker's threads, kept across invocations: a wake-up mostly waits on DynamoDB and on the
handler, so every message of a batch gets one (asyncio's default executor has `cpu_count + 4`, 5 or 6
on Lambda, and a fresh loop per batch outside Lambda made new threads for every batch)."""


async def _wake(record: SQSRecord) -> str:
    """One wake-up message, delivered to `ControlPlane.wake` on a thread of its own (`_wake_threads`)."""
    control_plane = build_control_plane()
    deliver = functools.partial(
        handle_wake_message,
        record.body,
        wake=control_plane.wake,
        scheduler=cast(SqsScheduler, control_plane.scheduler),  # as `build_control_plane` made it
        now_ms=control_plane.clock.now_ms(),
    )
    context = contextvars.copy_context()  # the logger's keys, as `asyncio.to_thread` would carry them
    outcome = await asyncio.get_running_loop().run_in_executor(_wake_threads, context.run, deliver)
    metrics.add_metric(name=f"Wake{str(outcome).title()}", unit=MetricUnit.Count, value=1)
    return str(outcome)


def _direct_wake(event: Any, context: Any, control_plane: HttpControlPlane) -> dict[str, str]:
    """A wake-up that is the event itself: an asynchronous Invoke's (`wake_now` with `TORPOR_WAKE`
    `invoke`) or a schedule's whose target is this function, `{"invocation_id", "due_ms"}` or a
    schedule's tick `{"schedule", "scheduled_time"}` (`handle_wake_message`, which re-delays one that
    came early through the timer queue). Anything else is logged and dropped, `{"outcome":
    "dropped"}`: raising would only make Lambda run it twice more.

    Raises:
        Exception: Whatever the wake-up raised (DynamoDB throttled...): Lambda retries the event
            (twice, then drops it; the sweep wakes what it would have woken).
    """
    try:
        body = json.dumps(event)
    except (TypeError, ValueError):
        body = repr(event)
    outcome = handle_wake_message(
        body,
        wake=control_plane.wake,
        scheduler=cast(SqsScheduler, control_plane.scheduler),
        now_ms=control_plane.clock.now_ms(),
    )
    metrics.add_metric(name=f"Wake{str(outcome).title()}", unit=MetricUnit.Count, value=1)
    return {"outcome": str(outcome)}


def _wake_queue_names() -> tuple[str, ...]:
    """The names of the wake and timer queues (`TORPOR_WAKE_QUEUE_URL`, `TORPOR_TIMER_QUEUE_URL`)."""
    urls = (os.environ.get("TORPOR_WAKE_QUEUE_URL"), os.environ.get("TORPOR_TIMER_QUEUE_URL"))
    return tuple(url.rstrip("/").rsplit("/", 1)[-1] for url in urls if url)


@metrics.log_metrics
@tracer.capture_lambda_handler
@logger.inject_lambda_context
@flushes_spans
def worker_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Advance the invocations a batch of wake-up messages names, concurrently.

    Returns `{"batchItemFailures": [{"itemIdentifier": message id}, ...]}`: a message whose advance
    raised goes back to the queue (and to its dead-letter queue after the redrive limit); the
    others are deleted. Every advance is idempotent, so a redelivery changes nothing it should not.

    Each call has a batch processor of its own: powertools' `AsyncBatchProcessor` keeps the batch
    in hand on itself, so one shared by two calls at once (a process hosting several, as a local
    poller with threads does) let the second call's records replace the first's, whose messages
    were then reported done and deleted undelivered (`tests/unit/test_lambda_worker.py`).

    An event of a subscription's source (an SQS queue other than the wake and timer queues, an
    EventBridge rule, a Kinesis or DynamoDB stream) goes to `adapters.aws.subscriptions`. Any other
    event without `Records` is one wake-up (`_direct_wake`: an asynchronous Invoke's or a schedule's,
    `TORPOR_WAKE` `invoke`), answered `{"outcome": "fired" | "redelayed" | "dropped"}`.
    """
    control_plane = build_control_plane()
    scheduler = control_plane.scheduler
    if isinstance(scheduler, SqsScheduler) and scheduler.invokes and not scheduler.wake_function_arn:
        scheduler.wake_function_arn = getattr(context, "invoked_function_arn", None)  # this function: the worker
    if not isinstance(event, dict):
        return _direct_wake(event, context, control_plane)  # dropped, with a log line
    batch = "Records" in event  # SQS, Kinesis, DynamoDB streams; an EventBridge rule's event has none
    records = event.get("Records")
    if batch and not (isinstance(records, list) and records and all(isinstance(r, dict) for r in records)):
        return _direct_wake(event, context, control_plane)  # `Records` no batch has: dropped, with a log line
    if is_subscription_event(event, _wake_queue_names()):  # a queue, rule or stream a subscription names
        return handle_subscription_event(event, context, control_plane.subscriptions)
    if not batch:
        return _direct_wake(event, context, control_plane)
    processor = AsyncBatchProcessor(event_type=EventType.SQS)
    return async_process_partial_response(event=event, record_handler=_wake, processor=processor, context=context)


# --- sweeper ----------------------------------------------------------------------------------------


@metrics.log_metrics
@tracer.capture_lambda_handler
@logger.inject_lambda_context
@flushes_spans
def sweeper_handler(event: dict[str, Any], context: Any) -> dict[str, int]:
    """Every minute: wake overdue timers, inboxes and expired leases (`ControlPlane.sweep_due`).

    Returns `{"woken": n}`.
    """
    woken = build_control_plane().sweep_due()
    metrics.add_metric(name="SweepWakeUps", unit=MetricUnit.Count, value=woken)
    return {"woken": woken}


# --- deploy hook: a CloudFormation custom resource ---------------------------------------------------


SCHEDULE_RESOURCE_TYPE = "Custom::TorporSchedule"
"""The custom resource type of a schedule declared in a stack (SAM, CloudFormation, the CDK's `TorporSchedule`)."""


def _schedule_resource(
    control_plane: HttpControlPlane, request_type: str, properties: Mapping[str, Any], physical_id: str
) -> tuple[str, dict[str, str]]:
    """Create, replace or delete the durable schedule a `Custom::TorporSchedule` declares.

    Properties (strings, as CloudFormation passes them): `Name`; `Target` (`Service/handler`, which
    must be registered: make the resource depend on its deployment); `Cron` (5 fields, UTC) or
    `Every` (a period, whole minutes on AWS); optional `Key` (a virtual object's or workflow's) and
    `Body` (JSON text: `'"hourly"'`, `'{"n": 1}'`). The same rules and 400 messages as
    `POST /schedules` (`control_plane.schedules`); the physical id is `schedule/NAME`.

    Create stores and arms it (a name already taken, e.g. by `torpor schedules create`, fails the
    resource rather than adopt it); Update with the same name deletes and creates it again (it goes
    on from its next future tick; a tick already sent is not sent again, its idempotency key being
    the same), with a new name creates the new one (CloudFormation then deletes the old); Delete
    removes the schedule and its EventBridge schedule (an unknown one is fine).

    Returns:
        `(physical id, {"Name": name})`.

    Raises:
        BadRequest: A property is missing or malformed, or the schedule is refused.
        Conflict: Create of a name that is taken.
        KeyError: `Name` or `Target` is missing.
    """
    schedules = control_plane.schedules
    if request_type == "Delete":
        if physical_id.startswith("schedule/"):
            try:
                schedules.delete(physical_id.removeprefix("schedule/"))
            except NotFound:
                pass
        return physical_id, {}
    name = str(properties["Name"])
    service, slash, handler = str(properties["Target"]).partition("/")
    if not slash or not service or not handler or "/" in handler:
        raise BadRequest(f"Target must be Service/handler, got {properties['Target']!r}")
    body: object = None
    if properties.get("Body") not in (None, ""):
        try:
            body = json.loads(str(properties["Body"]))
        except ValueError as exc:
            raise BadRequest(f"Body must be JSON text (e.g. '\"hourly\"'): {exc}") from exc
    if request_type == "Update" and physical_id == f"schedule/{name}":
        try:
            schedules.delete(name)
        except NotFound:
            pass
    schedules.create(
        name,
        service=service,
        handler=handler,
        key=str(properties.get("Key") or ""),
        body=body,
        cron=str(properties["Cron"]) if properties.get("Cron") else None,
        every=str(properties["Every"]) if properties.get("Every") else None,
    )
    return f"schedule/{name}", {"Name": name}


SUBSCRIPTION_RESOURCE_TYPE = "Custom::TorporSubscription"
"""The custom resource type of an event subscription declared in a stack (SAM's `SubscriptionQueueArn`,
the CDK's `subscriptions` prop)."""


def _subscription_resource(
    control_plane: HttpControlPlane, request_type: str, properties: Mapping[str, Any], physical_id: str
) -> tuple[str, dict[str, str]]:
    """Create, replace or delete the event subscription a `Custom::TorporSubscription` declares.

    Properties (strings): `Source` (`sqs://QUEUE`, ...), `Sink` (`service://Service/handler`, which
    must be registered: make the resource depend on its deployment), optional `Options` (an object of
    strings). The same rules and 400 messages as `POST /subscriptions`; the physical id is the
    subscription's id. Update creates a new subscription (CloudFormation then deletes the old one);
    Delete removes it (an unknown one is fine).

    Returns:
        `(subscription id, {"SubscriptionId": id})`.

    Raises:
        BadRequest: A property is missing or malformed, or the subscription is refused.
    """
    subscriptions = control_plane.subscriptions
    if request_type == "Delete":
        if physical_id.startswith("sub_"):
            try:
                subscriptions.delete(physical_id)
            except (NotFound, BadRequest):
                pass
        return physical_id, {}
    created = subscriptions.create(properties.get("Source"), properties.get("Sink"), properties.get("Options"))
    return created.subscription_id, {"SubscriptionId": created.subscription_id}


@logger.inject_lambda_context
def deploy_hook_handler(event: dict[str, Any], context: Any) -> None:
    """The CloudFormation custom resources `Custom::TorporDeployment`, `...Schedule`, `...Subscription`.

    `Custom::TorporDeployment` registers a handler function version as a deployment when the stack
    deploys it. Resource properties: `FunctionVersionArn` (a published version's ARN), optional
    `AssumeRoleArn`. Create and Update register it (the physical id is the deployment id); Delete
    removes it unless invocations are still pinned to it (they finish on it; it stays registered, as
    in Restate).

    `Custom::TorporSchedule` declares a durable schedule (`_schedule_resource`), and
    `Custom::TorporSubscription` an event subscription (`_subscription_resource`).

    The answer goes to CloudFormation's pre-signed `ResponseURL`; a failure is reported as FAILED
    with the reason, never left hanging.
    """
    properties = event.get("ResourceProperties") or {}
    physical_id = event.get("PhysicalResourceId") or "unregistered"
    data: dict[str, str] = {}
    status, reason = "SUCCESS", ""
    try:
        control_plane = build_control_plane()
        if event.get("ResourceType") == SCHEDULE_RESOURCE_TYPE:
            physical_id, data = _schedule_resource(control_plane, event["RequestType"], properties, physical_id)
        elif event.get("ResourceType") == SUBSCRIPTION_RESOURCE_TYPE:
            physical_id, data = _subscription_resource(control_plane, event["RequestType"], properties, physical_id)
        elif event["RequestType"] in ("Create", "Update"):
            arn = str(properties["FunctionVersionArn"])
            role = properties.get("AssumeRoleArn")
            deployment, _ = control_plane.registry.register(
                arn, {}, force=True, auth={"assume_role_arn": role} if role else None
            )
            physical_id = deployment.deployment_id
            data = {"DeploymentId": deployment.deployment_id}
        elif physical_id.startswith("dp_"):
            try:
                control_plane.registry.remove(physical_id)
            except Conflict as exc:
                logger.warning("deployment %s stays registered: %s", physical_id, exc.message)
            except NotFound:
                pass
    except (TorporError, KeyError, ConfigurationError) as exc:
        status, reason = "FAILED", getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
        logger.error("deploy hook failed: %s", reason)
    except Exception as exc:  # anything else (AccessDenied, throttling): still answer, never leave CFN waiting
        status, reason = "FAILED", f"{type(exc).__name__}: {exc}"
        logger.exception("deploy hook failed")
    answer = {
        "Status": status,
        "Reason": reason or f"see CloudWatch log stream {getattr(context, 'log_stream_name', '')}",
        "PhysicalResourceId": physical_id,
        "StackId": event.get("StackId"),
        "RequestId": event.get("RequestId"),
        "LogicalResourceId": event.get("LogicalResourceId"),
        "Data": data,
    }
    httpx.put(event["ResponseURL"], content=json.dumps(answer).encode(), headers={"content-type": ""}, timeout=30)
