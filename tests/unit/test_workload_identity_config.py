"""Where the workload identity federation configuration comes from: `TORPOR_GOOGLE_CREDENTIAL_CONFIG`
(JSON, base64 of it, or a file), else a `GOOGLE_APPLICATION_CREDENTIALS` file of type external_account."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from adapters.gcp.workload_identity import CONFIG_ENV, credential_config
from control_plane.ports import InvokerError

CONFIG = {
    "type": "external_account",
    "audience": "//iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/p/providers/aws",
    "subject_token_type": "urn:ietf:params:aws:token-type:aws4_request",
    "token_url": "https://sts.googleapis.com/v1/token",
    "service_account_impersonation_url": (
        "https://iamcredentials.googleapis.com/v1/projects/-/serviceAccounts/t@p.iam.gserviceaccount.com:generateAccessToken"
    ),
    "credential_source": {"environment_id": "aws1"},
}


def test_json_base64_and_a_file_give_the_same_configuration(tmp_path: Path) -> None:
    text = json.dumps(CONFIG)
    path = tmp_path / "config.json"
    path.write_text(text)
    for value in (text, base64.b64encode(text.encode()).decode(), str(path)):
        assert credential_config({CONFIG_ENV: value}) == CONFIG


def test_an_external_account_file_in_google_application_credentials_counts(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(CONFIG))
    assert credential_config({"GOOGLE_APPLICATION_CREDENTIALS": str(path)}) == CONFIG
    path.write_text(json.dumps({"type": "service_account"}))
    assert credential_config({"GOOGLE_APPLICATION_CREDENTIALS": str(path)}) is None
    assert credential_config({}) is None


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("not base64 and no file!", "neither JSON, nor a file that exists, nor base64 of JSON"),
        ("{not json", "is not JSON"),
        (json.dumps({"type": "service_account"}), "is not an external_account configuration"),
        (json.dumps({k: v for k, v in CONFIG.items() if k != "service_account_impersonation_url"}), "impersonates no"),
    ],
)
def test_a_bad_configuration_is_an_invoker_error_saying_what_is_wrong(value: str, message: str) -> None:
    with pytest.raises(InvokerError, match=message):
        credential_config({CONFIG_ENV: value})
