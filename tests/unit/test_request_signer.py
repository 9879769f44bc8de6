"""Request identity: the JWT Torpor signs (decoded with PyJWT as the SDKs check it), where the key
comes from (file, environment, SSM and Secrets Manager on a moto server), and that every kind of
invoker sends the headers (the Lambda one inside the API-Gateway-proxy event)."""

from __future__ import annotations

import base64
import io
import json
import logging
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import boto3
import jwt
import pytest
from botocore.response import StreamingBody
from botocore.stub import ANY, Stubber
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa

from adapters.aws.lambda_invoker import LambdaInvoker
from adapters.invokers import RoutingInvoker
from adapters.request_identity import (
    KEY_ENV,
    KEY_FILE_ENV,
    SECRET_ARN_ENV,
    SSM_PARAMETER_ENV,
    signer_from_environment,
    signer_from_file,
)
from control_plane.ports import HttpReply
from control_plane.request_identity import (
    JWT_HEADER,
    SCHEME_HEADER,
    RequestIdentityKeyError,
    RequestSigner,
    audience,
    generate_pem,
    refusal_hint,
)
from tests.helpers.moto import moto_server

# restate-server's own test key (service-client request_identity v1 tests) and the kid it expects:
# the same PEM must give the same public key here, or the SDKs would not recognise Torpor's kid.
RESTATE_TEST_PEM = b"""-----BEGIN PRIVATE KEY-----
MC4CAQAwBQYDK2VwBCIEIPe++4ZTPQDF81otpoU/mOGHC2vOAVp9WbiCblvn3nXO
-----END PRIVATE KEY-----
"""
RESTATE_TEST_KID = "publickeyv1_AfQwmwfgEZhrWpvv8N52SHpRtZqGGaFr4AZN6qtYWSiY"
NOW_S = 1_800_000_000  # 2027-01-15, seconds since the UNIX epoch


def verify(token: str, signer: RequestSigner, path: str, *, check_time: bool = True) -> dict[str, Any]:
    """Check `token` as the SDK does: EdDSA, `aud` = `path`, aud/exp/iat/nbf required, no leeway,
    at the real clock (`check_time=False`: signature and audience only). Like the SDK (jsonwebtoken),
    `iat` must be there but is not compared with the clock."""
    options = {
        "require": ["aud", "exp", "iat", "nbf"],
        "verify_exp": check_time,
        "verify_nbf": check_time,
        "verify_iat": False,
    }
    claims: dict[str, Any] = jwt.decode(
        token, signer._key.public_key(), algorithms=["EdDSA"], audience=path, leeway=0, options=options
    )
    return claims


def signed_at(offset_s: float) -> tuple[RequestSigner, str]:
    """A signer whose clock is `offset_s` from the real one, and its token for `/invoke/A/b`."""
    signer = RequestSigner.from_pem(generate_pem(), source="test")
    signer._clock = lambda: time.time() + offset_s
    return signer, signer.headers("/invoke/A/b")[JWT_HEADER]


def test_the_kid_is_the_sdk_form_of_the_public_key() -> None:
    signer = RequestSigner.from_pem(RESTATE_TEST_PEM, source="test")
    assert signer.public_key == RESTATE_TEST_KID


@pytest.mark.parametrize("path", ["/invoke/Greeter/greet", "/discover"])
def test_the_jwt_has_the_header_and_claims_the_sdk_verifies(path: str) -> None:
    signer = RequestSigner(
        serialization.load_pem_private_key(RESTATE_TEST_PEM, None),  # type: ignore[arg-type]
        clock=lambda: NOW_S + 0.7,
    )
    headers = signer.headers(path)
    assert headers[SCHEME_HEADER] == "v1"
    token = headers[JWT_HEADER]
    assert jwt.get_unverified_header(token) == {"alg": "EdDSA", "typ": "JWT", "kid": RESTATE_TEST_KID}
    claims = verify(token, signer, path, check_time=False)
    assert claims == {"aud": path, "iat": NOW_S, "nbf": NOW_S - 60, "exp": NOW_S + 60}


def test_the_token_lives_60_s_either_side_and_not_longer() -> None:
    """`nbf = iat - 60`, `exp = iat + 60`: a token signed up to 59 s ago or 59 s ahead (clock skew)
    verifies without leeway; one signed 61 s ago has expired, one 61 s ahead is not valid yet."""
    for offset_s in (-59, 0, 59):
        signer, token = signed_at(offset_s)
        verify(token, signer, "/invoke/A/b")
    signer, token = signed_at(-61)
    with pytest.raises(jwt.ExpiredSignatureError):
        verify(token, signer, "/invoke/A/b")
    signer, token = signed_at(61)
    with pytest.raises(jwt.ImmatureSignatureError):
        verify(token, signer, "/invoke/A/b")
    signer, token = signed_at(0)
    with pytest.raises(jwt.InvalidAudienceError):
        verify(token, signer, "/invoke/A/c")


def test_another_key_does_not_verify() -> None:
    signer = RequestSigner.from_pem(generate_pem(), source="test")
    other = RequestSigner.from_pem(generate_pem(), source="test")
    with pytest.raises(jwt.InvalidSignatureError):
        verify(signer.headers("/discover")[JWT_HEADER], other, "/discover")


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/invoke/Greeter/greet", "/invoke/Greeter/greet"),
        ("/restate/invoke/Greeter/greet", "/invoke/Greeter/greet"),
        ("/discover", "/discover"),
        ("/a/b/discover", "/discover"),
        ("/invoke/Greeter", "/invoke/Greeter"),
        ("/health", "/health"),
    ],
)
def test_the_audience_is_the_path_the_sdk_compares(path: str, expected: str) -> None:
    """sdk-shared-core drops a prefix before `/invoke/{service}/{handler}` and `/discover`."""
    assert audience(path) == expected


# --- bad keys ------------------------------------------------------------------------------------


def _rsa_pem() -> bytes:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _encrypted_pem() -> bytes:
    return ed25519.Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.BestAvailableEncryption(b"pw")
    )


@pytest.mark.parametrize(
    ("pem", "expected"),
    [
        (b"hello", "is not a PEM private key"),
        (b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n", "is not a PEM private key"),
        (_rsa_pem(), "is not an Ed25519 key"),
        (_encrypted_pem(), "is encrypted"),
    ],
    ids=["text", "garbage", "rsa", "encrypted"],
)
def test_a_bad_key_is_a_clear_error_naming_its_source_and_the_fix(pem: bytes, expected: str) -> None:
    with pytest.raises(RequestIdentityKeyError) as caught:
        RequestSigner.from_pem(pem, source="TORPOR_REQUEST_IDENTITY_KEY")
    message = caught.value.message
    assert expected in message
    assert "TORPOR_REQUEST_IDENTITY_KEY" in message
    assert "openssl genpkey -algorithm ed25519" in message


# --- where the key comes from ----------------------------------------------------------------------


def test_no_variable_means_unsigned_and_two_are_refused(tmp_path: Path) -> None:
    assert signer_from_environment({}) is None
    assert signer_from_environment({KEY_FILE_ENV: "", SSM_PARAMETER_ENV: ""}) is None  # the stack's empty defaults
    with pytest.raises(RequestIdentityKeyError, match="set only one of"):
        signer_from_environment({KEY_FILE_ENV: "/k.pem", KEY_ENV: "pem"})


def test_key_from_a_file_and_from_the_pem_text(tmp_path: Path) -> None:
    pem = generate_pem()
    (tmp_path / "key.pem").write_bytes(pem)
    by_file = signer_from_environment({KEY_FILE_ENV: str(tmp_path / "key.pem")})
    by_text = signer_from_environment({KEY_ENV: pem.decode()})
    assert by_file is not None
    assert by_text is not None
    assert by_file.public_key == by_text.public_key
    with pytest.raises(RequestIdentityKeyError, match=f"{KEY_FILE_ENV}=.*missing.pem does not exist"):
        signer_from_environment({KEY_FILE_ENV: str(tmp_path / "missing.pem")})


def test_a_missing_file_is_written_with_mode_0600_when_asked(tmp_path: Path) -> None:
    path = tmp_path / "new.pem"
    signer = signer_from_file(path, create=True)
    assert path.stat().st_mode & 0o777 == 0o600
    assert signer_from_file(path).public_key == signer.public_key  # read back, not written again
    assert signer_from_file(path, create=True).public_key == signer.public_key
    with pytest.raises(RequestIdentityKeyError, match="choose a path in a directory that exists"):
        signer_from_file(tmp_path / "no-such-dir" / "key.pem", create=True)


@pytest.fixture(scope="module")
def aws() -> Iterator[dict[str, Any]]:
    """SSM and Secrets Manager clients on a moto server."""
    with moto_server() as endpoint:
        config = {"region_name": "us-east-1", "endpoint_url": endpoint}
        yield {"ssm": boto3.client("ssm", **config), "secretsmanager": boto3.client("secretsmanager", **config)}


def test_key_from_an_ssm_secure_string_and_a_secret(aws: dict[str, Any]) -> None:
    pem = generate_pem().decode()
    expected = RequestSigner.from_pem(pem, source="test").public_key
    aws["ssm"].put_parameter(Name="/torpor/identity-key", Value=pem, Type="SecureString")
    arn = aws["secretsmanager"].create_secret(Name="torpor-identity-key", SecretString=pem)["ARN"]
    clients = {"ssm_client": aws["ssm"], "secrets_client": aws["secretsmanager"]}
    from_ssm = signer_from_environment({SSM_PARAMETER_ENV: "/torpor/identity-key"}, **clients)
    from_secret = signer_from_environment({SECRET_ARN_ENV: arn}, **clients)
    assert from_ssm is not None
    assert from_secret is not None
    assert from_ssm.public_key == from_secret.public_key == expected


def test_a_missing_parameter_or_secret_names_it_and_the_permission(aws: dict[str, Any]) -> None:
    clients = {"ssm_client": aws["ssm"], "secrets_client": aws["secretsmanager"]}
    with pytest.raises(RequestIdentityKeyError, match=r"SSM parameter /nope \(ParameterNotFound.*ssm:GetParameter"):
        signer_from_environment({SSM_PARAMETER_ENV: "/nope"}, **clients)
    with pytest.raises(RequestIdentityKeyError, match=r"secret nope \(ResourceNotFoundException.*GetSecretValue"):
        signer_from_environment({SECRET_ARN_ENV: "nope"}, **clients)


# --- every invoker sends the headers ---------------------------------------------------------------


class RecordingInvoker:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str, dict[str, str]]] = []

    def request(
        self,
        endpoint: str,
        method: str,
        path: str,
        headers: Mapping[str, str],
        body: bytes,
        timeout_s: float,
        auth: Mapping[str, object] | None = None,
    ) -> HttpReply:
        self.sent.append((endpoint, path, dict(headers)))
        return HttpReply(status=200, headers={}, body=b"")


def test_every_kind_of_endpoint_gets_the_identity_headers_for_its_path() -> None:
    signer = RequestSigner.from_pem(generate_pem(), source="test")
    http, lambda_, cloud_run = RecordingInvoker(), RecordingInvoker(), RecordingInvoker()
    invoker = RoutingInvoker(http, lambda_factory=lambda: lambda_, cloud_run_factory=lambda: cloud_run, signer=signer)
    stale = {"X-Restate-Signature-Scheme": "unsigned", "x-extra": "1"}  # a deployment's header cannot override it
    invoker.request("http://127.0.0.1:9080", "GET", "/discover", stale, b"", 5)
    invoker.request("arn:aws:lambda:us-east-1:123456789012:function:F:1", "POST", "/invoke/S/h", stale, b"", 5)
    invoker.request("projects/p/locations/l/services/s", "POST", "/invoke/S/h", stale, b"", 5)
    for recorder, path in ((http, "/discover"), (lambda_, "/invoke/S/h"), (cloud_run, "/invoke/S/h")):
        ((_, sent_path, headers),) = recorder.sent
        assert sent_path == path
        assert headers["x-extra"] == "1"
        assert headers[SCHEME_HEADER] == "v1"
        assert "X-Restate-Signature-Scheme" not in headers
        assert (
            jwt.decode(
                headers[JWT_HEADER],
                signer._key.public_key(),
                algorithms=["EdDSA"],
                audience=path,  # type: ignore[arg-type]
            )["aud"]
            == path
        )


def test_without_a_signer_nothing_is_added() -> None:
    http = RecordingInvoker()
    RoutingInvoker(http).request("http://h", "GET", "/discover", {"accept": "x"}, b"", 5)
    assert http.sent[0][2] == {"accept": "x"}


def test_the_lambda_event_carries_the_signature_in_its_headers() -> None:
    """restate-sdk's Lambda handler reads the event's `headers` and `path` and verifies them as over HTTP."""
    signer = RequestSigner.from_pem(generate_pem(), source="test")
    client = boto3.client("lambda", region_name="us-east-1", aws_access_key_id="t", aws_secret_access_key="t")
    sent: list[dict[str, Any]] = []
    client.meta.events.register("provide-client-params.lambda.Invoke", lambda params, **_: sent.append(params))
    answer = json.dumps({"statusCode": 200, "headers": {}, "body": "", "isBase64Encoded": True}).encode()
    arn = "arn:aws:lambda:us-east-1:123456789012:function:F:1"
    with Stubber(client) as stubber:
        stubber.add_response(
            "invoke",
            {"StatusCode": 200, "Payload": StreamingBody(io.BytesIO(answer), len(answer))},
            {"FunctionName": arn, "InvocationType": "RequestResponse", "Payload": ANY},
        )
        invoker = RoutingInvoker(
            RecordingInvoker(), lambda_factory=lambda: LambdaInvoker("us-east-1", client=client), signer=signer
        )
        invoker.request(arn, "POST", "/invoke/S/h", {"content-type": "x"}, b"body", 5)
    event = json.loads(sent[0]["Payload"])
    assert event["path"] == "/invoke/S/h"
    assert base64.b64decode(event["body"]) == b"body"
    assert event["headers"][SCHEME_HEADER] == "v1"
    claims = jwt.decode(
        event["headers"][JWT_HEADER],
        signer._key.public_key(),
        algorithms=["EdDSA"],
        audience="/invoke/S/h",  # type: ignore[arg-type]
    )
    assert claims["aud"] == "/invoke/S/h"


def test_the_lambda_functions_sign_with_the_key_their_environment_names() -> None:
    """`build_control_plane` (every control-plane function, once per cold start) reads the key."""
    from adapters.aws import lambda_app

    pem = generate_pem().decode()
    environment = {
        "TORPOR_TABLE": "torpor",
        "TORPOR_WAKE_QUEUE_URL": "http://127.0.0.1:9/queue",
        "AWS_REGION": "us-east-1",
        KEY_ENV: pem,
    }
    lambda_app.reset()
    try:
        invoker = lambda_app.build_control_plane(environment).registry.invoker
        assert isinstance(invoker, RoutingInvoker)
        assert invoker.signer is not None
        assert invoker.signer.public_key == RequestSigner.from_pem(pem, source="test").public_key
        lambda_app.reset()
        with pytest.raises(RequestIdentityKeyError, match=f"from {KEY_ENV} is not a PEM private key"):
            lambda_app.build_control_plane({**environment, KEY_ENV: "not a key"})
    finally:
        lambda_app.reset()


def test_a_key_file_others_can_read_is_used_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "key.pem"
    with caplog.at_level(logging.WARNING, logger="torpor.request_identity"):
        signer_from_file(path, create=True)
    assert [r.getMessage() for r in caplog.records] == [
        f"no request identity key at {path}: wrote a new one there (mode 0600)"
    ]  # a mistyped path must not pass unnoticed
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="torpor.request_identity"):
        signer_from_file(path)
    assert caplog.records == []  # 0600: nothing to say
    path.chmod(0o644)
    with caplog.at_level(logging.WARNING, logger="torpor.request_identity"):
        signer_from_file(path)
    assert len(caplog.records) == 1
    assert "can be read by group or others (mode 644)" in caplog.records[0].getMessage()
    assert f"chmod 600 {path}" in caplog.records[0].getMessage()


def test_the_401_hint_names_the_stack_parameters_that_hold_the_key() -> None:
    hint = refusal_hint(401)
    assert "RequestIdentityKeyParameter or RequestIdentityKeySecretArn parameter" in hint
    assert "Torpor signs nothing" in hint
    assert "Torpor signed with publickeyv1_X" in refusal_hint(401, "publickeyv1_X")
    assert refusal_hint(500) == ""
