"""How a request reaches the site: urllib3 connections under the fetch's whole-call deadline
(``icecrawler.deadline``), one ``HttpSession`` (cookie jar + keep-alive pool) per leased account, redirects followed
here so that every hop's cookies land in the jar, and the cache that keeps one session per account and worker.

``crawler_client.http.Fetcher`` sends through the ``Transport`` protocol and turns what this module raises
(``TRANSPORT_ERRORS``, ``TotalTimeout``, ``TooManyRedirects``, ``InvalidURL``) into classified ``FetchError``s.
``Urllib3Transport`` ignores ``HTTP(S)_PROXY`` in the environment: a crawler's proxy is configuration
(``client.proxy_url``), not an accident of the shell it was started from. The account's cookie blob is read by
``icecrawler.cookie_blob`` (pure parsing, its forms listed there).
"""

from __future__ import annotations

import socket
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import urllib3
import urllib3.connection
import urllib3.exceptions

from crawler_client.cookie_jar import BoundedCookieJar
from crawler_client.headers import merge_headers
from crawler_client.observer import current as current_observer
from crawler_client.sources.base import PageRequest
from icecrawler.cookie_blob import parse_cookie_blob, site_domain
from icecrawler.deadline import WATCHDOG, DeadlinePassed, Watch, Watchdog
from icecrawler.models import Account, account_lineage

__all__ = [
    "SESSION_IDLE_S",
    "TRANSPORT_ERRORS",
    "HttpSession",
    "InvalidURL",
    "RawResponse",
    "SessionCache",
    "TooManyRedirects",
    "TotalTimeout",
    "Transport",
    "Urllib3Transport",
]

#: Bytes read from the socket per step while streaming a body.
CHUNK_BYTES = 64 * 1024
#: Redirects followed per fetch before it fails as TooManyRedirects (requests' default, which we replaced).
MAX_REDIRECTS = 30
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
#: Origins (scheme, host, port) with keep-alive connections per session; a task rarely leaves one site.
POOLS = 8
#: Sent with every request unless the source overrides them (gzip is decoded while streaming).
DEFAULT_HEADERS = {"Accept": "*/*", "Accept-Encoding": "gzip, deflate"}


class TooManyRedirects(urllib3.exceptions.HTTPError):
    """A redirect chain longer than ``MAX_REDIRECTS`` (a loop, usually between a site and its login page)."""


class InvalidURL(urllib3.exceptions.LocationValueError):
    """A request URL that is not http(s)://host/...: a configuration error, never worth a retry."""


#: What a transport may raise; the Fetcher turns each into a classified FetchError.
TRANSPORT_ERRORS: tuple[type[Exception], ...] = (urllib3.exceptions.HTTPError, OSError)


class RawResponse(Protocol):
    """A response whose body has not been read yet."""

    status: int
    headers: Mapping[str, str]
    url: str

    def iter_chunks(self) -> Iterator[bytes]:
        """The body, piece by piece; may raise the transport's own errors mid-way."""
        ...

    def close(self) -> None: ...


class Transport(Protocol):
    """Sends one request. May raise urllib3 exceptions or ``OSError`` (``TRANSPORT_ERRORS``); the Fetcher
    translates them. ``timeout_s`` bounds the connect and each read, ``total_timeout_s`` the whole exchange up to
    the response's ``close`` (past it: ``TotalTimeout``)."""

    def send(
        self, request: PageRequest, headers: Mapping[str, str], timeout_s: float, total_timeout_s: float
    ) -> RawResponse: ...


class TotalTimeout(TimeoutError):
    """The fetch outlived ``client.total_timeout_s``: the watchdog shut its connection down."""


class _Urllib3Response:
    """A urllib3 response read as a stream; a connection whose body was not read to the end is closed rather
    than handed back to the pool (its unread bytes would corrupt the next response)."""

    def __init__(self, response: urllib3.BaseHTTPResponse, url: str, watch: Watch, watchdog: Watchdog) -> None:
        self._response = response
        self._finished = False
        self._watch = watch
        self._watchdog = watchdog
        self.status = response.status
        self.headers: Mapping[str, str] = response.headers
        self.url = url

    def iter_chunks(self) -> Iterator[bytes]:
        try:
            yield from self._response.stream(CHUNK_BYTES, decode_content=True)
        except TRANSPORT_ERRORS as exc:
            if self._watch.expired:
                raise TotalTimeout("the body was not complete within the fetch's total timeout") from exc
            raise
        if self._watch.expired:  # a body without a length ends at the shutdown as if it were complete
            raise TotalTimeout("the body was not complete within the fetch's total timeout")
        self._finished = True

    def close(self) -> None:
        self._watchdog.release(self._watch)  # before the connection can serve another fetch
        if not self._finished or self._watch.expired:
            self._response.close()
        self._response.release_conn()


#: The watch of the fetch this thread is sending, for the connections it opens or reuses to attach themselves.
_SENDING = threading.local()


def _sending() -> tuple[Watch, Watchdog] | None:
    """The watch of the fetch this thread is sending and its watchdog; None outside a fetch."""
    watch: Watch | None = getattr(_SENDING, "watch", None)
    return None if watch is None else (watch, _SENDING.watchdog)


class _WatchedRequests:
    """A urllib3 connection under the current fetch's watch: while it sets up (a proxy's CONNECT, the TLS
    handshake) and while it waits for the answer."""

    _setup_over: Callable[[], None] | None = None

    def _new_conn(self) -> socket.socket:
        new_conn: Callable[[], socket.socket] = super()._new_conn  # type: ignore[misc]
        sending = _sending()
        if sending is None:
            return new_conn()
        watch, watchdog = sending
        try:  # the name lookup has no socket to shut down: waited for on the side (icecrawler.deadline)
            sock = watchdog.call_within(watch, new_conn, discard=socket.socket.close)
        except DeadlinePassed as exc:
            raise TotalTimeout(f"no connection to {self.host} within the fetch's total timeout") from exc  # type: ignore[attr-defined]
        self._setup_over = watchdog.attach_setup(watch, sock)
        return sock

    def connect(self) -> None:
        try:
            super().connect()  # type: ignore[misc]
        finally:
            setup_over, self._setup_over = self._setup_over, None
            if setup_over is not None:
                setup_over()

    def _tunnel(self) -> None:
        super()._tunnel()  # type: ignore[misc]
        sending = _sending()
        if sending and sending[0].expired:  # a CONNECT answer cut by the shutdown ends as if it were complete
            raise TotalTimeout("the proxy's CONNECT answer was not complete within the fetch's total timeout")

    def getresponse(self, *args: Any, **kwargs: Any) -> Any:
        if sending := _sending():
            watch, watchdog = sending
            watchdog.attach(watch, self.sock)  # type: ignore[attr-defined]
        return super().getresponse(*args, **kwargs)  # type: ignore[misc]


class _WatchedHTTPConnection(_WatchedRequests, urllib3.connection.HTTPConnection):
    pass


class _WatchedHTTPSConnection(_WatchedRequests, urllib3.connection.HTTPSConnection):
    pass


class _WatchedHTTPPool(urllib3.HTTPConnectionPool):
    ConnectionCls = _WatchedHTTPConnection


class _WatchedHTTPSPool(urllib3.HTTPSConnectionPool):
    ConnectionCls = _WatchedHTTPSConnection


class _SetCookieSource:
    """The two methods ``http.cookiejar`` needs from a response to read its ``Set-Cookie`` headers."""

    def __init__(self, headers: urllib3.HTTPHeaderDict) -> None:
        self._headers = headers

    def info(self) -> _SetCookieSource:
        return self

    def get_all(self, name: str, default: list[str] | None = None) -> list[str]:
        return self._headers.getlist(name) or (default if default is not None else [])


class HttpSession:
    """One account's HTTP state: its cookie jar (the login; bounded as browsers bound theirs, ``cookie_jar``) and
    keep-alive connections per origin.

    Built on urllib3 directly: ``requests`` spent a large share of a client's CPU per page merging settings,
    preparing and adapting the request; ``icecrawler bench client`` and ``bench scale`` measure the client's CPU
    per page (docs/BENCHMARKS.md).
    """

    def __init__(self, proxy_url: str = "", on_cookie_refused: Callable[[], object] | None = None) -> None:
        self.cookies = BoundedCookieJar(on_refused=on_cookie_refused)
        self.pool: urllib3.PoolManager = (
            urllib3.ProxyManager(proxy_url, num_pools=POOLS) if proxy_url else urllib3.PoolManager(num_pools=POOLS)
        )
        self.pool.pool_classes_by_scheme = {"http": _WatchedHTTPPool, "https": _WatchedHTTPSPool}

    def close(self) -> None:
        """Close its connections. The session stays usable (a later request connects again) with its cookies."""
        self.pool.clear()


class Urllib3Transport:
    """The real transport: urllib3 with the session's cookies, following redirects itself so every hop's
    ``Set-Cookie`` lands in the jar (a login answers with a cookie and a redirect) and the final URL is known
    (sources detect a redirect to a login page by it)."""

    def __init__(self, session: HttpSession, watchdog: Watchdog = WATCHDOG) -> None:
        self.session = session
        self.watchdog = watchdog

    def send(
        self, request: PageRequest, headers: Mapping[str, str], timeout_s: float, total_timeout_s: float
    ) -> RawResponse:
        watch = self.watchdog.watch(total_timeout_s)
        _SENDING.watch, _SENDING.watchdog = watch, self.watchdog
        try:
            response = self._send(request, headers, timeout_s, watch)
        except BaseException as exc:
            self.watchdog.release(watch)
            if watch.expired and isinstance(exc, TRANSPORT_ERRORS):
                raise TotalTimeout(f"no complete answer within {total_timeout_s:g}s") from exc
            raise
        finally:
            _SENDING.watch = None
        if watch.expired:  # headers cut by the shutdown end as if they were complete
            response.close()  # releases the watch too
            raise TotalTimeout(f"no complete answer within {total_timeout_s:g}s")
        return response

    def _send(self, request: PageRequest, headers: Mapping[str, str], timeout_s: float, watch: Watch) -> RawResponse:
        url = request.url
        parts = _split(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise InvalidURL(f"{url!r} is not an http(s) URL")
        if request.params:
            url += ("&" if parts.query else "?") + urllib.parse.urlencode(request.params)
        method = request.method.upper()
        body: str | None = urllib.parse.urlencode(request.data) if request.data is not None else None
        timeout = urllib3.Timeout(connect=timeout_s, read=timeout_s)
        for _ in range(MAX_REDIRECTS + 1):
            form = {"Content-Type": "application/x-www-form-urlencoded"} if body is not None else {}
            sent = merge_headers(DEFAULT_HEADERS, form, headers)
            cookie_request = urllib.request.Request(url, method=method)
            self.session.cookies.add_cookie_header(cookie_request)
            cookie = cookie_request.get_header("Cookie")
            if cookie:
                sent = merge_headers(sent, {"Cookie": cookie}, self._cookie_headers(request, url))
            response = self.session.pool.urlopen(
                method,
                url,
                body=body,
                headers=sent,
                redirect=False,
                retries=False,
                timeout=timeout,
                preload_content=False,
            )
            if "set-cookie" in response.headers:
                self.session.cookies.extract_cookies(_SetCookieSource(response.headers), cookie_request)  # type: ignore[arg-type]
            location = response.headers.get("Location")
            if response.status not in REDIRECT_STATUSES or not location:
                return _Urllib3Response(response, url, watch, self.watchdog)
            self.watchdog.detach_all(watch)
            response.close()
            response.release_conn()
            _split(location)  # one whose host urllib.parse refuses is an InvalidURL, not urljoin's ValueError
            url = urllib.parse.urljoin(url, location)
            if response.status == 303 or (response.status in (301, 302) and method == "POST"):
                method, body = ("GET" if method != "HEAD" else method), None  # what browsers (and requests) do
        raise TooManyRedirects(f"more than {MAX_REDIRECTS} redirects")

    def _cookie_headers(self, request: PageRequest, url: str) -> dict[str, str]:
        """``request.cookie_headers`` filled with the values the jar sends to ``url`` (a header whose cookie is not
        sent there is not sent either)."""
        found: dict[str, str] = {}
        for header_name, cookie_name in request.cookie_headers.items():
            value = self.session.cookies.value_for(url, cookie_name)
            if value:
                found[header_name] = value
        return found


def _split(url: str) -> urllib.parse.SplitResult:
    """``urllib.parse.urlsplit``, whose ValueError for a host it refuses (``[::1``, ``[zz]``: a site's Location, a
    link a page gave) is an ``InvalidURL``, as urllib3's own for a bad port is: never a source's bug."""
    try:
        return urllib.parse.urlsplit(url)
    except ValueError as exc:
        raise InvalidURL(f"{url[:200]!r} is not a URL: {exc}") from None


# --- sessions -----------------------------------------------------------------------------------------------


#: A session unused this long has its keep-alive sockets closed; its cookies (a form login, a site's tokens) stay.
#: Sites drop idle connections long before this, and an account taken out of the pool, or a source no longer
#: crawled, is never asked for again: without it each such session held a socket per worker until ``max_sessions``
#: was reached (docs/DEPLOY.md, "File descriptors").
SESSION_IDLE_S = 600.0


@dataclass
class _CachedSession:
    blob: str
    session: HttpSession
    used: float
    #: The cookie domain the blob's cookies were loaded for (``site_domain`` of the source's base URL).
    domain: str = ""
    #: The session has had a request since its sockets were last closed for idleness.
    connected: bool = True


class SessionCache:
    """One ``HttpSession`` per (source, account), owned by ONE worker thread (sessions are not shared across
    threads). The blob's cookies are kept for the source's site only (``session``'s ``base_url``). A changed
    cookie blob for the same account replaces the session's cookies, and so does a renewed
    visitor session (a new generation of the same ``account_lineage``). A session idle for ``idle_s`` (on the
    monotonic clock: sockets age in real time, whatever the crawl's clock) closes its sockets and keeps its cookies;
    past ``max_sessions`` the least recently used session goes."""

    def __init__(
        self,
        max_sessions: int = 64,
        proxy_url: str = "",
        *,
        idle_s: float = SESSION_IDLE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        #: Least recently used first.
        self._sessions: dict[tuple[str, str], _CachedSession] = {}
        self._max = max_sessions
        self._proxy_url = proxy_url
        self._idle_s = idle_s
        self._clock = clock

    def __len__(self) -> int:
        return len(self._sessions)

    def session(self, source: str, account: Account, base_url: str = "") -> HttpSession:
        """The session for ``account`` on ``source``, whose site is at ``base_url``: the blob's cookies are sent to
        that site only (``icecrawler.cookie_blob.site_domain``; to every host without one). Raises
        FetchError(LoginRequired) for a bad blob."""
        now = self._clock()
        self._disconnect_idle(now)
        key = (source, account_lineage(account.id))
        domain = site_domain(base_url)
        cached = self._sessions.pop(key, None)
        if cached is not None:
            self._sessions[key] = cached  # now the most recently used
            cached.used, cached.connected = now, True
            if cached.blob == account.cookie_blob and cached.domain == domain:
                return cached.session
        blob = parse_cookie_blob(account.cookie_blob)
        if cached is None:
            if len(self._sessions) >= self._max:
                self._sessions.pop(next(iter(self._sessions))).session.close()
            session = HttpSession(self._proxy_url, lambda: current_observer().cookie_refused(source))
            cached = self._sessions[key] = _CachedSession("", session, now)
        cached.session.cookies.clear()
        cached.session.cookies.load_blob(blob.cookies, domain)
        cached.blob, cached.domain = account.cookie_blob, domain
        return cached.session

    def connected(self) -> int:
        """Sessions that may hold open sockets (used since their last idle close)."""
        return sum(cached.connected for cached in self._sessions.values())

    def _disconnect_idle(self, now: float) -> None:
        for cached in self._sessions.values():  # least recently used first
            if now - cached.used < self._idle_s:
                return  # the rest were used later
            if cached.connected:
                cached.session.close()
                cached.connected = False

    def close(self) -> None:
        for cached in self._sessions.values():
            cached.session.close()
        self._sessions.clear()
