"""A session's cookie jar, bounded as browsers bound theirs: a site that sets ever-new cookie names, or huge ones,
cannot grow a client's memory (or the Cookie header it sends back) without end.

Browsers keep at most 180 cookies per domain and about 3000 in all, and at most 4096 bytes of name and value per
cookie (Firefox's ``network.cookie.maxPerHost`` and ``network.cookie.maxNumber``; RFC 6265 asks a user agent to
store at least that much, so a site that needs more does not work in a browser either). This jar keeps the same
bounds. Where a browser then evicts its least recently used cookies, this jar refuses the new one: a session's
first cookies are its login (an account's blob, a form login's answer), and a site's churn must not push them out.
A new value for a cookie the jar already holds is always taken.

An account's blob names no domain (it is a browser's ``Cookie`` header); its cookies are kept for the site of the
source's base URL, as the site scoped them itself (``icecrawler.cookie_blob.site_domain``: ``.weibo.com``,
``.weibo.cn``, ``.jd.com``), so a redirect to another site never carries the login along. Where the site has since
set a cookie of the same name for the host asked, the site's value is sent and echoed alone (the blob's is stale
there), while every other host of the site still gets the blob's: a cookie set by a passport or login host, or for a
narrower path, must not take the login away from the site's own pages.
"""

from __future__ import annotations

import http.cookiejar
import logging
import time
import urllib.request
from collections.abc import Callable, Mapping
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

#: Marks a cookie that came from an account's blob, not from the site (a non-standard attribute: never sent).
BLOB_MARK = "x-icecrawler-blob"


def _from_blob(cookie: http.cookiejar.Cookie) -> bool:
    return not cookie.domain or cookie.has_nonstandard_attr(BLOB_MARK)


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
            super().set_cookie(cookie, *args, **kwargs)
            return
        self.refused += 1
        if self.on_refused is not None:
            self.on_refused()
        bound, why = refusal
        if bound not in self._logged:  # once per bound and jar: a churning site would otherwise log every answer
            self._logged.add(bound)
            log.warning("cookie jar: %s; refusing such cookies (the first: %r)", why, cookie.name[:64])

    def load_blob(self, cookies: Mapping[str, str], domain: str) -> None:
        """An account's cookies, for ``domain`` (``site_domain`` of the source's base URL; "" = every host)."""
        for name, value in cookies.items():
            self.set(name, value, domain=domain, rest={BLOB_MARK: ""})

    def _cookies_for_request(self, request: Any) -> list[http.cookiejar.Cookie]:
        """The cookies ``request`` gets (what ``add_cookie_header`` sends), without a blob's cookie whose name a
        cookie set by the site for this host also has: the site's value is the newer one."""
        cookies: list[http.cookiejar.Cookie] = super()._cookies_for_request(request)  # type: ignore[misc]
        set_by_site = {cookie.name for cookie in cookies if not _from_blob(cookie)}
        return [cookie for cookie in cookies if not _from_blob(cookie) or cookie.name not in set_by_site]

    def value_for(self, url: str, name: str) -> str | None:
        """The value of the cookie ``name`` that a request to ``url`` would send, or None (for a header that echoes
        a cookie, such as weibo.com's ``X-XSRF-TOKEN``: the value sent, not another host's)."""
        request = urllib.request.Request(url)
        with self._cookies_lock:  # type: ignore[attr-defined]
            self._policy._now = self._now = int(time.time())  # type: ignore[attr-defined]
            cookies = self._cookies_for_request(request)
        return next((cookie.value for cookie in cookies if cookie.name == name and cookie.value), None)

    def refreshed(self, cookies: Mapping[str, str], url: str) -> dict[str, str]:
        """``cookies`` (an account's blob) with the values the site has since set for ``url`` to outlive the session:
        a cookie with an expiry, as a login's are (a session cookie, such as weibo.com's ``XSRF-TOKEN``, dies with
        the session in a browser too, and is left as the blob has it). Names the blob does not have are not added."""
        request = urllib.request.Request(url)
        with self._cookies_lock:  # type: ignore[attr-defined]
            self._policy._now = self._now = int(time.time())  # type: ignore[attr-defined]
            sent = self._cookies_for_request(request)
        kept = {cookie.name: cookie.value for cookie in sent if not _from_blob(cookie) and not cookie.discard}
        return {name: kept.get(name) or value for name, value in cookies.items()}

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
