"""The small HTTP vocabulary the sites are written in: a parsed request, a response, the ``Site`` interface, and
helpers every site shares (PHP-style JSON, paging). Keeping sites on plain values means the renderers are
tested without sockets and the server is the only place that touches them."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

__all__ = ["OpenSite", "SimRequest", "SimResponse", "Site", "page_count", "page_slice", "php_json"]


@dataclass
class SimRequest:
    """One request to a site, with the site prefix stripped from ``path``."""

    method: str
    path: str
    query: dict[str, str]
    headers: Mapping[str, str]
    cookies: dict[str, str]
    form: dict[str, str]
    now_ms: int

    def int_param(self, name: str, default: int) -> int:
        """A numeric query parameter; junk and absence give ``default`` (like PHP's intval)."""
        try:
            return int(self.query.get(name, ""))
        except ValueError:
            return default


@dataclass
class SimResponse:
    status: int = 200
    body: bytes = b""
    content_type: str = "text/html; charset=utf-8"
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def html(cls, text: str, status: int = 200) -> SimResponse:
        return cls(status, text.encode("utf-8"))

    @classmethod
    def json(cls, obj: Any, *, php: bool = False, content_type: str = "application/json; charset=utf-8") -> SimResponse:
        """``php=True`` mimics PHP's json_encode: ASCII only (\\uXXXX) and escaped slashes, compact."""
        text = php_json(obj) if php else json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
        return cls(200, text.encode("utf-8"), content_type)

    @classmethod
    def redirect(cls, location: str) -> SimResponse:
        return cls(302, b"", headers={"Location": location})

    @classmethod
    def not_found(cls) -> SimResponse:
        return cls(404, b"<html><body><h1>404 Not Found</h1></body></html>")


def php_json(obj: Any) -> str:
    """Compact JSON with ``\\uXXXX`` for non-ASCII and ``\\/`` for slashes, as PHP and Weibo emit it."""
    return json.dumps(obj, ensure_ascii=True, separators=(",", ":")).replace("/", "\\/")


def page_count(total: int, per_page: int) -> int:
    return (total + per_page - 1) // per_page


def page_slice[T](items: Sequence[T], page: int, per_page: int) -> list[T]:
    """Items of 1-based ``page``; empty past the end or for page < 1."""
    if page < 1:
        return []
    return list(items[(page - 1) * per_page : page * per_page])


class Site(Protocol):
    """One fake site under ``/<prefix>``. ``handle`` must not sleep or misbehave: the server does that."""

    prefix: ClassVar[str]

    def target_of(self, request: SimRequest) -> str:
        """The uid or product id a request is about ("" if none), for per-target misbehaviour."""
        ...

    def logged_in(self, request: SimRequest) -> bool:
        """Whether the request carries a session this site accepts (checked only under a login wall)."""
        ...

    def login_wall(self, request: SimRequest) -> SimResponse | None:
        """What a request without a session gets under a login wall; None lets it through (login pages)."""
        ...

    def handle(self, request: SimRequest) -> SimResponse: ...

    # Optional: ``ban_answer(kind, now_s) -> SimResponse``, the site's own refusal for the ``ban_rate``
    # misbehaviour (``kind``: "busy" or "frozen"); a site without one answers with Weibo's interstitial.
    # Optional: ``new_layout(response) -> SimResponse``, the page ``handle`` made as the site shows it after a change
    # our parser does not read (the ``new_layout`` misbehaviour, refused for a site without one).


class OpenSite:
    """The ``Site`` methods of a site without logins or per-target misbehaviour: inherit it and write ``prefix``
    and ``handle`` (override ``target_of`` to let misbehaviour rules pick targets)."""

    def target_of(self, request: SimRequest) -> str:
        return ""

    def logged_in(self, request: SimRequest) -> bool:
        return True

    def login_wall(self, request: SimRequest) -> SimResponse | None:
        return None
