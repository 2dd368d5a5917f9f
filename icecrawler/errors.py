"""The one exception hierarchy of icecrawler (core code raises these; servants map them to Slice exceptions).

    IcecrawlerError
    ├── ConfigError (ValueError)          bad settings, bad command-line values
    ├── InvalidArgumentError (ValueError) a bad id, field or batch passed to a core API
    │   └── InvalidRecordsError           some records of a batch were rejected (the rest were stored)
    ├── NoWorkError                       nothing is due in the scheduler
    ├── LeaseLostError                    a report's lease expired, was re-issued, or never existed
    ├── StorageUnavailableError           backend and spool both refused a write
    ├── FetchError                        an HTTP fetch failed; carries the Outcome class
    │   └── ParseError (ValueError)       a response body that cannot be parsed
    ├── ServiceError                      a daemon (HBase, Ice server) did not start or answer
    │   └── NotAuthorizedError            the server refused our certificate's role for an operation
    └── MissingPartError (ImportError)    an optional extra, or a source-checkout-only package, is not installed

Foreign errors (berkeleydb, thrift/happybase, urllib3 and ``OSError`` from the HTTP transport) are translated where
they cross into our code, with ``raise ... from exc``.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence

from icecrawler.outcomes import Outcome

__all__ = [
    "ConfigError",
    "FetchError",
    "IcecrawlerError",
    "InvalidArgumentError",
    "InvalidRecordsError",
    "LeaseLostError",
    "MissingPartError",
    "NoWorkError",
    "NotAuthorizedError",
    "ParseError",
    "ServiceError",
    "StorageUnavailableError",
    "is_control",
    "quote",
    "shown",
]


class IcecrawlerError(Exception):
    """Root of every icecrawler error."""


class ConfigError(IcecrawlerError, ValueError):
    """A setting or command-line value is wrong; the message names it."""


class InvalidArgumentError(IcecrawlerError, ValueError):
    """A core API was called with a malformed argument. ``code`` is an ErrorCode name."""

    def __init__(self, message: str, *, code: str = "InvalidField", field: str = "", index: int = -1) -> None:
        super().__init__(message)
        self.code = code
        self.field = field
        self.index = index


class InvalidRecordsError(InvalidArgumentError):
    """Some records were rejected; every other record of the batch was stored."""

    def __init__(self, rejected: Sequence[tuple[int, str]], stored: int) -> None:
        summary = "; ".join(f"#{index}: {reason}" for index, reason in list(rejected)[:5])
        more = f" (+{len(rejected) - 5} more)" if len(rejected) > 5 else ""
        super().__init__(f"{len(rejected)} record(s) rejected, {stored} stored: {summary}{more}", code="RecordRejected")
        self.rejected = list(rejected)
        self.stored = stored


class NoWorkError(IcecrawlerError):
    """No task is due. ``next_due_in_ms`` is -1 when the queue is empty. ``code`` is an ErrorCode name:
    QueueEmpty, or ShuttingDown when the scheduler stopped handing out leases."""

    def __init__(self, message: str = "no task is due", next_due_in_ms: int = -1, *, code: str = "QueueEmpty") -> None:
        super().__init__(message)
        self.next_due_in_ms = next_due_in_ms
        self.code = code


class LeaseLostError(IcecrawlerError):
    """A report named a lease that is not the task's current one. Nothing was changed."""

    def __init__(self, message: str, *, task_id: str, index: int = 0, code: str = "StaleLease") -> None:
        super().__init__(message)
        self.task_id = task_id
        self.index = index
        self.code = code


class StorageUnavailableError(IcecrawlerError):
    """Neither the backend nor the durable spool could take a write."""


def is_control(char: str) -> bool:
    """Whether ``char`` is a control character (Unicode category Cc: NUL, tab, newline, ESC, DEL, the C1 set)."""
    return unicodedata.category(char) == "Cc"


def shown(text: str) -> str:
    """``text`` for a terminal line: each control character as its escape (``\\x1b``, ``\\n``), the rest as it is.
    Text a peer sent (a report's error class, which may quote a site) then neither moves the cursor nor splits
    the line it is printed on."""
    if text.isprintable():  # in C; printable text has no control character
        return text
    return "".join(repr(char)[1:-1] if is_control(char) else char for char in text)


def quote(value: object, limit: int = 60) -> str:
    """``repr`` of at most ``limit`` characters of ``value``, with its full length when cut: an error message never
    echoes a huge argument back (a 10 MB id would otherwise be copied into every log line and reply)."""
    text = value if isinstance(value, str) else str(value)
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}... ({len(text)} chars)"


class FetchError(IcecrawlerError):
    """An HTTP exchange ended badly. ``outcome`` is how (``Outcome.Banned``, ``Outcome.Timeout``, ...)."""

    def __init__(
        self, message: str, *, outcome: Outcome, http_status: int = 0, error_class: str = "", retry_after_s: float = 0.0
    ) -> None:
        super().__init__(message)
        if not isinstance(outcome, Outcome):
            raise TypeError(f"FetchError outcome must be an Outcome, got {outcome!r}")
        self.outcome = outcome
        self.http_status = http_status
        self.error_class = error_class or outcome.value
        self.retry_after_s = retry_after_s


class ParseError(FetchError, ValueError):
    """A response body that cannot be parsed into items."""

    def __init__(self, message: str, *, error_class: str = "parse-error", http_status: int = 0) -> None:
        super().__init__(message, outcome=Outcome.ParseError, http_status=http_status, error_class=error_class)


class ServiceError(IcecrawlerError):
    """A daemon we depend on did not start, or stopped answering."""


class NotAuthorizedError(ServiceError):
    """The caller's TLS certificate (its role, or a revoked one) does not allow the operation. Nothing changed.
    A ServiceError: a client keeps what it holds and retries, so nothing is lost while the certificate is fixed."""


class MissingPartError(IcecrawlerError, ImportError):
    """A command needs a package this install lacks; the message names the extra or says a checkout is needed."""
