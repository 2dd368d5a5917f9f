"""Weibo's passport visitor system under ``/passport``: ``POST /visitor/genvisitor2`` mints a visitor session
(``SUB``/``SUBP`` cookies, also echoed in a JSONP body as the real one does) and ``/visitor/visitor`` is the
"Sina Visitor System" page that sites redirect cookie-less browsers to.

The passport can also answer in two steps, as its older form does (``VisitorRegistry.two_step``, set through
``/__sandbox/visitors``): genvisitor2 then hands out only a visitor id (``data.tid``, ``new_tid``, ``confidence``)
and no cookie, and ``GET /visitor/visitor?a=incarnate&t=TID`` turns an id it issued into the session, answering
``window.cross_domain && cross_domain({"retcode":20000000,…,"data":{"sub":…,"subp":…}});`` with the two cookies.

``VisitorRegistry`` remembers every visitor ``SUB`` it minted and when it expires (simulated time), so the
sites can tell a live visitor (served), an expired one (HTTP 432, as weibo.com answers) and a logged-in
account (any other non-empty ``SUB``: never expires here).
"""

from __future__ import annotations

import secrets
import threading
from typing import ClassVar

from sandbox.web import OpenSite, SimRequest, SimResponse, php_json

__all__ = ["GENVISITOR_PATH", "PassportSite", "VisitorRegistry", "visitor_page"]

GENVISITOR_PATH = "/visitor/genvisitor2"
VISITOR_PAGE_PATH = "/visitor/visitor"
#: Prefix of the visitor SUB values this sandbox mints (real ones start with ``_2AkM``).
_VISITOR_PREFIX = "_2AkMsandbox"


class VisitorRegistry:
    """Minted visitor sessions and their expiry (simulated ms). Thread-safe."""

    def __init__(self, ttl_s: float = 86_400.0) -> None:
        self.ttl_s = ttl_s
        self._expires: dict[str, int] = {}
        self._lock = threading.Lock()
        self.minted = 0
        #: genvisitor2 answers a visitor id only; the session comes from the incarnate call (module docstring).
        self.two_step = False
        self._tids: set[str] = set()

    def mint(self, now_ms: int) -> tuple[str, str, int]:
        """A new (SUB, SUBP, expires_ms)."""
        with self._lock:
            sub = f"{_VISITOR_PREFIX}{secrets.token_hex(12)}"
            expires = now_ms + int(self.ttl_s * 1000)
            self._expires[sub] = expires
            self.minted += 1
        return sub, f"0033WrSXqPxfM72-Ws9jqgMF55529P9D9W{secrets.token_hex(6)}", expires

    def state(self, sub: str, now_ms: int) -> str:
        """ "none" (no SUB), "account" (a SUB we did not mint: a login), "visitor" (live) or "expired"."""
        if not sub:
            return "none"
        if not sub.startswith(_VISITOR_PREFIX):
            return "account"
        with self._lock:
            expires = self._expires.get(sub)
        return "visitor" if expires is not None and now_ms < expires else "expired"

    def issue_tid(self) -> str:
        """A visitor id for the incarnate step."""
        tid = secrets.token_urlsafe(24)
        with self._lock:
            self._tids.add(tid)
        return tid

    def redeem_tid(self, tid: str) -> bool:
        """Whether ``tid`` was issued and not yet used (each id incarnates once)."""
        with self._lock:
            if tid not in self._tids:
                return False
            self._tids.discard(tid)
            return True

    def expire_all(self) -> int:
        """End every visitor session now (the sandbox control endpoint); returns how many there were."""
        with self._lock:
            count = len(self._expires)
            self._expires = dict.fromkeys(self._expires, 0)
        return count

    def describe(self) -> dict[str, float | int]:
        return {"ttl_s": self.ttl_s, "minted": self.minted, "two_step": self.two_step}


def visitor_page() -> bytes:
    """The page a cookie-less browser is sent to: it runs the fingerprint script, then genvisitor2."""
    return (
        b'<!DOCTYPE html><html><head><meta charset="utf-8"><title>Sina Visitor System</title></head><body>'
        b'<script type="text/javascript">var url = url || {}; (function () {/* fingerprint, then '
        b"POST /visitor/genvisitor2 and go back */})();</script></body></html>"
    )


class PassportSite(OpenSite):
    prefix: ClassVar[str] = "passport"

    def __init__(self, registry: VisitorRegistry) -> None:
        self.registry = registry

    def handle(self, request: SimRequest) -> SimResponse:
        if request.path == GENVISITOR_PATH and request.method == "POST":
            return self._genvisitor(request)
        if request.path == VISITOR_PAGE_PATH and request.query.get("a") == "incarnate":
            return self._incarnate(request)
        if request.path == VISITOR_PAGE_PATH:
            return SimResponse(200, visitor_page())
        return SimResponse.not_found()

    def _session_answer(self, request: SimRequest, callback: str) -> SimResponse:
        """A new visitor session: the JSONP answer naming it and its two cookies."""
        sub, subp, _ = self.registry.mint(request.now_ms)
        response = _jsonp(callback, {"retcode": 20000000, "msg": "succ", "data": {"sub": sub, "subp": subp}})
        response.headers["Set-Cookie"] = f"SUB={sub}; path=/; httponly"
        return response

    def _incarnate(self, request: SimRequest) -> SimResponse:
        """The second step of the two-step form: an issued visitor id becomes a session."""
        callback = _callback(request.query.get("cb", ""), "cross_domain")
        if not self.registry.redeem_tid(request.query.get("t", "")):
            # Our own refusal (the real passport's wording for an unknown id is not known to us).
            return _jsonp(callback, {"retcode": 50111299, "msg": "visitor id unknown", "data": {}})
        return self._session_answer(request, callback)

    def _genvisitor(self, request: SimRequest) -> SimResponse:
        """``window.<cb> && <cb>({"retcode":20000000,"msg":"succ","data":{"sub":...,"subp":...}});`` and the
        same two values as cookies; in the two-step form only a visitor id, and no cookie."""
        callback = _callback(request.form.get("cb", ""), "visitor_gray_callback")
        if self.registry.two_step:
            tid = self.registry.issue_tid()
            data = {"tid": tid, "new_tid": True, "confidence": 100}
            return _jsonp(callback, {"retcode": 20000000, "msg": "succ", "data": data})
        sub, subp, _ = self.registry.mint(request.now_ms)
        data = {"sub": sub, "subp": subp, "tid": secrets.token_hex(16)}
        response = _jsonp(callback, {"retcode": 20000000, "msg": "succ", "data": data})
        response.headers["Set-Cookie"] = f"SUB={sub}; path=/; httponly"
        return response


def _callback(name: str, default: str) -> str:
    """The JSONP callback the client named, when it is a plain identifier; else ``default``."""
    return name if name and name.replace("_", "a").isalnum() else default


def _jsonp(callback: str, doc: dict[str, object]) -> SimResponse:
    """``window.<cb> && <cb>(<json>);``, as the passport wraps every answer."""
    body = f"window.{callback} && {callback}({php_json(doc)});".encode()
    return SimResponse(200, body, "application/javascript; charset=utf-8")
