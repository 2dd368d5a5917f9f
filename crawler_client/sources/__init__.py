"""The real sources behind one small interface (``base.Source``), and the registry the client uses.

Each public module here that defines ``SOURCE`` is one source: its class declares the site (``spec``, an
``icecrawler.sourcespec.SourceSpec``) and reads its own saved answers (``base.SavedPages``); the registry finds
it by name, so adding a source adds one module (CONTRIBUTING.md, "Adding a source").

    source = get_source("weibo_mobile")
    request = source.first_request(task, settings.get_str("sources.weibo_mobile.base_url"))
    page = source.parse(task, request, fetched, now_ms)      # ParsedPage, or FetchError/ParseError
    stop = any(source.is_older_or_equal(item, task.cursor) for item in page.items)
    cursor = source.newest_cursor(page.items, task.cursor)

Source-specific helpers the runtime calls directly: ``extend_request`` / ``parse_extend`` / ``with_long_text``
on the Weibo sources (full text of the posts named in ``ParsedPage.info["long_text_ids"]``: m.weibo.cn
``statuses/extend``, weibo.com ``ajax/statuses/longtext`` and the legacy ``p/aj/mblog/getlongtext``),
``ecshop.login_request`` / ``is_logged_in`` / ``shows_login_wall`` (member login).

This package parses; it renders no page. Each site's format is rendered in one place, the sandbox's
``sandbox/sites/<name>.py``, and the tests and benchmarks take their generated pages from there
(``sandbox.samples``); the import-linter layers keep this package from importing the sandbox.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import cast

from crawler_client.sources.base import DeclaredSource, FetchedPage, Item, PageRequest, ParsedPage, Source
from icecrawler.settings import Settings
from icecrawler.sourcespec import registry

__all__ = [
    "SOURCES",
    "DeclaredSource",
    "FetchedPage",
    "Item",
    "PageRequest",
    "ParsedPage",
    "Source",
    "get_source",
    "registry",
    "source_options",
]


class _SourceClasses(Mapping[str, type[DeclaredSource]]):
    """Source name → its class, as the registry (``icecrawler.sourcespec``) found them: every module of this
    package that defines ``SOURCE``, and those named in ``ICECRAWLER_SOURCE_MODULES``."""

    def __getitem__(self, name: str) -> type[DeclaredSource]:
        if name not in registry:
            raise KeyError(name)
        return cast("type[DeclaredSource]", registry.source_class(name))

    def __iter__(self) -> Iterator[str]:
        return iter(registry)

    def __len__(self) -> int:
        return len(registry)


#: Source name (the middle part of a task id) → its class.
SOURCES: Mapping[str, type[DeclaredSource]] = _SourceClasses()


def get_source(name: str, options: Mapping[str, str] | None = None) -> DeclaredSource:
    """A fresh instance of the named source; ``ConfigError`` (a ValueError) naming the known ones otherwise.
    ``options``: ``sources.<name>.*`` settings; those the class lists in its ``OPTIONS`` (e.g. JD's
    ``endpoint``) are passed to it, the others ignored."""
    cls = cast("type[DeclaredSource]", registry.source_class(name))
    wanted = getattr(cls, "OPTIONS", ())
    return cls(**{key: str(value) for key, value in (options or {}).items() if key in wanted})


def source_options(settings: Settings, name: str) -> dict[str, str]:
    """The ``sources.<name>.*`` settings as text (what ``get_source`` takes as ``options``)."""
    return {key: str(value) for key, value in settings.with_prefix(f"sources.{name}").items()}
