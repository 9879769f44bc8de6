"""Who may call the ingress, in each mode (`AWS_IAM`, `JWT`, `NONE`), on both templates.

SAM: the `IngressAuth`, `JwtIssuer` and `JwtAudience` parameters, with the template's conditions and
rules evaluated for them. CDK: the app synthesized with the `ingressAuth`, `jwtIssuer` and
`jwtAudience` context (what `cdk deploy -c ...` passes), i.e. `TorporControlPlane(ingress_auth=...)`.
Each variant must also lint clean.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk.assertions import Template

from infra.constructs import TorporControlPlane
from tests.infra.facts import SAM_TEMPLATE, Facts
from tests.infra.test_lint import CDK_IGNORED, _findings
from tests.infra.test_resources import _holds, refused_by_rules

MODES = ("AWS_IAM", "JWT", "NONE")
ISSUER = "https://cognito-idp.eu-west-1.amazonaws.com/eu-west-1_Example1"
AUDIENCE = "4example0client0id"


def _sam(sam_template: dict[str, Any], mode: str, issuer: str = ISSUER, audience: str = AUDIENCE) -> Facts:
    facts = Facts(sam_template)
    facts.parameters["IngressAuth"] = mode
    if mode == "JWT":
        facts.parameters["JwtIssuer"] = issuer
        facts.parameters["JwtAudience"] = audience
    return facts


_cdk_cache: dict[str, dict[str, Any]] = {}


def _cdk(mode: str, tmp_path_factory: pytest.TempPathFactory) -> Facts:
    if mode not in _cdk_cache:
        from infra.app import build_app

        context = {"ingressAuth": mode}
        if mode == "JWT":
            context |= {"jwtIssuer": ISSUER, "jwtAudience": AUDIENCE}
        _, stack = build_app(bundle=False, context=context, outdir=str(tmp_path_factory.mktemp(f"cdk-{mode}")))
        _cdk_cache[mode] = dict(Template.from_stack(stack).to_json())
    return Facts(_cdk_cache[mode])


@pytest.fixture(params=["sam", "cdk"])
def source(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _facts(source: str, mode: str, sam_template: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Facts:
    return _sam(sam_template, mode) if source == "sam" else _cdk(mode, tmp_path_factory)


def _in_effect(facts: Facts, value: Any) -> Any:
    """`value` with `Fn::If` on the template's conditions decided for `facts.parameters`; None for
    `AWS::NoValue`."""
    if isinstance(value, dict) and "Fn::If" in value:
        condition, when_true, when_false = value["Fn::If"]
        return _in_effect(facts, when_true if _holds(facts, {"Condition": condition}) else when_false)
    if value == {"Ref": "AWS::NoValue"}:
        return None
    return value


def _exists(facts: Facts, logical_id: str) -> bool:
    condition = facts.resources[logical_id].get("Condition")
    return condition is None or _holds(facts, {"Condition": condition})


def _route(facts: Facts, api: str) -> dict[str, Any]:
    api_id = facts.id_of(api)
    (route,) = [
        facts.props(r)
        for r in facts.of_type("AWS::ApiGatewayV2::Route")
        if facts.target(facts.props(r)["ApiId"]) == api_id
    ]
    return route


@pytest.mark.parametrize("mode", MODES)
def test_the_ingress_route_requires_the_mode_and_the_function_knows_it(
    source: str, mode: str, sam_template: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> None:
    facts = _facts(source, mode, sam_template, tmp_path_factory)
    route = _route(facts, "IngressApi")
    assert facts.render(route.get("AuthorizationType", "NONE")) == mode
    authorizers = [a for a in facts.of_type("AWS::ApiGatewayV2::Authorizer") if _exists(facts, a)]
    authorizer_ref = _in_effect(facts, route.get("AuthorizerId"))
    if mode == "JWT":
        (authorizer_id,) = authorizers
        assert facts.name(authorizer_id) == "IngressJwtAuthorizer"
        assert facts.target(authorizer_ref) == authorizer_id
        props = facts.props(authorizer_id)
        assert props["AuthorizerType"] == "JWT"
        assert props["IdentitySource"] == ["$request.header.Authorization"]
        assert facts.render(props["JwtConfiguration"]["Issuer"]) == ISSUER
        audience = facts.render(props["JwtConfiguration"]["Audience"])
        assert (audience if isinstance(audience, list) else [audience]) == [AUDIENCE]
    else:
        assert authorizers == []
        assert authorizer_ref is None
    variables = facts.function("IngressFunction")["Environment"]["Variables"]
    assert facts.render(variables["TORPOR_INGRESS_AUTH"]) == mode
    assert _route(facts, "AdminApi")["AuthorizationType"] == "AWS_IAM"  # whatever the ingress takes
    if source == "sam":
        assert refused_by_rules(facts) == []  # the stack's rules accept the mode


@pytest.mark.parametrize("mode", MODES)
def test_each_mode_lints_clean(
    source: str, mode: str, sam_template: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> None:
    if source == "cdk":
        assert _findings(json.dumps(_cdk(mode, tmp_path_factory).template, indent=1), CDK_IGNORED) == []
        return
    text = SAM_TEMPLATE.read_text()

    def default(parameter: str, kind: str, old: str, new: str) -> str:
        head = f"  {parameter}:\n    Type: {kind}\n    Default: "
        assert head + old + "\n" in variant, parameter
        return variant.replace(head + old + "\n", head + new + "\n")

    variant = text
    variant = default("IngressAuth", "String", "AWS_IAM", mode)
    if mode == "JWT":
        variant = default("JwtIssuer", "String", '""', f'"{ISSUER}"')
        variant = default("JwtAudience", "CommaDelimitedList", '""', f'"{AUDIENCE}"')
    assert (variant != text) == (mode != "AWS_IAM")
    assert _findings(variant) == []


@pytest.mark.parametrize(("issuer", "audience"), [("", AUDIENCE), (ISSUER, ""), ("", "")])
def test_jwt_without_issuer_or_audience_is_refused(sam_template: dict[str, Any], issuer: str, audience: str) -> None:
    """CloudFormation checks the rule before creating anything; the construct raises."""
    assert refused_by_rules(_sam(sam_template, "JWT", issuer, audience)) == [
        "IngressAuth JWT needs JwtIssuer and JwtAudience."
    ]
    stack = Stack(App(context={"aws:cdk:bundling-stacks": []}), "Variant")
    with pytest.raises(ValueError, match="ingress_auth JWT needs jwt_issuer and jwt_audience"):
        TorporControlPlane(
            stack,
            "ControlPlane",
            code=lambda_.Code.from_inline("def handler(e, c):\n    return None\n"),
            ingress_auth="JWT",
            jwt_issuer=issuer or None,
            jwt_audience=[audience] if audience else [],
        )


def test_an_unknown_mode_is_refused() -> None:
    stack = Stack(App(context={"aws:cdk:bundling-stacks": []}), "Variant")
    with pytest.raises(ValueError, match="ingress_auth must be one of AWS_IAM, JWT, NONE, got 'IAM'"):
        TorporControlPlane(stack, "ControlPlane", code=lambda_.Code.from_inline("x = 1\n"), ingress_auth="IAM")
    assert sam_allowed_values() == list(MODES)


def sam_allowed_values() -> list[str]:
    from cfnlint.decode.cfn_yaml import load

    return list(load(str(SAM_TEMPLATE))["Parameters"]["IngressAuth"]["AllowedValues"])


def test_grant_ingress_access_allows_execute_api_invoke_on_the_ingress_only() -> None:
    stack = Stack(App(context={"aws:cdk:bundling-stacks": []}), "Variant")
    control_plane = TorporControlPlane(stack, "ControlPlane", code=lambda_.Code.from_inline("x = 1\n"))
    caller = iam.Role(stack, "Caller", assumed_by=iam.AccountRootPrincipal())
    control_plane.grant_ingress_access(caller)
    template = Template.from_stack(stack)
    (policy,) = [
        p
        for p in template.find_resources("AWS::IAM::Policy").values()
        if {"Ref": stack.get_logical_id(caller.node.default_child)} in p["Properties"]["Roles"]
    ]
    (statement,) = policy["Properties"]["PolicyDocument"]["Statement"]
    assert statement["Action"] == "execute-api:Invoke"
    ingress_api = stack.get_logical_id(control_plane.ingress_api.node.default_child)
    assert {"Ref": ingress_api} in statement["Resource"]["Fn::Join"][1]


def test_the_stacks_and_the_ingress_function_know_the_same_auth_modes() -> None:
    """infra/ imports nothing of the control plane (it synthesizes without it), so the modes are
    written in both places: they must agree, and match the SAM parameter's allowed values."""
    from adapters.aws.lambda_app import INGRESS_AUTH_MODES as served
    from infra.constructs import INGRESS_AUTH_MODES as deployed

    assert served == deployed
    template = Path(__file__).resolve().parents[2] / "template.yaml"
    assert f"AllowedValues: [{', '.join(served)}]" in template.read_text()
