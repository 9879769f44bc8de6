"""`adapters.aws.blobs.Spiller`: which values of a DynamoDB request go to the blob store, and back."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from adapters.aws.blobs import PREVIEW_BYTES, REFERENCE_MARK, Spiller, ValuePreview, is_reference, previews
from control_plane.ports import MAX_MESSAGE_BYTES, ItemTooLarge, StoreUnavailable


class DictBlobs:
    """A `BlobStore` in a dict, counting its calls."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.calls: list[str] = []

    def put(self, key: str, data: bytes) -> None:
        self.calls.append("put")
        self.objects[key] = data

    def get(self, key: str) -> bytes:
        self.calls.append("get")
        return self.objects[key]

    def delete(self, prefix: str) -> int:
        gone = [k for k in self.objects if k.startswith(prefix)]
        for key in gone:
            del self.objects[key]
        return len(gone)


def put(item: dict[str, Any]) -> dict[str, Any]:
    return {"TableName": "t", "Item": {"PK": {"S": "INV#inv_1"}, "SK": {"S": "META"}, **item}}


def test_an_item_that_fits_is_sent_as_it_is_without_a_blob_request() -> None:
    blobs = DictBlobs()
    request = put({"input_entry": {"B": b"x" * 300_000}, "output": {"B": b"y" * 50_000}})
    sent = copy.deepcopy(request)
    Spiller(blobs).spill_request("PutItem", sent)
    assert sent == request
    assert blobs.calls == []


def test_an_item_too_large_spills_its_largest_values_first_and_reads_them_back() -> None:
    blobs = DictBlobs()
    spiller = Spiller(blobs)
    request = put({"input_entry": {"B": b"i" * 300_000}, "output": {"B": b"o" * 5_000_000}, "n": {"N": "1"}})
    spiller.spill_request("PutItem", request)
    item = request["Item"]
    assert is_reference(item["output"]["B"])
    assert item["input_entry"] == {"B": b"i" * 300_000}  # the item fits once the output is out
    (key,) = blobs.objects
    assert key.startswith("INV#inv_1/META/")

    spiller.restore_response({"Item": item})
    assert item["output"] == {"B": b"o" * 5_000_000}


def test_an_update_spills_only_when_told_the_item_is_too_large() -> None:
    blobs = DictBlobs()
    request = {
        "Key": {"PK": {"S": "INV#inv_1"}, "SK": {"S": "META"}},
        "ExpressionAttributeValues": {":0": {"B": b"o" * 500_000}, ":1": {"N": "3"}},
    }
    Spiller(blobs).spill_request("UpdateItem", request)
    assert blobs.calls == []
    Spiller(blobs).spill_request("UpdateItem", request, everything=True)
    assert is_reference(request["ExpressionAttributeValues"][":0"]["B"])
    assert request["ExpressionAttributeValues"][":1"] == {"N": "3"}


def test_a_value_that_looks_like_a_reference_is_always_spilled() -> None:
    blobs = DictBlobs()
    spiller = Spiller(blobs)
    tricky = REFERENCE_MARK + b'{"blob": "elsewhere", "size": 1, "sha256": "0"}'
    request = put({"output": {"B": tricky}})
    spiller.spill_request("PutItem", request)
    assert request["Item"]["output"]["B"] != tricky
    spiller.restore_response({"Items": [request["Item"]]})
    assert request["Item"]["output"] == {"B": tricky}


def test_a_value_above_32_mib_is_refused_before_any_write() -> None:
    blobs = DictBlobs()
    with pytest.raises(ItemTooLarge, match="32 MiB"):
        Spiller(blobs).spill_request("PutItem", put({"output": {"B": b"x" * (MAX_MESSAGE_BYTES + 1)}}))
    assert blobs.objects == {}


def test_a_changed_object_is_not_taken_for_the_value() -> None:
    blobs = DictBlobs()
    spiller = Spiller(blobs)
    request = put({"output": {"B": b"o" * 500_000}})
    spiller.spill_request("PutItem", request)
    (key,) = blobs.objects
    blobs.objects[key] = b"p" * 500_000
    with pytest.raises(ValueError, match="not the ones the item refers to"):
        spiller.restore_response({"Item": request["Item"]})


def test_inside_previews_a_spilled_value_reads_as_its_first_bytes_without_a_get() -> None:
    blobs = DictBlobs()
    spiller = Spiller(blobs)
    value = bytes(range(256)) * 20_000
    request = put({"output": {"B": value}, "input_entry": {"B": b"i" * 400_000}})
    spiller.spill_request("PutItem", request)
    stored = request["Item"]

    with previews("output"):
        answer = {"Item": copy.deepcopy(stored)}
        spiller.restore_response(answer)
    shown = answer["Item"]["output"]["B"]
    assert isinstance(shown, ValuePreview)
    assert shown == value[:PREVIEW_BYTES] and shown.size == len(value)
    assert answer["Item"]["input_entry"] == {"B": b"i" * 400_000}  # not named: read whole
    assert blobs.calls.count("get") == 1

    with pytest.raises(ValueError, match="preview"):  # never written back in the value's place
        spiller.spill_request("PutItem", put({"output": {"B": shown}}))

    answer = {"Item": copy.deepcopy(stored)}
    spiller.restore_response(answer)  # outside: the value itself
    assert answer["Item"]["output"] == {"B": value}


class FailingBlobs(DictBlobs):
    def get(self, key: str) -> bytes:
        raise ConnectionError("S3 is unreachable")


def test_a_failing_get_fails_the_read_retryably_never_without_the_value() -> None:
    blobs = FailingBlobs()
    spiller = Spiller(blobs)
    request = put({"output": {"B": b"o" * 1_000_000}})
    spiller.spill_request("PutItem", request)
    with pytest.raises(StoreUnavailable, match="cannot be read now"):
        spiller.restore_response({"Item": request["Item"]})
