"""Stored failures and their wire form: metadata kept, old records readable, long texts cut visibly."""

from __future__ import annotations

from control_plane.failures import clip, metadata_of, stored_failure, wire_failure
from control_plane.protocol import protocol_pb2 as pb


def test_metadata_goes_from_the_wire_to_the_store_and_back() -> None:
    failure = pb.Failure(code=418, message="no tea", metadata=[pb.FailureMetadata(key="reason", value="teapot")])
    stored = stored_failure(failure)
    assert stored == {"code": 418, "message": "no tea", "metadata": {"reason": "teapot"}}
    assert wire_failure(stored) == failure


def test_a_failure_stored_before_metadata_existed_reads_as_before() -> None:
    old = {"code": 409, "message": "cancelled"}
    assert metadata_of(old) == {}
    assert wire_failure(old) == pb.Failure(code=409, message="cancelled")
    assert stored_failure(pb.Failure(message="x")) == {"code": 500, "message": "x"}  # code 0 means 500


def test_a_long_text_is_cut_with_a_marker_saying_how_long_it_was() -> None:
    cut = clip("a" * 10_000, 100)
    assert len(cut) == 100
    assert cut.endswith("[truncated: 10000 characters in all]")
    assert clip("short", 100) == "short"
