"""Torpor's own defaults: built-in < environment < torpor.toml, each value knowing its source."""

from __future__ import annotations

from pathlib import Path

import pytest

from control_plane.errors import BadRequest
from control_plane.settings import Settings
from tests.helpers.headers import CREDENTIAL_NAMES


def test_torpor_toml_beats_the_environment_which_beats_the_built_in(tmp_path: Path) -> None:
    config = tmp_path / "torpor.toml"
    config.write_text("[torpor]\ncall_wait_ms = 29000\n")
    env = {"TORPOR_CALL_WAIT_MS": "5000", "TORPOR_INACTIVITY_TIMEOUT_MS": "1000"}
    settings = Settings.load(env, str(config))
    assert settings.call_wait_ms == 29_000
    assert settings.inactivity_timeout_ms == 1_000
    assert settings.lease_margin_ms == Settings().lease_margin_ms
    assert settings.sources == {"call_wait_ms": "torpor.toml", "inactivity_timeout_ms": "environment"}


@pytest.mark.parametrize("line", ['call_wait_ms = "soon"', "no_such_setting = 1", "call_wait_ms = true"])
def test_a_bad_torpor_toml_names_the_file_and_the_setting(tmp_path: Path, line: str) -> None:
    config = tmp_path / "torpor.toml"
    config.write_text(f"[torpor]\n{line}\n")
    with pytest.raises(BadRequest, match=r"torpor\.toml"):
        Settings.load({}, str(config))


def test_a_bad_environment_value_names_the_variable() -> None:
    with pytest.raises(BadRequest, match="TORPOR_CALL_WAIT_MS"):
        Settings.load({"TORPOR_CALL_WAIT_MS": "abc"}, None)


def test_the_default_retry_policy_comes_from_the_environment_and_torpor_toml(tmp_path: Path) -> None:
    config = tmp_path / "torpor.toml"
    config.write_text("[torpor.retry_policy]\nmax_attempts = 3\non_max_attempts = 'kill'\n")
    env = {"TORPOR_RETRY_POLICY_MAX_ATTEMPTS": "1", "TORPOR_RETRY_POLICY_INITIAL_INTERVAL_MS": "10"}
    from_env = Settings.load(env, None).retry_policy
    assert (from_env.max_attempts, from_env.initial_interval_ms, from_env.on_max_attempts) == (1, 10, "pause")
    settings = Settings.load(env, str(config))
    policy = settings.retry_policy
    assert (policy.max_attempts, policy.initial_interval_ms, policy.on_max_attempts) == (3, 10, "kill")
    assert policy.max_interval_ms == Settings().retry_policy.max_interval_ms
    assert settings.sources == {
        "retry_policy.max_attempts": "torpor.toml",
        "retry_policy.on_max_attempts": "torpor.toml",
        "retry_policy.initial_interval_ms": "environment",
    }


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"TORPOR_RETRY_POLICY_MAX_ATTEMPTS": "0"}, "TORPOR_RETRY_POLICY_MAX_ATTEMPTS"),
        ({"TORPOR_RETRY_POLICY_ON_MAX_ATTEMPTS": "explode"}, "TORPOR_RETRY_POLICY_ON_MAX_ATTEMPTS"),
        ({"TORPOR_RETRY_POLICY_EXPONENTIATION_FACTOR": "0.5"}, "TORPOR_RETRY_POLICY_EXPONENTIATION_FACTOR"),
        ({"TORPOR_RETRY_POLICY_MAX_TRIES": "3"}, "TORPOR_RETRY_POLICY_MAX_TRIES"),
    ],
)
def test_a_bad_retry_policy_setting_names_the_variable(env: dict[str, str], named: str) -> None:
    with pytest.raises(BadRequest, match=named):
        Settings.load(env, None)


def test_store_shards_come_from_the_environment_or_torpor_toml(tmp_path: Path) -> None:
    assert Settings().store_shards == 16
    assert Settings.load({"TORPOR_STORE_SHARDS": "32"}, None).store_shards == 32
    config = tmp_path / "torpor.toml"
    config.write_text("[torpor]\nstore_shards = 64\n")
    assert Settings.load({"TORPOR_STORE_SHARDS": "32"}, str(config)).store_shards == 64


def test_persisted_headers_come_from_the_environment_and_torpor_toml(tmp_path: Path) -> None:
    assert Settings.load({"TORPOR_PERSISTED_HEADERS": " Content-Type, my-*,,"}, None).persisted_headers == (
        "content-type",
        "my-*",
    )
    config = tmp_path / "torpor.toml"
    config.write_text('[torpor]\npersisted_headers = ["X-*", "authorization"]\n')
    assert Settings.load({}, str(config)).persisted_headers == ("x-*", "authorization")
    config.write_text('[torpor]\npersisted_headers = "x-*"\n')
    with pytest.raises(BadRequest, match=r"persisted_headers must be a list"):
        Settings.load({}, str(config))


@pytest.mark.parametrize(
    ("allowed", "header", "kept"),
    [
        (None, "X-My-Custom-Header", True),
        (None, "Content-Type", True),
        (None, "my-header", False),
        (None, "Authorization", False),
        (None, "Cookie", False),
        (None, "x-api-key", False),  # a credential: a pattern (x-*) is not enough
        (None, "X-Serverless-Authorization", False),
        (None, "x-goog-iap-jwt-assertion", False),
        (None, "x-amzn-oidc-accesstoken", False),
        (None, "x-auth-token", False),
        (None, "x-csrf-token", False),
        (None, "x-auth", False),
        (None, "x-jwt", False),
        (None, "x-session-id", False),
        (None, "x-sessionid", False),
        (None, "x-access-key", False),
        (None, "x-private-key", False),
        (None, "x-credential", False),
        (None, "x-passwd", False),
        (None, "x-author", True),  # not a credential (x-auth and x-auth-* are)
        (None, "x-keep-alive", True),  # a word is matched whole: "keep" is not "key"
        (None, "x-pinned-version", True),
        (None, "idempotency-key", True),  # named exactly by the default list
        *((None, name, False) for name in CREDENTIAL_NAMES),
        (None, "x-request-id", True),
        (("x-*", "x-api-key"), "X-Api-Key", True),  # named exactly: kept
        (("*",), "authorization", False),
        (("authorization",), "Authorization", True),
    ],
)
def test_which_ingress_headers_an_invocation_keeps(allowed: tuple[str, ...] | None, header: str, kept: bool) -> None:
    settings = Settings() if allowed is None else Settings(persisted_headers=allowed)
    assert settings.keeps_header(header) is kept


@pytest.mark.parametrize("value", ["0", "-1"])
def test_a_size_limit_below_one_byte_is_refused_naming_the_variable(value: str) -> None:
    with pytest.raises(BadRequest, match="TORPOR_MAX_REQUEST_BYTES"):
        Settings.load({"TORPOR_MAX_REQUEST_BYTES": value}, None)
