"""Torpor's own defaults, built once at the edge (`torpor dev`, Lambda entry points) and passed down.

`control_plane/` never reads the environment; `Settings.from_env` is called by the edges. Every
duration is in ms unless its name says otherwise.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from fnmatch import fnmatchcase
from functools import lru_cache

from control_plane.errors import BadRequest
from control_plane.retry import RetryPolicy

DEFAULT_PERSISTED_HEADERS: tuple[str, ...] = (
    "content-type",
    "accept",
    "accept-language",
    "user-agent",
    "idempotency-key",
    "traceparent",
    "tracestate",
    "baggage",
    "x-*",
)
"""The ingress request headers an invocation keeps (its journal's input entry, which the handler
reads as the request's headers): names or `fnmatch` patterns, lower case."""

CREDENTIAL_HEADERS: tuple[str, ...] = (
    "authorization",
    "proxy-authorization",
    "cookie",
    "*-authorization",
    "*auth-token*",
    "*api-key*",
    "*apikey*",
    "*token*",
    "*secret*",
    "*password*",
    "*passwd*",
    "*signature*",
    "*credential*",
    "*session*",
    "*jwt*",
    "*private-key*",
    "*access-key*",
    "x-auth",
    "x-auth-*",
    "x-amz-security-token",
    "x-amzn-oidc-*",
    "x-goog-iap-*",
)
"""Headers that may carry credentials (`fnmatch` patterns): kept only when `Settings.persisted_headers`
names them exactly, never through a pattern such as `x-*`."""

CREDENTIAL_WORDS: frozenset[str] = frozenset(
    {
        # keys: x-amz-server-side-encryption-customer-key, x-functions-key, x-master-key, x-signing-key
        "key", "keys", "apikey", "privatekey",
        # passwords and PINs: x-pass, x-user-pin, x-passphrase
        "pass", "passwd", "password", "passphrase", "passcode", "pin", "pwd",
        # one-time codes: x-otp, x-totp, x-mfa-code
        "otp", "totp", "hotp", "mfa", "2fa",
        # tokens: x-bearer, x-refresh, x-csrf
        "bearer", "refresh", "token", "csrf", "xsrf", "nonce",
        # certificates: x-ssl-client-cert, x-forwarded-client-cert (Envoy's XFCC)
        "cert", "certs", "certificate", "certificates", "xfcc",
        # secrets, signatures and sessions
        "secret", "sig", "signature", "session", "sessionid", "sid", "credential", "credentials",
        "auth", "authorization", "cookie", "jwt",
    }
)  # fmt: skip
"""Words that mark a header as a credential wherever they stand in its name: the name is split at
`-`, `_` and `.` (`x-ssl-client-cert` → `x`, `ssl`, `client`, `cert`), and a header one of whose words
is here is kept only when `Settings.persisted_headers` names it exactly (as `CREDENTIAL_HEADERS`).
Covers keys, passwords, PINs, one-time codes, bearer and refresh tokens and client certificates,
which cloud vendors carry in `x-*` headers (`x-ms-encryption-key`, `x-goog-encryption-key`)."""


def is_credential_header(name: str) -> bool:
    """Whether header `name` (any case) may carry a credential: it matches a `CREDENTIAL_HEADERS`
    pattern or one of its words (split at `-`, `_`, `.`) is in `CREDENTIAL_WORDS`."""
    name = name.lower()
    if any(word in CREDENTIAL_WORDS for word in re.split(r"[-_.]", name)):
        return True
    return any(fnmatchcase(name, pattern) for pattern in CREDENTIAL_HEADERS)


@dataclass(frozen=True, slots=True)
class Settings:
    """Runtime defaults. Handler and service options from the manifest override the per-handler ones.

    Attributes:
        inactivity_timeout_ms: longest one attempt (one request to the deployment) may take.
        lease_margin_ms: the lease outlives an attempt's timeout by this much, so a worker that is
            still inside its attempt never loses the lease to another worker.
        call_wait_ms: how long an ingress call waits for the result before answering 202 with the
            invocation id (API Gateway allows 29 s).
        completed_retention_ms: how long a completed invocation (status, output, journal) is kept.
        retry_policy: default policy for failed attempts (`TORPOR_RETRY_POLICY_MAX_ATTEMPTS=1`,
            `[torpor.retry_policy] max_attempts = 1`; see `retry_policy_changes`).
        max_protocol_version: highest service protocol version Torpor offers (5..7).
        eager_state_max_bytes: a keyed invocation's state goes whole in StartMessage up to this size
            (keys + values, bytes); above it, Torpor sends `partial_state` and answers lazy reads.
        workflow_retention_ms: how long a completed workflow's state and promises are kept.
        store_shards: how many partitions the store spreads timers and each status's index entries
            over (`TORPOR_STORE_SHARDS`, `[torpor] store_shards`); each takes about 1,000 writes/s
            on DynamoDB. It applies to a new table: the table records the count it was first used
            with, and every later process adopts it. `torpor dev`'s embedded moto uses 1 unless it
            is set.
        persisted_headers: the ingress request headers an invocation keeps in its journal and
            hands to the handler, as names or `fnmatch` patterns (`x-*`); the rest are dropped
            before anything is stored. Headers that may carry credentials (`is_credential_header`:
            `authorization`, `cookie`, `*token*`, `*api-key*`, ..., and any name with a word such as
            `key`, `pass`, `pin`, `otp`, `bearer`, `refresh`, `cert`) only when named exactly.
            `TORPOR_PERSISTED_HEADERS=content-type,x-*`, `[torpor] persisted_headers = ["x-*"]`.
        ui_origins: the origins (`https://ui.example.com`, or `*` for any) whose pages may call the
            ingress from a browser (CORS): the web UI's playground. `torpor dev` adds its admin
            API's own origin. `TORPOR_UI_ORIGINS=https://a.example,https://b.example`. `torpor dev`
            refuses (403) a change (a `POST`, ...) from any other web page's origin.
        allowed_hosts: `Host` names `torpor dev`'s ingress and admin API answer to beside the loopback
            names with their ports (`myhost.lan`, any port, or `myhost.lan:8080`); other names are
            refused (403) against DNS rebinding while they listen on loopback.
            `TORPOR_ALLOWED_HOSTS=myhost.lan,proxy.internal:8080`.
        max_request_bytes: the largest request body `torpor dev`'s servers take (bytes; 32 MiB, the
            largest input a journal entry may take; on AWS, API Gateway's own limit is 10 MB and a
            Lambda function's 6 MB); a larger one is a 413 before the rest is read.
        request_read_timeout_ms: how long `torpor dev`'s servers wait for a request's whole body after
            its headers (`TORPOR_REQUEST_READ_TIMEOUT_MS`, default 30 s as hyper's header timeout); a
            body that has not arrived by then (a `content-length` larger than the body sent, a
            stalled client) is answered `408` and the connection closed.
        max_answer_bytes: the largest answer Torpor reads from an HTTP deployment (bytes; on an
            HTTP/2 stream, one message and what is not committed yet); a larger one fails the
            attempt (500, retried as any failed attempt) without being read whole.
        query_max_rows: the most rows one `POST /query` answer may have (`TORPOR_QUERY_MAX_ROWS`); a
            query whose answer has more is refused (400): add a `LIMIT`. It also bounds the point
            reads a query may make (ids listed, journals loaded, listings of an `IN` product).
        query_memory_bytes: the memory one `POST /query` may use for its sorts, joins and aggregates
            (bytes, `TORPOR_QUERY_MEMORY_BYTES`; DataFusion's memory pool); over it the query is
            refused (400).
        query_timeout_ms: the wall-clock time one `POST /query` may take, reads included
            (`TORPOR_QUERY_TIMEOUT_MS`); past it the query is stopped and refused (400).
    """

    inactivity_timeout_ms: int = 60_000
    lease_margin_ms: int = 30_000
    call_wait_ms: int = 60_000
    completed_retention_ms: int = 24 * 3600 * 1000
    retry_policy: RetryPolicy = field(default_factory=RetryPolicy)
    max_protocol_version: int = 7
    eager_state_max_bytes: int = 64 * 1024
    workflow_retention_ms: int = 24 * 3600 * 1000
    store_shards: int = 16
    persisted_headers: tuple[str, ...] = DEFAULT_PERSISTED_HEADERS
    ui_origins: tuple[str, ...] = ()
    allowed_hosts: tuple[str, ...] = ()
    max_request_bytes: int = 32 * 1024 * 1024
    request_read_timeout_ms: int = 30_000
    max_answer_bytes: int = 32 * 1024 * 1024
    query_max_rows: int = 10_000
    query_memory_bytes: int = 256 * 1024 * 1024
    query_timeout_ms: int = 30_000
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)  # field -> where it came from

    def __post_init__(self) -> None:
        for name in ("max_request_bytes", "max_answer_bytes"):
            if getattr(self, name) < 1:
                raise BadRequest(f"{name} must be at least 1 byte (TORPOR_{name.upper()}), got {getattr(self, name)}")
        for name in ("query_max_rows", "query_memory_bytes", "query_timeout_ms", "request_read_timeout_ms"):
            if getattr(self, name) < 1:
                raise BadRequest(f"{name} must be at least 1 (TORPOR_{name.upper()}), got {getattr(self, name)}")

    @property
    def lease_ms(self) -> int:
        """How long a taken lease lasts before another worker may take over (ms)."""
        return self.inactivity_timeout_ms + self.lease_margin_ms

    def keeps_header(self, name: str) -> bool:
        """Whether an ingress request header `name` is kept with the invocation (`persisted_headers`)."""
        return _keeps_header(self.persisted_headers, name.lower())

    def with_overrides(self, **changes: object) -> Settings:
        """A copy with some fields changed (keyword names as the attributes)."""
        return replace(self, **changes)  # type: ignore[arg-type]

    @classmethod
    def load(cls, environ: Mapping[str, str] | None = None, config_file: str | None = None) -> Settings:
        """Torpor's defaults by precedence: `torpor.toml` > `TORPOR_*` environment > built-in.

        The file is `config_file`, else `$TORPOR_CONFIG`, else `./torpor.toml` if it exists; its
        `[torpor]` table takes the same names as the attributes (`inactivity_timeout_ms = 60000`).
        Raises `BadRequest` naming the file or variable when a value is not an integer.
        """
        env = os.environ if environ is None else environ
        settings = cls.from_env(env)
        path = config_file or env.get("TORPOR_CONFIG") or ("torpor.toml" if os.path.exists("torpor.toml") else None)
        if path is None:
            return settings
        try:
            with open(path, "rb") as f:
                table = tomllib.load(f).get("torpor", {})
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise BadRequest(f"cannot read {path}: {exc}") from exc
        names = {f.name for f in fields(cls)} - {"retry_policy", "sources"}
        changes: dict[str, object] = {}
        policy_table = table.pop("retry_policy", {})
        if not isinstance(policy_table, dict):
            raise BadRequest(f"{path}: [torpor] retry_policy must be a table ([torpor.retry_policy])")
        policy = retry_policy_changes(
            {name: str(value) for name, value in policy_table.items()},
            lambda name: f"{path}: [torpor.retry_policy] {name}",
        )
        if policy:
            changes["retry_policy"] = replace(settings.retry_policy, **policy)  # type: ignore[arg-type]  # parsed to the fields' types
        for name, value in table.items():
            if name in _LIST_SETTINGS:
                if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                    raise BadRequest(
                        f'{path}: [torpor] {name} must be a list of strings, e.g. ["{_LIST_SETTINGS[name]}"]'
                    )
                changes[name] = header_patterns(value)
                continue
            if name not in names or isinstance(value, bool) or not isinstance(value, int):
                raise BadRequest(f"{path}: [torpor] {name} = {value!r} is not a known integer setting")
            changes[name] = value
        sources = {
            **settings.sources,
            **dict.fromkeys((n for n in changes if n != "retry_policy"), "torpor.toml"),
            **dict.fromkeys((f"retry_policy.{n}" for n in policy), "torpor.toml"),
        }
        return replace(settings, **changes, sources=sources)  # type: ignore[arg-type]

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read `TORPOR_<FIELD>` variables (e.g. `TORPOR_CALL_WAIT_MS=29000`).

        Raises `BadRequest` naming the variable when a value is not an integer.
        """
        env = os.environ if environ is None else environ
        changes: dict[str, object] = {}
        for f in fields(cls):
            if f.name in ("retry_policy", "sources"):
                continue
            name = f"TORPOR_{f.name.upper()}"
            if name in env and f.name in _LIST_SETTINGS:
                changes[f.name] = header_patterns(env[name].split(","))
            elif name in env:
                try:
                    changes[f.name] = int(env[name])
                except ValueError as exc:
                    raise BadRequest(f"environment variable {name} has value {env[name]!r}: not an integer") from exc
        prefix = "TORPOR_RETRY_POLICY_"
        policy = retry_policy_changes(
            {name[len(prefix) :].lower(): value for name, value in env.items() if name.startswith(prefix)},
            lambda name: f"environment variable {prefix}{name.upper()}",
        )
        sources = {
            **dict.fromkeys(changes, "environment"),
            **dict.fromkeys((f"retry_policy.{n}" for n in policy), "environment"),
        }
        if policy:
            changes["retry_policy"] = RetryPolicy(**policy)  # type: ignore[arg-type]
        return cls(**changes, sources=sources)  # type: ignore[arg-type]


_LIST_SETTINGS = {
    "persisted_headers": "x-*",
    "ui_origins": "https://ui.example.com",
    "allowed_hosts": "myhost.lan",
}  # name -> an example value


def header_patterns(values: list[str]) -> tuple[str, ...]:
    """`[" Content-Type", "x-*", ""]` → `("content-type", "x-*")`: trimmed, lower case, no blanks,
    no trailing `/` (for origins)."""
    return tuple(v.strip().lower().rstrip("/") for v in values if v.strip())


def retry_policy_changes(values: Mapping[str, str], where: Callable[[str], str]) -> dict[str, object]:
    """Parse default retry policy fields given as text: `{"max_attempts": "1", "on_max_attempts": "kill"}`
    → `{"max_attempts": 1, "on_max_attempts": "kill"}` (names as `RetryPolicy`'s attributes; durations
    in ms; `exponentiation_factor` a number >= 1; `max_attempts` >= 1; `on_max_attempts` `pause` or `kill`).

    Raises `BadRequest` naming the setting (`where(name)`) for an unknown name or a bad value.
    """
    known = {f.name for f in fields(RetryPolicy)}
    out: dict[str, object] = {}
    for name, text in values.items():
        if name not in known:
            raise BadRequest(f"{where(name)}: unknown retry policy field (known: {', '.join(sorted(known))})")
        value: object
        try:
            if name == "on_max_attempts":
                value = text.strip().lower()
                if value not in ("pause", "kill"):
                    raise ValueError("expected pause or kill")
            elif name == "exponentiation_factor":
                value = float(text)
                if not value >= 1:
                    raise ValueError("expected a number >= 1")
            else:
                value = int(text)
                if value < (1 if name == "max_attempts" else 0):
                    raise ValueError("expected at least 1" if name == "max_attempts" else "expected ms >= 0")
        except ValueError as exc:
            raise BadRequest(f"{where(name)} has value {text!r}: {exc}") from exc
        out[name] = value
    return out


@lru_cache(maxsize=4096)
def _keeps_header(persisted_headers: tuple[str, ...], name: str) -> bool:
    """`Settings.keeps_header` for a lower-case `name`, remembered: the patterns are matched once per name."""
    if name in persisted_headers:
        return True
    if is_credential_header(name):
        return False
    return any(fnmatchcase(name, pattern) for pattern in persisted_headers)
