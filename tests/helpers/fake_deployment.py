"""A deployment that speaks the service protocol from a script: for tests of what Torpor does with
answers no SDK sends (the SDK side is untrusted input).

It answers `GET /discover` with a manifest of one service, `Fake`, whose handlers are the keys of
`answers`; `POST /invoke/Fake/{handler}` calls `answers[handler](start, journal)` with the decoded
StartMessage and the journal frames Torpor sent, and answers what it returns: the frames (encoded
with `control_plane.protocol`) or raw bytes, with the negotiated content type unless the script
names another. Serve it with `tests.helpers.asgi.serve_asgi`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from control_plane.protocol import Frame, decode_frames, encode_frames
from control_plane.protocol import protocol_pb2 as pb


@dataclass
class Answer:
    """What the fake answers one attempt: frames (or raw bytes) and, optionally, its own content type."""

    frames: list[Frame] | bytes
    content_type: str | None = None


Script = Callable[[pb.StartMessage, list[Frame]], Answer]


class FakeDeployment:
    """An ASGI app: discovery of service `name` (handlers = `answers`' keys, of `handler_types`), then
    scripted answers.

    `attempts[handler]` counts the invoke requests each handler received.
    """

    def __init__(
        self,
        answers: dict[str, Script],
        service_type: str = "SERVICE",
        *,
        name: str = "Fake",
        handler_types: dict[str, str] | None = None,
    ) -> None:
        self.answers = answers
        self.service_type = service_type
        self.name = name
        self.handler_types = handler_types or {}  # handler -> `ty` in the manifest (`SHARED`, ...), if any
        self.attempts: dict[str, int] = {}

    def manifest(self) -> dict[str, Any]:
        return {
            "protocolMode": "REQUEST_RESPONSE",
            "minProtocolVersion": 5,
            "maxProtocolVersion": 7,
            "services": [
                {
                    "name": self.name,
                    "ty": self.service_type,
                    "handlers": [
                        {"name": h, "input": {}, "output": {}}
                        | ({"ty": self.handler_types[h]} if h in self.handler_types else {})
                        for h in self.answers
                    ],
                }
            ],
        }

    async def __call__(self, scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                await send({"type": message["type"] + ".complete"})
                if message["type"] == "lifespan.shutdown":
                    return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        path: str = scope["path"]
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        if scope["method"] == "GET" and path.endswith("/discover"):
            content = json.dumps(self.manifest()).encode()
            await _reply(send, 200, "application/vnd.restate.endpointmanifest.v3+json", content)
            return
        handler = path.rsplit("/", 1)[-1]
        frames = decode_frames(body)
        start = frames[0].decode()
        assert isinstance(start, pb.StartMessage)
        self.attempts[handler] = self.attempts.get(handler, 0) + 1
        answer = self.answers[handler](start, frames[1:])
        content = answer.frames if isinstance(answer.frames, bytes) else encode_frames(answer.frames)
        await _reply(send, 200, answer.content_type or headers.get("content-type", ""), content)


async def _reply(send: Callable[..., Any], status: int, content_type: str, body: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})
