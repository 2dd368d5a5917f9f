"""Visitor sessions: the account provider for sources that serve visitors, used when no logged-in account is
configured for them (``sources.<name>.visitor_url``, weibo.com's passport visitor flow).

Weibo hands anonymous browsers a visitor session: ``POST passport.weibo.com/visitor/genvisitor2`` with
``cb=visitor_gray_callback&tid=&from=weibo`` answers ``window.cb && cb({"retcode":20000000,"data":{"sub":...,
"subp":...}})`` and sets the ``SUB``/``SUBP`` cookies. The older form answers only a visitor id (``data.tid``) and
needs a second call, ``visitor?a=incarnate&t=TID``, which ends in the same two values: ``mint_visitor`` makes it
when the first answer asks for it (``incarnate_query``). The scheduler mints one session per source, in the
background (a lease never waits on HTTP: tasks of that source wait, as for an exhausted account pool), and
leases it like an account: ``Account(id="visitor:<source>:<generation>", cookie_blob={"cookies": {...}})``.

When a crawl reports that the session ended (HTTP 432 or a redirect to the visitor system), the session of
that generation is renewed: once, however many clients report it (a report naming an older generation is
ignored), and no sooner than ``scheduler.visitor_renew_s`` after the previous mint. Such a report neither
blocks the host nor freezes an account; the task is simply due again. Cookies never reach logs or status.
"""

from __future__ import annotations

import http.client
import json
import logging
import random
import re
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.cookies import CookieError, SimpleCookie
from typing import Any

from icecrawler.deadline import WATCHDOG, Watch
from icecrawler.errors import ConfigError, shown
from icecrawler.models import SOURCES, Account, Outcome, is_visitor, visitor_account_id
from icecrawler.settings import Settings

__all__ = [
    "GENVISITOR_FORM",
    "VisitorError",
    "VisitorSessions",
    "genvisitor_form",
    "incarnate_query",
    "mint_visitor",
    "parse_visitor_answer",
    "session_ended",
]

log = logging.getLogger(__name__)

#: The passport's success code.
RETCODE_OK = 20000000
#: What weibo.com's own page posts to genvisitor2. Since late 2025 its visitor page (served from
#: ``visitor.passport.weibo.cn`` too) adds a form version, a fresh random ``request_id`` per call and
#: ``webdriver=false``; the older passport ignores them (docs/SOURCES.md, weibo_web "Sessions").
GENVISITOR_FORM = {"cb": "visitor_gray_callback", "tid": "", "from": "weibo", "ver": "20250916", "webdriver": "false"}


def genvisitor_form() -> dict[str, str]:
    """The form of one genvisitor2 call: ``GENVISITOR_FORM`` and a new ``request_id`` (32 hex digits)."""
    return {**GENVISITOR_FORM, "request_id": uuid.uuid4().hex}


#: error classes (crawler_client.sources._detect / weibo sources) that mean "the visitor session is gone".
#: "empty-answer" is weibo.com's ``{}`` to a cookie it no longer accepts, "illegal-request" Weibo's errno 100006
#: (请求非法) to a session it refuses.
_ENDED_CLASSES = frozenset({"http-432", "visitor", "html-instead-of-json", "empty-answer", "illegal-request"})
_CALL_RE = re.compile(r"\((\{.*\})\)\s*;?\s*$", re.DOTALL)
_USER_AGENT = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36"
)


#: Lease times are whole wall milliseconds: a lease handed out the instant its session's mint began may read as up to
#: a millisecond before it.
_LEASE_MS_ROUNDING_S = 0.001


class VisitorError(Exception):
    """The passport did not hand out a visitor session (message says why; never contains cookies)."""


def session_ended(outcome: Outcome, error_class: str, http_status: int) -> bool:
    """A report that says the visitor session it was crawled with is no longer accepted."""
    if outcome is Outcome.Banned and (http_status == 432 or error_class == "http-432"):
        return True
    return outcome is Outcome.LoginRequired and error_class in _ENDED_CLASSES


def _answer_doc(body: bytes) -> dict[str, Any]:
    """The JSON object of a passport answer (JSONP-wrapped or bare); {} when there is none."""
    text = body.decode("utf-8", errors="replace").strip()
    match = _CALL_RE.search(text)
    raw = match[1] if match else text
    try:
        doc: Any = json.loads(raw) if raw.startswith("{") else {}
    except ValueError:
        doc = {}
    return doc if isinstance(doc, dict) else {}


def parse_visitor_answer(body: bytes, set_cookies: list[str]) -> dict[str, str]:
    """``SUB``/``SUBP`` from a genvisitor2 (or incarnate) answer: the JSONP body's ``data``, else the
    ``Set-Cookie`` headers. Pure; raises VisitorError when neither has a ``SUB``."""
    cookies: dict[str, str] = {}
    for header in set_cookies:
        try:
            jar: SimpleCookie = SimpleCookie(header)
        except CookieError:
            continue
        cookies.update({name: morsel.value for name, morsel in jar.items() if name in ("SUB", "SUBP")})
    doc = _answer_doc(body)
    data = doc.get("data")
    if doc.get("retcode") not in (None, RETCODE_OK, str(RETCODE_OK)) and not cookies:
        raise VisitorError(f"passport retcode {str(doc.get('retcode'))[:20]}: {str(doc.get('msg', ''))[:60]}")
    if isinstance(data, dict):
        for key, name in (("sub", "SUB"), ("subp", "SUBP")):
            if isinstance(data.get(key), str) and data[key]:
                cookies[name] = data[key]
    if not cookies.get("SUB"):
        raise VisitorError("no SUB in the passport's answer")
    return cookies


def incarnate_query(body: bytes, set_cookies: list[str], rand: float) -> dict[str, str] | None:
    """The query of the ``visitor?a=incarnate`` call when a genvisitor answer names a visitor id (``data.tid``) but
    no session (the passport's older two-step form); None when the answer needs no second step. Pure.

    The fields are those the visitor page sends (as gallery-dl's weibo extractor sends them, 2025): ``w`` 3 for a new
    id and 2 for a known one, ``c`` the answer's confidence as three digits (100 when it gives none)."""
    if any(header.lstrip().startswith("SUB=") for header in set_cookies):
        return None
    doc = _answer_doc(body)
    data = doc.get("data")
    if doc.get("retcode") not in (RETCODE_OK, str(RETCODE_OK)) or not isinstance(data, dict):
        return None
    tid = data.get("tid")
    if data.get("sub") or not isinstance(tid, str) or not tid:
        return None
    confidence = data.get("confidence")
    return {
        "a": "incarnate",
        "t": tid,
        "w": "3" if data.get("new_tid") else "2",
        "c": f"{confidence if isinstance(confidence, int) and 0 < confidence <= 100 else 100:03d}",
        "gc": "",
        "cb": "cross_domain",
        "from": "weibo",
        "_rand": f"{rand:.16f}",
    }


#: The most of a passport answer read (the real one is well under 1 KiB).
MAX_ANSWER_BYTES = 1 << 20


def _passport_call(
    url: str, method: str, body: bytes | None, headers: dict[str, str], watch: Watch, timeout_s: float
) -> tuple[bytes, list[str]]:
    """One call to the passport under the mint's ``watch``: the answer's body and ``Set-Cookie`` headers. Raises
    VisitorError for a status other than 200, OSError/HTTPException for the transport (the caller words them)."""
    parts = urllib.parse.urlsplit(url)
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    connection = kind(parts.hostname or "", parts.port, timeout=timeout_s)
    try:  # the name lookup has no socket to shut down: waited for on the side (icecrawler.deadline)
        WATCHDOG.call_within(watch, connection.connect, discard=lambda _: connection.close())
        WATCHDOG.attach(watch, connection.sock)
        target = urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, ""))
        connection.request(method, target, body=body, headers={"User-Agent": _USER_AGENT, **headers})
        response = connection.getresponse()
        answer = response.read(MAX_ANSWER_BYTES)
        if watch.expired:  # an answer cut by the watchdog can look complete
            raise TimeoutError("cut at the deadline")
        if response.status != 200:
            raise VisitorError(f"{url.split('?')[0]}: HTTPError: {response.status} {response.reason}")
        return answer, response.headers.get_all("Set-Cookie") or []
    finally:
        connection.close()


def mint_visitor(url: str, timeout_s: float = 10.0) -> dict[str, str]:
    """One genvisitor2 call, and the ``incarnate`` call after it when the passport answers a visitor id only (its
    older two-step form): the visitor cookies, or VisitorError. Direct (proxies in the environment are not used), and
    no redirect is followed: the passport answers in place.

    ``timeout_s`` bounds the whole mint, name lookups, headers and bodies of both calls (``icecrawler.deadline``), not
    only each socket read: a passport (or a proxy before it) that sends one byte at a time would otherwise keep the
    source without a session for hours, one read per byte.
    """
    parts = urllib.parse.urlsplit(url)
    try:
        _ = parts.port  # a port that is not a number raises here, before any call
    except ValueError as exc:
        raise VisitorError(f"{url!r}: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise VisitorError(f"{url!r} is not an http(s) URL")
    referer = urllib.parse.urljoin(url, "visitor?entry=miniblog&a=enter")
    watch = WATCHDOG.watch(timeout_s)
    try:
        form = urllib.parse.urlencode(genvisitor_form()).encode()
        headers = {"Content-Type": "application/x-www-form-urlencoded", "Referer": referer}
        body, set_cookies = _passport_call(url, "POST", form, headers, watch, timeout_s)
        query = incarnate_query(body, set_cookies, random.random())
        if query is not None:
            incarnate = urllib.parse.urljoin(url, "visitor?" + urllib.parse.urlencode(query))
            body, set_cookies = _passport_call(incarnate, "GET", None, {"Referer": referer}, watch, timeout_s)
    except (OSError, http.client.HTTPException) as exc:
        if watch.expired:
            raise VisitorError(f"{url}: the answer was not complete after {timeout_s:g}s") from exc
        raise VisitorError(f"{url}: {type(exc).__name__}: {exc}") from exc
    finally:
        WATCHDOG.release(watch)
    return parse_visitor_answer(body, set_cookies)


@dataclass
class _Session:
    """One source's visitor session; ``account`` is None while none is usable."""

    url: str
    generation: int = 0
    account: Account | None = None
    minting: bool = False
    last_mint: float = float("-inf")
    mints: int = 0
    renewals: int = 0
    failures: int = 0
    last_error: str = ""


def _clock_set_back(session: _Session, now: float) -> None:
    """A last mint after ``now`` means the wall clock was set back: it counts as made now. Otherwise the renewal's
    rate limit would be waited out for the jump too, and every lease handed out meanwhile would read as one from
    before the mint, its report of the ended session ignored (``renew``), while the dead session was leased on.
    Called wherever the session is read (each lease, each report), so the mint is moved back by the first lease
    after the jump, not only by a report."""
    session.last_mint = min(session.last_mint, now)


def _spawn(work: Callable[[], None]) -> None:
    threading.Thread(target=work, name="visitor-mint", daemon=True).start()


class VisitorSessions:
    """The visitor session of every source with a visitor URL (see the module docstring). Thread-safe."""

    def __init__(
        self,
        urls: Mapping[str, str],
        *,
        renew_s: float = 30.0,
        mint: Callable[[str], dict[str, str]] = mint_visitor,
        spawn: Callable[[Callable[[], None]], None] = _spawn,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if renew_s < 0:
            raise ConfigError("scheduler.visitor_renew_s must be >= 0")
        self._sessions = {source: _Session(url) for source, url in urls.items() if url}
        self._renew_s = renew_s
        self._mint = mint
        self._spawn = spawn
        self._clock = clock
        self._lock = threading.RLock()  # a synchronous ``spawn`` (tests) mints while the lock is held

    @classmethod
    def from_settings(cls, settings: Settings) -> VisitorSessions:
        urls: dict[str, str] = {}
        for source in SOURCES:
            key = f"sources.{source}.visitor_url"
            url = settings.get_str(key) if key in settings else ""  # only visitor sources declare one
            if url and urllib.parse.urlsplit(url).scheme not in ("http", "https"):
                raise ConfigError(f"{key}: {url!r} is not an http(s) URL")
            urls[source] = url
        return cls(urls, renew_s=settings.get_float("scheduler.visitor_renew_s"))

    def serves(self, source: str) -> bool:
        return source in self._sessions

    def account(self, source: str, now: float) -> Account | None:
        """The source's current visitor account; None while one is being minted (a mint is started when
        none is under way and the rate limit allows)."""
        session = self._sessions.get(source)
        if session is None:
            return None
        with self._lock:
            # At each lease, not only at a report: a lease handed out before a mint "in the future" was moved back
            # read as one from before the mint, and its 432 was ignored (``renew``).
            _clock_set_back(session, now)
            if session.account is None:
                self._start_mint(source, session, now)
            return session.account

    def renew(self, account_id: str, now: float, leased_at: float | None = None) -> bool:
        """The session ``account_id`` was ended by the site: renew it unless another report already did.
        True when ``account_id`` is a visitor account (whatever its generation).

        ``leased_at`` (wall s): when the crawl that says so was leased. One leased before the current session's
        mint began was not crawled with it, whatever its id says: a restarted scheduler numbers its sessions from 1
        again, and clients send the reports they kept through its outage when it is back. Such a report is ignored."""
        if not is_visitor(account_id):
            return False
        _, source, generation = [*account_id.split(":"), "", ""][:3]
        session = self._sessions.get(source)
        if session is None:
            return True
        with self._lock:
            _clock_set_back(session, now)
            if leased_at is not None and leased_at < session.last_mint - _LEASE_MS_ROUNDING_S:
                return True
            if session.account is not None and session.account.id == account_id:
                session.account = None
                session.renewals += 1
                log.info("visitor session %s ended; renewing", account_id)
                self._start_mint(source, session, now)
            elif generation.isdigit() and int(generation) == session.generation and not session.minting:
                self._start_mint(source, session, now)
        return True

    def _start_mint(self, source: str, session: _Session, now: float) -> None:
        """Start a background mint if none runs and the last one is old enough (lock held)."""
        _clock_set_back(session, now)
        if session.minting or now - session.last_mint < self._renew_s:
            return
        session.minting = True
        session.last_mint = now
        try:
            self._spawn(lambda: self._mint_now(source, session))
        except Exception as exc:  # no thread (at the process's limit): a failed mint, not one "under way" for good
            session.minting = False
            session.failures += 1
            session.last_error = f"{type(exc).__name__}: {exc}"[:200]
            log.error(
                "visitor session for %s: the mint could not start (next try in %.0fs): %s", source, self._renew_s, exc
            )

    def _mint_now(self, source: str, session: _Session) -> None:
        try:
            cookies = self._mint(session.url)
        except VisitorError as exc:
            with self._lock:
                session.minting = False
                session.failures += 1
                session.last_error = str(exc)[:200]
            log.warning("visitor session for %s: %s (next try in %.0fs)", source, shown(str(exc)), self._renew_s)
            return
        except Exception as exc:  # a bug here must not leave the source without sessions for good
            with self._lock:
                session.minting = False
                session.failures += 1
                session.last_error = f"{type(exc).__name__}"
            log.exception("visitor session for %s: mint failed", source)
            return
        blob = json.dumps({"cookies": cookies}, separators=(",", ":"))
        with self._lock:
            session.generation += 1
            session.mints += 1
            session.account = Account(visitor_account_id(source, session.generation), blob)
            session.minting = False
            session.last_error = ""
        log.info("visitor session for %s minted (generation %d)", source, session.generation)

    def describe(self, now: float) -> dict[str, Any]:
        """Per-source session state for status: never the cookies."""
        with self._lock:
            return {
                source: {
                    "state": "ok" if s.account is not None else ("minting" if s.minting else "none"),
                    "account": s.account.id if s.account is not None else "",
                    "mints": s.mints,
                    "renewals": s.renewals,
                    "failures": s.failures,
                    "last_error": s.last_error,
                    "last_mint_s_ago": round(now - s.last_mint, 1) if s.mints or s.failures else None,
                }
                for source, s in sorted(self._sessions.items())
            }
