"""What a `POST /deployments` body names: an HTTP endpoint, a Lambda version, or a Cloud Run service."""

from __future__ import annotations

import pytest

from control_plane.endpoints import Registration, lambda_arn_problem, parse_registration
from control_plane.errors import BadRequest

FN = "arn:aws:lambda:eu-west-1:123456789012:function:greeter"


def test_an_http_uri_needs_no_auth_and_loses_its_trailing_slash() -> None:
    assert parse_registration({"uri": "http://localhost:9080/"}, force=False) == Registration("http://localhost:9080")


def test_a_published_lambda_version_is_registered_with_its_role() -> None:
    role = "arn:aws:iam::123456789012:role/invoker"
    parsed = parse_registration({"arn": f"{FN}:7", "assume_role_arn": role}, force=False)
    assert parsed == Registration(f"{FN}:7", {"assume_role_arn": role})


@pytest.mark.parametrize("arn", [FN, f"{FN}:$LATEST", f"{FN}:live"])
def test_an_unpinned_lambda_arn_is_refused_with_the_fix_unless_forced(arn: str) -> None:
    with pytest.raises(BadRequest) as refused:
        parse_registration({"arn": arn}, force=False)
    assert "publish" in refused.value.message
    assert f"{FN}:<version>" in refused.value.message
    assert '"force": true (torpor deployments register --force)' in refused.value.message
    assert parse_registration({"arn": arn}, force=True).endpoint == arn


@pytest.mark.parametrize(
    "body",
    [
        {"arn": "arn:aws:lambda:eu-west-1:12345:function:x:1"},  # not a 12-digit account
        {"arn": "greeter:1"},
        {"uri": "ftp://host"},
        {"uri": "http://h", "arn": f"{FN}:1"},
        {},
        {"arn": f"{FN}:1", "assume_role_arn": "not-a-role"},
        {"uri": "https://s.run.app", "auth": {"basic": {}}},
        {"uri": "https://s.run.app", "auth": {"google_id_token": {"impersonate_service_account": "sa@p"}}},
        {"uri": "https://s.run.app", "auth": {"google_id_token": {"audience": ""}}},
    ],
)
def test_bad_bodies_are_400s_even_with_force(body: dict[str, object]) -> None:
    with pytest.raises(BadRequest):
        parse_registration(body, force=True)


def test_cloud_run_auth_in_either_spelling_and_service_names_imply_it() -> None:
    url = "https://greeter-abc-ew.a.run.app"
    ours = parse_registration({"uri": url, "auth": {"google_id_token": {"audience": "aud"}}}, force=False)
    restates = parse_registration({"uri": url, "auth": {"GoogleIdToken": {"audience": "aud"}}}, force=False)
    assert ours == restates == Registration(url, {"google_id_token": {"audience": "aud"}})
    name = "projects/p/locations/europe-west1/services/greeter"
    assert parse_registration({"uri": name}, force=False) == Registration(name, {"google_id_token": {}})


def test_lambda_arn_problem_is_none_for_a_numeric_version() -> None:
    assert lambda_arn_problem(f"{FN}:12") is None
    assert lambda_arn_problem("arn:aws-cn:lambda:cn-north-1:123456789012:function:f:1") is None
