"""Weibo's passport visitor system under ``/passport``: ``POST /visitor/genvisitor2`` mints a visitor session
(``SUB``/``SUBP`` cookies, also echoed in a JSONP body as the real one does) and ``/visitor/visitor`` is the
"Sina Visitor System" page that sites redirect cookie-less browsers to.

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

    def expire_all(self) -> int:
        """End every visitor session now (the sandbox control endpoint); returns how many there were."""
        with self._lock:
            count = len(self._expires)
            self._expires = dict.fromkeys(self._expires, 0)
        return count

    def describe(self) -> dict[str, float | int]:
        return {"ttl_s": self.ttl_s, "minted": self.minted}


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
        if request.path == VISITOR_PAGE_PATH:
            return SimResponse(200, visitor_page())
        return SimResponse.not_found()

    def _genvisitor(self, request: SimRequest) -> SimResponse:
        """``window.<cb> && <cb>({"retcode":20000000,"msg":"succ","data":{"sub":...,"subp":...}});`` and the
        same two values as cookies."""
        sub, subp, _ = self.registry.mint(request.now_ms)
        callback = request.form.get("cb") or "visitor_gray_callback"
        if not callback.replace("_", "a").isalnum():
            callback = "visitor_gray_callback"
        body = php_json(
            {"retcode": 20000000, "msg": "succ", "data": {"sub": sub, "subp": subp, "tid": secrets.token_hex(16)}}
        )
        response = SimResponse(
            200, f"window.{callback} && {callback}({body});".encode(), "application/javascript; charset=utf-8"
        )
        response.headers["Set-Cookie"] = f"SUB={sub}; path=/; httponly"
        return response
