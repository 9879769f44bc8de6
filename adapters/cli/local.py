"""The commands that run Torpor itself: `torpor version` and `torpor dev` (the control plane locally).

`DURATION` is the click parameter type for durations (`500ms`, `10s`, `1h 30m`, `90sec`, `PT10S`, ms:
restate-server's forms), shared with `torpor invoke --delay`.
"""

from __future__ import annotations

import logging
import os
import sys
from importlib import metadata

import click

from control_plane.durations import parse_duration_ms
from control_plane.errors import TorporError
from control_plane.settings import Settings



def _installed_version() -> str:
    """The installed distribution's version (pyproject.toml's `version`), "unknown" from a source tree
    that was never installed (`pip install .` or `-e .` records it)."""
    try:
        return metadata.version("torpor")
    except metadata.PackageNotFoundError:
        return "unknown"


VERSION = _installed_version()
"""`torpor --version` and `torpor version`: the version pip installed (`importlib.metadata`)."""


class _Duration(click.ParamType):
    """A click parameter that takes `parse_duration_ms` forms and yields ms."""

    name = "duration"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        try:
            return parse_duration_ms(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


DURATION = _Duration()


def _parse_lambda_functions(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict[str, str]:
    """Click callback for `--lambda NAME=module:attr` (repeatable): function name → `module:attr`."""
    from adapters.local.lambda_emulator import parse_function_spec

    functions: dict[str, str] = {}
    for value in values:
        try:
            name, target = parse_function_spec(value)
        except ValueError as exc:
            raise click.BadParameter(str(exc), ctx, param) from exc
        if name in functions:
            raise click.BadParameter(f"function {name} is given twice", ctx, param)
        functions[name] = target
    return functions


def _configure_logging(log_format: str = "text") -> None:
    """Log to stderr: readable lines, or with `json` one JSON object per line carrying the structured
    fields (invocation_id, service, handler, attempt) the engine attaches (powertools' formatter).

    The level is `TORPOR_LOG_LEVEL` (`debug`, `info`, `warning`, `error`; default `info`); `debug`
    adds a line per invocation that completed successfully (failures and failed attempts are `info`).
    Raises `click.UsageError` for another value."""
    level_name = os.environ.get("TORPOR_LOG_LEVEL", "info").strip().upper()
    if level_name not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise click.UsageError(
            f"TORPOR_LOG_LEVEL={os.environ['TORPOR_LOG_LEVEL']!r} is not a log level; use debug, info, warning or error"
        )
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        from aws_lambda_powertools.logging.formatter import LambdaPowertoolsFormatter

        handler.setFormatter(LambdaPowertoolsFormatter(service="torpor"))
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-5s %(name)s: %(message)s", "%H:%M:%S"))
    logging.basicConfig(level=getattr(logging, level_name), handlers=[handler])
    logging.getLogger("torpor.hypercorn").setLevel(logging.WARNING)  # the UI proxy: "Running on ..." repeats our line
    for noisy in ("botocore", "urllib3", "httpx", "httpcore", "werkzeug"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


@click.command()
def version() -> None:
    """Print Torpor's version."""
    click.echo(f"torpor {VERSION}")


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address both APIs listen on.")
@click.option(
    "--ingress-port",
    type=click.IntRange(0, 65535),
    default=8080,
    show_default=True,
    help="Ingress API port (0: a free port).",
)
@click.option(
    "--admin-port",
    type=click.IntRange(0, 65535),
    default=9070,
    show_default=True,
    help="Admin API port (0: a free port).",
)
@click.option(
    "--dynamodb-endpoint",
    default=None,
    metavar="URL",
    help="Store in DynamoDB at this endpoint (dynalite, DynamoDB Local, a moto server, AWS).",
)
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False),
    default=None,
    metavar="DIR",
    help="Where the SQLite store lives (DIR/torpor.sqlite3; kept across restarts) [default: .torpor].",
)
@click.option("--in-memory", is_flag=True, help="Store in SQLite in memory: everything is lost when it stops.")
@click.option("--moto", is_flag=True, help="Store in DynamoDB on an embedded moto server (lost when it stops).")
@click.option("--table", default="torpor", show_default=True, help="DynamoDB table name.")
@click.option(
    "--blob-bucket",
    envvar="TORPOR_BLOB_BUCKET",
    default=None,
    help="With DynamoDB: the S3 bucket for values above an item's 400 KB (up to 32 MiB; created on a local endpoint).",
)
@click.option("--region", default="us-east-1", show_default=True, help="AWS region.")
@click.option(
    "--inactivity-timeout",
    type=DURATION,
    default=None,
    help="Longest one attempt may take, e.g. 60s [default: 60s or TORPOR_INACTIVITY_TIMEOUT_MS].",
)
@click.option(
    "--call-wait",
    type=DURATION,
    default=None,
    help="How long an ingress call waits before answering 202 [default: 60s or TORPOR_CALL_WAIT_MS].",
)
@click.option(
    "--lease-margin",
    type=DURATION,
    default=None,
    help="Extra lease time beyond an attempt's timeout [default: 30s or TORPOR_LEASE_MARGIN_MS].",
)
@click.option(
    "--workers",
    type=click.IntRange(1, 64),
    default=1,
    show_default=True,
    help="Orchestrator processes over the one store, serving the same ports (above 1: needs --data-dir "
    "or --dynamodb-endpoint, and no --lambda).",
)
@click.option(
    "--concurrency",
    type=click.IntRange(1, 1024),
    default=32,
    show_default=True,
    help="Invocations each process advances at the same time.",
)
@click.option(
    "--lambda",
    "lambda_functions",
    multiple=True,
    metavar="NAME=module:attr",
    callback=_parse_lambda_functions,
    help="Run a Lambda handler in the local Lambda emulator (repeatable), e.g. Examples=examples.app:app; "
    "register it as arn:aws:lambda:REGION:123456789012:function:NAME:1.",
)
@click.option(
    "--lambda-request-response",
    is_flag=True,
    help="Run the --lambda handlers as the SDK's own Lambda handler does: one Invoke per ctx.run. "
    "Default: in-process checkpoints (adapters.aws.checkpoints), one Invoke per suspension.",
)
@click.option(
    "--lambda-timeout",
    type=DURATION,
    default=None,
    help="Each --lambda function's timeout, as Lambda's Timeout (e.g. 30s; at most 15m): an Invoke still "
    'running then is stopped and fails with "Task timed out", as on AWS [default: 15m].',
)
@click.option(
    "--request-identity-key-file",
    type=click.Path(dir_okay=False),
    default=None,
    metavar="PATH",
    help="Sign every request to deployments with the Ed25519 key in this PEM file (a new key is written "
    "there, mode 0600, if the file does not exist); the public key to start deployments with is printed. "
    "Default: the key TORPOR_REQUEST_IDENTITY_KEY_FILE or TORPOR_REQUEST_IDENTITY_KEY names, else unsigned.",
)
@click.option(
    "--restate-ui",
    "restate_ui_path",
    type=click.Path(exists=True),
    default=None,
    metavar="PATH",
    help="Also serve Restate's own web UI over the admin API, on --restate-ui-port: PATH is the restate-server "
    "binary (its embedded UI is read, not run) or a directory of the UI's files.",
)
@click.option(
    "--restate-ui-port",
    type=click.IntRange(0, 65535),
    default=9072,
    show_default=True,
    help="Port of Restate's web UI, with --restate-ui (0: a free port).",
)
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="json: one JSON object per line with invocation_id, service, handler and attempt.",
)
def dev(
    host: str,
    ingress_port: int,
    admin_port: int,
    dynamodb_endpoint: str | None,
    data_dir: str | None,
    in_memory: bool,
    moto: bool,
    table: str,
    blob_bucket: str | None,
    region: str,
    inactivity_timeout: int | None,
    call_wait: int | None,
    lease_margin: int | None,
    workers: int,
    concurrency: int,
    lambda_functions: dict[str, str],
    lambda_request_response: bool,
    lambda_timeout: int | None,
    request_identity_key_file: str | None,
    restate_ui_path: str | None,
    restate_ui_port: int,
    log_format: str,
) -> None:
    """Run the control plane locally: ingress and admin APIs over one store.

    The store is SQLite in .torpor/ under the working directory (--data-dir to move it, --in-memory
    for a throwaway run), or DynamoDB with --dynamodb-endpoint (or on an embedded moto server, --moto).
    A restart on the same data directory resumes what was running.

    With --workers N (N above 1), N processes serve the same ports over the shared store (a data
    directory or a DynamoDB endpoint), each advancing up to --concurrency invocations; one that dies
    is started again.

    With --lambda, Lambda handlers run in a local emulator (a subprocess) that Lambda deployments
    are invoked on, through the same boto3 path as on AWS.

    With --restate-ui PATH, Restate's own web UI (read from the restate-server binary at PATH, or a
    directory of its files) is served at http://HOST:9072/ui/ over the admin API (docs/ui.md).
    Stop it with Ctrl+C (SIGINT) or SIGTERM.
    """
    from adapters.local.dev import DEFAULT_DATA_DIR, DEFAULT_STORE, MOTO_EXTRA_MISSING, moto_installed, run_dev
    from adapters.local.workers import shared_store_refusal

    _configure_logging(log_format)
    if lambda_timeout is not None and not 0 < lambda_timeout <= 900_000:
        raise click.BadParameter("must be above 0 and at most 15m (Lambda's range)", param_hint="--lambda-timeout")
    if dynamodb_endpoint is not None and not dynamodb_endpoint.startswith(("http://", "https://")):
        raise click.BadParameter(
            f"{dynamodb_endpoint!r} is not a URL: write e.g. http://127.0.0.1:5000", param_hint="--dynamodb-endpoint"
        )
    chosen = [flag for flag, given in (("--dynamodb-endpoint", dynamodb_endpoint is not None),
              ("--data-dir", data_dir is not None), ("--in-memory", in_memory), ("--moto", moto)) if given]  # fmt: skip
    if len(chosen) > 1:
        raise click.UsageError(f"choose one store: {' or '.join(chosen)}")
    if moto and not moto_installed():
        raise click.ClickException(MOTO_EXTRA_MISSING)
    if not chosen and DEFAULT_STORE == "sqlite":
        data_dir = DEFAULT_DATA_DIR
    refusal = shared_store_refusal(workers, dynamodb_endpoint, data_dir, in_memory, moto, lambda_functions)
    if refusal is not None:
        raise click.UsageError(refusal)
    try:
        settings = Settings.load()
    except TorporError as exc:
        raise click.ClickException(exc.message) from exc
    overrides = {
        name: value
        for name, value in (
            ("inactivity_timeout_ms", inactivity_timeout),
            ("call_wait_ms", call_wait),
            ("lease_margin_ms", lease_margin),
        )
        if value is not None
    }
    if overrides:
        settings = settings.with_overrides(**overrides)
    restate_ui = None
    if restate_ui_path is not None:
        from adapters.local.restate_ui import load_restate_ui

        if workers > 1:
            raise click.UsageError("--restate-ui is served by one process: leave out --workers")
        try:
            restate_ui = load_restate_ui(restate_ui_path)
        except TorporError as exc:
            raise click.BadParameter(exc.message, param_hint="--restate-ui") from exc
    try:
        run_dev(
            host=host,
            ingress_port=ingress_port,
            admin_port=admin_port,
            dynamodb_endpoint=dynamodb_endpoint,
            data_dir=data_dir,
            in_memory=in_memory,
            moto=moto,
            table=table,
            blob_bucket=blob_bucket,
            region=region,
            settings=settings,
            workers=workers,
            concurrency=concurrency,
            lambda_functions=lambda_functions,
            lambda_checkpoints=not lambda_request_response,
            lambda_timeout_ms=lambda_timeout,
            request_identity_key_file=request_identity_key_file,
            restate_ui=restate_ui,
            restate_ui_port=restate_ui_port,
        )
    except TorporError as exc:
        raise click.ClickException(exc.message) from exc
