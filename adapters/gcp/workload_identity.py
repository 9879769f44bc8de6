"""Google ID tokens through workload identity federation: Cloud Run from AWS without key files.

The control plane on Lambda has AWS credentials (its execution role), not Google ones. Workload
identity federation trades them for Google credentials:

1. google-auth's `external_account` credentials with the AWS provider sign an STS
   `GetCallerIdentity` request with the function's AWS credentials (from the environment Lambda
   sets, or the instance metadata elsewhere) and send it to Google's Security Token Service (the
   configuration's `token_url`, `https://sts.googleapis.com/v1/token`), which checks it with AWS
   and answers a federated access token for the pool's principal (`attribute.aws_role`);
2. with that token, Torpor calls the IAM Service Account Credentials API's `generateIdToken` for the
   service account the configuration impersonates (the configuration's
   `service_account_impersonation_url`, `…/serviceAccounts/SA:generateAccessToken`, with
   `:generateIdToken` in its place), and gets an ID token whose `aud` is the Cloud Run audience.

The principal needs `iam.serviceAccounts.getOpenIdToken` on the service account
(`roles/iam.serviceAccountOpenIdTokenCreator`); the service account needs `roles/run.invoker` on the
Cloud Run service. docs/cloud-run.md walks through the set-up.

The credential configuration is what `gcloud iam workload-identity-pools create-cred-config …
--service-account=SA --aws` writes (no secret in it). Torpor reads it from `CONFIG_ENV`: the JSON
itself, base64 of it (as the `GoogleCredentialConfig` template parameter carries it) or a path to it;
else from `GOOGLE_APPLICATION_CREDENTIALS` when that file's `type` is `external_account`.
"""

from __future__ import annotations

import base64
import binascii
import errno
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from control_plane.ports import InvokerError

__all__ = ["CONFIG_ENV", "credential_config", "workload_identity_id_token"]

CONFIG_ENV = "TORPOR_GOOGLE_CREDENTIAL_CONFIG"
"""The environment variable naming the credential configuration: its JSON text, or a file path."""

CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
_ACCESS_TOKEN_SUFFIX = ":generateAccessToken"


def credential_config(environ: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """The workload identity federation configuration in use, or None if there is none.

    From `CONFIG_ENV` (JSON text starting with `{`, a path to a JSON file, or base64 of the JSON),
    else from the file `GOOGLE_APPLICATION_CREDENTIALS` names when its `type` is `external_account`.

    Raises:
        InvokerError: `CONFIG_ENV` is set but cannot be read, is not JSON, or is not an
            `external_account` configuration that impersonates a service account.
    """
    env = os.environ if environ is None else environ
    given = (env.get(CONFIG_ENV) or "").strip()
    if given:
        text, source = _config_text(given)
        try:
            config = json.loads(text)
        except ValueError as exc:
            raise InvokerError(f"the Google credential configuration {source} is not JSON: {exc}") from exc
        _check(config, source)
        return config  # type: ignore[no-any-return]
    adc = env.get("GOOGLE_APPLICATION_CREDENTIALS")
    if adc:
        try:
            config = json.loads(Path(adc).read_text())
        except (OSError, ValueError):
            return None  # google-auth's own loading reports what is wrong with it
        if isinstance(config, dict) and config.get("type") == "external_account":
            _check(config, f"{adc} (GOOGLE_APPLICATION_CREDENTIALS)")
            return config
    return None


def _config_text(given: str) -> tuple[str, str]:
    """`(JSON text, how to name its source)` from `CONFIG_ENV`'s value: JSON, a file path, or base64 of
    the JSON (what a template parameter carries best). Raises `InvokerError`."""
    if given.startswith("{"):
        return given, CONFIG_ENV
    try:
        return Path(given).read_text(), f"{given} ({CONFIG_ENV})"
    except (FileNotFoundError, NotADirectoryError):
        pass  # not a path: base64
    except OSError as exc:
        if exc.errno != errno.ENAMETOOLONG:  # base64 of a whole configuration is longer than a file name may be
            raise InvokerError(f"cannot read the Google credential configuration {given}: {exc.strerror}") from exc
    try:
        return base64.b64decode(given, validate=True).decode(), f"{CONFIG_ENV} (base64)"
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise InvokerError(
            f"{CONFIG_ENV} is neither JSON, nor a file that exists, nor base64 of JSON: give the credential "
            "configuration's JSON (or `base64 -w0 config.json`)"
        ) from None


def _check(config: object, source: str) -> None:
    if not isinstance(config, dict) or config.get("type") != "external_account":
        raise InvokerError(
            f"the Google credential configuration {source} is not an external_account configuration: write it "
            "with `gcloud iam workload-identity-pools create-cred-config … --aws --service-account=SA`"
        )
    url = config.get("service_account_impersonation_url")
    if not isinstance(url, str) or not url.endswith(_ACCESS_TOKEN_SUFFIX):
        raise InvokerError(
            f"the Google credential configuration {source} impersonates no service account: an ID token is minted "
            "for a service account, so create it with --service-account=SA@PROJECT.iam.gserviceaccount.com"
        )


def _federated_credentials(config: Mapping[str, Any]) -> Any:
    """google-auth credentials for the pool's federated token itself (no impersonation)."""
    from google.auth import aws, identity_pool

    impersonation = ("service_account_impersonation_url", "service_account_impersonation")
    info = {k: v for k, v in config.items() if k not in impersonation}
    source = info.get("credential_source") or {}
    environment_id = source.get("environment_id", "") if isinstance(source, Mapping) else ""
    kind = aws.Credentials if str(environment_id).startswith("aws") else identity_pool.Credentials
    try:
        return kind.from_info(info, scopes=[CLOUD_PLATFORM_SCOPE])
    except (ValueError, TypeError, KeyError) as exc:
        raise InvokerError(f"the Google credential configuration is not valid: {exc}") from exc


def workload_identity_id_token(config: Mapping[str, Any], audience: str, request: Any) -> str:
    """A Google ID token for `audience`, for the service account `config` impersonates.

    Args:
        config: An `external_account` credential configuration (see `credential_config`).
        audience: The `aud` of the token, e.g. `https://svc-abc-ew.a.run.app`.
        request: A `google.auth.transport.Request` (each of its HTTP requests bounded in time).

    Returns:
        The token, a JWT signed by Google.

    Raises:
        InvokerError: No AWS credentials to sign with, Google's STS refused the exchange (the pool,
            provider or attribute condition does not admit this AWS role), `generateIdToken` refused
            (the principal lacks `iam.serviceAccounts.getOpenIdToken` on the service account), or
            an endpoint could not be reached.
    """
    from google.auth import exceptions

    credentials = _federated_credentials(config)
    try:
        credentials.refresh(request)
    except exceptions.TransportError as exc:
        raise InvokerError(f"could not reach Google's token exchange ({config.get('token_url')}): {exc}") from exc
    except (exceptions.RefreshError, exceptions.OAuthError) as exc:
        raise InvokerError(
            f"Google's token exchange refused this AWS identity for {config.get('audience')}: {_first(exc)}. Check "
            "the provider's account id and attribute condition, and that AWS credentials are available (the "
            "function's role)"
        ) from exc
    except exceptions.GoogleAuthError as exc:
        raise InvokerError(f"no AWS credentials or region to sign the token exchange with: {_first(exc)}") from exc
    impersonation_url = str(config["service_account_impersonation_url"])
    url = impersonation_url[: -len(_ACCESS_TOKEN_SUFFIX)] + ":generateIdToken"
    body = json.dumps({"audience": audience, "includeEmail": True}).encode()
    headers = {"authorization": f"Bearer {credentials.token}", "content-type": "application/json"}
    try:
        response = request(url=url, method="POST", headers=headers, body=body)
    except exceptions.TransportError as exc:
        raise InvokerError(f"could not reach {url}: {exc}") from exc
    data = response.data.decode("utf-8", "replace") if isinstance(response.data, bytes) else str(response.data)
    if response.status != 200:
        account = impersonation_url.rsplit("/", 1)[-1][: -len(_ACCESS_TOKEN_SUFFIX)]
        raise InvokerError(
            f"generateIdToken for {account} answered HTTP {response.status}: {data[:300]}. Grant the pool's principal "
            f"roles/iam.serviceAccountOpenIdTokenCreator on {account}"
        )
    try:
        token = json.loads(data)["token"]
    except (ValueError, KeyError, TypeError) as exc:
        raise InvokerError(f"generateIdToken answered no token: {data[:300]}") from exc
    if not isinstance(token, str) or not token:
        raise InvokerError(f"generateIdToken answered no token: {data[:300]}")
    return token


def _first(exc: BaseException) -> str:
    return str(exc.args[0]) if exc.args else type(exc).__name__
