"""A session's cookie jar, bounded as browsers bound theirs: a site that sets ever-new cookie names, or huge ones,
cannot grow a client's memory (or the Cookie header it sends back) without end.

Browsers keep at most 180 cookies per domain and about 3000 in all, and at most 4096 bytes of name and value per
cookie (Firefox's ``network.cookie.maxPerHost`` and ``network.cookie.maxNumber``; RFC 6265 asks a user agent to
store at least that much, so a site that needs more does not work in a browser either). This jar keeps the same
bounds. Where a browser then evicts its least recently used cookies, this jar refuses the new one: a session's
first cookies are its login (an account's blob, a form login's answer), and a site's churn must not push them out.
A new value for a cookie the jar already holds is always taken, and so is a site's value for a cookie the blob gave:
the blob's copy (set for no domain) is dropped, so the stale value is neither sent beside the new one nor echoed.
"""

from __future__ import annotations

import http.cookiejar
import logging
from collections.abc import Callable
from typing import Any

import requests.cookies

__all__ = ["MAX_COOKIES", "MAX_COOKIES_PER_DOMAIN", "MAX_COOKIE_BYTES", "BoundedCookieJar"]

#: Cookies kept per domain (as browsers do).
MAX_COOKIES_PER_DOMAIN = 180
#: Cookies kept in one jar, over all domains.
MAX_COOKIES = 3000
#: Longest name plus value of a cookie kept, in characters.
MAX_COOKIE_BYTES = 4096

log = logging.getLogger(__name__)


class BoundedCookieJar(requests.cookies.RequestsCookieJar):
    """A ``RequestsCookieJar`` that refuses a cookie past the bounds above (see the module docstring); ``refused``
    counts them, and ``on_refused`` is told of each (the client's metrics)."""

    def __init__(self, *args: Any, on_refused: Callable[[], object] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.refused = 0
        self.on_refused = on_refused
        self._logged: set[str] = set()

    def set_cookie(self, cookie: http.cookiejar.Cookie, *args: Any, **kwargs: Any) -> None:
        refusal = self._refusal(cookie)
        if refusal is None:
            if cookie.domain:
                self._drop_unscoped(cookie.name)
            super().set_cookie(cookie, *args, **kwargs)
            return
        self.refused += 1
        if self.on_refused is not None:
            self.on_refused()
        bound, why = refusal
        if bound not in self._logged:  # once per bound and jar: a churning site would otherwise log every answer
            self._logged.add(bound)
            log.warning("cookie jar: %s; refusing such cookies (the first: %r)", why, cookie.name[:64])

    def _drop_unscoped(self, name: str) -> None:
        """Forget the cookie ``name`` that an account's blob gave (set for no domain, so sent to every host): a site
        setting that cookie gives its new value, which must replace the blob's, not be sent beside it (the stale value
        first, and echoed in a header such as weibo.com's ``X-XSRF-TOKEN``)."""
        domains: dict[str, dict[str, dict[str, Any]]] = self._cookies  # type: ignore[attr-defined]
        unscoped = domains.get("", {})
        for path in [path for path, names in unscoped.items() if name in names]:
            del unscoped[path][name]
            if not unscoped[path]:
                del unscoped[path]
        if "" in domains and not unscoped:
            del domains[""]

    def _refusal(self, cookie: http.cookiejar.Cookie) -> tuple[str, str] | None:
        """(the bound, why) when ``cookie`` may not be kept; None when it may."""
        size = len(cookie.name) + len(cookie.value or "")
        if size > MAX_COOKIE_BYTES:
            return "size", f"a cookie of {size} characters (the most is {MAX_COOKIE_BYTES})"
        domains: dict[str, dict[str, dict[str, Any]]] = self._cookies  # type: ignore[attr-defined]
        paths = domains.get(cookie.domain, {})
        if cookie.name in paths.get(cookie.path, {}):
            return None  # a new value: always taken
        if sum(len(names) for names in paths.values()) >= MAX_COOKIES_PER_DOMAIN:
            return "domain", f"domain {cookie.domain!r} holds {MAX_COOKIES_PER_DOMAIN} cookies"
        if sum(len(names) for by_path in domains.values() for names in by_path.values()) >= MAX_COOKIES:
            return "jar", f"the jar holds {MAX_COOKIES} cookies"
        return None
