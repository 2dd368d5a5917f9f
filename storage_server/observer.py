"""What the storage core tells an observer (the daemon's metrics) as it works, without knowing about Prometheus."""

from __future__ import annotations

from typing import Protocol

__all__ = ["StorageObserver"]


class StorageObserver(Protocol):
    """Called by ``StorageService`` from its dispatch and replay threads (implementations are thread-safe)."""

    def wrote(self, table: str, stored: int, spooled: int, rejected: int, seconds: float) -> None:
        """One write call: records that reached the backend, were spooled, were rejected; its duration."""

    def replayed(self, table: str, records: int) -> None:
        """Spooled records that reached the backend."""

    def backend_failed(self, outage_began: bool) -> None:
        """A backend write failed or timed out; ``outage_began`` for the first failure since it was last up."""
