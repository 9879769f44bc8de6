"""ServiceToServiceScopeConcurrency: not applicable to Torpor (skipped with the reason).

Upstream (restatedev/e2e `sdk-tests` v2.2 `ServiceToServiceScopeConcurrency`) checks that an SDK
passes a call's `scope` and `limitKey` (service protocol V7) to the runtime, by setting a concurrency
rule for `scope/limitKey` through the admin API's `/limits/rules` and counting, in the test
process, how many scoped handlers run at once. Both are Restate 1.7 experimental features (vqueues,
protocol V7 enabled by flag): Torpor has neither scopes nor concurrency rules.
"""

from __future__ import annotations

import pytest


@pytest.mark.skip(
    reason="V7 call scopes and concurrency rules (/limits/rules) are Restate 1.7 experimental features "
    "(vqueues) that Torpor does not implement"
)
def test_scope_and_limit_key_are_propagated_on_service_to_service_calls() -> None:
    """Would check that at most `limit` calls scoped to `scope/limitKey` run at once."""
