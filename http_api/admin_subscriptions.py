"""The admin API's subscription routes (`control_plane.subscriptions`), as restate-server 1.7 has them.

| route | answer |
| --- | --- |
| `POST /subscriptions` | `201` `{"id", "source", "sink", "options"}`; body `{"source", "sink", "options"?}` |
| `GET /subscriptions` | `{"subscriptions": [...]}` by id; `?source=` and `?sink=` keep those equal to it |
| `GET /subscriptions/{id}` | the subscription |
| `DELETE /subscriptions/{id}` | `202` |

Sources are `sqs://QUEUE`, `eventbridge://RULE`, `kinesis://STREAM`, `dynamodb://TABLE`; the sink is
`service://Service/handler` of a registered handler. 400 (`{"code", "message"}`) for a bad source or
sink URI, an unknown sink, or an id not shaped `sub_…`; 422 for a body without `source` or `sink` or
with options that are not strings (restate-server's codes); 404 for an unknown subscription.
"""

from __future__ import annotations

from control_plane.errors import Unprocessable
from control_plane.subscriptions import Subscriptions, subscription_json
from http_api.http import HttpRequest, HttpResponse, Router

__all__ = ["add_subscription_routes"]


def add_subscription_routes(router: Router, subscriptions: Subscriptions) -> None:
    """Add the `/subscriptions` routes over `subscriptions` to the admin `router`."""

    def create(request: HttpRequest) -> HttpResponse:
        body = request.json()
        if not isinstance(body, dict):
            raise Unprocessable(
                'the body must be a JSON object like {"source": "sqs://orders.fifo", "sink": "service://Counter/add"}'
            )
        for field in ("source", "sink"):
            if field not in body:
                raise Unprocessable(f'missing field "{field}" (e.g. "source": "sqs://q", "sink": "service://S/h")')
        subscription = subscriptions.create(body["source"], body["sink"], body.get("options"))
        location = {"location": f"subscriptions/{subscription.subscription_id}"}
        return HttpResponse.json(subscription_json(subscription), 201, location)

    def list_all(request: HttpRequest) -> HttpResponse:
        found = subscriptions.list(request.query("source"), request.query("sink"))
        return HttpResponse.json({"subscriptions": [subscription_json(s) for s in found]})

    def get(request: HttpRequest, subscription_id: str) -> HttpResponse:
        return HttpResponse.json(subscription_json(subscriptions.get(subscription_id)))

    def delete(request: HttpRequest, subscription_id: str) -> HttpResponse:
        subscriptions.delete(subscription_id)
        return HttpResponse(202)

    router.add("POST", "/subscriptions", create)
    router.add("GET", "/subscriptions", list_all)
    router.add("GET", "/subscriptions/{subscription_id}", get)
    router.add("DELETE", "/subscriptions/{subscription_id}", delete)
