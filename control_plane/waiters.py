"""In-process wake-ups for callers waiting on an invocation's result.

A hint only: a caller also re-reads the store now and then, since the invocation may complete in
another process (another Lambda, or a `torpor dev` that was restarted). Subscribe first, then read
the store, then wait: a completion between the read and the wait is not missed.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class CompletionWaiters:
    """Per-invocation events set by `notify`; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: dict[str, list[threading.Event]] = {}

    @contextmanager
    def watching(self, invocation_id: str) -> Iterator[threading.Event]:
        """An event that `notify(invocation_id)` sets while the `with` block runs."""
        event = threading.Event()
        with self._lock:
            self._events.setdefault(invocation_id, []).append(event)
        try:
            yield event
        finally:
            with self._lock:
                events = self._events.get(invocation_id, [])
                if event in events:
                    events.remove(event)
                if not events:
                    self._events.pop(invocation_id, None)

    def notify_all(self) -> None:
        """Wake every watcher (the process is stopping)."""
        with self._lock:
            events = [event for events in self._events.values() for event in events]
        for event in events:
            event.set()

    def notify(self, invocation_id: str) -> None:
        """Wake every watcher of `invocation_id` (it completed, paused or changed status)."""
        with self._lock:
            events = list(self._events.get(invocation_id, ()))
        for event in events:
            event.set()
