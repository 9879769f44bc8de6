"""The CDK app: Torpor's control plane and the example handler, registered by version.

`cdk synth` / `cdk deploy` run this (`cdk.json`: `python3 -m infra.app`); so can you:
`python -m infra.app` writes the cloud assembly to `$CDK_OUTDIR` or `.cache/cdk.out`. With
`TORPOR_CDK_BUNDLE=0` the Lambda asset is not built (no pip, no network): enough to read or lint
the template, not to deploy it.

Context (`cdk deploy -c key=value`): `handlerFunctionNamePrefix`, `workerMaxConcurrency`,
`logLevel`, `tracing` (`Active` for X-Ray), `exampleHandler` (`false` to leave the example out),
`stackName` (default `Torpor`), and for signed requests `requestIdentityKeyParameter` (an SSM
SecureString name) or `requestIdentityKeySecretArn`, with `requestIdentityKeyKmsKeyArn` for a
customer managed key; `ingressAuth` (`AWS_IAM`, the default, `JWT` or `NONE`) with `jwtIssuer` and
`jwtAudience` (comma-separated) for `JWT`; `alarmEmail` (subscribed to the alarm topic);
`handlerAssumeRoleArns` (comma-separated), `logRetentionDays` (CloudWatch Logs' periods: 1, 3, 5, 7,
14, 30, ...), `googleCredentialConfig` (Cloud Run: the credential configuration's JSON or base64),
`uiOrigins` (comma-separated: the pages that may call the ingress from a browser);
`subscriptionQueueArn` with `subscriptionSink` (`service://Service/handler`): an event subscription
of that SQS queue (`TorporSubscription`).
The stack is environment-agnostic: it deploys to the account and region of your credentials.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from aws_cdk import App, CfnOutput, Duration, Stack
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.constructs import (
    DEFAULT_HANDLER_FUNCTION_NAME_PREFIX,
    PRODUCTION_STORE_SHARDS,
    RegisteredHandler,
    TorporControlPlane,
    TorporSchedule,
    TorporSubscription,
    checkpoint_statements,
    logged_function,
)

REPO_ROOT = Path(__file__).resolve().parents[1]
CDK_JSON = REPO_ROOT / "cdk.json"

EXAMPLE_HANDLER = "adapters.aws.checkpoints.handler"
"""Torpor's in-process checkpoint wrapper, driving the example app (`examples/app.py`, `TORPOR_APP`)."""
EXAMPLE_APP = "examples.app:app"
"""The example app's `module:attr` (`examples.app.app` alone would be its request/response Lambda handler)."""


class TorporStack(Stack):
    """Torpor's control plane, and the example handler registered through the deploy hook.

    Attributes:
        control_plane: The `TorporControlPlane`.
        example_handler: The example handler function, or None.
        example_deployment: Its `RegisteredHandler`, or None.
        example_schedule: The durable schedule declared with it (`TorporSchedule`, daily), or None.

    Args:
        scope: The app.
        id: The stack's id (and name).
        code: The control plane's code; `infra.bundling.torpor_code()` if None.
        example_code: The example handler's code; `infra.bundling.example_handler_code()` if None.
        handler_function_name_prefix: See `TorporControlPlane`; the example handler's name has it.
        worker_max_concurrency: See `TorporControlPlane`.
        timer_max_concurrency: See `TorporControlPlane`.
        wake_transport: See `TorporControlPlane` (`invoke` or `sqs`).
        log_level: See `TorporControlPlane`.
        store_shards: See `TorporControlPlane`.
        tracing_active: See `TorporControlPlane`.
        with_example_handler: Deploy and register the example handler.
        request_identity_key_parameter: See `TorporControlPlane`.
        request_identity_key_secret_arn: See `TorporControlPlane`.
        request_identity_key_kms_key_arn: See `TorporControlPlane`.
        ingress_auth: See `TorporControlPlane`.
        jwt_issuer: See `TorporControlPlane`.
        jwt_audience: See `TorporControlPlane`.
        alarm_email: See `TorporControlPlane`.
        handler_assume_role_arns: See `TorporControlPlane`.
        log_retention: See `TorporControlPlane`.
        google_credential_config: See `TorporControlPlane`.
        ui_origins: See `TorporControlPlane`.
        subscription_queue_arn: An SQS queue whose messages invoke `subscription_sink` (`TorporSubscription`).
        subscription_sink: `service://Service/handler`; registered first (the example's, or before).
        **kwargs: Further `Stack` properties.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        code: lambda_.Code | None = None,
        example_code: lambda_.Code | None = None,
        handler_function_name_prefix: str = DEFAULT_HANDLER_FUNCTION_NAME_PREFIX,
        worker_max_concurrency: int = 10,
        timer_max_concurrency: int = 10,
        wake_transport: str = "invoke",
        log_level: str = "INFO",
        store_shards: int = PRODUCTION_STORE_SHARDS,
        tracing_active: bool = False,
        with_example_handler: bool = True,
        request_identity_key_parameter: str | None = None,
        request_identity_key_secret_arn: str | None = None,
        request_identity_key_kms_key_arn: str | None = None,
        ingress_auth: str = "AWS_IAM",
        jwt_issuer: str | None = None,
        jwt_audience: Sequence[str] = (),
        alarm_email: str | None = None,
        handler_assume_role_arns: Sequence[str] = (),
        log_retention: logs.RetentionDays = logs.RetentionDays.ONE_MONTH,
        google_credential_config: Mapping[str, object] | str | None = None,
        ui_origins: Sequence[str] = (),
        subscription_queue_arn: str | None = None,
        subscription_sink: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            scope, id, description="Torpor: durable execution for Restate-SDK handlers on Lambda", **kwargs
        )
        self.control_plane = TorporControlPlane(
            self,
            "ControlPlane",
            code=code,
            handler_function_name_prefix=handler_function_name_prefix,
            worker_max_concurrency=worker_max_concurrency,
            timer_max_concurrency=timer_max_concurrency,
            wake_transport=wake_transport,
            log_level=log_level,
            store_shards=store_shards,
            tracing_active=tracing_active,
            request_identity_key_parameter=request_identity_key_parameter,
            request_identity_key_secret_arn=request_identity_key_secret_arn,
            request_identity_key_kms_key_arn=request_identity_key_kms_key_arn,
            ingress_auth=ingress_auth,
            jwt_issuer=jwt_issuer,
            jwt_audience=jwt_audience,
            alarm_email=alarm_email,
            handler_assume_role_arns=handler_assume_role_arns,
            log_retention=log_retention,
            google_credential_config=google_credential_config,
            ui_origins=ui_origins,
        )
        self.example_handler: lambda_.Function | None = None
        self.example_deployment: RegisteredHandler | None = None
        self.example_schedule: TorporSchedule | None = None
        if with_example_handler:
            if example_code is None:
                from infra.bundling import example_handler_code

                example_code = example_handler_code()
            self.example_handler = logged_function(
                self,
                "ExampleHandlerFunction",
                code=example_code,
                handler=EXAMPLE_HANDLER,
                # restate-sdk's arm64 wheels need glibc 2.28: python3.12's Amazon Linux 2023, not 3.11's AL2.
                runtime=lambda_.Runtime.PYTHON_3_12,
                timeout=Duration.seconds(120),
                log_retention=logs.RetentionDays.ONE_MONTH,
                description="Torpor example services (restate-sdk, in-process checkpoints)",
                environment={"TORPOR_APP": EXAMPLE_APP, "TORPOR_TABLE": self.control_plane.table.table_name},
                statements=checkpoint_statements(self.control_plane.table),
                # The name carries the prefix and stack name the control plane may invoke.
                function_name=f"{self.control_plane.handler_name_prefix}examples",
            )
            self.example_deployment = RegisteredHandler(
                self, "ExampleHandlerDeployment", control_plane=self.control_plane, function=self.example_handler
            )
            # a durable schedule declared with the stack (template.yaml: ExampleDailyGreeting)
            self.example_schedule = TorporSchedule(
                self,
                "ExampleDailyGreeting",
                control_plane=self.control_plane,
                name="daily-greeting",
                cron="0 6 * * *",  # 06:00 UTC
                target="Greeter/greet",
                body="schedule",
                after=[self.example_deployment],
            )
            CfnOutput(
                self,
                "ExampleHandlerVersionArn",
                value=self.example_deployment.version.function_arn,
                description="The example handler's published version, registered as a deployment",
            )
            CfnOutput(
                self,
                "ExampleDeploymentId",
                value=self.example_deployment.deployment_id,
                description="The deployment id the deploy hook registered (dp_...)",
            )
        self.subscription: TorporSubscription | None = None
        if subscription_queue_arn and subscription_sink:
            self.subscription = TorporSubscription(
                self,
                "Subscription",
                control_plane=self.control_plane,
                queue=sqs.Queue.from_queue_arn(self, "SubscriptionQueue", subscription_queue_arn),
                sink=subscription_sink,
                after=[self.example_deployment] if self.example_deployment else [],
            )
        CfnOutput(
            self,
            "IngressUrl",
            value=self.control_plane.ingress_url,
            description="Base URL of the ingress (ingressAuth: who may call it), e.g. POST {IngressUrl}/Greeter/greet",
        )
        CfnOutput(
            self,
            "AdminUrl",
            value=self.control_plane.admin_url,
            description="Base URL of the admin API (SigV4, execute-api:Invoke), for torpor --admin-url",
        )
        CfnOutput(self, "TableName", value=self.control_plane.table.table_name, description="The DynamoDB table")
        CfnOutput(self, "WakeQueueUrl", value=self.control_plane.wake_queue.queue_url, description="The SQS wake queue")
        CfnOutput(
            self,
            "TimerQueueUrl",
            value=self.control_plane.timer_queue.queue_url,
            description="The SQS timer queue (every timer's wake-up)",
        )
        CfnOutput(
            self,
            "WakeDeadLetterQueueUrl",
            value=self.control_plane.wake_dead_letter_queue.queue_url,
            description="The wake queue's dead-letter queue (redrive it after fixing the cause; docs/deploying.md)",
        )
        CfnOutput(
            self,
            "AlarmTopicArn",
            value=self.control_plane.alarm_topic.topic_arn,
            description="The SNS topic Torpor's alarms notify (subscribe email, chat or paging to it)",
        )
        CfnOutput(
            self,
            "DeployHookArn",
            value=self.control_plane.deploy_hook_function.function_arn,
            description="ServiceToken of Custom::TorporDeployment (registers handler versions from other stacks)",
            export_name=f"{self.stack_name}-DeployHookArn",
        )


def cdk_json_context() -> dict[str, Any]:
    """The `context` of `cdk.json` (feature flags), so a direct run synthesizes what `cdk synth` does."""
    return dict(json.loads(CDK_JSON.read_text()).get("context", {}))


def build_app(
    *,
    bundle: bool = True,
    context: Mapping[str, Any] | None = None,
    outdir: str | None = None,
    code: lambda_.Code | None = None,
    example_code: lambda_.Code | None = None,
) -> tuple[App, TorporStack]:
    """The app with its one stack, configured from context (see the module doc).

    Args:
        bundle: Build the Lambda asset (pip); False skips it, for offline synthesis and tests.
        context: Context values on top of `cdk.json`'s (the CLI's `-c` arrive by the environment).
        outdir: The cloud assembly directory; the CLI's, else `.cache/cdk.out`.
        code: The control plane's code instead of the bundled asset.
        example_code: The example handler's code instead of the bundled asset.
    """
    values: dict[str, Any] = {**cdk_json_context(), **(context or {})}
    if not bundle:
        values["aws:cdk:bundling-stacks"] = []
    if outdir is None and "CDK_OUTDIR" not in os.environ:
        outdir = str(REPO_ROOT / ".cache" / "cdk.out")
    app = App(context=values, outdir=outdir)

    def setting(key: str, default: Any) -> Any:
        value = app.node.try_get_context(key)
        return default if value is None else value

    stack = TorporStack(
        app,
        str(setting("stackName", "Torpor")),
        code=code,
        example_code=example_code,
        handler_function_name_prefix=str(setting("handlerFunctionNamePrefix", DEFAULT_HANDLER_FUNCTION_NAME_PREFIX)),
        worker_max_concurrency=int(setting("workerMaxConcurrency", 10)),
        timer_max_concurrency=int(setting("timerMaxConcurrency", 10)),
        wake_transport=str(setting("wakeTransport", "invoke")).lower(),
        log_level=str(setting("logLevel", "INFO")),
        store_shards=int(setting("storeShards", PRODUCTION_STORE_SHARDS)),
        tracing_active=str(setting("tracing", "PassThrough")) == "Active",
        with_example_handler=str(setting("exampleHandler", "true")).lower() != "false",
        request_identity_key_parameter=setting("requestIdentityKeyParameter", None),
        request_identity_key_secret_arn=setting("requestIdentityKeySecretArn", None),
        request_identity_key_kms_key_arn=setting("requestIdentityKeyKmsKeyArn", None),
        ingress_auth=str(setting("ingressAuth", "AWS_IAM")).upper(),
        jwt_issuer=setting("jwtIssuer", None),
        jwt_audience=_names(setting("jwtAudience", "")),
        alarm_email=setting("alarmEmail", None),
        handler_assume_role_arns=_names(setting("handlerAssumeRoleArns", "")),
        log_retention=_retention_days(int(setting("logRetentionDays", 30))),
        google_credential_config=_google_credential_config(setting("googleCredentialConfig", None)),
        ui_origins=_names(setting("uiOrigins", "")),
        subscription_queue_arn=setting("subscriptionQueueArn", None),
        subscription_sink=setting("subscriptionSink", None),
    )
    return app, stack


def _names(value: Any) -> list[str]:
    """A context value listing names: a JSON list (`cdk.json`) or comma-separated text (`-c key=a,b`)."""
    items = value if isinstance(value, list | tuple) else str(value).split(",")
    return [str(item).strip() for item in items if str(item).strip()]


_RETENTION_DAYS = dict(
    zip(
        (1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653),
        (
            "ONE_DAY", "THREE_DAYS", "FIVE_DAYS", "ONE_WEEK", "TWO_WEEKS", "ONE_MONTH", "TWO_MONTHS", "THREE_MONTHS",
            "FOUR_MONTHS", "FIVE_MONTHS", "SIX_MONTHS", "ONE_YEAR", "THIRTEEN_MONTHS", "EIGHTEEN_MONTHS", "TWO_YEARS",
            "THREE_YEARS", "FIVE_YEARS", "SIX_YEARS", "SEVEN_YEARS", "EIGHT_YEARS", "NINE_YEARS", "TEN_YEARS",
        ),
        strict=True,
    )
)  # fmt: skip
"""CloudWatch Logs' retention periods in days (the SAM parameter's `AllowedValues`), by `RetentionDays` name."""


def _retention_days(days: int) -> logs.RetentionDays:
    """`logRetentionDays` as CloudWatch Logs takes it.

    Raises:
        ValueError: `days` is not one of CloudWatch Logs' retention periods (the message lists them).
    """
    if days not in _RETENTION_DAYS:
        raise ValueError(f"logRetentionDays must be one of {sorted(_RETENTION_DAYS)}, got {days}")
    return getattr(logs.RetentionDays, _RETENTION_DAYS[days])  # type: ignore[no-any-return]


def _google_credential_config(value: Any) -> Mapping[str, object] | str | None:
    """`googleCredentialConfig`: the credential configuration's JSON text or base64 of it (as the SAM
    parameter takes it), or a JSON object given in `cdk.json`; None or "" for none."""
    if value is None or value == "":
        return None
    if isinstance(value, Mapping):
        return value
    text = str(value).strip()
    if not text.startswith("{"):
        text = base64.b64decode(text, validate=True).decode()
    return text


def main() -> None:
    """Synthesize the app (what `cdk synth` runs)."""
    app, _ = build_app(bundle=os.environ.get("TORPOR_CDK_BUNDLE", "1") != "0")
    app.synth()


if __name__ == "__main__":
    main()
