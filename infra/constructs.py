"""CDK constructs for Torpor on AWS: the control plane, and handler versions registered with it.

`TorporControlPlane` creates what `template.yaml` creates (the same properties, the same IAM):

| resource | what |
| --- | --- |
| DynamoDB table | `PK`/`SK`, GSIs `by_status_v2` and `by_expiry` (INCLUDE), TTL `expires_at`, on-demand, PITR |
| wake queue | standard SQS, SSE, visibility 6 x the worker's 900 s, to a dead-letter queue after 5 receives |
| timer queue | the same, for every timer's wake-up (delay messages, the schedules' target), its own mapping |
| schedules | an EventBridge Scheduler group, the role it sends to the timer queue with, a dead-letter queue |
| functions | ingress, admin, worker, sweeper, deploy hook (`adapters.aws.lambda_app.*`), arm64, Python 3.13 |
| HTTP APIs | ingress (`$default` route, `ingress_auth`: AWS_IAM, JWT or NONE), admin (`$default` route, AWS_IAM) |
| triggers | the worker's SQS event source mappings, one per queue (batches of 10, partial failures, a concurrency each), the sweeper's 1-minute rule |
| alarms | dead letters (both queues), paused invocations, worker/sweeper errors, throttles; an SNS topic |

Each function has its own role and log group, and its own DynamoDB statements (`table_statements`:
what its code paths use, no Scan and no table administration; ingress, worker and sweeper write
only invocation, timer and object partitions, the deploy hook only deployments and services, the
admin API what its routes write). The roles share managed policies, nothing broader:
`handler_invoke_policy` (`lambda:InvokeFunction` on this stack's handler functions, named with the
handler prefix, the stack's name and `_`; `sts:AssumeRole` on the roles given: ingress, admin,
worker, deploy hook) and `wake_up_policy` (`sqs:SendMessage` on the wake and timer queues,
`scheduler:CreateSchedule` in the group, `iam:PassRole` of the scheduler role: ingress, admin,
worker). The sweeper only sends to the two queues; the worker also consumes them. With a request
identity key (an SSM SecureString parameter or a Secrets Manager secret holding the PEM key Torpor
signs requests to deployments with), `request_identity_key_policy` lets the functions that call
deployments (all but the sweeper) read it.

`RegisteredHandler` registers a handler function's version as a Torpor deployment on each deploy
(a `Custom::TorporDeployment` served by the deploy hook function); `TorporSchedule` declares a
durable schedule (a `Custom::TorporSchedule`, served by the same function).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from aws_cdk import Aws, CustomResource, Duration, RemovalPolicy
from aws_cdk import aws_apigatewayv2 as apigwv2
from aws_cdk import aws_apigatewayv2_authorizers as apigwv2_authorizers
from aws_cdk import aws_apigatewayv2_integrations as apigwv2_integrations
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as events_targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as sns_subscriptions
from aws_cdk import aws_sqs as sqs
from constructs import Construct

__all__ = [
    "DEFAULT_HANDLER_FUNCTION_NAME_PREFIX",
    "HANDLERS",
    "INGRESS_AUTH_MODES",
    "RegisteredHandler",
    "TorporControlPlane",
    "TorporSchedule",
    "TorporSubscription",
    "logged_function",
]

DEFAULT_HANDLER_FUNCTION_NAME_PREFIX = "torpor-handler-"
PRODUCTION_STORE_SHARDS = 64
"""`TORPOR_STORE_SHARDS` of a deployed control plane: about 27,000 invocations/s of a mixed workload
before one DynamoDB partition key reaches 1,000 writes/s (bench/partitions.py)."""
"""Handler functions the control plane may invoke are those whose name starts with this."""

HANDLERS = {
    "ingress": "adapters.aws.lambda_app.ingress_handler",
    "admin": "adapters.aws.lambda_app.admin_handler",
    "worker": "adapters.aws.lambda_app.worker_handler",
    "sweeper": "adapters.aws.lambda_app.sweeper_handler",
    "deploy_hook": "adapters.aws.lambda_app.deploy_hook_handler",
}
"""The control plane's Lambda handlers, by function."""

INGRESS_AUTH_MODES = ("AWS_IAM", "JWT", "NONE")
"""Who may call the ingress: SigV4 (`execute-api:Invoke`), a JWT authorizer's bearer token, anyone."""

RUNTIME = lambda_.Runtime.PYTHON_3_13
ARCHITECTURE = lambda_.Architecture.ARM_64
MEMORY_MB = 512

HTTP_TIMEOUT = Duration.seconds(30)
"""Ingress and admin: API Gateway ends a request after 29 s (the ingress answers 202 before)."""
WORKER_TIMEOUT_S = 900
SWEEPER_TIMEOUT = Duration.seconds(60)
DEPLOY_HOOK_TIMEOUT = Duration.seconds(300)

WAKE_QUEUE_VISIBILITY_TIMEOUT = Duration.seconds(6 * WORKER_TIMEOUT_S)
"""Lambda asks for at least 6 x the function timeout on an SQS event source."""
WAKE_QUEUE_MAX_RECEIVES = 5
WAKE_TRANSPORTS = ("invoke", "sqs")
"""`wake_transport` values (`TORPOR_WAKE`, `adapters.aws.lambda_app.WAKE_TRANSPORTS`)."""

WORKER_BATCH_SIZE = 10
SWEEP_EVERY = Duration.minutes(1)

TABLE_READS = ("dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:Query")
TABLE_WRITES = ("dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:BatchWriteItem")
RUN_PARTITIONS = ("INV#*", "TIMER#*", "OBJ#*", "SKEYS#*", "CONFIG")
"""Partition keys (`dynamodb:LeadingKeys`) running invocations write: invocations, timers, objects and
workflows, the listing of keys with state (`SKEYS#{service}#{shard}`), and the table's shard count
(recorded by its first user)."""
SCHEDULE_PARTITION = "SCHED"
"""The partition of durable schedules, which the worker writes as it runs their ticks."""
SUBSCRIPTION_PARTITION = "SUB"
"""The partition of event subscriptions, which the admin API and the deploy hook write."""
REGISTRY_PARTITIONS = ("DEP", "SVC", "CONFIG")
"""Partition keys registration writes: deployments, services, the shard count."""
ADMIN_PARTITIONS = (*RUN_PARTITIONS, SCHEDULE_PARTITION)
"""Partition keys the admin API writes besides deployments and services: kill, cancel, pause, resume
and purge of invocations (their timers, the object keys and state they hold), state edits, durable
schedules, the shard count."""
CHECKPOINT_FENCE_ATTRIBUTES = ("PK", "SK", "epoch", "doorbell")
"""Attributes of a checkpoint's fence (`GetItem`): the key, and the two it reads (its
`ProjectionExpression`: `dynamodb:Attributes`)."""
CHECKPOINT_BATCH_ATTRIBUTES = ("PK", "SK", "entries", "epoch", "committed_at_ms")
"""Attributes of a checkpoint's journal batch (`PutItem`): its key and `BatchItem`'s fields."""


def handler_name_prefix(prefix: str, stack_name: str) -> str:
    """What the name of a handler function this stack's control plane may invoke starts with:
    `prefix`, the stack's name, then `_` (stack names have no `_`, so no other stack's functions
    match: `torpor-handler-prod_` is not a prefix of `torpor-handler-prod-eu_orders`)."""
    return f"{prefix}{stack_name}_"


ALARM_PERIOD = Duration.minutes(5)

STATUS_INDEX = "by_status_v2"
STATUS_INDEX_ATTRIBUTES = ("invocation_id", "service", "handler", "key", "status", "completion", "created_at_ms")
EXPIRY_INDEX = "by_expiry"
EXPIRY_INDEX_ATTRIBUTES = ("invocation_id", "journal_expires_at_ms", "retained_until")
TTL_ATTRIBUTE = "expires_at"
"""The table's indexes and TTL, as `adapters.aws.store_items.table_schema` has them (tests/infra compares)."""


def table_statements(table: dynamodb.ITable, kind: str) -> list[iam.PolicyStatement]:
    """The DynamoDB statements of one control-plane function (`kind` as in `HANDLERS`), from the
    `DynamoDBStore` operations its code paths use (docs/deploying.md, "Permissions").

    Every function reads items (`GetItem`, `BatchGetItem`, `Query` on the table). The ingress runs
    attempts and creates invocations, so it puts and updates items in `RUN_PARTITIONS`, and never
    deletes (its store expires what it drops and hands the removal of an expired invocation to the
    worker: `StoreFacts.may_delete`). The worker also deletes, with `BatchWriteItem` for a whole partition,
    in the same partitions; the sweeper does the same and also queries both indexes (overdue work,
    retention). The admin API writes what its routes write: any write in `ADMIN_PARTITIONS`
    (kill, cancel, pause, resume, purge, state, schedules) and puts and deletes of deployments and
    services (registration, service options), and lists invocations (`by_status_v2`); the deploy
    hook writes deployments and services only (`PutItem`, `DeleteItem`) and lists the invocations
    pinned to a deployment.

    Raises:
        KeyError: `kind` is not a control-plane function.
    """
    indexes = {
        "ingress": (),
        "worker": (),
        "sweeper": (STATUS_INDEX, EXPIRY_INDEX),
        "admin": (STATUS_INDEX,),
        "deploy_hook": (STATUS_INDEX,),
    }[kind]
    statements = [iam.PolicyStatement(actions=list(TABLE_READS), resources=[table.table_arn])]
    if indexes:
        statements.append(
            iam.PolicyStatement(
                actions=["dynamodb:Query"], resources=[f"{table.table_arn}/index/{name}" for name in indexes]
            )
        )
    if kind == "deploy_hook":  # registration, and the schedules stacks declare (TorporSchedule)
        partitions = (*REGISTRY_PARTITIONS, SCHEDULE_PARTITION, SUBSCRIPTION_PARTITION)  # and TorporSubscription
        writes = ["dynamodb:PutItem", "dynamodb:DeleteItem"]
    elif kind == "ingress":
        writes, partitions = ["dynamodb:PutItem", "dynamodb:UpdateItem"], RUN_PARTITIONS
    elif kind == "admin":
        writes, partitions = list(TABLE_WRITES), ADMIN_PARTITIONS
    else:
        writes, partitions = list(TABLE_WRITES), RUN_PARTITIONS
        if kind == "worker":
            partitions = (*partitions, SCHEDULE_PARTITION)  # a schedule's tick moves its next tick
    conditions = {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": list(partitions)}}
    statements.append(iam.PolicyStatement(actions=writes, resources=[table.table_arn], conditions=conditions))
    if kind == "admin":  # registration and service options: puts and deletes of deployments and services
        statements.append(
            iam.PolicyStatement(
                actions=["dynamodb:PutItem", "dynamodb:DeleteItem"],
                resources=[table.table_arn],
                conditions={
                    "ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["DEP", "SVC", SUBSCRIPTION_PARTITION]}
                },
            )
        )
    return statements


BLOB_ACTIONS = {
    "ingress": ("s3:GetObject", "s3:PutObject"),
    "admin": ("s3:GetObject", "s3:PutObject", "s3:DeleteObject"),
    "worker": ("s3:GetObject", "s3:PutObject", "s3:DeleteObject"),
    "sweeper": ("s3:GetObject", "s3:PutObject", "s3:DeleteObject"),
    "deploy_hook": ("s3:GetObject",),
}
"""What each control-plane function does with the blob bucket's objects (`adapters.aws.blobs`): every
one reads the large values of the items it reads; the ingress writes inputs, never deletes; the
functions that remove invocations delete their objects (by prefix: `s3:ListBucket` on the bucket)."""


def blob_statements(bucket: s3.IBucket, kind: str) -> list[iam.PolicyStatement]:
    """The S3 statements of one control-plane function (`kind` as in `HANDLERS`): `BLOB_ACTIONS` on the
    bucket's objects, and `s3:ListBucket` on the bucket for the ones that delete."""
    actions = BLOB_ACTIONS[kind]
    statements = [iam.PolicyStatement(actions=list(actions), resources=[bucket.arn_for_objects("*")])]
    if "s3:DeleteObject" in actions:
        statements.append(iam.PolicyStatement(actions=["s3:ListBucket"], resources=[bucket.bucket_arn]))
    return statements


def checkpoint_statements(table: dynamodb.ITable) -> list[iam.PolicyStatement]:
    """What a handler function with in-process checkpoints (`adapters.aws.checkpoints.handler`) needs
    of Torpor's table, and nothing more: `dynamodb:GetItem` (the read of the invocation's epoch
    and doorbell that fences each commit) and `dynamodb:PutItem` (the conditional put of a journal
    batch), on the table itself (no index), in invocation partitions (`INV#...`) only, each with
    only the attributes it names (`dynamodb:Attributes`: `CHECKPOINT_FENCE_ATTRIBUTES`,
    `CHECKPOINT_BATCH_ATTRIBUTES`; the read with a projection, `dynamodb:Select`) and no values
    returned: the function cannot set an invocation's status, output, input or deployment, nor read
    anything but epochs and doorbells (IAM conditions cannot say which invocation: it can still
    fence on or append to any invocation's journal)."""

    def only(action: str, attributes: tuple[str, ...], extra: dict[str, str]) -> iam.PolicyStatement:
        return iam.PolicyStatement(
            actions=[action],
            resources=[table.table_arn],
            conditions={
                "ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["INV#*"]},
                "ForAllValues:StringEquals": {"dynamodb:Attributes": list(attributes)},
                "StringEqualsIfExists": extra,
            },
        )

    return [
        only("dynamodb:GetItem", CHECKPOINT_FENCE_ATTRIBUTES, {"dynamodb:Select": "SPECIFIC_ATTRIBUTES"}),
        only("dynamodb:PutItem", CHECKPOINT_BATCH_ATTRIBUTES, {"dynamodb:ReturnValues": "NONE"}),
    ]


def logged_function(
    scope: Construct,
    id: str,
    *,
    code: lambda_.Code,
    handler: str,
    timeout: Duration,
    log_retention: logs.RetentionDays,
    managed_policies: Sequence[iam.IManagedPolicy] = (),
    statements: Sequence[iam.PolicyStatement] = (),
    environment: Mapping[str, str] | None = None,
    description: str | None = None,
    function_name: str | None = None,
    memory_size: int = MEMORY_MB,
    runtime: lambda_.Runtime = RUNTIME,
    tracing: lambda_.Tracing | None = None,
    recursive_loop: lambda_.RecursiveLoop | None = None,
) -> lambda_.Function:
    """An arm64 Python function with a role of its own that may only write to its own log group.

    `{id}LogGroup` and `{id}Role` are created beside `{id}`: the role gets `managed_policies`,
    an inline `logs` policy (`logs:CreateLogStream`, `logs:PutLogEvents` on the log group) and an
    inline `permissions` policy with `statements` if any. No AWS managed policy is attached.

    Args:
        scope: Where the three constructs go.
        id: The function's construct id.
        code: The function's code.
        handler: `module.attribute` of the handler.
        timeout: The function timeout.
        log_retention: How long the log group keeps logs.
        managed_policies: Customer managed policies to attach to the role.
        statements: Further permissions of this function alone.
        environment: Environment variables.
        description: The function's description.
        function_name: An explicit name (a handler the control plane invokes must carry its prefix).
        memory_size: Memory in MB.
        runtime: The Lambda runtime (python3.13, the control plane's, unless given).
        tracing: X-Ray tracing; `Tracing.ACTIVE` adds `xray:PutTraceSegments` and
            `xray:PutTelemetryRecords` on `*` to the role (X-Ray has no resource-level permissions).
            None: Lambda's default (PassThrough), and no X-Ray permission.
        recursive_loop: Lambda's recursive loop detection (`ALLOW` for the worker, whose wake-ups
            invoke it again by design); None: Lambda's default (terminate after 16 in a chain).
    """
    log_group = logs.LogGroup(scope, f"{id}LogGroup", retention=log_retention, removal_policy=RemovalPolicy.DESTROY)
    inline = {
        "logs": iam.PolicyDocument(
            statements=[
                iam.PolicyStatement(
                    actions=["logs:CreateLogStream", "logs:PutLogEvents"], resources=[log_group.log_group_arn]
                )
            ]
        )
    }
    if statements:
        inline["permissions"] = iam.PolicyDocument(statements=list(statements))
    role = iam.Role(
        scope,
        f"{id}Role",
        assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
        managed_policies=list(managed_policies),
        inline_policies=inline,
    )
    return lambda_.Function(
        scope,
        id,
        code=code,
        handler=handler,
        runtime=runtime,
        architecture=ARCHITECTURE,
        memory_size=memory_size,
        timeout=timeout,
        role=role,
        log_group=log_group,
        environment=dict(environment or {}),
        description=description,
        function_name=function_name,
        tracing=tracing,
        recursive_loop=recursive_loop,
    )


class TorporControlPlane(Construct):
    """Torpor's control plane on AWS (see the module doc for what it creates).

    Attributes:
        table: The DynamoDB table (`DynamoDBStore`'s layout).
        wake_queue: The standard SQS queue of wake-ups now (starts, hand-overs, completions).
        timer_queue: The standard SQS queue of every timer's wake-up, with its own event source
            mapping, so due timers never wait behind a burst of starts.
        wake_dead_letter_queue: Where wake-ups of either queue go after 5 failed receives.
        schedule_dead_letter_queue: Where EventBridge Scheduler puts wake-ups it could not deliver.
        schedule_group: The EventBridge Scheduler group of Torpor's one-time schedules (L1).
        scheduler_role: The role EventBridge Scheduler sends to the timer queue with.
        handler_invoke_policy: `lambda:InvokeFunction` on handler functions (see `allow_invoke`).
        wake_up_policy: Arm wake-ups: SQS messages, schedules in the group, the scheduler role.
        request_identity_key_policy: Read the request identity key (parameter or secret, and its
            KMS key if given); None without one.
        ingress_function, admin_function, worker_function, sweeper_function, deploy_hook_function:
            The control plane's functions.
        ingress_api: The ingress HTTP API (`ingress_auth` decides who may call it).
        alarm_topic: The SNS topic every alarm notifies (in alarm and back to OK).
        alarms: The CloudWatch alarms by name (`WakeDeadLetters`, `ScheduleDeadLetters`,
            `PausedInvocations`, `WorkerErrors`, `SweeperErrors`, `IngressThrottles`, `WorkerThrottles`).
        admin_api: The admin HTTP API (AWS_IAM: SigV4-signed requests with `execute-api:Invoke`).
        ingress_url: Base URL of the ingress.
        admin_url: Base URL of the admin API.
        environment: The environment variables every control-plane function gets.

    Args:
        scope: The parent construct.
        id: This construct's id.
        code: The code of the functions (the repository's packages with `requirements.txt`
            installed); `infra.bundling.torpor_code()` if None.
        handler_function_name_prefix: The control plane may invoke the functions of this account
            and region whose name starts with this, the stack's name and `_` (`handler_name_prefix`,
            e.g. `torpor-handler-mystack_orders`), and those given to `allow_invoke`.
        handler_assume_role_arns: Roles the control plane may assume to invoke handlers in other
            accounts (deployments registered with `assume_role_arn`).
        wake_transport: How a wake-up now and a long wait's schedule reach the worker (`TORPOR_WAKE`):
            `invoke` (an asynchronous Invoke of the worker, one Lambda request; its concurrency is
            bounded by the worker's reserved concurrency, if set) or `sqs` (a message on the wake
            queue: send, receive and delete, batched under load; bounded by `worker_max_concurrency`).
        worker_max_concurrency: Most worker instances the wake queue's event source runs at once (2 to 1000).
        timer_max_concurrency: Most worker instances the timer queue's event source runs at once
            (2 to 1000), on top of `worker_max_concurrency`.
        log_level: `LOG_LEVEL` of the functions.
        store_shards: `TORPOR_STORE_SHARDS` of the functions (1 to 1024): partitions for timers and the
            status index, for a new table (a table keeps the count it was first used with).
        log_retention: How long the functions' log groups keep logs.
        tracing_active: X-Ray tracing of the functions (powertools Tracer): a trace per request,
            billed by X-Ray; the roles may then write to X-Ray (on `*`: it has no resource ARNs).
        table_removal_policy: What deleting the stack does to the table and the blob bucket (kept by
            default).
        blob_expiration_days: Days after which the blob bucket's lifecycle deletes an invocation's
            large values (`INV#…` objects; the sweep deletes them with the invocation, this catches a
            crash's leftovers): keep it above the longest retention.
        request_identity_key_parameter: Name of an SSM SecureString parameter holding the PEM
            Ed25519 key every request to deployments is signed with (README "Signed requests").
        request_identity_key_secret_arn: ARN of a Secrets Manager secret holding it, instead.
        request_identity_key_kms_key_arn: The customer managed KMS key that parameter or secret is
            encrypted with (kms:Decrypt through SSM or Secrets Manager only); None: an AWS managed key.
        google_credential_config: For Cloud Run deployments: the workload identity federation
            credential configuration (`gcloud iam workload-identity-pools create-cred-config … --aws
            --service-account=SA`, as a dict or its JSON text), given to every function as
            `TORPOR_GOOGLE_CREDENTIAL_CONFIG` (docs/cloud-run.md); None: no Google credentials.
        ui_origins: Origins whose pages may call the ingress from a browser (CORS), e.g.
            `http://127.0.0.1:9071` for `torpor ui --admin-url`'s playground (`TORPOR_UI_ORIGINS`);
            browsers can call an ingress with `ingress_auth` NONE only.
        ingress_auth: Who may call the ingress: `AWS_IAM` (SigV4 with `execute-api:Invoke`, see
            `grant_ingress_access`), `JWT` (API Gateway's JWT authorizer with `jwt_issuer` and
            `jwt_audience`, e.g. a Cognito user pool) or `NONE` (anyone: public demos). The ingress
            function also refuses events not authorized so (`TORPOR_INGRESS_AUTH`).
        jwt_issuer: With `JWT`: the tokens' issuer URL (`iss`), whose JWKS API Gateway reads.
        jwt_audience: With `JWT`: the audiences a token must name one of (`aud`, or a Cognito access
            token's `client_id`).
        alarm_email: An address subscribed to the alarm topic (it must confirm); None: no subscriber.

    Raises:
        ValueError: An option out of range, both request identity key sources, an unknown
            `ingress_auth`, or `JWT` without issuer and audience.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        code: lambda_.Code | None = None,
        handler_function_name_prefix: str = DEFAULT_HANDLER_FUNCTION_NAME_PREFIX,
        handler_assume_role_arns: Sequence[str] = (),
        worker_max_concurrency: int = 10,
        timer_max_concurrency: int = 10,
        wake_transport: str = "invoke",
        log_level: str = "INFO",
        store_shards: int = PRODUCTION_STORE_SHARDS,
        log_retention: logs.RetentionDays = logs.RetentionDays.ONE_MONTH,
        tracing_active: bool = False,
        table_removal_policy: RemovalPolicy = RemovalPolicy.RETAIN,
        blob_expiration_days: int = 400,
        request_identity_key_parameter: str | None = None,
        request_identity_key_secret_arn: str | None = None,
        request_identity_key_kms_key_arn: str | None = None,
        google_credential_config: Mapping[str, object] | str | None = None,
        ingress_auth: str = "AWS_IAM",
        ui_origins: Sequence[str] = (),
        jwt_issuer: str | None = None,
        jwt_audience: Sequence[str] = (),
        alarm_email: str | None = None,
    ) -> None:
        super().__init__(scope, id)
        if ingress_auth not in INGRESS_AUTH_MODES:
            raise ValueError(f"ingress_auth must be one of {', '.join(INGRESS_AUTH_MODES)}, got {ingress_auth!r}")
        if ingress_auth == "JWT" and not (jwt_issuer and list(jwt_audience)):
            raise ValueError("ingress_auth JWT needs jwt_issuer and jwt_audience")
        if request_identity_key_parameter and request_identity_key_secret_arn:
            raise ValueError("give request_identity_key_parameter or request_identity_key_secret_arn, not both")
        if wake_transport not in WAKE_TRANSPORTS:
            raise ValueError(f"wake_transport must be one of {', '.join(WAKE_TRANSPORTS)}, got {wake_transport!r}")
        if not 2 <= worker_max_concurrency <= 1000:
            raise ValueError(f"worker_max_concurrency must be between 2 and 1000, got {worker_max_concurrency}")
        if not 2 <= timer_max_concurrency <= 1000:
            raise ValueError(f"timer_max_concurrency must be between 2 and 1000, got {timer_max_concurrency}")
        if not 1 <= store_shards <= 1024:
            raise ValueError(f"store_shards must be between 1 and 1024, got {store_shards}")
        if code is None:
            from infra.bundling import torpor_code

            code = torpor_code()
        partition, region, account = Aws.PARTITION, Aws.REGION, Aws.ACCOUNT_ID

        # --- state ---------------------------------------------------------------------------------
        self.table = dynamodb.Table(
            self,
            "Table",
            partition_key=dynamodb.Attribute(name="PK", type=dynamodb.AttributeType.STRING),
            sort_key=dynamodb.Attribute(name="SK", type=dynamodb.AttributeType.STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            time_to_live_attribute=TTL_ATTRIBUTE,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            removal_policy=table_removal_policy,
        )
        self.blob_bucket = s3.Bucket(
            self,
            "BlobBucket",
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            lifecycle_rules=[
                s3.LifecycleRule(id="invocations", prefix="INV#", expiration=Duration.days(blob_expiration_days)),
                s3.LifecycleRule(id="uploads", abort_incomplete_multipart_upload_after=Duration.days(1)),
            ],
            removal_policy=table_removal_policy,
        )
        for index_name, hash_key, range_key, projected in (
            (STATUS_INDEX, "status_key", "status_order", STATUS_INDEX_ATTRIBUTES),
            (EXPIRY_INDEX, "expiry_key", "expiry_order", EXPIRY_INDEX_ATTRIBUTES),
        ):
            self.table.add_global_secondary_index(
                index_name=index_name,
                partition_key=dynamodb.Attribute(name=hash_key, type=dynamodb.AttributeType.STRING),
                sort_key=dynamodb.Attribute(name=range_key, type=dynamodb.AttributeType.STRING),
                projection_type=dynamodb.ProjectionType.INCLUDE,
                non_key_attributes=list(projected),
            )

        # --- wake-ups ------------------------------------------------------------------------------
        self.wake_dead_letter_queue = sqs.Queue(
            self,
            "WakeDeadLetterQueue",
            retention_period=Duration.days(14),
            encryption=sqs.QueueEncryption.SQS_MANAGED,
        )
        self.wake_queue = sqs.Queue(
            self,
            "WakeQueue",
            visibility_timeout=WAKE_QUEUE_VISIBILITY_TIMEOUT,
            retention_period=Duration.days(4),
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            dead_letter_queue=sqs.DeadLetterQueue(
                max_receive_count=WAKE_QUEUE_MAX_RECEIVES, queue=self.wake_dead_letter_queue
            ),
        )
        self.timer_queue = sqs.Queue(
            self,
            "TimerQueue",
            visibility_timeout=WAKE_QUEUE_VISIBILITY_TIMEOUT,
            retention_period=Duration.days(4),
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            dead_letter_queue=sqs.DeadLetterQueue(
                max_receive_count=WAKE_QUEUE_MAX_RECEIVES, queue=self.wake_dead_letter_queue
            ),
        )
        self.schedule_dead_letter_queue = sqs.Queue(
            self,
            "ScheduleDeadLetterQueue",
            retention_period=Duration.days(14),
            encryption=sqs.QueueEncryption.SQS_MANAGED,
        )
        self.schedule_group = scheduler.CfnScheduleGroup(self, "ScheduleGroup")
        group_name = self.schedule_group.ref
        self.scheduler_role = iam.Role(
            self,
            "SchedulerRole",
            description="Assumed by EventBridge Scheduler to deliver Torpor's long wake-ups to the timer queue.",
            assumed_by=iam.ServicePrincipal(
                "scheduler.amazonaws.com",
                conditions={
                    "StringEquals": {
                        "aws:SourceAccount": account,
                        "aws:SourceArn": f"arn:{partition}:scheduler:{region}:{account}:schedule-group/{group_name}",
                    }
                },
            ),
            inline_policies={
                "send-wake-ups": iam.PolicyDocument(
                    statements=[
                        iam.PolicyStatement(
                            actions=["sqs:SendMessage"],
                            resources=[self.timer_queue.queue_arn, self.schedule_dead_letter_queue.queue_arn],
                        )
                    ]
                )
            },
        )

        # --- least privilege -----------------------------------------------------------------------
        self.handler_name_prefix = handler_name_prefix(handler_function_name_prefix, Aws.STACK_NAME)
        """What the names of the handler functions it may invoke start with: the prefix, the stack's
        name and `_` (`handler_name_prefix`), e.g. `torpor-handler-mystack_`."""
        invoke_statements = [
            iam.PolicyStatement(
                actions=["lambda:InvokeFunction"],
                resources=[f"arn:{partition}:lambda:{region}:{account}:function:{self.handler_name_prefix}*"],
            )
        ]
        if handler_assume_role_arns:
            invoke_statements.append(
                iam.PolicyStatement(actions=["sts:AssumeRole"], resources=list(handler_assume_role_arns))
            )
        self.handler_invoke_policy = iam.ManagedPolicy(
            self,
            "HandlerInvokePolicy",
            description="Invoke handler functions (name prefix), and assume the roles given for other accounts.",
            statements=invoke_statements,
        )
        self.wake_up_policy = iam.ManagedPolicy(
            self,
            "WakeUpPolicy",
            description="Arm wake-ups: SQS delay messages, EventBridge Scheduler one-time schedules in Torpor's group.",
            statements=[
                iam.PolicyStatement(actions=["sqs:SendMessage"], resources=self._queue_arns()),
                iam.PolicyStatement(  # schedules delete themselves once fired (ActionAfterCompletion DELETE)
                    actions=["scheduler:CreateSchedule"],
                    resources=[f"arn:{partition}:scheduler:{region}:{account}:schedule/{group_name}/*"],
                ),
                iam.PolicyStatement(
                    actions=["iam:PassRole"],
                    resources=[self.scheduler_role.role_arn],
                    conditions={"StringEquals": {"iam:PassedToService": "scheduler.amazonaws.com"}},
                ),
            ],
        )

        key_statements = []
        if request_identity_key_parameter:
            parameter = request_identity_key_parameter.lstrip("/")
            key_statements.append(
                iam.PolicyStatement(
                    actions=["ssm:GetParameter"],
                    resources=[f"arn:{partition}:ssm:{region}:{account}:parameter/{parameter}"],
                )
            )
        if request_identity_key_secret_arn:
            key_statements.append(
                iam.PolicyStatement(
                    actions=["secretsmanager:GetSecretValue"], resources=[request_identity_key_secret_arn]
                )
            )
        if key_statements and request_identity_key_kms_key_arn:
            key_statements.append(
                iam.PolicyStatement(
                    actions=["kms:Decrypt"],
                    resources=[request_identity_key_kms_key_arn],
                    conditions={
                        "StringEquals": {
                            "kms:ViaService": [f"ssm.{region}.amazonaws.com", f"secretsmanager.{region}.amazonaws.com"]
                        }
                    },
                )
            )
        self.request_identity_key_policy: iam.ManagedPolicy | None = None
        if key_statements:
            self.request_identity_key_policy = iam.ManagedPolicy(
                self,
                "RequestIdentityKeyPolicy",
                description="Read the request identity key (once per cold start), for the functions that call "
                "deployments.",
                statements=key_statements,
            )

        # --- functions -----------------------------------------------------------------------------
        self.environment = {
            "TORPOR_TABLE": self.table.table_name,
            "TORPOR_BLOB_BUCKET": self.blob_bucket.bucket_name,
            "TORPOR_WAKE_QUEUE_URL": self.wake_queue.queue_url,
            "TORPOR_WAKE_QUEUE_ARN": self.wake_queue.queue_arn,
            "TORPOR_TIMER_QUEUE_URL": self.timer_queue.queue_url,
            "TORPOR_TIMER_QUEUE_ARN": self.timer_queue.queue_arn,
            "TORPOR_SCHEDULE_GROUP": group_name,
            "TORPOR_SCHEDULER_ROLE_ARN": self.scheduler_role.role_arn,
            "TORPOR_SCHEDULE_DLQ_ARN": self.schedule_dead_letter_queue.queue_arn,
            "TORPOR_WAKE": wake_transport,
            "TORPOR_REQUEST_IDENTITY_KEY_SSM_PARAMETER": request_identity_key_parameter or "",
            "TORPOR_REQUEST_IDENTITY_KEY_SECRET_ARN": request_identity_key_secret_arn or "",
            "POWERTOOLS_SERVICE_NAME": "torpor",
            "POWERTOOLS_METRICS_NAMESPACE": "Torpor",
            "LOG_LEVEL": log_level,
            "TORPOR_STORE_SHARDS": str(store_shards),
            # Cloud Run deployments: Google ID tokens from the functions' AWS roles ("": none)
            "TORPOR_GOOGLE_CREDENTIAL_CONFIG": (
                json.dumps(google_credential_config, separators=(",", ":"))
                if isinstance(google_credential_config, Mapping)
                else google_credential_config or ""
            ),
        }
        # every function but the sweeper calls deployments (discovery or invoke), so reads the key
        key_policy = [self.request_identity_key_policy] if self.request_identity_key_policy else []
        runs = [self.handler_invoke_policy, self.wake_up_policy, *key_policy]

        def function(
            id: str,
            kind: str,
            timeout: Duration,
            description: str,
            policies: Sequence[iam.IManagedPolicy] = runs,
            statements: Sequence[iam.PolicyStatement] = (),
            environment: Mapping[str, str] | None = None,
            recursive_loop: lambda_.RecursiveLoop | None = None,
        ) -> lambda_.Function:
            return logged_function(
                self,
                id,
                code=code,
                handler=HANDLERS[kind],
                timeout=timeout,
                log_retention=log_retention,
                managed_policies=policies,
                statements=[
                    *table_statements(self.table, kind),
                    *blob_statements(self.blob_bucket, kind),
                    *statements,
                ],
                environment={**self.environment, **(environment or {})},
                description=description,
                tracing=lambda_.Tracing.ACTIVE if tracing_active else None,
                recursive_loop=recursive_loop,
            )

        self.ingress_function = function(
            "IngressFunction",
            "ingress",
            HTTP_TIMEOUT,
            "Torpor ingress (API Gateway HTTP API v2 events)",
            # it refuses events not authorized so; CORS: the pages that may call it
            environment={"TORPOR_INGRESS_AUTH": ingress_auth, "TORPOR_UI_ORIGINS": ",".join(ui_origins)},
        )
        self.admin_function = function(
            "AdminFunction",
            "admin",
            HTTP_TIMEOUT,
            "Torpor admin API (API Gateway HTTP API v2 events, IAM-authorized)",
            # durable schedules: pause/resume update, delete removes their recurring EventBridge schedule
            # (created through the wake-up policy's CreateSchedule and PassRole)
            statements=[
                iam.PolicyStatement(
                    actions=["scheduler:UpdateSchedule", "scheduler:DeleteSchedule"],
                    resources=[f"arn:{partition}:scheduler:{region}:{account}:schedule/{group_name}/torpor-schedule-*"],
                )
            ],
        )
        self.worker_function = function(
            "WorkerFunction",
            "worker",
            Duration.seconds(WORKER_TIMEOUT_S),
            "Torpor worker (wake-ups by asynchronous invoke and SQS, partial batch failures)",
            statements=[
                iam.PolicyStatement(
                    actions=["sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes"],
                    resources=self._queue_arns(),
                )
            ],
            # its wake-ups invoke it again (and its timers come back through SQS): a chain of more
            # than 16 is a long workflow, not a runaway loop
            recursive_loop=lambda_.RecursiveLoop.ALLOW,
        )
        # The sweeper wakes invocations (due now or overdue: SQS only), invokes no handler, reads no key.
        self.sweeper_function = function(
            "SweeperFunction",
            "sweeper",
            SWEEPER_TIMEOUT,
            "Torpor sweeper (the safety net for lost wake-ups, every minute)",
            policies=(),
            statements=[iam.PolicyStatement(actions=["sqs:SendMessage"], resources=self._queue_arns())],
            environment={
                "TORPOR_REQUEST_IDENTITY_KEY_SSM_PARAMETER": "",
                "TORPOR_REQUEST_IDENTITY_KEY_SECRET_ARN": "",
                "TORPOR_GOOGLE_CREDENTIAL_CONFIG": "",
            },
        )
        # Registration runs discovery against the handler and writes the registry: no wake-ups. The
        # schedules stacks declare (TorporSchedule) are stored and get their recurring EventBridge schedule.
        self.deploy_hook_function = function(
            "DeployHookFunction",
            "deploy_hook",
            DEPLOY_HOOK_TIMEOUT,
            "Torpor deploy hook (CloudFormation custom resources Custom::TorporDeployment, Custom::TorporSchedule)",
            policies=[self.handler_invoke_policy, *key_policy],
            statements=[
                iam.PolicyStatement(
                    actions=["scheduler:CreateSchedule", "scheduler:UpdateSchedule", "scheduler:DeleteSchedule"],
                    resources=[f"arn:{partition}:scheduler:{region}:{account}:schedule/{group_name}/torpor-schedule-*"],
                ),
                iam.PolicyStatement(
                    actions=["iam:PassRole"],
                    resources=[self.scheduler_role.role_arn],
                    conditions={"StringEquals": {"iam:PassedToService": "scheduler.amazonaws.com"}},
                ),
            ],
        )

        # Wake-ups as asynchronous invokes of the worker (`wake_transport` invoke) and the schedules'
        # target: every function that wakes invocations (the worker takes its own ARN from its Lambda
        # context) and EventBridge Scheduler may invoke it; a policy of its own, so that the worker's
        # role need not depend on the worker.
        worker_arn = self.worker_function.function_arn
        for woken_by in (self.ingress_function, self.admin_function, self.sweeper_function, self.deploy_hook_function):
            woken_by.add_environment("TORPOR_WAKE_FUNCTION", worker_arn)
        self.wake_invoke_policy = iam.Policy(
            self,
            "WakeInvokePolicy",
            policy_name="invoke-worker",
            statements=[iam.PolicyStatement(actions=["lambda:InvokeFunction"], resources=[worker_arn])],
        )
        for role in (
            self.ingress_function.role,
            self.admin_function.role,
            self.worker_function.role,
            self.sweeper_function.role,
            self.scheduler_role,
        ):
            assert role is not None
            self.wake_invoke_policy.attach_to_role(role)

        # --- triggers ------------------------------------------------------------------------------
        ingress_authorizer: apigwv2.IHttpRouteAuthorizer | None = None
        if ingress_auth == "AWS_IAM":
            ingress_authorizer = apigwv2_authorizers.HttpIamAuthorizer()
        elif ingress_auth == "JWT":
            ingress_authorizer = apigwv2_authorizers.HttpJwtAuthorizer(
                "IngressJwt", str(jwt_issuer), jwt_audience=list(jwt_audience), authorizer_name="ingress-jwt"
            )
        self.ingress_api = apigwv2.HttpApi(
            self,
            "IngressApi",
            description="Torpor ingress (Restate's ingress API)",
            default_authorizer=ingress_authorizer,
            default_integration=apigwv2_integrations.HttpLambdaIntegration(
                "IngressIntegration",
                self.ingress_function,
                payload_format_version=apigwv2.PayloadFormatVersion.VERSION_2_0,
            ),
        )
        self.admin_api = apigwv2.HttpApi(
            self,
            "AdminApi",
            description="Torpor admin API (SigV4-signed requests only)",
            default_authorizer=apigwv2_authorizers.HttpIamAuthorizer(),
            default_integration=apigwv2_integrations.HttpLambdaIntegration(
                "AdminIntegration",
                self.admin_function,
                payload_format_version=apigwv2.PayloadFormatVersion.VERSION_2_0,
            ),
        )
        self.ingress_url = self.ingress_api.api_endpoint
        self.admin_url = self.admin_api.api_endpoint
        self.admin_function.add_environment("TORPOR_INGRESS_URL", self.ingress_url)  # the web UI's playground

        lambda_.EventSourceMapping(
            self,
            "WorkerWakeUps",
            target=self.worker_function,
            event_source_arn=self.wake_queue.queue_arn,
            batch_size=WORKER_BATCH_SIZE,
            max_batching_window=Duration.seconds(0),
            report_batch_item_failures=True,
            max_concurrency=worker_max_concurrency,
        )
        lambda_.EventSourceMapping(
            self,
            "WorkerTimers",
            target=self.worker_function,
            event_source_arn=self.timer_queue.queue_arn,
            batch_size=WORKER_BATCH_SIZE,
            max_batching_window=Duration.seconds(0),
            report_batch_item_failures=True,
            max_concurrency=timer_max_concurrency,
        )
        events.Rule(
            self,
            "SweeperSchedule",
            description="Torpor sweep, every minute",
            schedule=events.Schedule.rate(SWEEP_EVERY),
            targets=[events_targets.LambdaFunction(self.sweeper_function)],
        )

        # --- alarms (docs/deploying.md, "Runbook") ---------------------------------------------------
        self.alarm_topic = sns.Topic(self, "AlarmTopic", display_name="Torpor alarms")
        if alarm_email:
            self.alarm_topic.add_subscription(sns_subscriptions.EmailSubscription(alarm_email))
        paused = cloudwatch.Metric(
            namespace=self.environment["POWERTOOLS_METRICS_NAMESPACE"],
            metric_name="invocations_paused",
            dimensions_map={"service": self.environment["POWERTOOLS_SERVICE_NAME"]},
            statistic="Sum",
            period=ALARM_PERIOD,
        )

        def dead_letters(queue: sqs.Queue) -> cloudwatch.IMetric:
            return queue.metric_approximate_number_of_messages_visible(statistic="Maximum", period=ALARM_PERIOD)

        def of(function: lambda_.Function, metric: str) -> cloudwatch.IMetric:
            return function.metric(metric, statistic="Sum", period=ALARM_PERIOD)

        watched = {
            "WakeDeadLetters": (
                dead_letters(self.wake_dead_letter_queue),
                "Wake-ups in the dead-letter queue: the worker failed on them 5 times. Their invocations wait "
                "until the sweeper's next pass or a redrive.",
            ),
            "ScheduleDeadLetters": (
                dead_letters(self.schedule_dead_letter_queue),
                "EventBridge Scheduler could not deliver long wake-ups to the wake queue; the sweeper wakes "
                "their invocations when their timers are overdue.",
            ),
            "PausedInvocations": (
                paused,
                "Invocations were paused after using up their retry policy: they wait for a person to resume "
                "or kill them (torpor invocations list --status paused).",
            ),
            "WorkerErrors": (
                of(self.worker_function, "Errors"),
                "The worker function failed: a crash, a timeout, or a batch whose every wake-up failed (a "
                "handler's own errors are retried inside an invocation and do not count). The messages are "
                "received again.",
            ),
            "SweeperErrors": (
                of(self.sweeper_function, "Errors"),
                "The sweeper function failed: lost wake-ups and retention are not being repaired.",
            ),
            "IngressThrottles": (
                of(self.ingress_function, "Throttles"),
                "Lambda throttled the ingress function: callers got 429/503 (raise the account's concurrency).",
            ),
            "WorkerThrottles": (
                of(self.worker_function, "Throttles"),
                "Lambda throttled the worker function: wake-ups wait on the queue (raise concurrency or "
                "WorkerMaxConcurrency).",
            ),
        }
        self.alarms: dict[str, cloudwatch.Alarm] = {}
        action = cloudwatch_actions.SnsAction(self.alarm_topic)
        for name, (metric, description) in watched.items():
            alarm = cloudwatch.Alarm(
                self,
                f"{name}Alarm",
                metric=metric,
                threshold=0,
                comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
                evaluation_periods=1,
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
                alarm_description=f"{description} Runbook: docs/deploying.md.",
            )
            alarm.add_alarm_action(action)
            alarm.add_ok_action(action)
            self.alarms[name] = alarm

    def _queue_arns(self) -> list[str]:
        """The ARNs of the two queues wake-ups are sent to: the wake queue's, the timer queue's."""
        return [self.wake_queue.queue_arn, self.timer_queue.queue_arn]

    def allow_invoke(self, function: lambda_.IFunction) -> None:
        """Let the control plane invoke `function` (any version or alias) whatever its name.

        Adds the function's ARN to `handler_invoke_policy`. The policy then depends on the
        function: a function whose own properties refer back to the control plane (its URLs, say)
        would make a cycle; name such a function with the handler prefix instead.
        """
        self.handler_invoke_policy.add_statements(
            iam.PolicyStatement(
                actions=["lambda:InvokeFunction"], resources=[function.function_arn, f"{function.function_arn}:*"]
            )
        )

    def grant_ingress_access(self, grantee: iam.IGrantable) -> iam.Grant:
        """Allow `grantee` to call the ingress (`execute-api:Invoke` on every route of it): what
        `ingress_auth="AWS_IAM"` asks of a caller."""
        return iam.Grant.add_to_principal(
            grantee=grantee,
            actions=["execute-api:Invoke"],
            resource_arns=[self.ingress_api.arn_for_execute_api()],
        )

    def grant_admin_access(self, grantee: iam.IGrantable) -> iam.Grant:
        """Allow `grantee` to call the admin API (`execute-api:Invoke` on every route of it)."""
        return iam.Grant.add_to_principal(
            grantee=grantee,
            actions=["execute-api:Invoke"],
            resource_arns=[self.admin_api.arn_for_execute_api()],
        )


class RegisteredHandler(Construct):
    """A handler function version registered as a Torpor deployment whenever the stack deploys it.

    A `Custom::TorporDeployment` resource served by the control plane's deploy hook: Create and
    Update register `FunctionVersionArn` (a new version is a new deployment; invocations already
    running stay pinned to theirs), Delete removes the deployment unless invocations are still
    pinned to it. The function must be one the control plane may invoke: named with the handler
    prefix, or passed to `TorporControlPlane.allow_invoke`.

    Attributes:
        version: The registered version.
        resource: The custom resource.
        deployment_id: The deployment id (`dp_...`), a deploy-time token.

    Args:
        scope: The parent construct.
        id: This construct's id.
        control_plane: The control plane to register with.
        function: A function whose `current_version` to register (a new version is published
            whenever its code or configuration changes).
        version: A version to register instead of `function`'s current one.
        assume_role_arn: A role the control plane assumes to invoke the version (another account).

    Raises:
        ValueError: Neither or both of `function` and `version` given.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        control_plane: TorporControlPlane,
        function: lambda_.Function | None = None,
        version: lambda_.IVersion | None = None,
        assume_role_arn: str | None = None,
    ) -> None:
        super().__init__(scope, id)
        if (function is None) == (version is None):
            raise ValueError("RegisteredHandler takes exactly one of function= and version=")
        self.version: lambda_.IVersion = version if version is not None else function.current_version  # type: ignore[union-attr]
        properties = {"FunctionVersionArn": self.version.function_arn}
        if assume_role_arn:
            properties["AssumeRoleArn"] = assume_role_arn
        self.resource = CustomResource(
            self,
            "Deployment",
            service_token=control_plane.deploy_hook_function.function_arn,
            resource_type="Custom::TorporDeployment",
            properties=properties,
        )
        self.deployment_id = self.resource.get_att_string("DeploymentId")


class TorporSchedule(Construct):
    """A durable schedule declared with the stack: a `Custom::TorporSchedule` resource served by the
    control plane's deploy hook, as `torpor schedules create` would make it (README, "Durable schedules").

    Create stores the schedule and its recurring EventBridge schedule; Update replaces it (it goes on
    from its next future tick); Delete removes both. The target must be registered when it is
    created: pass the `RegisteredHandler` that serves it as `after` (or add the dependency yourself).

    Attributes:
        resource: The custom resource (physical id `schedule/NAME`).

    Args:
        scope: The parent construct.
        id: This construct's id.
        control_plane: The control plane that runs the ticks.
        name: The schedule's name.
        target: `Service/handler`.
        cron: A 5-field cron expression, UTC; or
        every: A period (`5m`, `1h`; whole minutes on AWS).
        key: The key of a virtual object or workflow target.
        body: The JSON value each tick sends (serialized with `json.dumps`); None sends no body.
        after: Constructs to create first (the `RegisteredHandler` of the target's deployment).

    Raises:
        ValueError: Neither or both of `cron` and `every` given.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        control_plane: TorporControlPlane,
        name: str,
        target: str,
        cron: str | None = None,
        every: str | None = None,
        key: str | None = None,
        body: Any = None,
        after: Sequence[Construct] = (),
    ) -> None:
        super().__init__(scope, id)
        if (cron is None) == (every is None):
            raise ValueError("TorporSchedule takes exactly one of cron= and every=")
        properties: dict[str, str] = {"Name": name, "Target": target}
        if cron is not None:
            properties["Cron"] = cron
        if every is not None:
            properties["Every"] = every
        if key:
            properties["Key"] = key
        if body is not None:
            properties["Body"] = json.dumps(body)
        self.resource = CustomResource(
            self,
            "Schedule",
            service_token=control_plane.deploy_hook_function.function_arn,
            resource_type="Custom::TorporSchedule",
            properties=properties,
        )
        for construct in after:
            self.resource.node.add_dependency(construct)


class TorporSubscription(Construct):
    """An event subscription declared with the stack: the messages of an SQS queue invoke a handler,
    each once (its deduplication or message id is the idempotency key), a FIFO queue's message group
    in order with the group id as the object key (README, "Event subscriptions").

    It makes a `Custom::TorporSubscription` resource served by the deploy hook (the subscription
    `sqs://QUEUE` → `sink`, as `restate subscriptions create` would store it), grants the worker
    function the queue's messages, and maps the queue to the worker (batches of 10, partial batch
    failures reported) once the subscription exists. The sink must be registered when it is created:
    pass the `RegisteredHandler` that serves it as `after`.

    Attributes:
        resource: The custom resource (physical id: the subscription's `sub_…` id).
        mapping: The queue's event source mapping to the worker function.

    Args:
        scope: The parent construct.
        id: This construct's id.
        control_plane: The control plane whose worker delivers the messages.
        queue: The SQS queue (standard or FIFO).
        sink: `service://Service/handler`.
        options: The subscription's options (strings; `key`: the object key of messages without one).
        after: Constructs to create first (the `RegisteredHandler` of the sink's deployment).

    Raises:
        ValueError: `sink` is not `service://Service/handler`.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        control_plane: TorporControlPlane,
        queue: sqs.IQueue,
        sink: str,
        options: Mapping[str, str] | None = None,
        after: Sequence[Construct] = (),
    ) -> None:
        super().__init__(scope, id)
        service, slash, handler = sink.removeprefix("service://").partition("/")
        if not sink.startswith("service://") or not service or not slash or not handler or "/" in handler:
            raise ValueError(f"sink must be service://Service/handler, got {sink!r}")
        properties: dict[str, Any] = {"Source": f"sqs://{queue.queue_name}", "Sink": sink}
        if options:
            properties["Options"] = dict(options)
        self.resource = CustomResource(
            self,
            "Subscription",
            service_token=control_plane.deploy_hook_function.function_arn,
            resource_type="Custom::TorporSubscription",
            properties=properties,
        )
        for construct in after:
            self.resource.node.add_dependency(construct)
        queue.grant_consume_messages(control_plane.worker_function)
        self.mapping = lambda_.EventSourceMapping(
            self,
            "Events",
            target=control_plane.worker_function,
            event_source_arn=queue.queue_arn,
            batch_size=WORKER_BATCH_SIZE,
            max_batching_window=Duration.seconds(0),
            report_batch_item_failures=True,
        )
        self.mapping.node.add_dependency(self.resource)
