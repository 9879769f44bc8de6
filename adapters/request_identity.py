"""Where the request identity key comes from (`control_plane.request_identity` signs with it).

One of these, read once when the control plane is built (per process; per cold start on Lambda):

| variable | what it holds |
| --- | --- |
| `TORPOR_REQUEST_IDENTITY_KEY_FILE` | the path of a PEM file (PKCS#8 Ed25519, `openssl genpkey -algorithm ed25519`) |
| `TORPOR_REQUEST_IDENTITY_KEY` | the PEM text itself (for local use: the environment is easily seen) |
| `TORPOR_REQUEST_IDENTITY_KEY_SSM_PARAMETER` | the name or ARN of an SSM parameter (SecureString) holding the PEM |
| `TORPOR_REQUEST_IDENTITY_KEY_SECRET_ARN` | the ARN (or name) of a Secrets Manager secret whose string is the PEM |

None set: requests go unsigned. More than one set is an error, as is a key that cannot be read.
`torpor dev --request-identity-key-file PATH` takes precedence over them all, and writes a new key
to PATH (mode 0600) when there is no file yet.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from control_plane.request_identity import KEY_FIX, RequestIdentityKeyError, RequestSigner, generate_pem

KEY_FILE_ENV = "TORPOR_REQUEST_IDENTITY_KEY_FILE"
KEY_ENV = "TORPOR_REQUEST_IDENTITY_KEY"
SSM_PARAMETER_ENV = "TORPOR_REQUEST_IDENTITY_KEY_SSM_PARAMETER"
SECRET_ARN_ENV = "TORPOR_REQUEST_IDENTITY_KEY_SECRET_ARN"
ALL_ENV = (KEY_FILE_ENV, KEY_ENV, SSM_PARAMETER_ENV, SECRET_ARN_ENV)

_AWS_TIMEOUT_S = 10.0

log = logging.getLogger("torpor.request_identity")


def signer_from_environment(
    environ: Mapping[str, str] | None = None,
    *,
    region: str | None = None,
    ssm_client: Any = None,
    secrets_client: Any = None,
) -> RequestSigner | None:
    """The signer for the key the environment names (see the module doc), or None if it names none.

    Args:
        environ: The variables; None: `os.environ`.
        region: Region of the SSM and Secrets Manager clients; None: botocore's default (`AWS_REGION`).
        ssm_client: A ready SSM client (tests); None: built with boto3 when needed.
        secrets_client: A ready Secrets Manager client (tests); None: likewise.

    Raises:
        RequestIdentityKeyError: More than one variable is set, or the key cannot be read or parsed
            (the message names the variable and the fix).
    """
    env = os.environ if environ is None else environ
    given = [name for name in ALL_ENV if env.get(name)]
    if not given:
        return None
    if len(given) > 1:
        raise RequestIdentityKeyError(f"set only one of {', '.join(given)}: each names a request identity key")
    name = given[0]
    value = env[name]
    source = f"{name}={value}" if name != KEY_ENV else name
    if name == KEY_FILE_ENV:
        return signer_from_file(value, source=source)
    if name == KEY_ENV:
        return RequestSigner.from_pem(value, source=source)
    if name == SSM_PARAMETER_ENV:
        return RequestSigner.from_pem(_from_ssm(value, region, ssm_client), source=source)
    return RequestSigner.from_pem(_from_secrets_manager(value, region, secrets_client), source=source)


def signer_from_file(path: str | os.PathLike[str], *, create: bool = False, source: str | None = None) -> RequestSigner:
    """The signer for the PEM file at `path`; a warning is logged if group or others may read it.

    Args:
        path: The PEM file (PKCS#8 Ed25519 private key).
        create: When no file is at `path`: write a new key there (mode 0600) instead of failing.
        source: How errors name the key; None: the path.

    Raises:
        RequestIdentityKeyError: The file does not exist (and `create` is false), cannot be read or
            written, or holds no Ed25519 private key.
    """
    file = Path(path)
    source = source or str(file)
    if create and not file.exists():
        try:
            descriptor = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "wb") as out:
                out.write(generate_pem())
            log.warning("no request identity key at %s: wrote a new one there (mode 0600)", file)
        except FileExistsError:
            pass  # written by another process in between: read theirs
        except OSError as exc:
            raise RequestIdentityKeyError(
                f"cannot write a new request identity key to {file}: {exc.strerror or exc}; "
                "choose a path in a directory that exists and is writable"
            ) from exc
    try:
        pem = file.read_bytes()
    except FileNotFoundError as exc:
        raise RequestIdentityKeyError(f"the request identity key file {source} does not exist; {KEY_FIX}") from exc
    except OSError as exc:
        raise RequestIdentityKeyError(
            f"cannot read the request identity key file {source}: {exc.strerror or exc}"
        ) from exc
    signer = RequestSigner.from_pem(pem, source=source)
    with contextlib.suppress(OSError):
        mode = file.stat().st_mode
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            log.warning(
                "the request identity key file %s can be read by group or others (mode %03o): "
                "whoever reads it can sign requests as Torpor; chmod 600 %s",
                source,
                mode & 0o777,
                file,
            )
    return signer


def _from_ssm(name: str, region: str | None, client: Any) -> str:
    """The decrypted value of SSM parameter `name`. Raises `RequestIdentityKeyError`."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        client = client or _client("ssm", region)
        answer = client.get_parameter(Name=name, WithDecryption=True)
        return str(answer["Parameter"]["Value"])
    except ClientError as exc:
        error = exc.response.get("Error", {})
        raise RequestIdentityKeyError(
            f"cannot read the request identity key from SSM parameter {name} ({error.get('Code')}: "
            f"{error.get('Message')}): check the name and region, and let this function call ssm:GetParameter "
            "on it (and kms:Decrypt on its key)"
        ) from exc
    except BotoCoreError as exc:
        raise RequestIdentityKeyError(f"cannot read the request identity key from SSM parameter {name}: {exc}") from exc


def _from_secrets_manager(secret: str, region: str | None, client: Any) -> str:
    """The string of Secrets Manager secret `secret`. Raises `RequestIdentityKeyError`."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        client = client or _client("secretsmanager", region)
        answer = client.get_secret_value(SecretId=secret)
    except ClientError as exc:
        error = exc.response.get("Error", {})
        raise RequestIdentityKeyError(
            f"cannot read the request identity key from secret {secret} ({error.get('Code')}: "
            f"{error.get('Message')}): check the ARN, and let this function call secretsmanager:GetSecretValue "
            "on it (and kms:Decrypt on its key)"
        ) from exc
    except BotoCoreError as exc:
        raise RequestIdentityKeyError(f"cannot read the request identity key from secret {secret}: {exc}") from exc
    if "SecretString" not in answer:
        raise RequestIdentityKeyError(
            f"secret {secret} holds binary data: store the PEM text as the secret's string (--secret-string)"
        )
    return str(answer["SecretString"])


def _client(service: str, region: str | None) -> Any:
    import boto3
    from botocore.config import Config

    config = Config(connect_timeout=_AWS_TIMEOUT_S, read_timeout=_AWS_TIMEOUT_S, retries={"mode": "standard"})
    return boto3.client(service, region_name=region, config=config)  # type: ignore[call-overload]
