"""Refused calls in the scheduler's log. A caller's own mistake goes back to it as a declared exception
(``InvalidArgument``, ``LeaseLost``); the scheduler's log says so too, so that an operator sees a client that keeps
sending bad calls, but at most one line per operation and error code a minute, with how many more there were: a
client stuck in a loop of bad reports must not flood the log.

Not logged: ``NoWork`` (an idle queue), and a lease that ended before its report or release (``StaleLease``,
``TaskRemoved``): that is the normal cost of a slow crawl, a lapsed client or a removed target, and the client
handles it.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

from icecrawler import rpc
from icecrawler.logs import LogThrottle

__all__ = ["LOG_INTERVAL_S", "RefusalLog"]

log = logging.getLogger(__name__)

#: The shortest time between two lines about one operation's refusals of one code.
LOG_INTERVAL_S = 60.0
#: Lease errors that are part of normal operation, not a caller's mistake.
_QUIET_CODES = frozenset({"StaleLease", "TaskRemoved"})
#: How much of the error's message a line carries (the message already quotes arguments short).
_MESSAGE_CHARS = 300

F = TypeVar("F", bound=Callable[..., Any])


class RefusalLog:
    """Logs refused calls, each (operation, code) at most once per ``interval_s`` (see the module docstring)."""

    def __init__(self, interval_s: float = LOG_INTERVAL_S, clock: Callable[[], float] = time.monotonic) -> None:
        self._throttle = LogThrottle(interval_s, clock)  # keyed by (operation, code)

    def note(self, operation: str, error: Exception) -> None:
        """Log ``error``, the declared Slice exception a call of ``operation`` raised, unless it is not a caller's
        mistake or one like it was logged less than ``interval_s`` ago."""
        C = rpc.crawler()
        if not isinstance(error, (C.InvalidArgument, C.LeaseLost)):
            return
        code = error.code.name
        if code in _QUIET_CODES:
            return
        admitted = self._throttle.admit((operation, code))
        if admitted is None:
            return
        where = f" at {error.field}" if isinstance(error, C.InvalidArgument) and error.field else ""
        more = LogThrottle.more(admitted, "refused so")
        log.warning("refused %s: %s%s: %s%s", operation, code, where, error.message[:_MESSAGE_CHARS], more)

    def noted(self, method: F) -> F:
        """Servant method decorator, outside ``rpc.map_errors``: notes what the call raises, at once or through
        the asynchronous result it returns (``rpc.Converted``)."""
        operation = method.__name__

        @functools.wraps(method)
        def wrapper(*args: Any) -> Any:
            try:
                result = method(*args)
            except Exception as exc:
                self.note(operation, exc)
                raise
            return _Noted(result, operation, self) if isinstance(result, rpc.Converted) else result

        return wrapper  # type: ignore[return-value]


class _Noted:
    """An asynchronous dispatch's result (what Ice reads) whose error is also noted in the ``RefusalLog``."""

    __slots__ = ("_log", "_operation", "_view")

    def __init__(self, view: rpc.Converted[Any, Any], operation: str, refusals: RefusalLog) -> None:
        self._view = view
        self._operation = operation
        self._log = refusals

    def add_done_callback(self, callback: Callable[[_Noted], object]) -> None:
        self._view.add_done_callback(lambda _: callback(self))

    def result(self, timeout: float | None = None) -> Any:
        try:
            return self._view.result(timeout)
        except Exception as exc:
            self._log.note(self._operation, exc)
            raise
