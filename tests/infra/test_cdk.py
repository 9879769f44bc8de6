"""The CDK app through `aws_cdk.assertions`: the stack `cdk synth` makes, and the constructs' options.

`test_resources.py` checks the same facts on both templates with canonical names; these checks use
the assertions API on the synthesized stack itself, and cover what only the constructs offer
(`allow_invoke`, `handler_assume_role_arns`, `RegisteredHandler`'s arguments).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_lambda as lambda_
from aws_cdk.assertions import Match, Template

from adapters.aws.store_items import table_schema
from infra.constructs import HANDLERS, RegisteredHandler, TorporControlPlane

INLINE = lambda_.Code.from_inline("def handler(event, context):\n    return None\n")
"""Stand-in code for the construct variants (their assets are not what these tests are about)."""

ENVIRONMENT_KEYS = {
    "TORPOR_TABLE",
    "TORPOR_BLOB_BUCKET",
    "TORPOR_WAKE_QUEUE_URL",
    "TORPOR_WAKE_QUEUE_ARN",
    "TORPOR_TIMER_QUEUE_URL",
    "TORPOR_TIMER_QUEUE_ARN",
    "TORPOR_SCHEDULE_GROUP",
    "TORPOR_SCHEDULER_ROLE_ARN",
    "TORPOR_WAKE",
    "TORPOR_SCHEDULE_DLQ_ARN",
    "TORPOR_REQUEST_IDENTITY_KEY_SSM_PARAMETER",
    "TORPOR_REQUEST_IDENTITY_KEY_SECRET_ARN",
    "TORPOR_GOOGLE_CREDENTIAL_CONFIG",
    "POWERTOOLS_SERVICE_NAME",
    "POWERTOOLS_METRICS_NAMESPACE",
    "LOG_LEVEL",
    "TORPOR_STORE_SHARDS",
}


def test_table(cdk_assertions: Template) -> None:
    cdk_assertions.resource_count_is("AWS::DynamoDB::Table", 1)
    cdk_assertions.has_resource(
        "AWS::DynamoDB::Table",
        {
            "Properties": {
                "KeySchema": [{"AttributeName": "PK", "KeyType": "HASH"}, {"AttributeName": "SK", "KeyType": "RANGE"}],
                "BillingMode": "PAY_PER_REQUEST",
                "GlobalSecondaryIndexes": table_schema("any")["GlobalSecondaryIndexes"],
                "TimeToLiveSpecification": {"AttributeName": "expires_at", "Enabled": True},
                "PointInTimeRecoverySpecification": {"PointInTimeRecoveryEnabled": True},
            },
            "DeletionPolicy": "Retain",
        },
    )


def test_wake_queue(cdk_assertions: Template) -> None:
    cdk_assertions.has_resource_properties(
        "AWS::SQS::Queue",
        {
            "VisibilityTimeout": 5400,
            "SqsManagedSseEnabled": True,
            "RedrivePolicy": {"deadLetterTargetArn": Match.any_value(), "maxReceiveCount": 5},
        },
    )


def test_admin_and_ingress_routes_use_iam_by_default(cdk_assertions: Template) -> None:
    routes = cdk_assertions.find_resources("AWS::ApiGatewayV2::Route")
    assert sorted(r["Properties"].get("AuthorizationType", "NONE") for r in routes.values()) == ["AWS_IAM", "AWS_IAM"]
    apis = cdk_assertions.find_resources(
        "AWS::ApiGatewayV2::Api", {"Properties": {"Description": Match.string_like_regexp("admin")}}
    )
    (admin_api,) = apis
    cdk_assertions.has_resource_properties(
        "AWS::ApiGatewayV2::Route",
        {"ApiId": {"Ref": admin_api}, "RouteKey": "$default", "AuthorizationType": "AWS_IAM"},
    )


def test_worker_event_source(cdk_assertions: Template) -> None:
    cdk_assertions.resource_count_is("AWS::Lambda::EventSourceMapping", 2)  # the wake queue's, the timer queue's
    cdk_assertions.has_resource_properties(
        "AWS::Lambda::EventSourceMapping",
        {
            "BatchSize": 10,
            "FunctionResponseTypes": ["ReportBatchItemFailures"],
            "ScalingConfig": {"MaximumConcurrency": 10},
        },
    )


def test_sweeper_schedule(cdk_assertions: Template) -> None:
    cdk_assertions.resource_count_is("AWS::Events::Rule", 1)
    cdk_assertions.has_resource_properties("AWS::Events::Rule", {"ScheduleExpression": "rate(1 minute)"})


@pytest.mark.parametrize("kind", sorted(HANDLERS))
def test_function_handler_and_environment(cdk_assertions: Template, kind: str) -> None:
    functions = cdk_assertions.find_resources("AWS::Lambda::Function", {"Properties": {"Handler": HANDLERS[kind]}})
    assert len(functions) == 1
    (function,) = functions.values()
    props = function["Properties"]
    assert props["Runtime"] == "python3.13"
    assert props["Architectures"] == ["arm64"]
    extra = {"admin": {"TORPOR_INGRESS_URL"}, "ingress": {"TORPOR_INGRESS_AUTH", "TORPOR_UI_ORIGINS"}}.get(kind, set())
    if kind != "worker":  # the worker's wake-ups invoke itself: its ARN from its Lambda context
        extra = extra | {"TORPOR_WAKE_FUNCTION"}
    assert set(props["Environment"]["Variables"]) == ENVIRONMENT_KEYS | extra
    assert props["Environment"]["Variables"]["TORPOR_STORE_SHARDS"] == "64"  # the production shard count
    assert props["Environment"]["Variables"]["POWERTOOLS_SERVICE_NAME"] == "torpor"


def test_example_handler_registered_by_version(cdk_assertions: Template) -> None:
    versions = cdk_assertions.find_resources("AWS::Lambda::Version")
    (version_id,) = versions
    cdk_assertions.has_resource_properties(
        "Custom::TorporDeployment",
        {
            "ServiceToken": {"Fn::GetAtt": [Match.string_like_regexp("DeployHookFunction"), "Arn"]},
            "FunctionVersionArn": {"Ref": version_id},
        },
    )


def test_iam_statements_have_no_wildcards(cdk_assertions: Template) -> None:
    documents: list[Any] = []
    for role in cdk_assertions.find_resources("AWS::IAM::Role").values():
        documents += [p["PolicyDocument"] for p in role["Properties"].get("Policies", [])]
    for policy_type in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
        documents += [p["Properties"]["PolicyDocument"] for p in cdk_assertions.find_resources(policy_type).values()]
    statements = [s for d in documents for s in d["Statement"]]
    assert len(statements) >= 10
    for statement in statements:
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
        assert all("*" not in action for action in actions), statement
        assert "*" not in resources, statement


# --- the constructs' options -------------------------------------------------------------------------


def _control_plane(**kwargs: Any) -> tuple[Stack, TorporControlPlane]:
    stack = Stack(App(context={"aws:cdk:bundling-stacks": []}), "Variant")
    return stack, TorporControlPlane(stack, "ControlPlane", code=INLINE, **kwargs)


def _statements_of(template: Template, description: str) -> list[dict[str, Any]]:
    (policy,) = template.find_resources(
        "AWS::IAM::ManagedPolicy", {"Properties": {"Description": Match.string_like_regexp(description)}}
    ).values()
    return list(policy["Properties"]["PolicyDocument"]["Statement"])


def test_construct_options_reach_the_template() -> None:
    stack, control_plane = _control_plane(
        handler_function_name_prefix="acme-",
        handler_assume_role_arns=["arn:aws:iam::210987654321:role/torpor-invoke"],
        worker_max_concurrency=50,
        log_level="DEBUG",
    )
    other = lambda_.Function(stack, "Other", code=INLINE, handler="index.handler", runtime=lambda_.Runtime.PYTHON_3_11)
    control_plane.allow_invoke(other)
    RegisteredHandler(
        stack,
        "Registered",
        control_plane=control_plane,
        function=other,
        assume_role_arn="arn:aws:iam::210987654321:role/torpor-invoke",
    )
    template = Template.from_stack(stack)

    statements = _statements_of(template, "Invoke handler functions")
    invoke = [s for s in statements if s["Action"] == "lambda:InvokeFunction"]
    rendered = [s["Resource"] for s in invoke]
    assert rendered[0]["Fn::Join"][1][-3:] == [":function:acme-", {"Ref": "AWS::StackName"}, "_*"]
    other_arn = {"Fn::GetAtt": [stack.get_logical_id(other.node.default_child), "Arn"]}
    assert rendered[1][0] == other_arn
    assert rendered[1][1] == {"Fn::Join": ["", [other_arn, ":*"]]}
    assert {
        "Action": "sts:AssumeRole",
        "Effect": "Allow",
        "Resource": "arn:aws:iam::210987654321:role/torpor-invoke",
    } in statements

    template.has_resource_properties("AWS::Lambda::EventSourceMapping", {"ScalingConfig": {"MaximumConcurrency": 50}})
    template.has_resource_properties(
        "AWS::Lambda::Function",
        {"Handler": HANDLERS["ingress"], "Environment": {"Variables": Match.object_like({"LOG_LEVEL": "DEBUG"})}},
    )
    template.has_resource_properties(
        "Custom::TorporDeployment",
        {
            "FunctionVersionArn": {"Ref": Match.string_like_regexp("OtherCurrentVersion")},
            "AssumeRoleArn": "arn:aws:iam::210987654321:role/torpor-invoke",
        },
    )


def test_defaults_give_no_assume_role() -> None:
    stack, _ = _control_plane()
    statements = _statements_of(Template.from_stack(stack), "Invoke handler functions")
    assert [s["Action"] for s in statements] == ["lambda:InvokeFunction"]


def test_wake_transport_sqs_reaches_every_function_and_another_is_refused() -> None:
    stack, _ = _control_plane(wake_transport="sqs")
    functions = Template.from_stack(stack).find_resources("AWS::Lambda::Function")
    transports = [f["Properties"]["Environment"]["Variables"].get("TORPOR_WAKE") for f in functions.values()]
    assert transports == ["sqs"] * 5  # ingress, admin, worker, sweeper, deploy hook
    with pytest.raises(ValueError, match="wake_transport must be one of invoke, sqs, got 'eventbridge'"):
        _control_plane(wake_transport="eventbridge")


def test_worker_concurrency_out_of_range_is_refused() -> None:
    with pytest.raises(ValueError, match="worker_max_concurrency must be between 2 and 1000, got 1"):
        _control_plane(worker_max_concurrency=1)


def test_registered_handler_takes_one_function_or_version() -> None:
    stack, control_plane = _control_plane()
    with pytest.raises(ValueError, match="exactly one of function= and version="):
        RegisteredHandler(stack, "Neither", control_plane=control_plane)


def test_tracing_adds_xray_writes_on_star_and_nothing_else() -> None:
    """X-Ray has no resource ARNs: with tracing on, its two write actions are the only `*` resource."""
    stack, _ = _control_plane(tracing_active=True)
    template = Template.from_stack(stack)
    functions = template.find_resources("AWS::Lambda::Function")
    assert len(functions) == 5
    assert all(f["Properties"]["TracingConfig"] == {"Mode": "Active"} for f in functions.values())
    star = [
        statement
        for policy in template.find_resources("AWS::IAM::Policy").values()
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if statement["Resource"] == "*"
    ]
    assert len(star) == 5
    assert all(s["Action"] == ["xray:PutTraceSegments", "xray:PutTelemetryRecords"] for s in star), star


def _roles_with(template: Template, policy_id: str) -> set[str]:
    return {
        role_id
        for role_id, role in template.find_resources("AWS::IAM::Role").items()
        if {"Ref": policy_id} in role["Properties"].get("ManagedPolicyArns", [])
    }


@pytest.mark.parametrize(
    ("option", "value", "action", "variable"),
    [
        (
            "request_identity_key_parameter",
            "/torpor/request-identity-key",
            "ssm:GetParameter",
            "TORPOR_REQUEST_IDENTITY_KEY_SSM_PARAMETER",
        ),
        (
            "request_identity_key_secret_arn",
            "arn:aws:secretsmanager:eu-west-1:123456789012:secret:torpor-key-AbCdEf",
            "secretsmanager:GetSecretValue",
            "TORPOR_REQUEST_IDENTITY_KEY_SECRET_ARN",
        ),
    ],
)
def test_request_identity_key_is_readable_by_every_control_plane_function(
    option: str, value: str, action: str, variable: str
) -> None:
    """The functions that call deployments (discovery or invoke), all but the sweeper, read the key, and only it."""
    kms_key = "arn:aws:kms:eu-west-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
    stack, control_plane = _control_plane(**{option: value, "request_identity_key_kms_key_arn": kms_key})
    template = Template.from_stack(stack)
    statements = _statements_of(template, "Read the request identity key")
    assert [s["Action"] for s in statements] == [action, "kms:Decrypt"]
    if action == "ssm:GetParameter":
        assert statements[0]["Resource"]["Fn::Join"][1][-1] == ":parameter/torpor/request-identity-key"
    else:
        assert statements[0]["Resource"] == value
    assert statements[1]["Resource"] == kms_key
    via = statements[1]["Condition"]["StringEquals"]["kms:ViaService"]
    assert [v["Fn::Join"][1][0] for v in via] == ["ssm.", "secretsmanager."]
    assert control_plane.request_identity_key_policy is not None
    policy_id = stack.get_logical_id(control_plane.request_identity_key_policy.node.default_child)
    functions = template.find_resources("AWS::Lambda::Function")
    assert len(functions) == 5
    sweeper = {f["Properties"]["Role"]["Fn::GetAtt"][0] for f in functions.values() if f is _sweeper(functions)}
    roles = {f["Properties"]["Role"]["Fn::GetAtt"][0] for f in functions.values()} - sweeper
    assert len(roles) == 4
    assert _roles_with(template, policy_id) == roles
    for function in functions.values():
        expected = "" if function is _sweeper(functions) else value
        assert function["Properties"]["Environment"]["Variables"][variable] == expected


def _sweeper(functions: dict[str, Any]) -> dict[str, Any]:
    (sweeper,) = [f for f in functions.values() if f["Properties"]["Handler"] == HANDLERS["sweeper"]]
    return sweeper


def test_no_request_identity_key_gives_no_key_policy() -> None:
    stack, control_plane = _control_plane()
    assert control_plane.request_identity_key_policy is None
    descriptions = [
        p["Properties"].get("Description", "")
        for p in Template.from_stack(stack).find_resources("AWS::IAM::ManagedPolicy").values()
    ]
    assert not [d for d in descriptions if "request identity" in d]


def test_request_identity_key_from_two_places_is_refused() -> None:
    with pytest.raises(ValueError, match="not both"):
        _control_plane(request_identity_key_parameter="/k", request_identity_key_secret_arn="arn:aws:secretsmanager:x")


def test_google_credential_config_reaches_every_function_as_compact_json() -> None:
    config = {"type": "external_account", "audience": "//iam.googleapis.com/projects/1/locations/global/x"}
    stack, control_plane = _control_plane(google_credential_config=config)
    functions = Template.from_stack(stack).find_resources("AWS::Lambda::Function")
    assert len(functions) == 5
    for function in functions.values():
        variables = function["Properties"]["Environment"]["Variables"]
        if function["Properties"].get("Description", "").startswith("Torpor sweeper"):
            assert variables["TORPOR_GOOGLE_CREDENTIAL_CONFIG"] == ""  # it calls no deployment
            continue
        assert json.loads(variables["TORPOR_GOOGLE_CREDENTIAL_CONFIG"]) == config
    assert " " not in control_plane.environment["TORPOR_GOOGLE_CREDENTIAL_CONFIG"]  # Lambda's 4 KB of variables


def test_the_apps_context_sets_assume_roles_log_retention_google_credentials_and_ui_origins(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """`cdk deploy -c handlerAssumeRoleArns=… -c logRetentionDays=7 -c googleCredentialConfig=BASE64
    -c uiOrigins=…`, as the SAM parameters `HandlerAssumeRoleArns`, `LogRetentionDays`,
    `GoogleCredentialConfig` and `IngressUiOrigins`."""
    import base64

    from infra.app import build_app

    roles = ["arn:aws:iam::111122223333:role/a", "arn:aws:iam::111122223333:role/b"]
    config = {"type": "external_account", "audience": "//iam.googleapis.com/projects/1/x"}
    context = {
        "handlerAssumeRoleArns": ",".join(roles),
        "logRetentionDays": "7",
        "googleCredentialConfig": base64.b64encode(json.dumps(config).encode()).decode(),
        "exampleHandler": "false",
        "uiOrigins": ["http://127.0.0.1:9071", "http://localhost:9071"],  # as a list in cdk.json
    }
    _, stack = build_app(bundle=False, context=context, outdir=str(tmp_path_factory.mktemp("cdk-context")))
    template = Template.from_stack(stack)

    assert {g["Properties"]["RetentionInDays"] for g in template.find_resources("AWS::Logs::LogGroup").values()} == {7}
    assume = [
        statement
        for policy in template.find_resources("AWS::IAM::ManagedPolicy").values()
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if statement["Action"] == "sts:AssumeRole"
    ]
    assert [s["Resource"] for s in assume] == [roles]
    functions = template.find_resources("AWS::Lambda::Function").values()
    given = {f["Properties"]["Environment"]["Variables"]["TORPOR_GOOGLE_CREDENTIAL_CONFIG"] for f in functions}
    (configured,) = given - {""}  # the sweeper calls no deployment: it has none
    assert json.loads(configured) == config
    origins = {f["Properties"]["Environment"]["Variables"].get("TORPOR_UI_ORIGINS") for f in functions}
    assert origins == {None, "http://127.0.0.1:9071,http://localhost:9071"}  # the ingress's alone
    with pytest.raises(ValueError, match=r"logRetentionDays must be one of \[1, 3, 5, 7, 14, 30"):
        build_app(bundle=False, context={"logRetentionDays": "10"}, outdir=str(tmp_path_factory.mktemp("cdk-bad")))


def test_synth_warns_of_nothing(cdk_app: tuple[Any, Any]) -> None:
    """What `cdk synth` reports: every feature flag aws-cdk-lib knows is set in cdk.json (else the CLI
    prints "N feature flags are not configured"), and no construct adds a warning or an error."""
    app, stack = cdk_app
    assembly = app.synth()
    manifest = json.loads((Path(assembly.directory) / "manifest.json").read_text())
    reports = [a for a in manifest["artifacts"].values() if a["type"] == "cdk:feature-flag-report"]
    assert reports, "aws-cdk-lib wrote no feature flag report"
    flags = reports[0]["properties"]["flags"]
    unset = sorted(name for name, flag in flags.items() if "userValue" not in flag)
    assert not unset, f"{len(unset)} feature flags not set in cdk.json: {unset[:5]}"
    messages = assembly.get_stack_artifact(stack.artifact_id).messages
    noisy = [(m.level, m.id, m.entry.data) for m in messages if str(m.level).lower() != "info"]
    assert not noisy, noisy



QUEUE_ARN = "arn:aws:sqs:us-east-1:111122223333:orders.fifo"


def test_a_subscription_maps_its_queue_to_the_worker_and_is_declared_to_the_deploy_hook(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """`cdk deploy -c subscriptionQueueArn=… -c subscriptionSink=…`, as the SAM parameters
    `SubscriptionQueueArn` and `SubscriptionSink`: the stack lints clean and maps the queue to the
    worker, after the subscription exists, which the worker may consume."""
    from infra.app import build_app
    from tests.infra.linting import findings
    from tests.infra.test_lint import CDK_IGNORED

    context = {"subscriptionQueueArn": QUEUE_ARN, "subscriptionSink": "service://Counter/add"}
    _, stack = build_app(bundle=False, context=context, outdir=str(tmp_path_factory.mktemp("cdk-subscription")))
    template = Template.from_stack(stack)

    (resource_id,) = template.find_resources("Custom::TorporSubscription")
    template.has_resource_properties(
        "Custom::TorporSubscription", {"Source": "sqs://orders.fifo", "Sink": "service://Counter/add"}
    )
    mappings = template.find_resources("AWS::Lambda::EventSourceMapping", {"Properties": {"EventSourceArn": QUEUE_ARN}})
    ((_, mapping),) = mappings.items()
    assert mapping["Properties"]["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert resource_id in mapping["DependsOn"]
    worker = mapping["Properties"]["FunctionName"]["Ref"]
    assert template.to_json()["Resources"][worker]["Properties"]["Handler"] == HANDLERS["worker"]
    consume = [
        s
        for policy in template.find_resources("AWS::IAM::Policy").values()
        for s in policy["Properties"]["PolicyDocument"]["Statement"]
        if s.get("Resource") == QUEUE_ARN
    ]
    assert consume and "sqs:ReceiveMessage" in consume[0]["Action"]
    assert list(findings(json.dumps(template.to_json(), indent=1), tuple(sorted(CDK_IGNORED)))) == []


def test_a_subscription_sink_must_name_a_handler() -> None:
    from aws_cdk import aws_sqs as sqs

    from infra.constructs import TorporSubscription

    stack, control_plane = _control_plane()
    queue = sqs.Queue.from_queue_arn(stack, "Q", QUEUE_ARN)
    with pytest.raises(ValueError, match="service://Service/handler"):
        TorporSubscription(stack, "S", control_plane=control_plane, queue=queue, sink="Counter/add")
