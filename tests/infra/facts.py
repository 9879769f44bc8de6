"""Read the same facts out of `template.yaml` (SAM) and the CDK-synthesized template.

The two templates name their resources differently (`Table` vs `ControlPlaneTable1210433C`) and
spell references differently (`!Sub "${Table.Arn}/index/by_status_v2"` vs a `Fn::Join`). `Facts`
gives each resource a canonical name found from what it is (the one table; the queue with a redrive
policy; the function whose handler is `...ingress_handler`, its role and its log group; ...) and
renders every reference as a string over those names, e.g.
`arn:${AWS::Partition}:scheduler:${AWS::Region}:${AWS::AccountId}:schedule/${ScheduleGroup}/*`.
A parameter renders as its default. Tests then compare both templates with the same expected values.

SAM functions (`AWS::Serverless::Function`) are read as `AWS::Lambda::Function` with the template's
`Globals` merged in; `!Ref Fn.Version` (AutoPublishAlias) and a CDK `AWS::Lambda::Version` of the
function both render as `${<Function>.Version}`.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
SAM_TEMPLATE = REPO_ROOT / "template.yaml"

HANDLER_NAMES = {
    "adapters.aws.lambda_app.ingress_handler": "Ingress",
    "adapters.aws.lambda_app.admin_handler": "Admin",
    "adapters.aws.lambda_app.worker_handler": "Worker",
    "adapters.aws.lambda_app.sweeper_handler": "Sweeper",
    "adapters.aws.lambda_app.deploy_hook_handler": "DeployHook",
    "adapters.aws.checkpoints.handler": "ExampleHandler",  # driving examples.app:app (TORPOR_APP)
}
"""Canonical name of each function, by its handler string."""

_SUB_VARIABLE = re.compile(r"\$\{([^}]+)\}")


@dataclass(frozen=True)
class Statement:
    """One IAM policy statement, its resources rendered, and whether a condition (`Fn::If`) guards it."""

    effect: str
    actions: tuple[str, ...]
    resources: tuple[str, ...]
    condition: dict[str, Any] | None
    guarded: bool
    raw: dict[str, Any]

    def pairs(self) -> set[tuple[str, str]]:
        """Every (action, resource) this statement allows."""
        return {(action, resource) for action in self.actions for resource in self.resources}


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def dynamodb_request_context(operation: str, kwargs: dict[str, Any]) -> dict[str, list[str]]:
    """The IAM condition keys DynamoDB evaluates for one low-level request (`operation`, botocore's
    `kwargs`): `dynamodb:LeadingKeys` (the partition keys it names), `dynamodb:Attributes` (the
    top-level attribute names it names: key, item, expressions), `dynamodb:ReturnValues` if sent and,
    for a read, `dynamodb:Select` (`SPECIFIC_ATTRIBUTES` with a projection, else `ALL_ATTRIBUTES`).
    (AWS DynamoDB developer guide, "Using IAM policy conditions for fine-grained access control".)"""
    keys: list[str] = [kwargs[k]["PK"]["S"] for k in ("Key", "Item") if k in kwargs]
    attributes: set[str] = set()
    for part in ("Key", "Item"):
        attributes |= set(kwargs.get(part) or {})
    attributes |= set((kwargs.get("ExpressionAttributeNames") or {}).values())
    for requests in kwargs.get("RequestItems", {}).values():
        for request in requests if isinstance(requests, list) else requests["Keys"]:
            put, delete = request.get("PutRequest", {}), request.get("DeleteRequest", {})
            item = put.get("Item") or delete.get("Key") or request  # BatchGetItem: the key itself
            keys.append(item["PK"]["S"])
            attributes |= set(item)
    context = {"dynamodb:LeadingKeys": keys, "dynamodb:Attributes": sorted(attributes)}
    if kwargs.get("ReturnValues"):
        context["dynamodb:ReturnValues"] = [kwargs["ReturnValues"]]
    if operation in ("GetItem", "Query", "Scan"):  # a read names its attributes, or reads them all
        projected = "ProjectionExpression" in kwargs or "AttributesToGet" in kwargs
        select = kwargs.get("Select") or ("SPECIFIC_ATTRIBUTES" if projected else "ALL_ATTRIBUTES")
        context["dynamodb:Select"] = [select]
    return context


def condition_holds(condition: dict[str, Any] | None, context: dict[str, list[str]]) -> bool:
    """Whether an IAM `Condition` block holds for a request's condition keys (`context`): the
    operators Torpor's templates use (`ForAllValues:StringLike`, `ForAllValues:StringEquals`,
    `StringEqualsIfExists`, `StringEquals`). Every operator and key must hold (IAM: AND)."""
    import fnmatch

    for operator, tests in (condition or {}).items():
        for key, allowed in tests.items():
            allowed_values = [str(v) for v in _as_list(allowed)]
            values = context.get(key)
            if operator == "ForAllValues:StringLike":
                ok = all(any(fnmatch.fnmatchcase(v, p) for p in allowed_values) for v in values or [])
            elif operator == "ForAllValues:StringEquals":
                ok = all(v in allowed_values for v in values or [])
            elif operator == "StringEqualsIfExists":
                ok = values is None or any(v in allowed_values for v in values)
            elif operator == "StringEquals":
                ok = values is not None and any(v in allowed_values for v in values)
            else:
                raise AssertionError(f"condition operator {operator} is not evaluated here")
            if not ok:
                return False
    return True


class Facts:
    """Canonical names and rendered values of one CloudFormation (or SAM) template.

    Args:
        template: The template as a dict (intrinsics as `{"Ref": ...}`, `{"Fn::GetAtt": ...}`).
    """

    def __init__(self, template: dict[str, Any]) -> None:
        self.template = template
        self.parameters = {name: p.get("Default") for name, p in template.get("Parameters", {}).items()}
        self.resources: dict[str, dict[str, Any]] = {}
        globals_ = template.get("Globals", {}).get("Function", {})
        for logical_id, resource in template["Resources"].items():
            resource = copy.deepcopy(resource)
            if resource["Type"] == "AWS::Serverless::Function":
                resource["Properties"] = {**copy.deepcopy(globals_), **resource.get("Properties", {})}
                resource["Type"] = "AWS::Lambda::Function"
                resource["Sam"] = True
            self.resources[logical_id] = resource
        self.names = self._name_resources()

    # --- looking up ---------------------------------------------------------------------------------

    def of_type(self, resource_type: str) -> dict[str, dict[str, Any]]:
        """The resources of one type, by logical id."""
        return {k: v for k, v in self.resources.items() if v["Type"] == resource_type}

    def props(self, logical_id: str) -> dict[str, Any]:
        """A resource's properties."""
        return dict(self.resources[logical_id].get("Properties", {}))

    def id_of(self, name: str) -> str:
        """The logical id of the resource with canonical `name`.

        Raises:
            KeyError: No resource has that name.
        """
        for logical_id, canonical in self.names.items():
            if canonical == name:
                return logical_id
        raise KeyError(f"no resource is {name}; names: {sorted(self.names.values())}")

    def function(self, name: str) -> dict[str, Any]:
        """The properties of the function with canonical name `name` (e.g. `IngressFunction`)."""
        return self.props(self.id_of(name))

    @staticmethod
    def target(value: Any) -> str | None:
        """The logical id a `Ref` or `Fn::GetAtt` points at, else None."""
        if isinstance(value, dict) and "Ref" in value:
            return str(value["Ref"]).split(".")[0]
        if isinstance(value, dict) and "Fn::GetAtt" in value:
            getatt = value["Fn::GetAtt"]
            return str(getatt[0] if isinstance(getatt, list) else getatt.split(".")[0])
        return None

    # --- naming -------------------------------------------------------------------------------------

    def _name_resources(self) -> dict[str, str]:
        names: dict[str, str] = {}
        self.names = names  # filled in order: later steps render references to earlier names
        for logical_id in self.of_type("AWS::DynamoDB::Table"):
            names[logical_id] = "Table"
        for logical_id in self.of_type("AWS::S3::Bucket"):
            names[logical_id] = "BlobBucket"
        queues = self.of_type("AWS::SQS::Queue")
        for logical_id, queue in queues.items():
            redrive = queue.get("Properties", {}).get("RedrivePolicy")
            if redrive:
                names[logical_id] = "TimerQueue" if "TimerQueue" in logical_id else "WakeQueue"
                dead_letter = self.target(redrive.get("deadLetterTargetArn"))
                if dead_letter:
                    names[dead_letter] = "WakeDeadLetterQueue"
        for logical_id in queues:
            names.setdefault(logical_id, "ScheduleDeadLetterQueue")
        for logical_id in self.of_type("AWS::Scheduler::ScheduleGroup"):
            names[logical_id] = "ScheduleGroup"
        for logical_id, role in self.of_type("AWS::IAM::Role").items():
            services = {
                service
                for statement in role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
                for service in _as_list(statement.get("Principal", {}).get("Service", []))
            }
            if services == {"scheduler.amazonaws.com"}:
                names[logical_id] = "SchedulerRole"
        for logical_id, function in self.of_type("AWS::Lambda::Function").items():
            props = function["Properties"]
            base = HANDLER_NAMES.get(props.get("Handler", ""))
            if base is None:
                continue
            names[logical_id] = f"{base}Function"
            role = self.target(props.get("Role"))
            if role:
                names[role] = f"{base}Role"
            log_group = self.target(props.get("LoggingConfig", {}).get("LogGroup"))
            if log_group:
                names[log_group] = f"{base}LogGroup"
        for logical_id, integration in self.of_type("AWS::ApiGatewayV2::Integration").items():
            function_name = names.get(self.target(integration["Properties"].get("IntegrationUri")) or "", "")
            base = function_name.removesuffix("Function")
            if base:
                names[logical_id] = f"{base}Integration"
                api = self.target(integration["Properties"].get("ApiId"))
                if api:
                    names[api] = f"{base}Api"
        for logical_id, authorizer in self.of_type("AWS::ApiGatewayV2::Authorizer").items():
            api = names.get(self.target(authorizer["Properties"].get("ApiId")) or "", "")
            if api:
                names[logical_id] = (
                    f"{api.removesuffix('Api')}{authorizer['Properties']['AuthorizerType'].title()}Authorizer"
                )
        for logical_id in self.of_type("AWS::SNS::Topic"):
            names[logical_id] = "AlarmTopic"
        for logical_id, resource in self.of_type("Custom::TorporDeployment").items():
            version = str(self.render(resource["Properties"].get("FunctionVersionArn", "")))
            if version.startswith("${") and version.endswith("Function.Version}"):
                names[logical_id] = version[2:].removesuffix("Function.Version}") + "Deployment"
        for logical_id, rule in self.of_type("AWS::Events::Rule").items():
            for target in rule["Properties"].get("Targets", []):
                if names.get(self.target(target.get("Arn")) or "") == "SweeperFunction":
                    names[logical_id] = "SweeperSchedule"
        return names

    def name(self, logical_id: str) -> str:
        """The canonical name of a logical id (`?{id}` for one with none, which no expectation matches)."""
        return self.names.get(logical_id, f"?{logical_id}")

    # --- rendering ----------------------------------------------------------------------------------

    def _ref(self, target: str) -> str:
        if target in self.parameters:
            return str(self.parameters[target])
        if target.startswith("AWS::"):
            return "${" + target + "}"
        if target.endswith(".Version"):  # SAM AutoPublishAlias: !Ref Function.Version
            return "${" + self.name(target.removesuffix(".Version")) + ".Version}"
        resource = self.resources.get(target)
        if resource is not None and resource["Type"] == "AWS::Lambda::Version":
            function = self.target(resource["Properties"]["FunctionName"]) or "?"
            return "${" + self.name(function) + ".Version}"
        return "${" + self.name(target) + "}"

    def _getatt(self, logical_id: str, attribute: str) -> str:
        return "${" + self.name(logical_id) + "." + attribute + "}"

    def render(self, value: Any) -> Any:
        """`value` with every intrinsic rendered as a string over canonical names (lists stay lists).

        Raises:
            ValueError: An intrinsic this reader does not know (so a test fails instead of guessing).
        """
        if isinstance(value, bool):
            return str(value).lower()
        if isinstance(value, str | int | float):
            return str(value)
        if isinstance(value, list):
            return [self.render(item) for item in value]
        if isinstance(value, dict) and len(value) == 1:
            ((key, arg),) = value.items()
            if key == "Ref":
                return self._ref(str(arg))
            if key == "Fn::GetAtt":
                logical_id, attribute = arg if isinstance(arg, list) else arg.split(".", 1)
                return self._getatt(logical_id, attribute)
            if key == "Fn::Join":
                separator, parts = arg
                if isinstance(parts, dict):  # a list parameter (CommaDelimitedList): its comma-separated value
                    parts = str(self.render(parts)).split(",")
                return separator.join(str(self.render(part)) for part in parts)
            if key == "Fn::Sub":
                text, variables = (arg, {}) if isinstance(arg, str) else arg
                return self._sub(text, variables)
        raise ValueError(f"cannot render {value!r}")

    def _sub(self, text: str, variables: dict[str, Any]) -> str:
        def replace(match: re.Match[str]) -> str:
            name = match.group(1)
            if name.startswith("!"):
                return "${" + name[1:] + "}"
            if name in variables:
                return str(self.render(variables[name]))
            if "." in name and not name.startswith("AWS::"):
                logical_id, attribute = name.split(".", 1)
                return self._getatt(logical_id, attribute)
            return self._ref(name)

        return _SUB_VARIABLE.sub(replace, text)

    # --- IAM ----------------------------------------------------------------------------------------

    def _statements(self, document: dict[str, Any], guarded: bool = False) -> Iterator[Statement]:
        for item in _as_list(document.get("Statement", [])):
            yield from self._statement(item, guarded)

    def _statement(self, item: Any, guarded: bool) -> Iterator[Statement]:
        if isinstance(item, dict) and "Fn::If" in item:
            _, when_true, when_false = item["Fn::If"]
            for branch in (when_true, when_false):
                if branch != {"Ref": "AWS::NoValue"}:
                    yield from self._statement(branch, True)
            return
        yield Statement(
            effect=item["Effect"],
            actions=tuple(_as_list(item.get("Action", []))),
            resources=tuple(str(r) for r in self.render(_as_list(item.get("Resource", [])))),
            condition=item.get("Condition"),
            guarded=guarded,
            raw=item,
        )

    def managed_policies(self, role_id: str) -> list[tuple[str | None, bool]]:
        """The managed policies a role attaches: (logical id or None if not in the template, guarded)."""
        found = []
        for arn in self.props(role_id).get("ManagedPolicyArns", []):
            guarded = isinstance(arn, dict) and "Fn::If" in arn  # !If [Condition, !Ref Policy, !Ref AWS::NoValue]
            managed = self.target(arn["Fn::If"][1] if guarded else arn)
            found.append((managed if managed in self.resources else None, guarded))
        return found

    def role_statements(self, role_id: str) -> list[Statement]:
        """Every statement that applies to a role: inline, attached managed policies, `AWS::IAM::Policy`."""
        props = self.props(role_id)
        found: list[Statement] = []
        for policy in props.get("Policies", []):
            found += self._statements(policy["PolicyDocument"])
        for managed, guarded in self.managed_policies(role_id):
            if managed is None:
                raise ValueError(f"role {role_id} attaches a managed policy that is not in the template")
            found += self._statements(self.props(managed)["PolicyDocument"], guarded)
        for policy_type in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
            for policy in self.of_type(policy_type).values():
                roles = [self.target(r) for r in policy["Properties"].get("Roles", [])]
                if role_id in roles:  # a policy with a condition is created only when it holds
                    found += self._statements(policy["Properties"]["PolicyDocument"], "Condition" in policy)
        return found

    def all_policy_statements(self) -> Iterator[tuple[str, Statement]]:
        """Every identity-policy statement in the template, with the logical id it is written in."""
        for logical_id, role in self.of_type("AWS::IAM::Role").items():
            for policy in role["Properties"].get("Policies", []):
                for statement in self._statements(policy["PolicyDocument"]):
                    yield logical_id, statement
        for policy_type in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
            for logical_id, policy in self.of_type(policy_type).items():
                guarded = "Condition" in policy  # created only when its condition holds
                for statement in self._statements(policy["Properties"]["PolicyDocument"], guarded):
                    yield logical_id, statement
