"""The CDK app through `aws_cdk.assertions`: the stack `cdk synth` makes, and the constructs' options.

`test_resources.py` checks the same facts on both templates with canonical names; these checks use
the assertions API on the synthesized stack itself, and cover what only the constructs offer
(`allow_invoke`, `handler_assume_role_arns`, `RegisteredHandler`'s arguments).
"""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_lambda as lambda_
from aws_cdk.assertions import Match, Template

from infra.constructs import HANDLERS, RegisteredHandler, TorporControlPlane

INLINE = lambda_.Code.from_inline("def handler(event, context):\n    return None\n")
"""Stand-in code for the construct variants (their assets are not what these tests are about)."""

ENVIRONMENT_KEYS = {
    "TORPOR_TABLE",
    "TORPOR_WAKE_QUEUE_URL",
    "TORPOR_WAKE_QUEUE_ARN",
    "TORPOR_SCHEDULE_GROUP",
    "TORPOR_SCHEDULER_ROLE_ARN",
    "TORPOR_SCHEDULE_DLQ_ARN",
    "POWERTOOLS_SERVICE_NAME",
    "POWERTOOLS_METRICS_NAMESPACE",
    "LOG_LEVEL",
}


def test_table(cdk_assertions: Template) -> None:
    cdk_assertions.resource_count_is("AWS::DynamoDB::Table", 1)
    cdk_assertions.has_resource(
        "AWS::DynamoDB::Table",
        {
            "Properties": {
                "KeySchema": [{"AttributeName": "PK", "KeyType": "HASH"}, {"AttributeName": "SK", "KeyType": "RANGE"}],
                "BillingMode": "PAY_PER_REQUEST",
                "GlobalSecondaryIndexes": [
                    {
                        "IndexName": "by_status",
                        "KeySchema": [
                            {"AttributeName": "status_pk", "KeyType": "HASH"},
                            {"AttributeName": "status_sk", "KeyType": "RANGE"},
                        ],
                        "Projection": {"ProjectionType": "ALL"},
                    }
                ],
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


def test_admin_routes_use_iam_and_ingress_routes_do_not(cdk_assertions: Template) -> None:
    routes = cdk_assertions.find_resources("AWS::ApiGatewayV2::Route")
    assert sorted(r["Properties"].get("AuthorizationType", "NONE") for r in routes.values()) == ["AWS_IAM", "NONE"]
    apis = cdk_assertions.find_resources(
        "AWS::ApiGatewayV2::Api", {"Properties": {"Description": Match.string_like_regexp("admin")}}
    )
    (admin_api,) = apis
    cdk_assertions.has_resource_properties(
        "AWS::ApiGatewayV2::Route",
        {"ApiId": {"Ref": admin_api}, "RouteKey": "$default", "AuthorizationType": "AWS_IAM"},
    )


def test_worker_event_source(cdk_assertions: Template) -> None:
    cdk_assertions.resource_count_is("AWS::Lambda::EventSourceMapping", 1)
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
    assert props["Runtime"] == "python3.11"
    assert props["Architectures"] == ["arm64"]
    extra = {"TORPOR_INGRESS_URL"} if kind == "admin" else set()
    assert set(props["Environment"]["Variables"]) == ENVIRONMENT_KEYS | extra
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
    assert rendered[0]["Fn::Join"][1][-1] == ":function:acme-*"
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
