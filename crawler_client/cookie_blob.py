"""The cookie blob of a leased account (``Task.account.cookie_blob``, opaque to everyone but the client's HTTP
layer): pure parsing, apart from the sessions that use it (``crawler_client.transport``).

A blob is any of:

* empty: no cookies (sources that need no login);
* a JSON object ``{"cookies": {...} | "a=1; b=2", "username": "...", "password": "..."}``; every key is
  optional; ``username``/``password`` are form-login credentials (ECSHOP) that override the settings;
* a flat JSON object of cookie names to string values, ``{"SUB": "...", "SUBP": "..."}``;
* a ``Cookie:`` header string, with or without the ``Cookie:`` prefix: ``SUB=...; SUBP=...``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from icecrawler.errors import FetchError
from icecrawler.models import Outcome

__all__ = ["AccountBlob", "format_cookie_blob", "parse_cookie_blob"]


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
