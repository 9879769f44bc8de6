"""Request identity: Torpor signs every request to a deployment with an Ed25519 key, as Restate does.

A deployment on a public URL (a Lambda function URL, a Cloud Run service) can then accept only
requests from this Torpor: the Restate SDKs check them when started with the public key
(restate-sdk `restate.app(..., identity_keys=["publickeyv1_…"])`, the TypeScript SDK's
`identityKeys`). The wire form (restate-server `service-client/src/request_identity/v1.rs`, checked by
sdk-shared-core `request_identity.rs`, which the Python and TypeScript SDKs run):

- header `x-restate-signature-scheme: v1`;
- header `x-restate-jwt-v1`: a JWT signed with EdDSA (Ed25519), header `{"typ": "JWT", "alg": "EdDSA",
  "kid": "publickeyv1_<base58 of the raw 32-byte public key>"}`, claims `aud` (the request path:
  `/invoke/{service}/{handler}` or `/discover`), `iat` (now, s since the UNIX epoch), `nbf`
  (`iat - lifetime`) and `exp` (`iat + lifetime`). The SDK allows no clock leeway, so the lifetime
  (60 s, restate-server's default) is both how long a token lives and how much clock skew between
  Torpor and the deployment is tolerated.

The key is a PKCS#8 PEM Ed25519 private key, as `openssl genpkey -algorithm ed25519` writes it. Where
it comes from (a file, the environment, SSM, Secrets Manager) is the adapters' business
(`adapters.request_identity`); this module only parses, signs and derives the public key.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import base58
import jwt
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from control_plane.errors import TorporError

SCHEME_HEADER = "x-restate-signature-scheme"
"""Names the signature scheme; its value is `v1` when a key is configured."""

JWT_HEADER = "x-restate-jwt-v1"
"""Carries the v1 JWT."""

PUBLIC_KEY_PREFIX = "publickeyv1_"
"""Prefix of a public key in the SDKs' form: `publickeyv1_<base58 of the 32-byte key>`."""

TOKEN_LIFETIME_S = 60
"""`exp - iat` and `iat - nbf`, in seconds (restate-server's `request-identity-expiration` default)."""

KEY_FIX = (
    "write one with `openssl genpkey -algorithm ed25519 -out key.pem` (or `torpor request-identity generate key.pem`)"
)
"""How to make a good key, for error messages."""


class RequestIdentityKeyError(TorporError):
    """The request identity key is missing, unreadable or not a PEM Ed25519 private key; the message
    names the key's source and the fix."""

    status = 500
    code = "request_identity_key"


class RequestSigner:
    """Signs requests to deployments with one Ed25519 private key. Thread-safe (holds no mutable state).

    Args:
        private_key: The Ed25519 private key.
        lifetime_s: Seconds each token is valid before and after its `iat` (at least 1).
        clock: Seconds since the UNIX epoch; None: `time.time`.
    """

    def __init__(
        self,
        private_key: Ed25519PrivateKey,
        *,
        lifetime_s: int = TOKEN_LIFETIME_S,
        clock: Callable[[], float] | None = None,
    ) -> None:
        if lifetime_s < 1:
            raise ValueError(f"lifetime_s must be at least 1, not {lifetime_s}")
        self._key = private_key
        self._lifetime_s = lifetime_s
        self._clock = clock or time.time
        raw = private_key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        self.public_key = PUBLIC_KEY_PREFIX + base58.b58encode(raw).decode("ascii")
        """The public key in the SDKs' form, `publickeyv1_…`: what deployments are started with."""

    @classmethod
    def from_pem(cls, pem: bytes | str, *, source: str, lifetime_s: int = TOKEN_LIFETIME_S) -> RequestSigner:
        """A signer over the PKCS#8 PEM Ed25519 private key `pem`.

        Args:
            pem: The PEM text (`-----BEGIN PRIVATE KEY-----` …), unencrypted.
            source: Where the key came from, named in errors (e.g. `TORPOR_REQUEST_IDENTITY_KEY_FILE=/k.pem`).
            lifetime_s: See the class.

        Raises:
            RequestIdentityKeyError: `pem` is not an unencrypted PEM private key, or not an Ed25519 one.
        """
        data = pem.encode("utf-8") if isinstance(pem, str) else pem
        try:
            key = serialization.load_pem_private_key(data.strip() + b"\n", password=None)
        except TypeError as exc:  # encrypted, and no password given
            raise RequestIdentityKeyError(
                f"the request identity key from {source} is encrypted: give an unencrypted PEM key; {KEY_FIX}"
            ) from exc
        except (ValueError, UnsupportedAlgorithm) as exc:
            raise RequestIdentityKeyError(
                f"the request identity key from {source} is not a PEM private key ({_reason(exc)}); {KEY_FIX}"
            ) from exc
        if not isinstance(key, Ed25519PrivateKey):
            raise RequestIdentityKeyError(
                f"the request identity key from {source} is not an Ed25519 key (it is a {type(key).__name__}); "
                f"{KEY_FIX}"
            )
        return cls(key, lifetime_s=lifetime_s)

    def headers(self, path: str) -> dict[str, str]:
        """The two request identity headers for a request to `path`.

        Args:
            path: The request path below the deployment's endpoint, e.g. `/invoke/Greeter/greet` or
                `/discover`; a path prefix before `/invoke/…` or `/discover` is dropped from `aud`,
                as the SDKs drop it before they compare (see `audience`).

        Returns:
            `{"x-restate-signature-scheme": "v1", "x-restate-jwt-v1": <JWT>}`.
        """
        now_s = int(self._clock())
        claims = {
            "aud": audience(path),
            "iat": now_s,
            "nbf": now_s - self._lifetime_s,
            "exp": now_s + self._lifetime_s,
        }
        token = jwt.encode(claims, self._key, algorithm="EdDSA", headers={"kid": self.public_key, "typ": "JWT"})
        return {SCHEME_HEADER: "v1", JWT_HEADER: token}


def audience(path: str) -> str:
    """The `aud` claim for a request to `path`: `/invoke/{service}/{handler}` or `/discover`, whatever
    prefix the path has; any other path as it is (the SDKs compare against the same normalised path,
    sdk-shared-core `IdentityVerifier::normalise_path`)."""
    path = path.split("?", 1)[0]
    parts = path.split("/")
    if len(parts) >= 4 and parts[-3] == "invoke":
        return "/" + "/".join(parts[-3:])
    if len(parts) >= 2 and parts[-1] == "discover":
        return "/discover"
    return path


def refusal_hint(status: int, public_key: str | None = None) -> str:
    """What to check when a deployment answers `status`: for 401 (the SDKs' answer to a request whose
    identity they do not accept), a sentence starting with "; " that says whether Torpor signed (with
    `public_key`, `publickeyv1_…`, or not at all: None) and names the key settings; else ""."""
    if status != 401:
        return ""
    signed = (
        f"Torpor signed with {public_key}, which the deployment does not accept"
        if public_key
        else "Torpor signs nothing (no request identity key is configured)"
    )
    return (
        f"; if the deployment checks request identity (identity_keys): {signed}. Give Torpor the private key of "
        "the deployment's public key: torpor dev --request-identity-key-file, TORPOR_REQUEST_IDENTITY_KEY_FILE, "
        "or the stack's RequestIdentityKeyParameter or RequestIdentityKeySecretArn parameter "
        "(`torpor request-identity public-key KEY.pem` prints a key's public key)"
    )


def generate_pem() -> bytes:
    """A new Ed25519 private key as unencrypted PKCS#8 PEM (what `openssl genpkey -algorithm ed25519` writes)."""
    return Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _reason(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.split(". ", 1)[0][:200] if text else type(exc).__name__
