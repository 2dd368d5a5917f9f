"""The cookie blob of a leased account (``Task.account.cookie_blob``) and the site its cookies are for: pure
parsing, shared by the client's sessions (``crawler_client.transport``), which send it, and the scheduler's account
pool (``scheduler_server.accounts``), which checks a login the site refreshed before leasing it and keeps each
site's refresh apart.

A blob is any of:

* empty: no cookies (sources that need no login);
* a JSON object ``{"cookies": {...} | "a=1; b=2", "username": "...", "password": "..."}``; every key is
  optional; ``username``/``password`` are form-login credentials (ECSHOP) that override the settings;
* a flat JSON object of cookie names to string values, ``{"SUB": "...", "SUBP": "..."}``;
* a ``Cookie:`` header string, with or without the ``Cookie:`` prefix: ``SUB=...; SUBP=...``.
"""

from __future__ import annotations

import ipaddress
import json
import urllib.parse
from dataclasses import dataclass, field

from icecrawler.errors import FetchError
from icecrawler.models import Outcome

__all__ = ["AccountBlob", "format_cookie_blob", "parse_cookie_blob", "site_domain"]

#: Public suffixes of two labels a crawled site may be registered under (``shop.example.com.cn``); a site under
#: another such suffix gets its blob scoped one label too wide, which is no wider than a blob without a domain.
_TWO_LABEL_SUFFIXES = frozenset(
    {"com.cn", "net.cn", "org.cn", "gov.cn", "edu.cn", "ac.cn", "com.hk", "com.tw", "org.tw", "co.uk", "org.uk"}
    | {"co.jp", "ne.jp", "or.jp", "com.au", "net.au", "co.kr", "com.sg", "com.my", "co.nz", "com.br"}
)


@dataclass(frozen=True)
class AccountBlob:
    """What a leased account's cookie blob holds (see the module docstring for the accepted forms)."""

    cookies: dict[str, str] = field(default_factory=dict)
    username: str = ""
    password: str = ""

    def __repr__(self) -> str:  # secrets never reach logs
        return f"AccountBlob(cookies=<{len(self.cookies)}>, username={self.username!r}, password=<hidden>)"


def _parse_cookie_header(text: str) -> dict[str, str]:
    body = text.strip()
    if body.lower().startswith("cookie:"):
        body = body[len("cookie:") :]
    cookies: dict[str, str] = {}
    for part in body.split(";"):
        part = part.strip()
        if not part:
            continue
        name, sep, value = part.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"cookie header part {part[:40]!r} is not name=value")
        cookies[name.strip()] = value.strip()
    return cookies


def parse_cookie_blob(blob: str) -> AccountBlob:
    """Parse a cookie blob; raises ``FetchError(LoginRequired, error_class="bad-cookie-blob")`` when it is
    malformed, because an account whose cookies cannot be read is as good as logged out."""
    text = blob.strip()
    if not text:
        return AccountBlob()
    try:
        if text.startswith("{"):
            data = json.loads(text)
            if not isinstance(data, dict):
                raise ValueError("JSON cookie blob must be an object")
            known = {"cookies", "username", "password"}
            if known & data.keys():
                unknown = sorted(set(data) - known)
                if unknown:
                    raise ValueError(f"unknown key(s) {unknown} (known: {sorted(known)})")
                raw = data.get("cookies", {})
                cookies = _parse_cookie_header(raw) if isinstance(raw, str) else raw
                username, password = data.get("username", ""), data.get("password", "")
            else:
                cookies, username, password = data, "", ""
            if not isinstance(cookies, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in cookies.items()
            ):
                raise ValueError("cookies must map names to string values")
            if not isinstance(username, str) or not isinstance(password, str):
                raise ValueError("username and password must be strings")
            return AccountBlob(dict(cookies), username, password)
        return AccountBlob(_parse_cookie_header(text))
    except RecursionError:  # JSON nested past the interpreter's depth: a report's refresh can be ~16 KB of brackets
        raise FetchError(
            "unreadable cookie blob: its JSON nests too deeply",
            outcome=Outcome.LoginRequired,
            error_class="bad-cookie-blob",
        ) from None
    except ValueError as exc:  # json.JSONDecodeError is a ValueError
        raise FetchError(
            f"unreadable cookie blob: {exc}", outcome=Outcome.LoginRequired, error_class="bad-cookie-blob"
        ) from exc


def format_cookie_blob(blob: AccountBlob) -> str:
    """A blob ``parse_cookie_blob`` reads back as ``blob``: a ``Cookie`` header string, or the JSON object when it
    carries form-login credentials."""
    header = "; ".join(f"{name}={value}" for name, value in blob.cookies.items())
    if not blob.username and not blob.password:
        return header
    return json.dumps({"cookies": header, "username": blob.username, "password": blob.password}, ensure_ascii=False)


def site_domain(url: str) -> str:
    """The cookie domain of the site ``url`` is on, for an account's blob: its registrable domain with a leading dot
    (``https://m.weibo.cn`` → ``.weibo.cn``), an IP address as it is, a host of one label as ``http.cookiejar`` names
    it (``localhost.local``); "" when ``url`` names no host or an IPv6 one (the cookies then go to every host). A
    bare ``host[:port]`` is read as ``//host[:port]``. The client scopes a blob's cookies to it; the scheduler keeps
    a site's refresh of a login for that site alone."""
    host = (urllib.parse.urlsplit(url if "//" in url else f"//{url}").hostname or "").rstrip(".").lower()
    if not host or ":" in host:
        return ""
    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        pass
    else:
        return host
    labels = host.split(".")
    if len(labels) == 1:
        return f"{host}.local"
    keep = 3 if len(labels) >= 3 and ".".join(labels[-2:]) in _TWO_LABEL_SUFFIXES else 2
    return "." + ".".join(labels[-keep:])
