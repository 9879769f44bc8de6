"""The admin API's schedule routes (`control_plane.schedules`), added to the admin router.

| route | answer |
| --- | --- |
| `POST /schedules` | `201` the schedule; body `{"name", "cron" or "every", "target", "key"?, "body"?}` |
| `GET /schedules` | `{"schedules": [...]}`, by name |
| `GET /schedules/{name}` | the schedule (`schedules.schedule_json`) |
| `PATCH /schedules/{name}/pause` | the schedule, paused |
| `PATCH /schedules/{name}/resume` | the schedule, ticking again from its next future tick |
| `DELETE /schedules/{name}` | `202` |

`target` is `Service/handler` (or give `service` and `handler`); `body` any JSON value.
400 (`{"code", "message"}`) for a bad name, cron expression (one that never fires, or with `L`, `W`,
`#`, `?`) or period, an unknown target, a keyed target without key, a key above 1024 bytes or a body
above 256 KiB (`schedules.MAX_KEY_BYTES`, `MAX_BODY_BYTES`); 404 for an unknown schedule; 409 for a name taken.
"""

from __future__ import annotations

from control_plane.errors import BadRequest
from control_plane.schedules import Schedules, schedule_json
from http_api.http import HttpRequest, HttpResponse, Router

__all__ = ["add_schedule_routes"]

_FIELDS = ("name", "cron", "every", "target", "service", "handler", "key", "body")


def _optional_string(body: dict[str, object], field: str) -> str | None:
    value = body.get(field)
    if value is not None and not isinstance(value, str):
        raise BadRequest(f'"{field}" must be a string')
    return value


def add_schedule_routes(router: Router, schedules: Schedules) -> None:
    """Add the `/schedules` routes over `schedules` to the admin `router`."""

    def create(request: HttpRequest) -> HttpResponse:
        body = request.json()
        if not isinstance(body, dict):
            raise BadRequest(
                'the body must be a JSON object like {"name": "hourly", "cron": "0 * * * *", '
                '"target": "Service/handler"}'
            )
        unknown = sorted(set(body) - set(_FIELDS))
        if unknown:
            raise BadRequest(f"unknown schedule field {unknown[0]!r}; known: {', '.join(_FIELDS)}")
        target = _optional_string(body, "target")
        service, handler = _optional_string(body, "service"), _optional_string(body, "handler")
        if target is not None:
            service, slash, handler = target.partition("/")
            if not slash or not service or not handler or "/" in handler:
                raise BadRequest(f'"target" must be Service/handler, got {target!r}')
        schedule = schedules.create(
            _optional_string(body, "name") or "",
            service=service or "",
            handler=handler or "",
            key=_optional_string(body, "key") or "",
            body=body.get("body"),
            cron=_optional_string(body, "cron"),
            every=_optional_string(body, "every"),
        )
        return HttpResponse.json(schedule_json(schedule), 201)

    def list_all(request: HttpRequest) -> HttpResponse:
        return HttpResponse.json({"schedules": [schedule_json(s) for s in schedules.list()]})

    def get(request: HttpRequest, name: str) -> HttpResponse:
        return HttpResponse.json(schedule_json(schedules.get(name)))

    def pause(request: HttpRequest, name: str) -> HttpResponse:
        return HttpResponse.json(schedule_json(schedules.pause(name)))

    def resume(request: HttpRequest, name: str) -> HttpResponse:
        return HttpResponse.json(schedule_json(schedules.resume(name)))

    def delete(request: HttpRequest, name: str) -> HttpResponse:
        schedules.delete(name)
        return HttpResponse(202)

    router.add("POST", "/schedules", create)
    router.add("GET", "/schedules", list_all)
    router.add("GET", "/schedules/{name}", get)
    router.add("PATCH", "/schedules/{name}/pause", pause)
    router.add("PATCH", "/schedules/{name}/resume", resume)
    router.add("DELETE", "/schedules/{name}", delete)
