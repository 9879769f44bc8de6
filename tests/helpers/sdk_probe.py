"""Drive Torpor's Lambda checkpoint wrapper (`adapters.aws.checkpoints.handler`) with whatever
restate-sdk this interpreter has, and print what happened as one JSON line
(tests/integration/test_checkpoints_sdk_versions.py runs it in one virtualenv per SDK version).

`python -m tests.helpers.sdk_probe STORE.sqlite [--pause-ms MS] [--protocol-version V]
[--break-run-detection]` plays
both the Lambda runtime and the orchestrator, on a fresh invocation of `Probe/two_runs_and_a_sleep`
in the SQLite store `STORE.sqlite`:

1. loads the wrapper as Lambda does (`AWS_LAMBDA_FUNCTION_NAME` set, `TORPOR_APP` naming this
   module's `app`, `TORPOR_SQLITE` the store), so `restate.app(...)` returns the SDK's Lambda handler;
2. discovery through the wrapper (request/response), for the SDK's highest protocol version Torpor
   speaks, unless `--protocol-version` names one (V5/V6: the wrapper feeds each committed run's
   RunCompletion back; V7: a ProposeRunCompletionAck);
3. Invoke 1 with the journal [Input]: a sync run and an async run, each `pause_ms` long, should be
   committed by the wrapper itself, then the SDK suspends on the sleep;
4. stores the commands the answer carries (the Sleep), as the orchestrator does, and Invoke 2 with
   the sleep's completion: the handler ends with `[1, 2]`.

`--break-run-detection` renames the SDK task the wrapper looks for (a later SDK naming it
differently): the runs are then left to the orchestrator, which the test checks it can tell.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import time
from datetime import timedelta
from typing import Any

import restate

probe = restate.Service("Probe")


@probe.handler()
async def two_runs_and_a_sleep(ctx: restate.Context, pause_ms: int) -> list[int]:
    """A sync `ctx.run` (runs in the SDK's executor), an async one, a durable sleep; returns [1, 2]."""

    def sync_step() -> int:
        time.sleep(pause_ms / 1000)
        return 1

    async def async_step() -> int:
        await asyncio.sleep(pause_ms / 1000)
        return 2

    first = await ctx.run_typed("sync", sync_step)
    second = await ctx.run_typed("async", async_step)
    await ctx.sleep(timedelta(milliseconds=1))
    return [first, second]


app = restate.app([probe])


class _Context:
    """The Lambda context object, as far as the wrapper reads it."""

    def get_remaining_time_in_millis(self) -> int:
        return 60_000


def _kinds(answer: dict[str, Any]) -> list[str]:
    from control_plane.protocol import MessageType, decode_frames

    return [MessageType(f.type).name for f in decode_frames(base64.b64decode(answer["body"]))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store")
    parser.add_argument("--pause-ms", type=int, default=200)
    parser.add_argument("--protocol-version", type=int, default=None)
    parser.add_argument("--break-run-detection", action="store_true")
    args = parser.parse_args(argv)
    os.environ.update(
        AWS_LAMBDA_FUNCTION_NAME="probe", TORPOR_APP="tests.helpers.sdk_probe:app", TORPOR_SQLITE=args.store
    )

    import importlib.metadata

    from adapters.aws import checkpoints
    from adapters.local.sqlite_store import SQLiteStore
    from control_plane import ids
    from control_plane.held import Held
    from control_plane.ports import InvocationRecord, JournalBatch
    from control_plane.protocol import MessageType, decode_frames, encode_frames, frame, versions
    from control_plane.protocol import protocol_pb2 as pb
    from tests.integration.test_lambda_checkpoints import invoke_event

    if args.break_run_detection:
        checkpoints._RUN_TASK = "a.name.the.sdk.does.not.use"

    discovery = checkpoints.handler(
        {"path": "/discover", "httpMethod": "GET", "headers": {"accept": versions.DISCOVERY_ACCEPT}, "body": ""},
        _Context(),
    )
    manifest = json.loads(base64.b64decode(discovery["body"]))
    lowest, highest = int(manifest["minProtocolVersion"]), int(manifest["maxProtocolVersion"])
    version = args.protocol_version or min(highest, versions.MAX_VERSION)
    if not lowest <= version <= highest:
        parser.error(f"the SDK speaks protocol versions {lowest} to {highest}, not {version}")

    store = SQLiteStore(args.store)
    now = int(time.time() * 1000)
    invocation_id = ids.new_invocation_id()
    input_entry = encode_frames([frame(pb.InputCommandMessage(value=pb.Value(content=str(args.pause_ms).encode())))])
    store.create_invocation(
        InvocationRecord(invocation_id=invocation_id, service="Probe", handler="two_runs_and_a_sleep", key="",
                         deployment_id="dp_1", protocol_version=version, status="ready", input_entry=input_entry,
                         created_at_ms=now, modified_at_ms=now)
    )  # fmt: skip
    lease = store.acquire_lease(invocation_id, now, now + 60_000, ["ready"])

    def held() -> Held:
        loaded = store.load_invocation(invocation_id)
        assert loaded is not None
        return Held.of(loaded)

    started = time.perf_counter()
    first = checkpoints.handler(invoke_event(held(), [], epoch=lease.epoch, doorbell=lease.doorbell), _Context())
    first_s = time.perf_counter() - started
    after_first = held()
    stored_after_first = [MessageType(f.type).name for f in after_first.journal.frames]

    # the orchestrator's part: store the commands of the answer, wake the sleep
    answered = decode_frames(base64.b64decode(first["body"]))
    commands = [f for f in answered if f.type not in (MessageType.Suspension, MessageType.AwaitingOn)]
    if commands and not any(f.type == MessageType.ProposeRunCompletion for f in commands):
        store.append_batch(
            invocation_id,
            JournalBatch(len(after_first.journal), encode_frames(commands), lease.epoch, int(time.time() * 1000)),
        )
    second: dict[str, Any] | None = None
    output = None
    sleeps = held().journal.open_sleeps()
    if len(sleeps) == 1:
        [(sleep_id, _)] = sleeps.items()
        wake = frame(pb.SleepCompletionNotificationMessage(completion_id=sleep_id, void=pb.Void()))
        second = checkpoints.handler(invoke_event(held(), [wake], epoch=lease.epoch), _Context())
        for f in decode_frames(base64.b64decode(second["body"])):
            if f.type == MessageType.Output:
                output = json.loads(pb.OutputCommandMessage.FromString(f.payload).value.content)
    store.close()
    report = {
        "sdk_version": importlib.metadata.version("restate-sdk"),
        "restate_file": restate.__file__,
        "protocol_version": version,
        "discovery_status": discovery["statusCode"],
        "first": {
            "status": first["statusCode"],
            "committed_length": first["headers"].get(checkpoints.COMMITTED_HEADER),
            "answer": _kinds(first),
            "stored": stored_after_first,
            "seconds": round(first_s, 3),
        },
        "second": second and {"status": second["statusCode"], "answer": _kinds(second), "output": output},
    }
    print(json.dumps(report))  # the probe's answer, read by the test
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
