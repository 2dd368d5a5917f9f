"""The one small interface every source implements: build requests for a task, classify a response (bans,
logins, busy pages), and parse it into items plus paging info. Sources are pure: no I/O, no clock reads
(``now`` is passed in), so they are tested with saved bytes and fuzzed without a network.

The client runtime (``crawler_client.crawl``) drives a source:

    request = source.first_request(task, base_url)
    while request and pages < cap:
        raw = fetch(request)                            # I/O lives in the runtime
        page = source.parse(task, request, raw, now)    # raises FetchError/ParseError, never anything else
        ...stop at task.cursor, follow page.next_request...
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Protocol

from icecrawler.models import Post, Review, Task, TaskKind
from icecrawler.sourcespec import SourceSpec

__all__ = [
    "LONG_TEXT_GONE",
    "DeclaredSource",
    "FetchedPage",
    "FormLogin",
    "Item",
    "PageRequest",
    "ParsedPage",
    "SavedPages",
    "Source",
    "SourceSpec",
    "sniff",
]

#: The ``error_class`` of a long-text answer saying the post is gone (deleted since its timeline page was read):
#: the crawl keeps the post's truncated text instead of failing (``crawler_client.crawl``).
LONG_TEXT_GONE = "long-text-gone"

#: What a page yields: posts (Weibo), reviews (ECSHOP, JD) or discovered product ids (listing pages).
Item = Post | Review | str


@dataclass
class PageRequest:
    """One HTTP request, with the real site's path and query under the configured base URL."""

    url: str
    params: dict[str, str] = field(default_factory=dict)
    method: str = "GET"
    data: dict[str, str] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    #: 1-based page number within this crawl (the runtime caps it).
    page: int = 1
    #: Source-private paging state carried to the next request (e.g. Weibo PC's pagebar chunk).
    state: dict[str, str] = field(default_factory=dict)
    #: Headers whose value is a session cookie's, set by the transport when the jar holds it (header name →
    #: cookie name, e.g. weibo.com's ``X-XSRF-TOKEN`` ← ``XSRF-TOKEN``): sources never see cookies.
    cookie_headers: dict[str, str] = field(default_factory=dict)


@dataclass
class FetchedPage:
    """A response as bytes: decoding is the source's job (many ban pages are GBK bytes that claim utf-8)."""

    url: str
    status: int
    headers: Mapping[str, str]
    body: bytes
    #: The final URL after redirects (login walls and visitor systems show up here).
    final_url: str = ""


@dataclass
class ParsedPage:
    items: list[Item]
    next_request: PageRequest | None = None
    #: Total pages the site reports (countPage, page_count, maxPage), if it says.
    total_pages: int | None = None
    #: Source-specific facts worth printing in ``icecrawler parse`` (since_id, record_count, ...).
    info: dict[str, str] = field(default_factory=dict)


class Source(Protocol):
    """A site we crawl. One module per source in ``crawler_client.sources``."""

    name: ClassVar[str]
    kinds: ClassVar[frozenset[TaskKind]]
    #: What the site's own web client sends with these requests (``sources.<name>.headers`` changes them).
    default_headers: ClassVar[dict[str, str]]

    def first_request(self, task: Task, base_url: str) -> PageRequest:
        """The newest-first first page for ``task`` under ``base_url``."""
        ...

    def parse(self, task: Task, request: PageRequest, page: FetchedPage, now_ms: int) -> ParsedPage:
        """Classify then parse ``page``. Raises ``FetchError`` (ban, login, busy, not found...) or
        ``ParseError`` (garbage); every other input yields a ParsedPage."""
        ...

    # Incremental stop (see ``crawler_client.sources._cursor`` for each source's order):
    def cursor_of(self, item: Item) -> str:
        """The ``Task.cursor`` value ``item`` leaves behind ("" for items without an order)."""
        ...

    def is_older_or_equal(self, item: Item, cursor: str) -> bool:
        """True once ``item`` is at or behind ``cursor`` (never for pinned posts or an empty cursor)."""
        ...

    def newest_cursor(self, items: Iterable[Item], current: str = "") -> str:
        """The cursor to keep after a crawl: the newest orderable item's (pinned posts skipped), or ``current``."""
        ...


class DeclaredSource(Source, Protocol):
    """A source as the registry holds it: the crawl interface, its declaration (``icecrawler.sourcespec``), and
    what ``icecrawler parse`` asks about a saved answer (no task at hand; ``SavedPages`` has the defaults)."""

    spec: ClassVar[SourceSpec]

    def saved_kind(self, body: bytes) -> TaskKind: ...

    def saved_target(self, kind: TaskKind, body: bytes) -> str: ...

    def saved_request(self, task: Task, base_url: str, body: bytes, page: int, chunk: int | None) -> PageRequest: ...


@dataclass(frozen=True)
class FormLogin:
    """A member login form (a source whose spec says ``login="form"`` has one as ``form_login``), from pure
    helpers: build the login POST from (base_url, username, password), tell whether an answer shows a member."""

    request: Callable[[str, str, str], PageRequest]
    succeeded: Callable[[FetchedPage], bool]


class SavedPages:
    """What ``icecrawler parse`` asks a source about a saved answer, with the defaults most sources keep:
    the declared default kind, the target from the first of ``sniffers`` that matches, the first request with
    ``page`` set. A source whose answers tell more (a profile, a comment pager) overrides these.

    A subclass that sets ``spec`` gets its ``name`` and ``kinds`` from it, so the two cannot drift apart."""

    spec: ClassVar[SourceSpec]
    name: ClassVar[str]
    kinds: ClassVar[frozenset[TaskKind]]
    #: Byte patterns whose first group is the target (uid, product id) a saved answer is about.
    sniffers: ClassVar[tuple[re.Pattern[bytes], ...]] = ()

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        spec = cls.__dict__.get("spec")
        if isinstance(spec, SourceSpec):
            cls.name = spec.name
            cls.kinds = spec.kinds

    def first_request(self, task: Task, base_url: str) -> PageRequest:
        raise NotImplementedError

    def saved_kind(self, body: bytes) -> TaskKind:
        """The task kind a saved answer was fetched for."""
        return self.spec.default_kind

    def saved_target(self, kind: TaskKind, body: bytes) -> str:
        """The target the bytes name ("" when they do not say)."""
        return sniff(self.sniffers, body)

    def saved_request(self, task: Task, base_url: str, body: bytes, page: int, chunk: int | None) -> PageRequest:
        """The request a saved answer answers: the first one, moved to ``page``."""
        page = page or 1
        request = self.first_request(task, base_url)
        if page > 1:
            request.params["page"] = str(page)
        request.page = page
        return request


def sniff(patterns: Iterable[re.Pattern[bytes]], body: bytes) -> str:
    """The first group of the first pattern that matches the first MiB of ``body`` ("" when none does)."""
    for pattern in patterns:
        match = pattern.search(body[: 1 << 20])
        if match:
            return match[1].decode("ascii")
    return ""
