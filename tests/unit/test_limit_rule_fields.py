"""`PUT /limits/rules` and `POST /limits/rules/bulk-delete` refuse fields of the wrong type with 422
(`Unprocessable`), as restate-server 1.7.12 refuses a body its rule types do not parse, instead of
storing them: `"disabled": "false"` must not disable a rule, and a limit is a nonzero u32 there."""

from __future__ import annotations

import pytest

from control_plane.errors import Unprocessable
from control_plane.limits import delete_rules, upsert_rules


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        ({"disabled": "false"}, "disabled must be true or false"),
        ({"disabled": 0}, "disabled must be true or false"),
        ({"description": 5}, "description must be a string"),
        ({"limits": {"concurrency": 2**32}}, "at most 4294967295"),
    ],
)
def test_a_rule_field_of_the_wrong_type_is_refused_and_nothing_is_stored(extra: dict[str, object], says: str) -> None:
    entry = {"pattern": "tenants/*", "limits": {"concurrency": 2}, **extra}
    with pytest.raises(Unprocessable, match=says):
        upsert_rules({}, [entry], now_ms=1)


def test_well_typed_fields_are_stored() -> None:
    book, out = upsert_rules({}, [{"pattern": "t", "disabled": False, "description": "d", "limits": None}], now_ms=1)
    assert out[0]["disabled"] is False and out[0]["description"] == "d" and out[0]["limits"] == {"concurrency": None}
    _, out = upsert_rules({}, [{"pattern": "t", "limits": {"concurrency": 2**32 - 1}}], now_ms=1)
    assert out[0]["limits"] == {"concurrency": 2**32 - 1}


def test_an_expected_version_that_is_not_a_number_is_malformed_not_a_conflict() -> None:
    book, _ = upsert_rules({}, [{"pattern": "t", "limits": {"concurrency": 1}}], now_ms=1)
    with pytest.raises(Unprocessable, match="expected_version must be a whole number"):
        delete_rules(book, [{"pattern": "t", "expected_version": "1"}])
    assert delete_rules(book, [{"pattern": "t", "expected_version": 1}])[1] == ["t"]
