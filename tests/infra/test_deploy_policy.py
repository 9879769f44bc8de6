"""infra/deploy-policy.json, the least-privilege policy of whoever deploys the stack (docs/deploying.md).

Each resource type the stacks create (template.yaml after SAM's transform, and the CDK app's) needs
the actions that create, update and delete it, on resources named after the stack (`torpor*`), and
nothing is granted on every resource but reads and what cannot be scoped by name.
"""

from __future__ import annotations

import fnmatch
import json
from typing import Any

import pytest

from tests.infra.facts import REPO_ROOT

POLICY = REPO_ROOT / "infra" / "deploy-policy.json"

NEEDED = {
    "AWS::DynamoDB::Table": ["dynamodb:CreateTable", "dynamodb:UpdateTable", "dynamodb:UpdateTimeToLive",
                             "dynamodb:UpdateContinuousBackups", "dynamodb:DescribeTable"],
    "AWS::SQS::Queue": ["sqs:CreateQueue", "sqs:SetQueueAttributes", "sqs:GetQueueAttributes", "sqs:DeleteQueue"],
    "AWS::IAM::Role": ["iam:CreateRole", "iam:PutRolePolicy", "iam:AttachRolePolicy", "iam:DeleteRole",
                       "iam:DeleteRolePolicy", "iam:DetachRolePolicy", "iam:GetRole", "iam:PassRole"],
    "AWS::IAM::ManagedPolicy": ["iam:CreatePolicy", "iam:CreatePolicyVersion", "iam:DeletePolicy",
                                "iam:DeletePolicyVersion", "iam:ListPolicyVersions"],
    "AWS::IAM::Policy": ["iam:PutRolePolicy", "iam:DeleteRolePolicy"],
    "AWS::Lambda::Function": ["lambda:CreateFunction", "lambda:UpdateFunctionCode",
                              "lambda:UpdateFunctionConfiguration", "lambda:DeleteFunction", "lambda:GetFunction"],
    "AWS::Lambda::Version": ["lambda:PublishVersion"],
    "AWS::Lambda::Alias": ["lambda:CreateAlias", "lambda:UpdateAlias", "lambda:DeleteAlias"],
    "AWS::Lambda::Permission": ["lambda:AddPermission", "lambda:RemovePermission"],
    "AWS::Lambda::EventSourceMapping": ["lambda:CreateEventSourceMapping", "lambda:UpdateEventSourceMapping",
                                        "lambda:DeleteEventSourceMapping"],
    "AWS::Logs::LogGroup": ["logs:CreateLogGroup", "logs:PutRetentionPolicy", "logs:DeleteLogGroup"],
    "AWS::Scheduler::ScheduleGroup": ["scheduler:CreateScheduleGroup", "scheduler:DeleteScheduleGroup"],
    "AWS::Events::Rule": ["events:PutRule", "events:PutTargets", "events:RemoveTargets", "events:DeleteRule"],
    "AWS::ApiGatewayV2::Api": ["apigateway:POST", "apigateway:PATCH", "apigateway:DELETE", "apigateway:GET"],
    "AWS::ApiGatewayV2::Authorizer": ["apigateway:POST", "apigateway:DELETE"],
    "AWS::ApiGatewayV2::Integration": ["apigateway:POST", "apigateway:DELETE"],
    "AWS::ApiGatewayV2::Route": ["apigateway:POST", "apigateway:DELETE"],
    "AWS::ApiGatewayV2::Stage": ["apigateway:POST", "apigateway:DELETE"],
    "AWS::SNS::Topic": ["sns:CreateTopic", "sns:DeleteTopic", "sns:GetTopicAttributes"],
    "AWS::SNS::Subscription": ["sns:Subscribe", "sns:Unsubscribe"],
    "AWS::CloudWatch::Alarm": ["cloudwatch:PutMetricAlarm", "cloudwatch:DeleteAlarms"],
    "Custom::TorporDeployment": ["lambda:InvokeFunction"],  # CloudFormation invokes the deploy hook
    "Custom::TorporSchedule": ["lambda:InvokeFunction"],
    "AWS::S3::Bucket": ["s3:CreateBucket", "s3:PutEncryptionConfiguration", "s3:PutBucketPublicAccessBlock",
                        "s3:PutBucketOwnershipControls", "s3:PutLifecycleConfiguration", "s3:DeleteBucket"],
    "Custom::TorporSubscription": ["lambda:InvokeFunction"],
    "AWS::CDK::Metadata": [],
}
"""Resource type → the deployer's actions CloudFormation needs to create, update and delete it."""

FROM_SAM = {
    "AWS::Serverless::Function": ["AWS::Lambda::Function", "AWS::Lambda::Version", "AWS::Lambda::Alias",
                                  "AWS::Lambda::Permission", "AWS::Lambda::EventSourceMapping", "AWS::IAM::Role"],
}  # fmt: skip
"""SAM's resource types → what its transform makes of them (a superset)."""

UNSCOPED = {
    "cloudformation:ValidateTemplate",
    "cloudformation:GetTemplateSummary",
    "cloudformation:ListStacks",
    "lambda:GetEventSourceMapping",
    "lambda:ListEventSourceMappings",
    "logs:DescribeLogGroups",
}
"""Actions granted on `*` without a condition: reads whose resource cannot be named in advance."""


def _statements() -> list[dict[str, Any]]:
    document = json.loads(POLICY.read_text())
    assert document["Version"] == "2012-10-17"
    return list(document["Statement"])


def _listed(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def _types(template: dict[str, Any]) -> set[str]:
    types: set[str] = set()
    for resource in template["Resources"].values():
        types.update(FROM_SAM.get(resource["Type"], [resource["Type"]]))
    return types


@pytest.mark.parametrize("which", ["sam", "cdk"])
def test_every_resource_type_the_stack_creates_is_covered(which: str, request: pytest.FixtureRequest) -> None:
    types = _types(request.getfixturevalue(f"{which}_template"))
    unknown = sorted(types - set(NEEDED))
    assert not unknown, f"add what deploying {unknown} needs to infra/deploy-policy.json and NEEDED"
    granted = {action for s in _statements() if s["Effect"] == "Allow" for action in _listed(s["Action"])}
    missing = {t: sorted(set(NEEDED[t]) - granted) for t in types if set(NEEDED[t]) - granted}
    assert not missing, missing


def test_writes_are_scoped_to_the_stacks_names() -> None:
    """Every statement names `torpor*` resources (or SAM's bucket and transform), or grants reads only,
    or is held by a condition naming `torpor*`."""
    for statement in _statements():
        resources = _listed(statement["Resource"])
        if resources == ["*"]:
            condition = json.dumps(statement.get("Condition", {}))
            assert set(_listed(statement["Action"])) <= UNSCOPED or "function:torpor*" in condition, statement["Sid"]
            continue
        for resource in resources:
            name = resource.split(":", 5)[-1]
            assert fnmatch.fnmatch(name, "*torpor*") or "aws-sam-cli-managed-default" in resource or (
                resource.endswith("transform/Serverless-2016-10-31") or "/apis" in resource or "/tags/" in resource
            ), (statement["Sid"], resource)


def test_pass_role_only_to_the_stacks_services() -> None:
    (statement,) = [s for s in _statements() if "iam:PassRole" in _listed(s["Action"])]
    services = statement["Condition"]["StringEquals"]["iam:PassedToService"]
    assert set(services) == {"lambda.amazonaws.com", "scheduler.amazonaws.com"}
