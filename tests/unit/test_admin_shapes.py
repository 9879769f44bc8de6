"""The admin API's Restate shapes: state versions, durations, handler descriptions."""

from __future__ import annotations

import pytest

from control_plane.durations import format_duration_ms, parse_duration_ms
from http_api.admin_shapes import payload_description, state_version


@pytest.mark.parametrize(
    ("state", "version"),
    [  # restate-server's own vectors for its state version, and the one its CLI sent for {"count": "5"}
        ({b"name": b"bob"}, "tDqA04Lj3_qJ-PgNPTecXDGZgpwy6jm2Ni2BYqJIthM"),
        ({b"b": b"bbb", b"a": b"aaa"}, "RVM17P6x18Wp-JnzQ01BzmqCvhAunTOQI_az6Px3Zyk"),
        ({}, "47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU"),
        ({b"count": b"5"}, "S6MyUcVGhqv_Nm54F5guL_XKfJMeFCOXIi7QEc5GZZA"),
    ],
)
def test_state_version_is_restate_servers(state: dict[bytes, bytes], version: str) -> None:
    assert state_version(state) == version


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (0, "0s"),
        (500, "500ms"),
        (60_000, "1m"),
        (5_400_000, "1h 30m"),
        (86_400_000, "1d"),
        (93_784_005, "1d 2h 3m 4s 5ms"),
    ],
)
def test_durations_are_written_as_restate_writes_them_and_read_back(ms: int, text: str) -> None:
    assert format_duration_ms(ms) == text
    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize(
    ("payload", "described"),
    [
        (None, "none"),
        ({}, "none"),
        ({"contentType": "application/json", "jsonSchema": {"type": "object"}}, "JSON object"),
        ({"contentType": "application/json"}, "JSON value"),
        ({"contentType": "application/octet-stream"}, "application/octet-stream"),
    ],
)
def test_payload_descriptions(payload: dict[str, object] | None, described: str) -> None:
    assert payload_description(payload) == described
