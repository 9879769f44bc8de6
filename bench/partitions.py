"""Scale projection: DynamoDB requests and write units per invocation, and the hottest partition key.

    python -m bench.partitions [--checkout PATH ...] [--runs 5] [--rounds 10] [--quick] [--trace]
    python -m bench.partitions --checkout /work/wt/before --checkout .   # before → after, side by side

Measured from the outside, at the DynamoDB wire, so that the same code measures any version of
Torpor: `--checkout PATH` (repeatable; default this repository) runs `torpor dev` from that
checkout (`python -m adapters.cli dev` with that directory as working directory and `PYTHONPATH`,
this interpreter; the module path and commit that ran are printed), one checkout after the other,
each on a fresh moto server (its own process). The example services (`python -m examples.serve`,
from this repository) are registered on its admin API. Between Torpor and moto sits a **metering
proxy** (`MeterProxy`, threads of this process) that forwards every DynamoDB JSON request
(`X-Amz-Target` names the operation) and records, one request at a time (requests are serialised
so that the item images before and after a write are exact):

- every request, by operation (a Query by operation and index name);
- for every item written (PutItem, UpdateItem, DeleteItem, BatchWriteItem, TransactWriteItems and
  its ConditionCheck), the write units in the table and in each global secondary index, with the
  partition key they land on. The item before and after the write is read from moto directly with
  a strongly consistent GetItem (not counted). Write units (DynamoDB's rules, "Capacity unit
  consumption" in the developer guide): 1 per started KB of the larger of the old and the new item,
  at least 1; a write that fails its condition costs the same on the old item alone; in a
  `TransactWriteItems` every table write counts twice (index upkeep is counted once, as it is done
  outside the transaction). An index is written when the item enters it, leaves it, or changes there
  (its index keys or projected attributes differ; keys and projection from DescribeTable): a new
  index key is a delete in the old index partition plus a put in the new one. An index entry's size
  is its projected attributes, the table's and the index's keys, plus 100 bytes. Item sizes: the
  attribute names' and values' UTF-8 bytes, numbers 1 byte per two significant digits + 1,
  binaries their decoded bytes, lists and maps 3 bytes + 1 per element;
- read units of every read (GetItem, BatchGetItem, TransactGetItems, Query, Scan), from the items
  answered: 1 per started 4 KB, half for an eventually consistent read, twice in a transaction.

Workloads, each `--runs` times alone, one after the other (after one unmetered warm-up of each):
`Steps/one_step`, `Steps/ten_steps`, `Greeter/greet` (no step), `Counter/{fresh key}/add`
(exclusive), `Counter/{key}/get` (shared read of a key that has state), the workflow
`Signup/{id}/run` sent, left to suspend on its `confirmation` promise, then `Signup/{id}/confirm`
(two invocations), `Waits/sleep` 1000 ms, and `Steps/one_step/send`. After each run the bench waits
until the proxy has seen no request for `--settle` seconds, so the figures per invocation include
what the control plane does in the background meanwhile (the timer loop; the periodic sweep, every
60 s, falls into whichever window it falls into). Answers are checked (a send's and the workflow's
output are fetched after the window closed). Then the **mixed run**: `--rounds` rounds, each
starting one of every workload at once (9 invocations), then the settle wait; its write units are
summed per partition key (table and index apart). Keys `INV#…` and `OBJ#…` belong to one invocation
or one object key and do not get hotter as the rate grows; every other key (`TIMER…`, `STATUS#…` in
an index, `DEP`, `SVC`, …) is shared. DynamoDB serves at most 1,000 write units per second on one
partition key (a partition's limit; adaptive capacity can split a hot partition but not one key), so
the projected ceiling of this mix is 1,000 ÷ (the hottest shared key's write units per invocation)
invocations per second. With few invocations the busiest shard of a sharded key family
(`STATUS#running#{shard}`, `TIMER#{shard}`, ...) is mostly chance, so the projection at scale
spreads a family's writes evenly over its `--shards` shards (`TORPOR_STORE_SHARDS`, default 64, as
the SAM and CDK stacks deploy): its ceiling is 1,000 ÷ (the family's write units per invocation ÷
shards). `--quick`: 2 runs, 3 rounds. `--trace`: every request of the workloads run alone
(operation, status, keys). With several checkouts, each table shows `first → second` cells.

Not measured here: latency (moto's speed is not DynamoDB's), and the reads' partition keys (3,000
read units per second per partition, far from reached).
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import math
import os
import re
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import boto3
import httpx

from bench.common import load, moto, wait_http
from control_plane.limits import subpools
from tests.helpers.moto import DUMMY_AWS_ENV
from tests.helpers.services import REPO_ROOT, free_port, serve_examples, stop_process

KB = 1024
READ_UNIT_BYTES = 4 * KB
INDEX_ENTRY_OVERHEAD = 100  # bytes DynamoDB adds to every index entry
SHARDS = 64
"""`TORPOR_STORE_SHARDS` of the measured `torpor dev` (`--shards`; the SAM and CDK stacks' default)."""

KEY_WRITE_LIMIT = 1000  # write units per second on one partition key
OWNED_PREFIXES = ("INV#", "OBJ#")  # one invocation's or one object key's partition
WRITES = ("PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems")

# --- item sizes and units --------------------------------------------------------------------------


def value_size(value: dict[str, Any]) -> int:
    """Bytes of one DynamoDB attribute value in wire form (`{"S": "x"}`), as DynamoDB sizes items."""
    ((kind, v),) = value.items()
    if kind == "S":
        return len(v.encode())
    if kind == "N":
        return number_size(v)
    if kind == "B":
        return _binary_size(v)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(len(s.encode()) for s in v)
    if kind == "NS":
        return sum(number_size(n) for n in v)
    if kind == "BS":
        return sum(_binary_size(b) for b in v)
    if kind == "L":
        return 3 + sum(1 + value_size(e) for e in v)
    if kind == "M":
        return 3 + sum(1 + len(k.encode()) + value_size(e) for k, e in v.items())
    raise ValueError(f"unknown attribute type {kind!r}")


def _binary_size(value: bytes | str) -> int:
    """Bytes of a binary value: as boto3 gives it (bytes), or on the wire (base64 text)."""
    return len(value) if isinstance(value, bytes) else len(base64.b64decode(value))


def number_size(text: str) -> int:
    """Bytes of a DynamoDB number: 1 per two significant digits, plus 1."""
    digits = format(abs(Decimal(text)).normalize(), "f").replace(".", "").strip("0")
    return (len(digits) + 1) // 2 + 1


def item_size(item: dict[str, Any] | None) -> int:
    """Bytes of an item (names and values); 0 for no item."""
    return sum(len(name.encode()) + value_size(v) for name, v in (item or {}).items())


def write_units(*sizes: int) -> int:
    """Write units of one item write: 1 per started KB of the largest of `sizes` (bytes), at least 1."""
    return max(1, math.ceil(max(sizes, default=0) / KB))


def read_units(size: int, consistent: bool) -> float:
    """Read units of reading `size` bytes: 1 per started 4 KB (at least 1), half if eventually consistent."""
    units = max(1, math.ceil(size / READ_UNIT_BYTES))
    return units if consistent else units / 2


@dataclass
class Index:
    """A global secondary index: its name, key attributes, and projected attributes (None: all)."""

    name: str
    hash_key: str
    keys: tuple[str, ...]
    projected: frozenset[str] | None

    def entry(self, item: dict[str, Any] | None, table_keys: tuple[str, ...]) -> dict[str, Any] | None:
        """The item's entry in this index (its projected attributes), or None if it is not in it."""
        if item is None or any(k not in item for k in self.keys):
            return None
        if self.projected is None:
            return dict(item)
        names = self.projected | set(self.keys) | set(table_keys)
        return {k: v for k, v in item.items() if k in names}


@dataclass
class Schema:
    """A table's key attributes and global secondary indexes (from DescribeTable)."""

    keys: tuple[str, ...]
    indexes: list[Index]

    @classmethod
    def described(cls, table: dict[str, Any]) -> Schema:
        indexes = []
        for gsi in table.get("GlobalSecondaryIndexes", []):
            keys = tuple(k["AttributeName"] for k in gsi["KeySchema"])
            hash_key = next(k["AttributeName"] for k in gsi["KeySchema"] if k["KeyType"] == "HASH")
            projection = gsi.get("Projection", {"ProjectionType": "ALL"})
            kind = projection.get("ProjectionType", "ALL")
            projected = None if kind == "ALL" else frozenset(projection.get("NonKeyAttributes", []))
            indexes.append(Index(gsi["IndexName"], hash_key, keys, projected))
        return cls(tuple(k["AttributeName"] for k in table["KeySchema"]), indexes)


# --- the meter -------------------------------------------------------------------------------------


@dataclass
class Write:
    """Write units that one item write consumed in one place: the table ("table") or an index."""

    operation: str  # e.g. "UpdateItem", "TransactWriteItems", "PutItem (condition failed)"
    where: str  # "table" or the index name
    partition: str  # the partition key's value in that place
    units: float


@dataclass
class Reading:
    """What the meter recorded since the last `take`: requests by kind, writes, read units."""

    requests: Counter[str] = field(default_factory=Counter)
    writes: list[Write] = field(default_factory=list)
    read_units: float = 0.0
    log: list[str] = field(default_factory=list)  # one line per request: operation, keys
    proxy_seconds: float = 0.0  # time requests spent in the meter besides their own round trip to the store

    @property
    def write_units(self) -> float:
        return sum(w.units for w in self.writes)


def _key_text(value: dict[str, Any]) -> str:
    ((_, v),) = value.items()
    return str(v)


def _keys_named(request: dict[str, Any]) -> str:
    """The keys a request names, for a trace line: `PK/SK` of its items, or a query's key values."""
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if "PK" in node and isinstance(node["PK"], dict):
                found.append("/".join(_key_text(node[k])[:40] for k in ("PK", "SK") if k in node))
                return
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk({k: v for k, v in request.items() if k != "ExpressionAttributeValues"})
    if not found and "KeyConditionExpression" in request:
        values = request.get("ExpressionAttributeValues", {}).values()
        found.append(" ".join(_key_text(v)[:40] for v in values))
    return ", ".join(found)


class Meter:
    """Forwards DynamoDB JSON requests to `endpoint` one at a time and meters them (module docstring).

    `handle` is the whole proxy logic; `MeterProxy` puts it behind HTTP. The item images are read
    with a boto3 client on `endpoint` directly (not metered).
    """

    def __init__(self, endpoint: str, region: str = "us-east-1") -> None:
        self.endpoint = endpoint
        self._lock = threading.Lock()
        self._http = httpx.Client(timeout=60)
        self._direct = boto3.client(
            "dynamodb", endpoint_url=endpoint, region_name=region,
            aws_access_key_id="testing", aws_secret_access_key="testing",
        )  # fmt: skip
        self._schemas: dict[str, Schema] = {}
        self._reading = Reading()
        self.last_request = time.monotonic()

    def take(self) -> Reading:
        """What was recorded since the last call; starts a new record."""
        with self._lock:
            reading, self._reading = self._reading, Reading()
            return reading

    def wait_idle(self, idle_s: float, timeout_s: float = 120.0) -> None:
        """Return once no request has arrived for `idle_s` seconds. Raises TimeoutError after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() - self.last_request < idle_s:
            if time.monotonic() > deadline:
                raise TimeoutError(f"DynamoDB requests kept coming for {timeout_s:.0f} s")
            time.sleep(0.05)

    def handle(self, headers: dict[str, str], body: bytes) -> httpx.Response:
        """Forward one request (headers, raw body) to the endpoint, metering it; moto's answer."""
        operation = headers.get("x-amz-target", "").rpartition(".")[2]
        with self._lock:
            try:
                request = json.loads(body) if body else {}
            except ValueError:
                request = {}
            try:
                touched = self._touched(operation, request) if operation in WRITES else []
            except self._direct.exceptions.ResourceNotFoundException:
                touched = []  # no such table: the store answers the error itself, nothing is written
            before = [self._get(table, key) for table, key, _ in touched]
            response = self._http.post(self.endpoint + "/", content=body, headers=headers)
            self.last_request = time.monotonic()
            label = operation + (f" {request['IndexName']}" if request.get("IndexName") else "")
            self._reading.requests[label] += 1
            self._reading.log.append(f"{label:<24} {response.status_code} {_keys_named(request)}")
            if operation in ("CreateTable", "UpdateTable", "DeleteTable"):
                self._schemas.pop(str(request.get("TableName")), None)
            ok = response.status_code == 200
            if touched:
                after = [self._get(table, key) for table, key, _ in touched] if ok else before
                for (table, key, factor), old, new in zip(touched, before, after, strict=True):
                    self._meter_write(operation if ok else f"{operation} (condition failed)", table, key,
                                      old, new, factor)  # fmt: skip
            elif ok and operation in ("GetItem", "BatchGetItem", "TransactGetItems", "Query", "Scan"):
                self._reading.read_units += self._read_units(operation, request, response.json())
            return response

    def add_proxy_time(self, seconds: float) -> None:
        """Count `seconds` a request spent in the proxy beyond its own round trip to the store."""
        with self._lock:
            self._reading.proxy_seconds += seconds

    def _schema(self, table: str) -> Schema:
        if table not in self._schemas:
            self._schemas[table] = Schema.described(self._direct.describe_table(TableName=table)["Table"])
        return self._schemas[table]

    def _get(self, table: str, key: dict[str, Any]) -> dict[str, Any] | None:
        return self._direct.get_item(TableName=table, Key=key, ConsistentRead=True).get("Item")

    def _touched(self, operation: str, request: dict[str, Any]) -> list[tuple[str, dict[str, Any], int]]:
        """(table, key, factor) of every item the write request names; factor 2 in a transaction."""
        out: list[tuple[str, dict[str, Any], int]] = []

        def add(table: str, key_or_item: dict[str, Any], factor: int = 1) -> None:
            keys = self._schema(table).keys
            out.append((table, {k: key_or_item[k] for k in keys}, factor))

        if operation == "PutItem":
            add(request["TableName"], request["Item"])
        elif operation in ("UpdateItem", "DeleteItem"):
            add(request["TableName"], request["Key"])
        elif operation == "BatchWriteItem":
            for table, requests in request["RequestItems"].items():
                for r in requests:
                    add(table, r["PutRequest"]["Item"] if "PutRequest" in r else r["DeleteRequest"]["Key"])
        elif operation == "TransactWriteItems":
            for item in request["TransactItems"]:
                ((_, action),) = item.items()
                add(action["TableName"], action.get("Item") or action["Key"], 2)
        return out

    def _meter_write(
        self, operation: str, table: str, key: dict[str, Any], old: dict | None, new: dict | None, factor: int
    ) -> None:
        schema = self._schema(table)
        partition = _key_text(key[schema.keys[0]])
        record = self._reading.writes.append
        record(Write(operation, "table", partition, factor * write_units(item_size(old), item_size(new))))
        for index in schema.indexes:
            was, now = index.entry(old, schema.keys), index.entry(new, schema.keys)
            if was == now:
                continue  # not in the index, or unchanged there: no index write
            was_key = tuple(str(was[k]) for k in index.keys) if was else None
            now_key = tuple(str(now[k]) for k in index.keys) if now else None
            if was is not None and now is not None and was_key == now_key:  # changed in place
                size = max(item_size(was), item_size(now)) + INDEX_ENTRY_OVERHEAD
                record(Write(operation, index.name, _key_text(now[index.hash_key]), write_units(size)))
                continue
            if was is not None:  # leaves the index, or its index key moves: a delete there
                size = item_size(was) + INDEX_ENTRY_OVERHEAD
                record(Write(operation, index.name, _key_text(was[index.hash_key]), write_units(size)))
            if now is not None:  # enters the index, or arrives under its new key: a put there
                size = item_size(now) + INDEX_ENTRY_OVERHEAD
                record(Write(operation, index.name, _key_text(now[index.hash_key]), write_units(size)))

    @staticmethod
    def _read_units(operation: str, request: dict[str, Any], answer: dict[str, Any]) -> float:
        consistent = bool(request.get("ConsistentRead"))
        if operation == "GetItem":
            return read_units(item_size(answer.get("Item")), consistent)
        if operation in ("Query", "Scan"):
            return read_units(sum(item_size(i) for i in answer.get("Items", [])), consistent)
        if operation == "TransactGetItems":
            return sum(2 * read_units(item_size(r.get("Item")), True) for r in answer.get("Responses", []))
        units = 0.0  # BatchGetItem: per item, each table's consistency
        for table, items in answer.get("Responses", {}).items():
            table_consistent = bool(request["RequestItems"].get(table, {}).get("ConsistentRead"))
            units += sum(read_units(item_size(i), table_consistent) for i in items)
        return units


class MeterProxy:
    """`Meter` behind a threaded HTTP server on a free loopback port (`url`); a context manager."""

    def __init__(self, endpoint: str) -> None:
        self.meter = Meter(endpoint)
        meter = self.meter

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out in two writes: no 40 ms delayed-ACK stall

            def do_POST(self) -> None:
                entered = time.perf_counter()
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                skip = ("host", "content-length", "connection", "accept-encoding")
                headers = {k.lower(): v for k, v in self.headers.items() if k.lower() not in skip}
                try:
                    answer = meter.handle(headers, body)
                except Exception as exc:  # the proxy answers 500 rather than hanging the client
                    logging.getLogger(__name__).exception("metering proxy failed")
                    content, status, answer_headers, forwarded = str(exc).encode(), 500, {}, 0.0
                else:
                    content, status, forwarded = answer.content, answer.status_code, answer.elapsed.total_seconds()
                    drop = ("content-length", "transfer-encoding", "connection", "content-encoding")
                    answer_headers = {k: v for k, v in answer.headers.items() if k.lower() not in drop}
                self.send_response(status)
                for name, value in answer_headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)
                meter.add_proxy_time(time.perf_counter() - entered - forwarded)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="meter-proxy", daemon=True)

    def __enter__(self) -> MeterProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


# --- running a checkout ----------------------------------------------------------------------------


@dataclass
class Checkout:
    """A Torpor checkout to measure: its path, a short label, what ran (module path, commit)."""

    path: Path
    label: str
    commit: str
    ran: str = ""


def checkout(path: str) -> Checkout:
    """The checkout at `path`, labelled by its folder name and commit."""
    root = Path(path).resolve()
    commit = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=False).stdout.strip() or "?"  # fmt: skip
    dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True, check=False).stdout.strip()  # fmt: skip
    return Checkout(root, root.name, commit + ("+changes" if dirty else ""))


@contextmanager
def torpor_dev(where: Checkout, dynamodb_endpoint: str, shards: int = SHARDS) -> Iterator[tuple[str, str]]:
    """`torpor dev` from the checkout `where`, its table behind `dynamodb_endpoint`: (ingress, admin URLs).

    It runs with `TORPOR_STORE_SHARDS` = `shards` (a checkout without shards ignores it)."""
    env = {**os.environ, **DUMMY_AWS_ENV, "PYTHONPATH": str(where.path), "TORPOR_STORE_SHARDS": str(shards)}
    probe = "import adapters.cli.local as a, control_plane.settings as c; print(a.__file__, c.__file__)"
    where.ran = subprocess.run([sys.executable, "-c", probe], cwd=where.path, env=env, capture_output=True,
                               text=True, check=True).stdout.strip()  # fmt: skip
    if any(not Path(f).resolve().is_relative_to(where.path) for f in where.ran.split()):
        raise SystemExit(f"{where.path}: Python imports Torpor from elsewhere: {where.ran}")
    where.ran = str(Path(where.ran.split()[0]).parents[2])
    ingress, admin = free_port(), free_port()
    command = [sys.executable, "-m", "adapters.cli", "dev", "--ingress-port", str(ingress), "--admin-port", str(admin),
               "--dynamodb-endpoint", dynamodb_endpoint, "--table", f"bench-{uuid.uuid4().hex[:8]}"]  # fmt: skip
    log_path = REPO_ROOT / ".cache" / "bench" / "partitions-torpor-dev.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        process = subprocess.Popen(command, cwd=where.path, env=env, stdout=log, stderr=log)
    try:
        wait_http(f"http://127.0.0.1:{admin}/health", 60, process)
        yield f"http://127.0.0.1:{ingress}", f"http://127.0.0.1:{admin}"
    finally:
        stop_process(process)  # type: ignore[arg-type]


# --- workloads -------------------------------------------------------------------------------------


class Driver:
    """Starts the workloads on one `torpor dev` and checks their answers."""

    def __init__(self, ingress: str, meter: Meter, settle_s: float) -> None:
        self.ingress = ingress
        self.meter = meter
        self.settle_s = settle_s
        self.client = httpx.Client(timeout=90)
        self.objects: list[str] = []  # keys of Counter that have state
        self.pending: list[tuple[str, str]] = []  # (output URL, what), checked after the window

    def post(self, path: str, body: Any, expected: int = 200) -> Any:
        answer = self.client.post(self.ingress + path, json=body)
        if answer.status_code != expected:
            raise SystemExit(f"POST {path}: HTTP {answer.status_code} {answer.text[:200]}")
        return answer.json() if answer.content else None

    def one_step(self, _: str) -> None:
        self.post("/Steps/one_step", 1)

    def ten_steps(self, _: str) -> None:
        self.post("/Steps/ten_steps", "b")

    def greet(self, _: str) -> None:
        self.post("/Greeter/greet", "x")

    def add(self, tag: str) -> None:
        key = f"k{tag}"
        if self.post(f"/Counter/{key}/add", 1) != 1:
            raise SystemExit(f"Counter/{key}/add on a fresh key did not answer 1")
        self.objects.append(key)

    def get(self, tag: str) -> None:
        key = self.objects[hash(tag) % len(self.objects)]
        if not isinstance(self.post(f"/Counter/{key}/get", None), int):
            raise SystemExit(f"Counter/{key}/get did not answer a number")

    def workflow(self, tag: str, settle: bool = True) -> None:
        self.post(f"/Signup/w{tag}/run/send", f"{tag}@example.com", 202)
        if settle:
            self.meter.wait_idle(self.settle_s)  # `run` suspends on the promise
        else:
            time.sleep(0.5)
        if self.post(f"/Signup/w{tag}/confirm", "c0de") != "confirmed":
            raise SystemExit(f"Signup/w{tag}/confirm did not answer 'confirmed'")
        self.pending.append((f"/restate/workflow/Signup/w{tag}/output", "Signup/run"))

    def sleep(self, _: str) -> None:
        self.post("/Waits/sleep", 1000)

    def limited(self, _: str) -> None:
        self.post("/Waits/sleeps", 0)  # no sleep: a plain call, under a concurrency limit (`LIMITED`)

    def send(self, _: str) -> None:
        invocation_id = self.post("/Steps/one_step/send", 1, 202)["invocationId"]
        self.pending.append((f"/restate/invocation/{invocation_id}/output", "Steps/one_step/send"))

    def mixed(self, method: str, tag: str) -> None:
        """One workload of the mixed run (the workflow waits a fixed 0.5 s before confirming)."""
        if method == "workflow":
            self.workflow(tag, settle=False)
        else:
            getattr(self, method)(tag)

    def check(self) -> None:
        """Every sent invocation has completed with an output (after the metered window)."""
        for url, what in self.pending:
            answer = self.client.get(self.ingress + url)
            if answer.status_code != 200:
                raise SystemExit(f"{what}: its output is not there ({url}: HTTP {answer.status_code} {answer.text})")
        self.pending.clear()


KINDS: dict[str, tuple[str, int]] = {  # label: (Driver method, invocations per run)
    "one step (`Steps/one_step`)": ("one_step", 1),
    "ten steps (`Steps/ten_steps`)": ("ten_steps", 1),
    "no step (`Greeter/greet`)": ("greet", 1),
    "exclusive object call, fresh key (`Counter/add`)": ("add", 1),
    "shared read (`Counter/get`)": ("get", 1),
    "workflow + promise (`Signup` run, confirm)": ("workflow", 2),
    "1 s sleep (`Waits/sleep`)": ("sleep", 1),
    "send of one step (`Steps/one_step/send`)": ("send", 1),
    "call under a concurrency limit (`Waits/sleeps` 0, limit 64)": ("limited", 1),
}
LIMITED_SLOTS = 64
LIMITED = {"handler_concurrency_limits": {"sleeps": LIMITED_SLOTS}}
"""Set on `Waits` (`PATCH /services/Waits`) before the runs: the limited workload's pool, one item."""
MIX_INVOCATIONS = sum(n for _, n in KINDS.values())


@dataclass
class Result:
    """One checkout's readings: per kind (over `runs` runs), and the mixed run (`rounds` rounds)."""

    where: Checkout
    runs: int
    rounds: int
    kinds: dict[str, Reading]
    mixed: Reading
    seconds: float


def measure(
    where: Checkout, runs: int, rounds: int, settle_s: float, trace: bool = False, shards: int = SHARDS
) -> Result:
    """Run every workload alone `runs` times, then the mix `rounds` times, on `torpor dev` from `where`."""
    started = time.monotonic()
    with (
        moto() as (endpoint, _),
        MeterProxy(endpoint) as proxy,
        serve_examples() as (services, _),
        torpor_dev(where, proxy.url, shards) as (ingress, admin),
    ):
        httpx.post(f"{admin}/deployments", json={"uri": services}, timeout=30).raise_for_status()
        limited = httpx.patch(f"{admin}/services/Waits", json=LIMITED, timeout=30)
        if limited.status_code != 200:  # a checkout without concurrency limits: its call runs unlimited
            print(f"note: {where}: PATCH /services/Waits {LIMITED} answered {limited.status_code}", file=sys.stderr)
        meter, driver = proxy.meter, Driver(ingress, proxy.meter, settle_s)
        for method, _ in KINDS.values():  # warm-up, not metered
            getattr(driver, method)(f"warm-{uuid.uuid4().hex[:6]}")
        meter.wait_idle(settle_s)
        driver.check()
        kinds = {}
        for label, (method, _) in KINDS.items():
            meter.wait_idle(settle_s)
            meter.take()
            for _ in range(runs):
                getattr(driver, method)(uuid.uuid4().hex[:10])
                meter.wait_idle(settle_s)
            kinds[label] = meter.take()
            if trace:
                print("\n".join(f"    {line}" for line in kinds[label].log))
            driver.check()
            print(f"  {where.label}: {label}: {sum(kinds[label].requests.values()) / runs:.1f} requests, "
                  f"{kinds[label].write_units / runs:.1f} write units per run", flush=True)  # fmt: skip
        meter.wait_idle(settle_s)
        meter.take()
        with ThreadPoolExecutor(len(KINDS)) as pool:
            for _ in range(rounds):
                tag = uuid.uuid4().hex[:8]
                futures = [pool.submit(driver.mixed, method, tag) for method, _ in KINDS.values()]
                for future in futures:
                    future.result()
        meter.wait_idle(settle_s)
        mixed = meter.take()
        driver.check()
    return Result(where, runs, rounds, kinds, mixed, time.monotonic() - started)


# --- tables ----------------------------------------------------------------------------------------


_SHARD_SUFFIX = re.compile(r"#\d+$")
_SUBPOOL = re.compile(r"^(OBJ#~limit/[^#]*)~s\d+#.*$")
"""A concurrency limit's sub-pool item, `OBJ#~limit/{pool}~s{i}#{h("")}` (`limits.sub_pool`)."""


def family(partition: str) -> str:
    """A shared key with its shard number replaced: `STATUS#running#7` -> `STATUS#running#{shard}`;
    a concurrency limit's sub-pool `OBJ#~limit/Waits/sleeps~s3#…` -> `OBJ#~limit/Waits/sleeps~s{sub}`."""
    return _SHARD_SUFFIX.sub("#{shard}", _SUBPOOL.sub(r"\1~s{sub}", partition))


def family_keys(family_key: str, shards: int) -> int:
    """How many keys a family's writes spread over at scale: its shards, a limited pool's sub-pools
    (`limits.subpools` of the bench's limit, `LIMITED`), else 1."""
    if family_key.endswith("#{shard}"):
        return shards
    if family_key.endswith("~s{sub}"):
        return subpools(LIMITED_SLOTS)
    return 1


SHARED_OBJECTS = ("OBJ#~limit/", "OBJ#~rate/")  # a concurrency or rate limit's item: every limited call's


def owned(partition: str) -> bool:
    """Whether a partition key belongs to one invocation or one object key (not shared: a limit's
    pool or start schedule, `OBJ#~limit/…`, `OBJ#~rate/…`, is every limited call's)."""
    return partition.startswith(OWNED_PREFIXES) and not partition.startswith(SHARED_OBJECTS)


def per_key(reading: Reading) -> Counter[tuple[str, str]]:
    """Write units per (place, partition key); the place is "table" or an index name."""
    units: Counter[tuple[str, str]] = Counter()
    for w in reading.writes:
        units[w.where, w.partition] += w.units
    return units


def named(where: str, partition: str) -> str:
    """A partition key for the tables: `TIMER`, or `STATUS#running` in index `by_status`."""
    key = f"`{short(partition)}`"
    return key if where == "table" else f"{key} in index `{where}`"


def short(key: str) -> str:
    """A partition key for a table: an owned key's id shortened."""
    if key.startswith(SHARED_OBJECTS):
        return key if key.endswith("~s{sub}") else key.split("#")[0] + "#" + key.split("#")[1]
    for prefix in OWNED_PREFIXES:
        if key.startswith(prefix):
            rest = key[len(prefix) :]
            return prefix + (rest[:10] + "…" if len(rest) > 12 else rest)
    return key


@dataclass
class Hot:
    """The mixed run's partition figures for one checkout."""

    invocations: int
    total: float
    shared_key: str
    shared_units: float  # per invocation
    top_key: str
    top_units: float  # per invocation
    owned_units: float  # per invocation
    family_key: str  # the shared key family hottest at scale: its writes spread evenly over its shards
    family_units: float  # per invocation, on one key of that family (the family's total / its shards)

    @property
    def ceiling(self) -> float:
        return KEY_WRITE_LIMIT / self.shared_units if self.shared_units else math.inf

    @property
    def scale_ceiling(self) -> float:
        return KEY_WRITE_LIMIT / self.family_units if self.family_units else math.inf


def hot(result: Result, shards: int = SHARDS) -> Hot:
    units = per_key(result.mixed)
    n = result.rounds * MIX_INVOCATIONS
    shared = {k: v for k, v in units.items() if not owned(k[1])}
    shared_key = max(shared, key=shared.__getitem__, default=("table", "(none)"))
    top_key = max(units, key=units.__getitem__, default=("table", "(none)"))
    owned_total = sum(v for k, v in units.items() if owned(k[1]))
    families: Counter[tuple[str, str]] = Counter()
    for (where, partition), v in shared.items():
        families[where, family(partition)] += v
    one_key = {k: v / family_keys(k[1], shards) for k, v in families.items()}
    family_key = max(one_key, key=one_key.__getitem__, default=("table", "(none)"))
    return Hot(n, sum(units.values()), named(*shared_key), shared.get(shared_key, 0) / n, named(*top_key),
               units.get(top_key, 0) / n, owned_total / n, named(*family_key),
               one_key.get(family_key, 0) / n)  # fmt: skip


def where_units(reading: Reading) -> Counter[str]:
    units: Counter[str] = Counter()
    for w in reading.writes:
        units[w.where] += w.units
    return units


def print_tables(results: list[Result], shards: int = SHARDS) -> None:
    """The markdown tables: per kind, by operation, the mixed run's keys, the projection."""
    labels = [r.where.label for r in results]
    indexes = sorted({w for r in results for k in [*r.kinds.values(), r.mixed] for w in where_units(k)} - {"table"})
    print("\n## Requests and write units per run of each workload, alone\n")
    for r in results:
        print(f"- {r.where.label}: `{r.where.path}` at {r.where.commit} (Torpor imported from `{r.where.ran}`), "
              f"{r.runs} runs per workload, {r.seconds:.0f} s")  # fmt: skip
    columns = ["requests", "write units", "… in the table", *[f"… in index {i}" for i in indexes], "read units"]
    if len(results) > 1:
        print(f"\nCells: {' → '.join(labels)}.")
    print("\n| workload | " + " | ".join(columns) + " |\n| --- |" + " --- |" * len(columns))
    for kind in KINDS:
        cells = []
        for column in columns:
            values = []
            for r in results:
                reading = r.kinds[kind]
                value = {
                    "requests": sum(reading.requests.values()),
                    "write units": reading.write_units,
                    "… in the table": where_units(reading)["table"],
                    "read units": reading.read_units,
                    **{f"… in index {i}": where_units(reading)[i] for i in indexes},
                }[column]
                values.append(f"{value / r.runs:.1f}")
            cells.append(" → ".join(values))
        print(f"| {kind} | " + " | ".join(cells) + " |")
    for r in results:
        print(f"\n### {r.where.label}: by operation, requests / write units (table + indexes) per run\n")
        names = [kind.split(" (")[0] for kind in KINDS]
        print("| operation | " + " | ".join(names) + " |\n| --- |" + " --- |" * len(names))
        ops = sorted({op for reading in r.kinds.values() for op in reading.requests})
        for op in ops:
            cells = []
            for reading in r.kinds.values():
                requests = reading.requests[op] / r.runs
                units = sum(w.units for w in reading.writes if w.operation.split(" (")[0] == op) / r.runs
                failed = sum(w.units for w in reading.writes if w.operation == f"{op} (condition failed)") / r.runs
                cell = f"{requests:.1f}" + (f" / {units:.1f}" if op in WRITES else "")
                cells.append(cell + (f" ({failed:.1f} failed)" if failed else "") if requests else "")
            print(f"| {op} | " + " | ".join(cells) + " |")

    print(f"\n## Mixed run: every workload at once ({MIX_INVOCATIONS} invocations per round)\n")
    for r in results:
        units, n = per_key(r.mixed), r.rounds * MIX_INVOCATIONS
        total = sum(units.values())
        print(f"### {r.where.label}: write units per partition key ({r.rounds} rounds, {n} invocations, "
              f"{total:.0f} write units)\n")  # fmt: skip
        print("| partition key | owner | keys | write units per invocation | share of all writes | top key's share |")
        print("| --- | --- | --- | --- | --- | --- |")
        groups: dict[tuple[str, str], list[float]] = defaultdict(list)
        for (where, partition), v in units.items():
            if owned(partition):
                groups[named(where, partition[:4] + "…"), "one invocation or object key"].append(v)
            else:
                groups[named(where, partition), "shared"].append(v)
        for (name, owner), values in sorted(groups.items(), key=lambda kv: -sum(kv[1])):
            print(f"| {name} | {owner} | {len(values)} | {sum(values) / n:.2f} | {sum(values) / total:.1%} | "
                  f"{max(values) / total:.1%} |")  # fmt: skip
        print()
    print("## Projection\n")
    print("| figure | " + " | ".join(labels) + " |\n| --- |" + " --- |" * len(labels))
    figures = [hot(r, shards) for r in results]
    rows = [
        ("requests per invocation", [f"{sum(r.mixed.requests.values()) / h.invocations:.1f}"
                                     for r, h in zip(results, figures, strict=True)]),
        ("write units per invocation", [f"{h.total / h.invocations:.1f}" for h in figures]),
        ("… on owned keys (`INV#…`, `OBJ#…`)", [f"{h.owned_units:.1f} ({h.owned_units * h.invocations / h.total:.0%})"
                                                for h in figures]),
        ("hottest shared key", [h.shared_key for h in figures]),
        ("… its write units per invocation", [f"{h.shared_units:.2f}" for h in figures]),
        ("… its share of all writes", [f"{h.shared_units * h.invocations / h.total:.1%}" for h in figures]),
        ("projected ceiling, as measured (invocations/s at 1,000 WCU/s on that key)",
         [f"{h.ceiling:,.0f}" for h in figures]),
        (f"hottest shared key at scale (a sharded family's writes spread evenly over its {shards} shards)",
         [h.family_key for h in figures]),
        ("… its write units per invocation", [f"{h.family_units:.3f}" for h in figures]),
        ("**projected ceiling at scale** (invocations/s at 1,000 WCU/s on that key)",
         [f"**{h.scale_ceiling:,.0f}**" for h in figures]),
        ("hottest key overall", [f"{h.top_key} ({h.top_units * h.invocations / h.total:.1%})" for h in figures]),
    ]  # fmt: skip
    for name, cells in rows:
        print(f"| {name} | " + " | ".join(cells) + " |")


def main(argv: list[str] | None = None) -> int:
    """Measure each `--checkout`, then print the tables side by side."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkout", action="append", help="a checkout to measure (repeatable; default: this one)")
    parser.add_argument("--runs", type=int, default=5, help="runs of each workload alone (default 5)")
    parser.add_argument("--rounds", type=int, default=10, help="rounds of the mixed run (default 10)")
    parser.add_argument("--settle", type=float, default=1.0, help="idle seconds that end a run (default 1)")
    parser.add_argument("--quick", action="store_true", help="2 runs, 3 rounds")
    parser.add_argument("--shards", type=int, default=SHARDS, help=f"TORPOR_STORE_SHARDS (default {SHARDS})")
    parser.add_argument("--trace", action="store_true", help="print every request of the workloads run alone")
    args = parser.parse_args(argv)
    if args.quick:
        args.runs, args.rounds = 2, 3
    for name in ("werkzeug", "torpor", "botocore", "httpx"):
        logging.getLogger(name).setLevel(logging.WARNING)
    os.environ.update(DUMMY_AWS_ENV)
    print(f"before: {load()}", flush=True)
    paths = args.checkout or [str(REPO_ROOT)]
    results = [measure(checkout(path), args.runs, args.rounds, args.settle, args.trace, args.shards) for path in paths]
    print(f"after: {load()}")
    print_tables(results, args.shards)
    return 0


if __name__ == "__main__":
    start = time.monotonic()
    code = main()
    print(f"\n({time.monotonic() - start:.0f} s)")
    raise SystemExit(code)
