"""HTTP fetches for the crawler client: the ``Fetcher`` bounds each fetch, retries where a retry can help and
translates every transport failure into a classified ``FetchError`` at this boundary.

What a fetch guarantees (and why):

* **Bounded in time.** ``client.timeout_s`` caps the connect and every read; ``client.total_timeout_s`` caps
  the whole fetch on the socket itself (``icecrawler.deadline``), from the name lookup on: a proxy's answer to
  CONNECT, the TLS handshake, the headers and the body. A server or proxy that drips one byte per second passes
  every read timeout and still cannot hold a worker longer, and neither can slow name servers: a new connection's
  name lookup is waited for no longer than the deadline either.
* **Bounded in size.** The body is streamed and cut at ``client.max_body_bytes`` → ``FetchError(TooLarge)``:
  a runaway page never fills the client's memory. The limit counts decoded bytes, and urllib3 (from 2.8, our
  floor) inflates a compressed body only as far as each read asks, so a compression bomb is cut at the limit
  too; the bodies of redirects are closed unread. An answer whose Content-Encoding cannot be decoded (a corrupt
  stream, a chain of more than five encodings) is ``FetchError(HttpError, error_class="DecodeError")``, not
  retried: the same server sends the same bytes again.
* **Retried only where a retry can help.** Timeouts, connection errors and 5xx answers are retried
  ``client.retries`` times with jittered exponential backoff (``client.backoff_s`` × 2^attempt × U(0.5, 1.5)),
  so N clients hitting the same flaky host do not retry in lockstep. 4xx answers are never retried.
* **Retry-After is honoured, not slept through.** HTTP 429, or a 503 carrying ``Retry-After``, ends the fetch
  with ``FetchError(RateLimited, retry_after_s=...)``; the scheduler then holds the host for that long, across
  all clients (a worker sleeping on it would hold a lease and help nobody).
* Every other answer (200, 302-to-login, 403, 418, 404, a 5xx after the retries...) comes back as a
  ``FetchedPage``: recognising bans, login walls and busy pages is the source's job (they differ per site).

The transport is injectable (``crawler_client.transport.Transport``), so retries, size cuts and Retry-After are
unit-tested without a network; ``Urllib3Transport`` there is the real one, over one ``HttpSession`` (cookie jar +
keep-alive pool) per leased account.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import urllib3.exceptions

from crawler_client.headers import FALLBACK_USER_AGENT, merge_headers
from crawler_client.sources._detect import retry_after_seconds
from crawler_client.sources.base import FetchedPage, PageRequest
from crawler_client.transport import TRANSPORT_ERRORS, RawResponse, TooManyRedirects, TotalTimeout, Transport
from icecrawler.errors import FetchError
from icecrawler.models import Outcome
from icecrawler.settings import Settings

__all__ = ["FetchPolicy", "Fetcher", "parse_retry_after"]

#: Backoff jitter for every Fetcher (a task makes one; seeding a new Random from the OS each time showed up in a
#: client's CPU profile under ``icecrawler bench client``). Its C ``random()`` is atomic under the GIL, so the
#: threads can share it.
_JITTER = random.Random()

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FetchPolicy:
    """Limits of one fetch (and the proxy it goes through), read from the ``client.*`` settings."""

    timeout_s: float
    total_timeout_s: float
    retries: int
    backoff_s: float
    max_body_bytes: int
    user_agent: str
    proxy_url: str = ""

    @classmethod
    def from_settings(cls, settings: Settings) -> FetchPolicy:
        return cls(
            timeout_s=settings.get_float("client.timeout_s"),
            total_timeout_s=settings.get_float("client.total_timeout_s"),
            retries=settings.get_int("client.retries"),
            backoff_s=settings.get_float("client.backoff_s"),
            max_body_bytes=settings.get_int("client.max_body_bytes"),
            user_agent=settings.get_str("client.user_agent"),
            proxy_url=settings.get_str("client.proxy_url"),
        )


def parse_retry_after(value: str | None, now_s: float) -> float:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or an HTTP date); 0 when absent or bad. The
    sources read the header the same way (``retry_after_seconds``): one reading for a 429 and a refusal page."""
    return retry_after_seconds(value, round(now_s * 1000)) if value else 0.0


def _classify_exception(exc: Exception) -> tuple[Outcome, str]:
    """(Outcome, error class) of a transport exception: the most specific class we can find."""
    if isinstance(exc, urllib3.exceptions.NameResolutionError):  # a NewConnectionError: no address, none refused
        return Outcome.ConnectionError, "NameResolution"
    if isinstance(exc, urllib3.exceptions.NewConnectionError):  # a ConnectTimeoutError subclass in urllib3 2
        return Outcome.ConnectionError, "ConnectionRefused"
    if isinstance(exc, urllib3.exceptions.ConnectTimeoutError):
        return Outcome.Timeout, "ConnectTimeout"
    if isinstance(exc, TotalTimeout):
        return Outcome.Timeout, "TotalTimeout"
    if isinstance(exc, (urllib3.exceptions.ReadTimeoutError, TimeoutError)):
        return Outcome.Timeout, "ReadTimeout"
    if isinstance(exc, TooManyRedirects):
        return Outcome.HttpError, "TooManyRedirects"
    if isinstance(exc, urllib3.exceptions.LocationValueError):
        return Outcome.ConnectionError, "InvalidURL"
    if isinstance(exc, urllib3.exceptions.DecodeError):  # the answer itself is malformed: a retry gets it again
        return Outcome.HttpError, "DecodeError"
    if isinstance(exc, urllib3.exceptions.ProtocolError):  # reset, aborted, truncated chunked body
        return Outcome.ConnectionError, "ConnectionError"
    return Outcome.ConnectionError, type(exc).__name__


class Fetcher:
    """Fetches ``PageRequest``s through a transport under a ``FetchPolicy``.

    ``requests_made`` counts every HTTP request (retries included): it becomes ``Report.fetches``.
    ``sleep`` is used for retry backoff; pass ``threading.Event().wait`` so a shutdown cuts the wait short.
    """

    def __init__(
        self,
        transport: Transport,
        policy: FetchPolicy,
        *,
        sleep: Callable[[float], object] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
        headers: Mapping[str, str] | None = None,
        on_response: Callable[[int, int, float], object] | None = None,
    ) -> None:
        self.transport = transport
        #: The source's headers (``crawler_client.headers.source_headers``); a request's own come on top.
        self.headers = dict(headers or {})
        #: Told (status or 0, body bytes, seconds) after every request: the client's metrics.
        self.on_response = on_response
        self.policy = policy
        self._sleep = sleep
        self._clock = clock
        self._wall_clock = wall_clock
        self._rng = rng or _JITTER
        self.requests_made = 0

    def backoff_delay(self, attempt: int) -> float:
        """Jittered exponential backoff before retry number ``attempt`` (0-based)."""
        return float(self.policy.backoff_s * (2**attempt) * self._rng.uniform(0.5, 1.5))

    def fetch(self, request: PageRequest) -> FetchedPage:
        """One page, with retries. Raises ``FetchError`` (Timeout, ConnectionError, TooLarge, RateLimited,
        HttpError for redirect loops); any HTTP answer otherwise comes back as a FetchedPage."""
        attempts = self.policy.retries + 1
        for attempt in range(attempts):
            last = attempt == attempts - 1
            try:
                page = self._fetch_once(request)
            except FetchError as exc:
                retryable = exc.outcome in (Outcome.Timeout, Outcome.ConnectionError)
                if not retryable or exc.error_class == "InvalidURL" or last:
                    raise
                log.debug("retrying %s after %s (%d/%d)", request.url, exc.error_class, attempt + 1, attempts - 1)
            else:
                retry_after = parse_retry_after(page.headers.get("Retry-After"), self._wall_clock())
                if page.status == 429 or (page.status == 503 and "Retry-After" in page.headers):
                    raise FetchError(
                        f"{request.url}: HTTP {page.status}, Retry-After {retry_after:.0f}s",
                        outcome=Outcome.RateLimited,
                        http_status=page.status,
                        error_class=f"http-{page.status}",
                        retry_after_s=retry_after,
                    )
                if page.status < 500 or last:
                    return page
                log.debug("retrying %s after HTTP %d (%d/%d)", request.url, page.status, attempt + 1, attempts - 1)
            self._sleep(self.backoff_delay(attempt))
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _fetch_once(self, request: PageRequest) -> FetchedPage:
        headers = merge_headers(self.headers, request.headers)
        if not any(name.lower() == "user-agent" for name in headers):
            headers["User-Agent"] = self.policy.user_agent or FALLBACK_USER_AGENT
        self.requests_made += 1
        started = self._clock()
        try:
            raw = self.transport.send(request, headers, self.policy.timeout_s, self.policy.total_timeout_s)
        except TRANSPORT_ERRORS as exc:
            self._observe(0, 0, started)
            outcome, error_class = _classify_exception(exc)
            raise FetchError(f"{request.url}: {error_class}: {exc}", outcome=outcome, error_class=error_class) from exc
        body = b""
        try:
            body = self._read_body(request, raw, started)
        except TRANSPORT_ERRORS as exc:
            outcome, error_class = _classify_exception(exc)
            raise FetchError(
                f"{request.url}: {error_class} while reading the body: {exc}",
                outcome=outcome,
                http_status=raw.status,
                error_class=error_class,
            ) from exc
        finally:
            raw.close()
            self._observe(raw.status, len(body), started)
        return FetchedPage(url=request.url, status=raw.status, headers=raw.headers, body=body, final_url=raw.url)

    def _observe(self, status: int, size: int, started: float) -> None:
        if self.on_response is not None:
            self.on_response(status, size, self._clock() - started)

    def _read_body(self, request: PageRequest, raw: RawResponse, started: float) -> bytes:
        limit = self.policy.max_body_bytes
        declared = raw.headers.get("Content-Length", "")
        if declared.isdigit() and int(declared) > limit:
            raise FetchError(
                f"{request.url}: Content-Length {declared} > {limit} bytes",
                outcome=Outcome.TooLarge,
                http_status=raw.status,
                error_class="content-length",
            )
        parts: list[bytes] = []
        size = 0
        for chunk in raw.iter_chunks():
            size += len(chunk)
            if size > limit:
                raise FetchError(
                    f"{request.url}: body exceeds {limit} bytes",
                    outcome=Outcome.TooLarge,
                    http_status=raw.status,
                    error_class="body-cut",
                )
            parts.append(chunk)
            if self._clock() - started > self.policy.total_timeout_s:
                raise FetchError(
                    f"{request.url}: body not complete after {self.policy.total_timeout_s:.0f}s",
                    outcome=Outcome.Timeout,
                    http_status=raw.status,
                    error_class="TotalTimeout",
                )
        return b"".join(parts)
