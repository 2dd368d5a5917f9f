"""What a crawler client tells its metrics as it works: one process-wide observer, a no-op until the daemon
installs its metrics (``crawler_client.metrics``), so the crawl code needs no Prometheus and its tests no server.

Any layer may report through ``current()``; e.g. a source that renews a visitor session calls
``current().session_renewed(source)``.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["ClientObserver", "NullObserver", "current", "install"]


class ClientObserver(Protocol):
    """Called from the worker threads (implementations are thread-safe and cheap)."""

    def crawled(self, source: str, outcome: str, new_items: int, seconds: float) -> None:
        """One task crawled (not given back): its outcome, the new items found, the crawl's wall time."""

    def fetched(self, source: str, status: int, size: int, seconds: float) -> None:
        """One HTTP request: its status (0 when no answer came), body bytes read, time to the end of the body."""

    def parsed(self, source: str, seconds: float, items: int) -> None:
        """One page parsed: its time, and the items it gave (new or already stored; 0 when the parser raised)."""

    def waited(self, reason: str, seconds: float) -> None:
        """A deliberate wait: ``no_work`` (nothing due, or due tasks held back by politeness), ``backoff`` (the
        scheduler unreachable) or ``fetch_retry`` (backoff before retrying a request)."""

    def session_renewed(self, source: str) -> None:
        """A session was renewed: a form login after a login wall, a new visitor cookie."""

    def cookie_refused(self, source: str) -> None:
        """A session's cookie jar refused a cookie past its bounds (``crawler_client.cookie_jar``)."""

    def records_clamped(self, source: str) -> None:
        """A record is sent with a count clamped into a 32-bit int (``crawler_client.screen.clamp_counts``)."""


class NullObserver:
    """Observes nothing (metrics off)."""

    def crawled(self, source: str, outcome: str, new_items: int, seconds: float) -> None:
        pass

    def fetched(self, source: str, status: int, size: int, seconds: float) -> None:
        pass

    def parsed(self, source: str, seconds: float, items: int) -> None:
        pass

    def waited(self, reason: str, seconds: float) -> None:
        pass

    def session_renewed(self, source: str) -> None:
        pass

    def cookie_refused(self, source: str) -> None:
        pass

    def records_clamped(self, source: str) -> None:
        pass


_current: ClientObserver = NullObserver()


def current() -> ClientObserver:
    """The observer of this process."""
    return _current


def install(observer: ClientObserver) -> None:
    """Make ``observer`` the process's observer (the client daemon, at start)."""
    global _current
    _current = observer
