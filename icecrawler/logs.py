"""One logging set-up for every daemon: one line per event, the same format everywhere, text or JSON."""

from __future__ import annotations

import json
import logging
import math
import sys
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

__all__ = ["Failure", "FailureEpisode", "LogThrottle", "configure_logging"]

TEXT_FORMAT = "%(asctime)s %(levelname)-7s %(name)s [%(process)d] %(message)s"

_STANDARD_ATTRS = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line; extra= fields are kept as keys."""

    def format(self, record: logging.LogRecord) -> str:
        event: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "pid": record.process,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD_ATTRS and not key.startswith("_"):
                event[key] = value if isinstance(value, (int, float, str, bool, type(None))) else repr(value)
        if record.exc_info:
            event["exc"] = self.formatException(record.exc_info)
        return json.dumps(event, ensure_ascii=False)


def configure_logging(level: str = "INFO", json_lines: bool = False) -> None:
    """Replace the root handlers with one stderr handler in the shared format."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if json_lines else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    try:
        root.setLevel(level.upper())
    except ValueError as exc:
        from icecrawler.errors import ConfigError

        raise ConfigError(f"unknown log level {level!r}") from exc
    for noisy in ("jieba", "urllib3", "matplotlib", "PIL"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))


class LogThrottle:
    """At most one log line per key every ``interval_s``, so that a peer repeating one mistake cannot flood a
    daemon's log: ``admit(key)`` is None for an event not to be logged, else ``(unlogged, since_s)``, how many
    events of that key went unlogged since its last line and how long ago that was (the line says so)."""

    def __init__(self, interval_s: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval_s = interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._last: dict[Hashable, tuple[float, int]] = {}

    def admit(self, key: Hashable) -> tuple[int, float] | None:
        with self._lock:
            now = self._clock()
            last, unlogged = self._last.get(key, (-math.inf, 0))
            if now - last < self.interval_s:
                self._last[key] = (last, unlogged + 1)
                return None
            self._last[key] = (now, 0)
        return unlogged, now - last

    @staticmethod
    def more(admitted: tuple[int, float], what: str) -> str:
        """The end of an admitted line: " (N more <what> in the last S s)", or "" when none went unlogged."""
        unlogged, since_s = admitted
        return f" ({unlogged} more {what} in the last {since_s:.0f} s)" if unlogged else ""


@dataclass(frozen=True)
class Failure:
    """What ``FailureEpisode.failed`` makes of one failure: whether it began an episode, and whether to log it."""

    #: The first failure since the last recovery (or ever).
    first: bool
    #: Log it as a WARNING: the first of an episode, then at most one per ``interval_s``.
    logged: bool
    #: Failures not logged since the last logged one, and how long ago that was.
    unlogged: int = 0
    since_s: float = 0.0

    def more(self, what: str) -> str:
        """The end of a logged line: " (N more <what> in the last S s)", or "" (``LogThrottle.more``)."""
        return LogThrottle.more((self.unlogged, self.since_s), what)


class FailureEpisode:
    """A condition that fails for a while and then recovers (a full disk, a backend down), so that a daemon says so
    without flooding its log: the first failure of an episode is logged, repeats at most once per ``interval_s``
    with how many went unlogged (``math.inf``: once per episode), and the recovery once; the next failure begins a
    new episode, logged at once and counted afresh.

    Work that overlapped a failure proves no recovery: take ``mark()`` before it begins and pass it to
    ``recovered``, which then says False if a failure was recorded meanwhile (a batch that was being written when
    the disk filled up must not announce that writes are taken again)."""

    def __init__(self, interval_s: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval_s = interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._throttle = LogThrottle(interval_s, clock)
        self._failures = 0
        self._failing = False
        #: The last failure's message ("" while not failing).
        self.message = ""

    @property
    def failing(self) -> bool:
        """From a failure until the recovery after it."""
        return self._failing

    def mark(self) -> int:
        """A token for ``recovered``: how many failures were recorded so far."""
        with self._lock:
            return self._failures

    def failed(self, message: str = "") -> Failure:
        """Record one failure; its ``logged`` says whether to log it (with ``more`` at the end of the line)."""
        with self._lock:
            first = not self._failing
            self._failing = True
            self._failures += 1
            self.message = message
            admitted = self._throttle.admit(None)
        if admitted is None:
            return Failure(first, False)
        return Failure(first, True, *admitted)

    def recovered(self, mark: int | None = None) -> bool:
        """Record a success: True once per episode, when it ends (log the recovery then), else False: while not
        failing, or when a failure was recorded after ``mark`` was taken. The throttle starts afresh."""
        with self._lock:
            if not self._failing or (mark is not None and mark != self._failures):
                return False
            self._failing = False
            self.message = ""
            self._throttle = LogThrottle(self.interval_s, self._clock)
        return True
