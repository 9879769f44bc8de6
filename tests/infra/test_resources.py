"""The resources and permissions of Torpor on AWS, checked on `template.yaml` and on the CDK template.

Every test runs twice (the `facts` fixture: SAM, then CDK) against the same expected values, so the
two ways to deploy cannot drift apart. References are compared as rendered by `Facts` (canonical
names: `${Table.Arn}`, `${WakeQueue}`, ...; parameters at their defaults).
"""

from __future__ import annotations

import fnmatch
from typing import Any

import pytest

from adapters.aws.store_items import TTL_ATTRIBUTE, table_schema
from tests.infra.facts import Facts

CONTROL_PLANE = {
    "IngressFunction": ("adapters.aws.lambda_app.ingress_handler", 30),
    "AdminFunction": ("adapters.aws.lambda_app.admin_handler", 30),
    "WorkerFunction": ("adapters.aws.lambda_app.worker_handler", 900),
    "SweeperFunction": ("adapters.aws.lambda_app.sweeper_handler", 60),
    "DeployHookFunction": ("adapters.aws.lambda_app.deploy_hook_handler", 300),
}
"""Each control-plane function: its handler string and timeout in seconds."""

ENVIRONMENT = {
    "TORPOR_TABLE": "${Table}",
    "TORPOR_BLOB_BUCKET": "${BlobBucket}",
    "TORPOR_WAKE_QUEUE_URL": "${WakeQueue}",
    "TORPOR_WAKE_QUEUE_ARN": "${WakeQueue.Arn}",
    "TORPOR_TIMER_QUEUE_URL": "${TimerQueue}",
    "TORPOR_TIMER_QUEUE_ARN": "${TimerQueue.Arn}",
    "TORPOR_SCHEDULE_GROUP": "${ScheduleGroup}",
    "TORPOR_SCHEDULER_ROLE_ARN": "${SchedulerRole.Arn}",
    "TORPOR_SCHEDULE_DLQ_ARN": "${ScheduleDeadLetterQueue.Arn}",
    "TORPOR_WAKE": "invoke",  # wake-ups now and schedules invoke the worker (WakeTransport, wake_transport)
    "TORPOR_REQUEST_IDENTITY_KEY_SSM_PARAMETER": "",  # none by default: requests go unsigned
    "TORPOR_REQUEST_IDENTITY_KEY_SECRET_ARN": "",
    "TORPOR_GOOGLE_CREDENTIAL_CONFIG": "",  # none by default: no Cloud Run deployments from AWS
    "POWERTOOLS_SERVICE_NAME": "torpor",
    "POWERTOOLS_METRICS_NAMESPACE": "Torpor",
    "LOG_LEVEL": "INFO",
    "TORPOR_STORE_SHARDS": "64",  # SAM's StoreShards and CDK's store_shards default
}
"""What every control-plane function's environment must be, exactly (rendered)."""

ARN_PREFIX = "arn:${AWS::Partition}"
REGION_ACCOUNT = "${AWS::Region}:${AWS::AccountId}"
HANDLER_FUNCTIONS = f"{ARN_PREFIX}:lambda:{REGION_ACCOUNT}:function:torpor-handler-${{AWS::StackName}}_*"
"""This stack's handler functions only: the prefix, the stack's name, `_` (no stack name has one)."""
SCHEDULES = f"{ARN_PREFIX}:scheduler:{REGION_ACCOUNT}:schedule/${{ScheduleGroup}}/*"
TABLE = "${Table.Arn}"
STATUS_INDEX = "${Table.Arn}/index/by_status_v2"
EXPIRY_INDEX = "${Table.Arn}/index/by_expiry"
READS = ("dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:Query")
WRITES = ("dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:BatchWriteItem")
RUN_PARTITIONS = ["INV#*", "TIMER#*", "OBJ#*", "SKEYS#*", "CONFIG"]
"""What running invocations write: invocations, timers, objects and workflows, the listing of keys
with state, the shard count."""
REGISTRY_PARTITIONS = ["DEP", "SVC", "CONFIG"]
ADMIN_PARTITIONS = [*RUN_PARTITIONS, "SCHED"]
"""What the admin API's routes write besides deployments and services: kill, cancel, pause, resume,
purge (invocations, their timers, the keys and state they hold), state edits, durable schedules."""
RECURRING_SCHEDULES = {
    (action, f"{ARN_PREFIX}:scheduler:{REGION_ACCOUNT}:schedule/${{ScheduleGroup}}/torpor-schedule-*")
    for action in ("scheduler:UpdateSchedule", "scheduler:DeleteSchedule")
}
"""Durable schedules' recurring EventBridge schedules: pause/resume update them, delete removes them
(the admin API only; they are created through the wake-up policy's CreateSchedule)."""

DECLARED_SCHEDULES = {
    (action, f"{ARN_PREFIX}:scheduler:{REGION_ACCOUNT}:schedule/${{ScheduleGroup}}/torpor-schedule-*")
    for action in ("scheduler:CreateSchedule", "scheduler:UpdateSchedule", "scheduler:DeleteSchedule")
} | {("iam:PassRole", "${SchedulerRole.Arn}")}
"""The deploy hook's part of schedules declared with the stack: create (update if it exists), delete."""


def _logs(function: str) -> set[tuple[str, str]]:
    log_group = "${" + function.removesuffix("Function") + "LogGroup.Arn}"
    return {("logs:CreateLogStream", log_group), ("logs:PutLogEvents", log_group)}


def _table(writes: tuple[str, ...] = WRITES, indexes: tuple[str, ...] = ()) -> set[tuple[str, str]]:
    """Reads of items, `Query` on `indexes`, `writes` of items (each function's `table` policy)."""
    return {(action, TABLE) for action in (*READS, *writes)} | {("dynamodb:Query", index) for index in indexes}


SEND = {("sqs:SendMessage", "${WakeQueue.Arn}"), ("sqs:SendMessage", "${TimerQueue.Arn}")}
"""Wake-ups now go to the wake queue, timers' to the timer queue."""


def _wake_ups() -> set[tuple[str, str]]:
    return SEND | {
        ("scheduler:CreateSchedule", SCHEDULES),  # schedules delete themselves once fired
        ("iam:PassRole", "${SchedulerRole.Arn}"),
    }


INVOKE = {("lambda:InvokeFunction", HANDLER_FUNCTIONS)}
WAKE_INVOKE = {("lambda:InvokeFunction", "${WorkerFunction.Arn}")}
"""Wake-ups now as asynchronous invokes of the worker (and the schedules' target)."""
CONSUME = {
    (action, queue)
    for action in ("sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes")
    for queue in ("${WakeQueue.Arn}", "${TimerQueue.Arn}")
}

CHECKPOINTS = {("dynamodb:GetItem", "${Table.Arn}"), ("dynamodb:PutItem", "${Table.Arn}")}
"""In-process checkpoints (`adapters.aws.checkpoints`): the epoch fence (a read) and the journal batch, no more."""

def _blobs(*actions: str) -> set[tuple[str, str]]:
    """`actions` on the blob bucket's objects, and `s3:ListBucket` on it for a function that deletes."""
    listing = {("s3:ListBucket", "${BlobBucket.Arn}")} if "s3:DeleteObject" in actions else set()
    return {(action, "${BlobBucket.Arn}/*") for action in actions} | listing


BLOBS_RW = _blobs("s3:GetObject", "s3:PutObject", "s3:DeleteObject")
"""Reads and writes large values, and deletes them with the invocations it removes."""

EXPECTED_PERMISSIONS = {
    # runs attempts in-process (calls), creates invocations: reads, puts and updates items, no index;
    # never deletes (what it drops expires; an expired invocation's removal goes to the worker)
    "IngressFunction": _table(writes=("dynamodb:PutItem", "dynamodb:UpdateItem"))
    | _blobs("s3:GetObject", "s3:PutObject")
    | _wake_ups()
    | INVOKE
    | WAKE_INVOKE
    | _logs("IngressFunction"),
    # registration, listing (by_status_v2), kill, purge, state: the items its routes write (WRITE_PARTITIONS)
    "AdminFunction": _table(indexes=(STATUS_INDEX,))
    | BLOBS_RW
    | _wake_ups()
    | INVOKE
    | WAKE_INVOKE
    | RECURRING_SCHEDULES
    | _logs("AdminFunction"),
    "WorkerFunction": _table() | BLOBS_RW | _wake_ups() | INVOKE | WAKE_INVOKE | CONSUME | _logs("WorkerFunction"),
    # overdue timers and leases (by_status_v2), retention (by_expiry); wakes the worker, invokes no handler
    "SweeperFunction": _table(indexes=(STATUS_INDEX, EXPIRY_INDEX))
    | BLOBS_RW
    | SEND
    | WAKE_INVOKE
    | _logs("SweeperFunction"),
    # discovery (invoke), deployments and services, the invocations pinned to a deployment; the
    # schedules stacks declare (Custom::TorporSchedule) and their recurring EventBridge schedules
    "DeployHookFunction": _table(writes=("dynamodb:PutItem", "dynamodb:DeleteItem"), indexes=(STATUS_INDEX,))
    | _blobs("s3:GetObject")
    | INVOKE
    | DECLARED_SCHEDULES
    | _logs("DeployHookFunction"),
    "ExampleHandlerFunction": _logs("ExampleHandlerFunction") | CHECKPOINTS,
}
"""Every (action, resource) each function's role allows, unconditionally, and nothing else."""

WRITE_PARTITIONS: dict[str, list[tuple[set[str], list[str]]]] = {
    "IngressFunction": [({"dynamodb:PutItem", "dynamodb:UpdateItem"}, RUN_PARTITIONS)],
    "AdminFunction": [
        (set(WRITES), ADMIN_PARTITIONS),
        ({"dynamodb:PutItem", "dynamodb:DeleteItem"}, ["DEP", "SVC", "SUB"]),  # SUB: event subscriptions
    ],
    "WorkerFunction": [(set(WRITES), [*RUN_PARTITIONS, "SCHED"])],  # a schedule's tick moves its next tick
    "SweeperFunction": [(set(WRITES), RUN_PARTITIONS)],
    "DeployHookFunction": [({"dynamodb:PutItem", "dynamodb:DeleteItem"}, [*REGISTRY_PARTITIONS, "SCHED", "SUB"])],
}
"""Each function's write statements: (actions, the partition keys (`dynamodb:LeadingKeys`) they may
write items in). No function writes in any partition."""


# --- the table -------------------------------------------------------------------------------------


def test_table_is_what_the_store_creates(facts: Facts) -> None:
    """Keys, attribute types and the GSIs match `store_items.table_schema` (what `ensure_schema` creates)."""
    (table_id,) = facts.of_type("AWS::DynamoDB::Table")
    props = facts.props(table_id)
    schema = table_schema("any")
    assert props["KeySchema"] == schema["KeySchema"]
    assert sorted(props["AttributeDefinitions"], key=lambda a: a["AttributeName"]) == sorted(
        schema["AttributeDefinitions"], key=lambda a: a["AttributeName"]
    )
    indexes = {index["IndexName"]: index for index in props["GlobalSecondaryIndexes"]}
    expected = {index["IndexName"]: index for index in schema["GlobalSecondaryIndexes"]}
    assert sorted(indexes) == sorted(expected) == ["by_expiry", "by_status_v2"]
    for name, index in indexes.items():
        assert index["KeySchema"] == expected[name]["KeySchema"]
        assert index["Projection"] == expected[name]["Projection"]


def test_table_is_on_demand_with_ttl_and_point_in_time_recovery(facts: Facts) -> None:
    (table_id,) = facts.of_type("AWS::DynamoDB::Table")
    props = facts.props(table_id)
    assert props["BillingMode"] == "PAY_PER_REQUEST"
    assert "ProvisionedThroughput" not in props
    assert props["TimeToLiveSpecification"] == {"AttributeName": TTL_ATTRIBUTE, "Enabled": True}
    assert props["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert facts.resources[table_id]["DeletionPolicy"] == "Retain"
    assert facts.resources[table_id]["UpdateReplacePolicy"] == "Retain"


# --- queues and schedules --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["WakeQueue", "TimerQueue"])
def test_wake_and_timer_queues_redrive_after_five_receives_and_outlast_the_worker(facts: Facts, name: str) -> None:
    queue = facts.props(facts.id_of(name))
    worker_timeout = int(facts.function("WorkerFunction")["Timeout"])
    assert worker_timeout == 900
    assert int(queue["VisibilityTimeout"]) >= 6 * worker_timeout
    assert queue["RedrivePolicy"]["maxReceiveCount"] == 5
    assert facts.render(queue["RedrivePolicy"]["deadLetterTargetArn"]) == "${WakeDeadLetterQueue.Arn}"
    assert not queue.get("FifoQueue"), "FIFO queues ignore per-message DelaySeconds"


def test_every_queue_is_encrypted_and_there_are_four(facts: Facts) -> None:
    queues = facts.of_type("AWS::SQS::Queue")
    assert sorted(facts.name(q) for q in queues) == [
        "ScheduleDeadLetterQueue",
        "TimerQueue",
        "WakeDeadLetterQueue",
        "WakeQueue",
    ]
    for logical_id in queues:
        assert facts.props(logical_id).get("SqsManagedSseEnabled") is True, logical_id


def test_scheduler_role_only_sends_to_the_timer_queue_and_its_dead_letter_queue(facts: Facts) -> None:
    role_id = facts.id_of("SchedulerRole")
    (trust,) = facts.props(role_id)["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Action"] == "sts:AssumeRole"
    conditions = {key: facts.render(value) for key, value in trust["Condition"]["StringEquals"].items()}
    assert conditions == {
        "aws:SourceAccount": "${AWS::AccountId}",
        "aws:SourceArn": f"{ARN_PREFIX}:scheduler:{REGION_ACCOUNT}:schedule-group/${{ScheduleGroup}}",
    }
    allowed = set().union(*(s.pairs() for s in facts.role_statements(role_id)))
    assert allowed == {
        ("sqs:SendMessage", "${TimerQueue.Arn}"),
        ("sqs:SendMessage", "${ScheduleDeadLetterQueue.Arn}"),
        ("lambda:InvokeFunction", "${WorkerFunction.Arn}"),  # WakeTransport invoke: schedules invoke the worker
    }
    assert len(facts.of_type("AWS::Scheduler::ScheduleGroup")) == 1


# --- functions -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(CONTROL_PLANE))
def test_control_plane_function_handler_runtime_and_timeout(facts: Facts, name: str) -> None:
    handler, timeout = CONTROL_PLANE[name]
    props = facts.function(name)
    assert props["Handler"] == handler
    assert props["Runtime"] == "python3.13"  # Amazon Linux 2023
    assert props["Architectures"] == ["arm64"]
    assert int(props["Timeout"]) == timeout


@pytest.mark.parametrize("name", sorted(CONTROL_PLANE))
def test_control_plane_function_environment(facts: Facts, name: str) -> None:
    variables = facts.function(name)["Environment"]["Variables"]
    expected = dict(ENVIRONMENT)
    if name == "AdminFunction":  # the web UI's playground posts to the ingress
        expected["TORPOR_INGRESS_URL"] = "${IngressApi.ApiEndpoint}"
    if name != "WorkerFunction":  # the worker invokes itself: its ARN from its Lambda context
        expected["TORPOR_WAKE_FUNCTION"] = "${WorkerFunction.Arn}"
    if name == "IngressFunction":  # it refuses events API Gateway did not authorize so
        expected["TORPOR_INGRESS_AUTH"] = "AWS_IAM"
        expected["TORPOR_UI_ORIGINS"] = ""  # no page may call it from a browser unless named
    assert {key: facts.render(value) for key, value in variables.items()} == expected


def test_example_handler_is_a_version_the_control_plane_may_invoke(facts: Facts) -> None:
    props = facts.function("ExampleHandlerFunction")
    assert props["Handler"] == "adapters.aws.checkpoints.handler"  # in-process checkpoints
    assert props["Runtime"] == "python3.12"  # restate-sdk's arm64 wheels need glibc 2.28 (not python3.11's AL2)
    assert props["Architectures"] == ["arm64"]
    variables = {key: facts.render(value) for key, value in props["Environment"]["Variables"].items()}
    assert variables == {"TORPOR_APP": "examples.app:app", "TORPOR_TABLE": "${Table}"}  # nothing else of Torpor
    assert facts.render(props["FunctionName"]) == "torpor-handler-${AWS::StackName}_examples"


def test_each_function_logs_to_its_own_log_group_with_retention(facts: Facts) -> None:
    functions = [*CONTROL_PLANE, "ExampleHandlerFunction"]
    for name in functions:
        log_group = facts.render(facts.function(name)["LoggingConfig"]["LogGroup"])
        assert log_group == "${" + name.removesuffix("Function") + "LogGroup}"
        assert facts.render(facts.props(facts.id_of(log_group[2:-1]))["RetentionInDays"]) == "30"
    assert len(facts.of_type("AWS::Logs::LogGroup")) == len(functions)


# --- triggers --------------------------------------------------------------------------------------


def test_worker_consumes_both_queues_each_with_its_own_mapping(facts: Facts) -> None:
    found = facts.of_type("AWS::Lambda::EventSourceMapping")
    mappings = [facts.props(m) for m, resource in found.items() if "Condition" not in resource]  # SAM's subscription
    assert sorted(facts.render(m["EventSourceArn"]) for m in mappings) == ["${TimerQueue.Arn}", "${WakeQueue.Arn}"]
    for mapping in mappings:  # a concurrency each: due timers never wait for workers busy with starts
        assert facts.render(mapping["FunctionName"]) == "${WorkerFunction}"
        assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
        assert int(mapping["BatchSize"]) == 10
        assert facts.render(mapping["ScalingConfig"]["MaximumConcurrency"]) == "10"


def test_the_worker_may_be_invoked_in_a_chain_longer_than_lambdas_loop_detection_allows(facts: Facts) -> None:
    # its wake-ups invoke it again, its timers come back through SQS: a long workflow, not a runaway loop
    assert facts.function("WorkerFunction").get("RecursiveLoop") == "Allow"
    for name in ("IngressFunction", "AdminFunction", "SweeperFunction", "DeployHookFunction"):
        assert facts.function(name).get("RecursiveLoop") is None, name


def test_sweeper_runs_every_minute(facts: Facts) -> None:
    (rule_id,) = facts.of_type("AWS::Events::Rule")
    rule = facts.props(rule_id)
    assert rule["ScheduleExpression"] == "rate(1 minute)"
    assert rule.get("State", "ENABLED") == "ENABLED"
    assert [facts.render(t["Arn"]) for t in rule["Targets"]] == ["${SweeperFunction.Arn}"]
    permissions = [
        p
        for p in facts.of_type("AWS::Lambda::Permission").values()
        if p["Properties"]["Principal"] == "events.amazonaws.com"
    ]
    assert len(permissions) == 1
    permission = permissions[0]["Properties"]
    assert facts.render(permission["FunctionName"]) in ("${SweeperFunction}", "${SweeperFunction.Arn}")
    assert facts.render(permission["SourceArn"]) == "${SweeperSchedule.Arn}"


def _routes(facts: Facts, api: str) -> list[dict]:
    api_id = facts.id_of(api)
    return [
        props
        for props in (facts.props(r) for r in facts.of_type("AWS::ApiGatewayV2::Route"))
        if facts.target(props["ApiId"]) == api_id
    ]


@pytest.mark.parametrize(("api", "authorization"), [("IngressApi", "AWS_IAM"), ("AdminApi", "AWS_IAM")])
def test_http_api_routes_everything_to_its_function(facts: Facts, api: str, authorization: str) -> None:
    base = api.removesuffix("Api")
    assert facts.props(facts.id_of(api))["ProtocolType"] == "HTTP"
    routes = _routes(facts, api)
    assert [r["RouteKey"] for r in routes] == ["$default"]
    for route in routes:
        assert facts.render(route.get("AuthorizationType", "NONE")) == authorization  # SAM: IngressAuth's default
        assert facts.render(route["Target"]) == "integrations/${" + base + "Integration}"
    integration = facts.props(facts.id_of(f"{base}Integration"))
    assert integration["IntegrationType"] == "AWS_PROXY"
    assert integration["PayloadFormatVersion"] == "2.0"
    assert facts.render(integration["IntegrationUri"]) == "${" + base + "Function.Arn}"
    stages = [
        facts.props(s)
        for s in facts.of_type("AWS::ApiGatewayV2::Stage")
        if facts.target(facts.props(s)["ApiId"]) == facts.id_of(api)
    ]
    assert [(s["StageName"], s["AutoDeploy"]) for s in stages] == [("$default", True)]
    permissions = [
        p["Properties"]
        for p in facts.of_type("AWS::Lambda::Permission").values()
        if p["Properties"]["Principal"] == "apigateway.amazonaws.com"
        and facts.render(p["Properties"]["FunctionName"]) in ("${" + base + "Function}", "${" + base + "Function.Arn}")
    ]
    assert len(permissions) == 1
    source_arn = facts.render(permissions[0]["SourceArn"])
    assert source_arn.startswith(f"{ARN_PREFIX}:execute-api:{REGION_ACCOUNT}:${{{api}}}/")


def test_no_other_route_skips_iam_on_the_admin_api(facts: Facts) -> None:
    """Every route of every API is one of the two above: nothing reaches the admin function unsigned."""
    routes = [facts.props(r) for r in facts.of_type("AWS::ApiGatewayV2::Route")]
    assert len(routes) == 2
    assert len(facts.of_type("AWS::ApiGatewayV2::Api")) == 2
    admin_integration = "integrations/${AdminIntegration}"
    for route in routes:
        if facts.render(route["Target"]) == admin_integration:
            assert route["AuthorizationType"] == "AWS_IAM"


def test_example_version_is_registered_through_the_deploy_hook(facts: Facts) -> None:
    (resource_id,) = facts.of_type("Custom::TorporDeployment")
    props = facts.props(resource_id)
    assert facts.render(props["ServiceToken"]) == "${DeployHookFunction.Arn}"
    assert facts.render(props["FunctionVersionArn"]) == "${ExampleHandlerFunction.Version}"
    assert "AssumeRoleArn" not in props


def test_a_schedule_is_declared_through_the_deploy_hook_after_its_target_is_registered(facts: Facts) -> None:
    (resource_id,) = facts.of_type("Custom::TorporSchedule")
    props = facts.props(resource_id)
    assert facts.render(props["ServiceToken"]) == "${DeployHookFunction.Arn}"
    assert (props["Name"], props["Target"], props["Cron"], props["Body"]) == (
        "daily-greeting", "Greeter/greet", "0 6 * * *", '"schedule"'
    )
    (deployment_id,) = facts.of_type("Custom::TorporDeployment")
    depends_on = facts.template["Resources"][resource_id].get("DependsOn", [])
    assert deployment_id in ([depends_on] if isinstance(depends_on, str) else depends_on)


def test_outputs(facts: Facts) -> None:
    outputs = {name: facts.render(o["Value"]) for name, o in facts.template["Outputs"].items()}
    names = ("IngressUrl", "AdminUrl", "TableName", "WakeQueueUrl", "TimerQueueUrl", "DeployHookArn")
    assert {k: outputs[k] for k in names} == {
        "IngressUrl": "${IngressApi.ApiEndpoint}",
        "AdminUrl": "${AdminApi.ApiEndpoint}",
        "TableName": "${Table}",
        "WakeQueueUrl": "${WakeQueue}",
        "TimerQueueUrl": "${TimerQueue}",
        "DeployHookArn": "${DeployHookFunction.Arn}",
    }
    export = facts.render(facts.template["Outputs"]["DeployHookArn"]["Export"]["Name"])
    assert export in ("${AWS::StackName}-DeployHookArn", "Torpor-DeployHookArn")
    assert outputs["ExampleDeploymentId"] == "${ExampleHandlerDeployment.DeploymentId}"
    assert outputs["ExampleHandlerVersionArn"] == "${ExampleHandlerFunction.Version}"


# --- IAM -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(EXPECTED_PERMISSIONS))
def test_function_role_allows_exactly_what_it_needs(facts: Facts, name: str) -> None:
    role_id = facts.target(facts.function(name)["Role"])
    assert role_id is not None
    assert facts.name(role_id) == name.removesuffix("Function") + "Role"
    (trust,) = facts.props(role_id)["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "lambda.amazonaws.com"}
    statements = [s for s in facts.role_statements(role_id) if not s.guarded]
    assert all(s.effect == "Allow" for s in statements)
    allowed = set().union(*(s.pairs() for s in statements))
    assert allowed == EXPECTED_PERMISSIONS[name], (
        f"missing {sorted(EXPECTED_PERMISSIONS[name] - allowed)}, extra {sorted(allowed - EXPECTED_PERMISSIONS[name])}"
    )
    for statement in statements:
        if "iam:PassRole" in statement.actions:
            assert statement.condition == {"StringEquals": {"iam:PassedToService": "scheduler.amazonaws.com"}}
    assert all(managed is not None for managed, _ in facts.managed_policies(role_id)), "an AWS managed policy"


@pytest.mark.parametrize("name", sorted(WRITE_PARTITIONS))
def test_function_writes_items_only_in_its_partitions(facts: Facts, name: str) -> None:
    """Ingress, worker and sweeper cannot write a deployment or a service (re-point a service to
    another URL); the deploy hook cannot write an invocation; the admin API writes deployments and
    services only by putting or deleting them (registration), the rest only in the partitions its
    routes change. Reads carry no condition."""
    role_id = facts.target(facts.function(name)["Role"])
    table = [s for s in facts.role_statements(role_id) if any(a.startswith("dynamodb:") for a in s.actions)]
    writes = [s for s in table if set(s.actions) & set(WRITES)]
    found = [(set(s.actions), (s.condition or {}).get("ForAllValues:StringLike", {}).get("dynamodb:LeadingKeys"))
             for s in writes]  # fmt: skip
    assert found == WRITE_PARTITIONS[name]
    for statement, (_, partitions) in zip(writes, found, strict=True):
        assert statement.condition == {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": partitions}}
    for statement in table:
        if statement not in writes:
            assert statement.condition is None
            assert set(statement.actions) <= set(READS)


def test_no_function_scans_describes_or_administers_the_table(facts: Facts) -> None:
    """Nothing on Lambda calls `Scan`, `DescribeTable` or `DescribeTimeToLive` (`ensure_schema` is for
    `torpor dev`; the template creates the table), nor any table administration."""
    actions = {a for _, s in facts.all_policy_statements() for a in s.actions if a.startswith("dynamodb:")}
    assert actions == set(READS) | set(WRITES)


CHECKPOINT_FENCE = ["PK", "SK", "epoch", "doorbell"]
CHECKPOINT_BATCH = ["PK", "SK", "entries", "epoch", "committed_at_ms"]


def test_example_handler_commits_only_its_fence_and_journal_batches(facts: Facts) -> None:
    """Its table requests (in-process checkpoints) are limited by IAM to `INV#...` partitions and to
    the attributes of the epoch fence (a `GetItem` of epoch and doorbell) and of a journal batch
    (`PutItem`, no values returned): it cannot rewrite an invocation's status, output, input or
    deployment, nor read anything else."""
    role_id = facts.target(facts.function("ExampleHandlerFunction")["Role"])
    statements = [s for s in facts.role_statements(role_id) if any(a.startswith("dynamodb:") for a in s.actions)]
    assert [(list(s.actions), s.condition) for s in statements] == [
        (
            [action],
            {
                "ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["INV#*"]},
                "ForAllValues:StringEquals": {"dynamodb:Attributes": attributes},
                "StringEqualsIfExists": extra,
            },
        )
        for action, attributes, extra in (
            ("dynamodb:GetItem", CHECKPOINT_FENCE, {"dynamodb:Select": "SPECIFIC_ATTRIBUTES"}),
            ("dynamodb:PutItem", CHECKPOINT_BATCH, {"dynamodb:ReturnValues": "NONE"}),
        )
    ]


def test_example_handler_is_named_so_that_only_its_own_stack_invokes_it(facts: Facts) -> None:
    name = facts.render(facts.function("ExampleHandlerFunction")["FunctionName"])
    assert name == "torpor-handler-${AWS::StackName}_examples"
    assert fnmatch.fnmatchcase(f"{ARN_PREFIX}:lambda:{REGION_ACCOUNT}:function:{name}:7", HANDLER_FUNCTIONS)


@pytest.mark.parametrize(
    ("own", "other"), [("prod", "prod-eu"), ("prod-eu", "prod"), ("a", "ab"), ("Torpor", "Torpor2")]
)
def test_a_stack_cannot_invoke_another_stacks_handlers(own: str, other: str) -> None:
    """Stack names are letters, digits and `-`: the `_` after the name ends it, so no stack's pattern
    matches another's functions, whatever their names share."""
    pattern = HANDLER_FUNCTIONS.replace("${AWS::StackName}", own)
    arn = f"{ARN_PREFIX}:lambda:{REGION_ACCOUNT}:function:torpor-handler-{other}_orders:3"
    assert not fnmatch.fnmatchcase(arn, pattern)
    assert fnmatch.fnmatchcase(arn.replace(f"-{other}_", f"-{own}_"), pattern)


XRAY_ACTIONS = ("xray:PutTraceSegments", "xray:PutTelemetryRecords")
"""X-Ray has no resource-level permissions: AWS requires `Resource: "*"` for these, and only these."""


KEY_READS = (("ssm:GetParameter",), ("secretsmanager:GetSecretValue",), ("kms:Decrypt",))
"""Reading the request identity key: guarded by its parameters, on the one parameter, secret or KMS key."""


def test_only_assume_role_key_reads_and_tracing_are_behind_a_condition(facts: Facts) -> None:
    """Off by default: `sts:AssumeRole` (handlers in other accounts, when roles are given), reading the
    request identity key (when one is given), X-Ray (when tracing is on; the CDK template of the
    default stack has none at all) and consuming a subscription's queue (SAM's `SubscriptionQueueArn`)."""
    guarded = [s for _, s in facts.all_policy_statements() if s.guarded]
    for statement in guarded:
        if statement.actions == ("sts:AssumeRole",) or statement.actions in KEY_READS:
            assert statement.resources != ("*",)
        elif statement.raw.get("Resource") == {"Ref": "SubscriptionQueueArn"}:
            assert all(a.startswith("sqs:") for a in statement.actions), statement.actions
        else:
            assert statement.actions == XRAY_ACTIONS
            assert statement.resources == ("*",)


def test_no_wildcard_action_and_no_wildcard_resource(facts: Facts) -> None:
    """No `*` in any action, and `Resource: "*"` only for X-Ray's writes, which AWS requires so."""
    statements = list(facts.all_policy_statements())
    assert len(statements) >= 10
    for where, statement in statements:
        assert "NotAction" not in statement.raw, where
        assert "NotResource" not in statement.raw, where
        for action in statement.actions:
            assert "*" not in action, f"{where}: {action}"
        for resource in statement.resources:
            assert resource != "*" or statement.actions == XRAY_ACTIONS, f"{where}: {statement.actions} on *"
            assert not resource.endswith(":*:*"), f"{where}: {resource}"


def test_every_role_belongs_to_a_function_or_to_the_scheduler(facts: Facts) -> None:
    """No other principal gets a permission: seven roles, and every policy is attached to one of them."""
    roles = {facts.name(r) for r in facts.of_type("AWS::IAM::Role")}
    assert roles == {name.removesuffix("Function") + "Role" for name in EXPECTED_PERMISSIONS} | {"SchedulerRole"}
    role_ids = set(facts.of_type("AWS::IAM::Role"))
    for policy_type in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
        for logical_id, policy in facts.of_type(policy_type).items():
            attached = {facts.target(r) for r in policy["Properties"].get("Roles", [])}
            attached |= {r for r in role_ids if logical_id in {m for m, _ in facts.managed_policies(r)}}
            assert attached, f"{logical_id} is attached to no role"
            assert attached <= role_ids, f"{logical_id} is attached to {attached - role_ids}"
            assert not policy["Properties"].get("Users"), logical_id
            assert not policy["Properties"].get("Groups"), logical_id


def test_sam_request_identity_key_parameters_reach_every_control_plane_function(sam_template: dict) -> None:
    """With the parameter (or secret) given, each control-plane role but the sweeper's (it calls no
    deployment) attaches the key policy, which reads that parameter or secret only, and the KMS key
    only through SSM or Secrets Manager."""
    facts = Facts(sam_template)
    facts.parameters["RequestIdentityKeyParameter"] = "/torpor/request-identity-key"
    policy_id = "RequestIdentityKeyPolicy"
    assert facts.resources[policy_id]["Condition"] == "HasRequestIdentityKey"
    statements = list(facts._statements(facts.props(policy_id)["PolicyDocument"]))
    assert {(s.actions, s.resources) for s in statements} == {
        (("ssm:GetParameter",), (f"{ARN_PREFIX}:ssm:{REGION_ACCOUNT}:parameter/torpor/request-identity-key",)),
        (("secretsmanager:GetSecretValue",), ("",)),
        (("kms:Decrypt",), ("",)),
    }
    (kms,) = [s for s in statements if s.actions == ("kms:Decrypt",)]
    via = [facts.render(v) for v in kms.condition["StringEquals"]["kms:ViaService"]]
    assert via == ["ssm.${AWS::Region}.amazonaws.com", "secretsmanager.${AWS::Region}.amazonaws.com"]
    for name in CONTROL_PLANE:
        role_id = facts.target(facts.function(name)["Role"])
        variables = facts.function(name)["Environment"]["Variables"]
        if name == "SweeperFunction":
            assert policy_id not in {m for m, _ in facts.managed_policies(role_id)}
            assert facts.render(variables["TORPOR_REQUEST_IDENTITY_KEY_SSM_PARAMETER"]) == ""
            continue
        assert (policy_id, True) in facts.managed_policies(role_id), name
        assert facts.render(variables["TORPOR_REQUEST_IDENTITY_KEY_SSM_PARAMETER"]) == "/torpor/request-identity-key"
    example_role = facts.target(facts.function("ExampleHandlerFunction")["Role"])
    assert policy_id not in {m for m, _ in facts.managed_policies(example_role)}


def _holds(facts: Facts, expression: Any) -> bool:
    """Evaluate a rule assertion (Fn::And, Fn::Or, Fn::Not, Fn::Equals over rendered values)."""
    ((function, arguments),) = expression.items()
    if function == "Fn::And":
        return all(_holds(facts, a) for a in arguments)
    if function == "Fn::Or":
        return any(_holds(facts, a) for a in arguments)
    if function == "Fn::Not":
        return not _holds(facts, arguments[0])
    if function == "Condition":
        return _holds(facts, facts.template["Conditions"][arguments])
    assert function == "Fn::Equals", function
    return bool(facts.render(arguments[0]) == facts.render(arguments[1]))


def refused_by_rules(facts: Facts) -> list[str]:
    """The descriptions of the template's rule assertions that fail for `facts.parameters` (a rule
    with a `RuleCondition` applies only when that holds), as CloudFormation checks before creating."""
    refused = []
    for rule in facts.template.get("Rules", {}).values():
        if "RuleCondition" in rule and not _holds(facts, rule["RuleCondition"]):
            continue
        refused += [a["AssertDescription"] for a in rule["Assertions"] if not _holds(facts, a["Assert"])]
    return refused


@pytest.mark.parametrize(
    ("parameter", "secret", "accepted"),
    [
        ("", "", True),
        ("/torpor/key", "", True),
        ("", "arn:aws:secretsmanager:us-east-1:123456789012:secret:key", True),
        ("/torpor/key", "arn:aws:secretsmanager:us-east-1:123456789012:secret:key", False),
    ],
)
def test_sam_stack_refuses_both_request_identity_key_sources(
    sam_template: dict, parameter: str, secret: str, accepted: bool
) -> None:
    """CloudFormation checks the template's rules before creating anything: both the parameter and the
    secret given would make every function refuse to start, so the stack refuses them."""
    facts = Facts(sam_template)
    facts.parameters["RequestIdentityKeyParameter"] = parameter
    facts.parameters["RequestIdentityKeySecretArn"] = secret
    refused = refused_by_rules(facts)
    if accepted:
        assert refused == []
    else:
        assert len(refused) == 1
        assert "RequestIdentityKeyParameter or RequestIdentityKeySecretArn, not both" in refused[0]


def test_sam_google_credential_config_reaches_every_control_plane_function(sam_template: dict) -> None:
    """Cloud Run deployments from AWS: every function that calls deployments gets the workload identity
    federation configuration (base64); the sweeper (it calls none) and the example handler do not."""
    facts = Facts(sam_template)
    facts.parameters["GoogleCredentialConfig"] = "eyJ0eXBlIjogImV4dGVybmFsX2FjY291bnQifQ=="
    for name in CONTROL_PLANE:
        variables = facts.function(name)["Environment"]["Variables"]
        expected = "" if name == "SweeperFunction" else "eyJ0eXBlIjogImV4dGVybmFsX2FjY291bnQifQ=="
        assert facts.render(variables["TORPOR_GOOGLE_CREDENTIAL_CONFIG"]) == expected, name
    assert "TORPOR_GOOGLE_CREDENTIAL_CONFIG" not in facts.function("ExampleHandlerFunction")["Environment"]["Variables"]


# --- alarms ----------------------------------------------------------------------------------------

ALARMS = {
    ("AWS/SQS", "ApproximateNumberOfMessagesVisible", ("QueueName", "${WakeDeadLetterQueue.QueueName}"), "Maximum"),
    ("AWS/SQS", "ApproximateNumberOfMessagesVisible", ("QueueName", "${ScheduleDeadLetterQueue.QueueName}"), "Maximum"),
    ("Torpor", "invocations_paused", ("service", "torpor"), "Sum"),  # EMF: powertools' namespace and service
    ("AWS/Lambda", "Errors", ("FunctionName", "${WorkerFunction}"), "Sum"),
    ("AWS/Lambda", "Errors", ("FunctionName", "${SweeperFunction}"), "Sum"),
    ("AWS/Lambda", "Throttles", ("FunctionName", "${IngressFunction}"), "Sum"),
    ("AWS/Lambda", "Throttles", ("FunctionName", "${WorkerFunction}"), "Sum"),
}
"""(namespace, metric, its one dimension, statistic) of every alarm."""


def test_alarms_watch_dead_letters_paused_invocations_errors_and_throttles(facts: Facts) -> None:
    """Each fires on the first occurrence in 5 minutes (> 0), is quiet without data, and notifies the
    alarm topic both ways."""
    alarms = [facts.props(a) for a in facts.of_type("AWS::CloudWatch::Alarm")]
    found = set()
    for alarm in alarms:
        ((dimension,),) = [[(d["Name"], facts.render(d["Value"])) for d in alarm["Dimensions"]]]
        found.add((alarm["Namespace"], alarm["MetricName"], dimension, alarm["Statistic"]))
        assert (int(alarm["Period"]), int(alarm["EvaluationPeriods"]), float(alarm["Threshold"])) == (300, 1, 0)
        assert alarm["ComparisonOperator"] == "GreaterThanThreshold"
        assert alarm["TreatMissingData"] == "notBreaching"
        assert facts.render(alarm["AlarmActions"]) == ["${AlarmTopic}"]
        assert facts.render(alarm["OKActions"]) == ["${AlarmTopic}"]
        assert alarm["AlarmDescription"].endswith(" Runbook: docs/deploying.md.")
    assert found == ALARMS
    assert len(alarms) == len(ALARMS)
    variables = facts.function("WorkerFunction")["Environment"]["Variables"]
    assert (variables["POWERTOOLS_METRICS_NAMESPACE"], variables["POWERTOOLS_SERVICE_NAME"]) == ("Torpor", "torpor")


def test_the_alarm_topic_is_output_and_not_under_the_aws_managed_sns_key(facts: Facts) -> None:
    """CloudWatch cannot publish to a topic encrypted with `alias/aws/sns`."""
    (topic,) = facts.of_type("AWS::SNS::Topic")
    assert "KmsMasterKeyId" not in facts.props(topic)
    outputs = {name: facts.render(o["Value"]) for name, o in facts.template["Outputs"].items()}
    assert outputs["AlarmTopicArn"] == "${AlarmTopic}"
    assert outputs["WakeDeadLetterQueueUrl"] == "${WakeDeadLetterQueue}"
