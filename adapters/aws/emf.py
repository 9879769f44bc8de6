"""`control_plane.observability.Metrics` as CloudWatch embedded metric format (EMF), through
aws-lambda-powertools: each function invocation's counts and observations are flushed as one EMF
log line by `Metrics.log_metrics` (see `adapters.aws.lambda_app`); CloudWatch turns them into metrics
in the function's namespace. Labels are not dimensions (one dimension set per flush): a count is
summed over services, which keeps the metric count, and so the bill, flat.
"""

from __future__ import annotations

import threading

from aws_lambda_powertools import Metrics
from aws_lambda_powertools.metrics import MetricUnit


class EmfMetrics:
    """Counts (`Count`) and observations (`Milliseconds`) added to a powertools `Metrics`; thread-safe."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics
        self._lock = threading.Lock()

    def count(self, name: str, value: float = 1, **labels: str) -> None:
        """Add `value` to the EMF metric `name` (labels are dropped, see the module doc)."""
        with self._lock:
            self._metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)

    def observe(self, name: str, value_ms: float, **labels: str) -> None:
        """Add one value in milliseconds to the EMF metric `name`."""
        with self._lock:
            self._metrics.add_metric(name=name, unit=MetricUnit.Milliseconds, value=value_ms)
