"""How a fetch ended: the one outcome vocabulary, from a source's classification (``FetchError.outcome``) to the
report the scheduler acts on (``Report.outcome``). Its own module so that ``icecrawler.errors`` and
``icecrawler.models`` both use the enum itself, never its name as a string."""

from __future__ import annotations

import enum

__all__ = ["Outcome"]


class Outcome(enum.StrEnum):
    """How a fetch ended (same names as Crawler::Outcome)."""

    Ok = "Ok"
    HttpError = "HttpError"
    Timeout = "Timeout"
    ConnectionError = "ConnectionError"
    ParseError = "ParseError"
    LoginRequired = "LoginRequired"
    Busy = "Busy"
    AccountFrozen = "AccountFrozen"
    Banned = "Banned"
    RateLimited = "RateLimited"
    NotFound = "NotFound"
    TooLarge = "TooLarge"
