"""`PATCH /services/{name}` refuses a handler limit or rate for a handler the service does not have
(`limits.check_limits`): a typo must not be stored as a limit that never applies."""

from __future__ import annotations

import pytest

from control_plane.errors import BadRequest
from control_plane.limits import check_limits


def test_a_handler_limit_or_rate_for_a_handler_the_service_lacks_is_refused_and_null_is_taken() -> None:
    handlers = [{"name": "sleep"}, {"name": "awakeable"}]
    with pytest.raises(BadRequest, match="no handler 'slep'; its handlers are: awakeable, sleep"):
        check_limits("SERVICE", handlers, {"handlerConcurrencyLimits": {"slep": 2}})
    with pytest.raises(BadRequest, match="handler_rate_limits: the service has no handler 'slep'"):
        check_limits("SERVICE", handlers, {"handlerRateLimits": {"slep": 1.5}})
    check_limits("SERVICE", handlers, {"handlerConcurrencyLimits": {"slep": None, "sleep": 2}})
