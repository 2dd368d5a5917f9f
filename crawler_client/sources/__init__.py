"""The four real sources behind one small interface (``base.Source``), and the registry the client uses.

    source = get_source("weibo_mobile")
    request = source.first_request(task, settings.get_str("sources.weibo_mobile.base_url"))
    page = source.parse(task, request, fetched, now_ms)      # ParsedPage, or FetchError/ParseError
    stop = any(source.is_older_or_equal(item, task.cursor) for item in page.items)
    cursor = source.newest_cursor(page.items, task.cursor)

Source-specific helpers the runtime calls directly: ``extend_request`` / ``parse_extend`` / ``with_long_text``
on both Weibo sources (full text of the posts named in ``ParsedPage.info["long_text_ids"]``: m.weibo.cn
``statuses/extend``, weibo.com ``p/aj/mblog/getlongtext``), ``ecshop.login_request`` / ``is_logged_in`` /
``shows_login_wall`` (member login). ``samples.bench_cases()`` gives generated pages for the client bench.
"""

from __future__ import annotations

from crawler_client.sources.base import FetchedPage, Item, PageRequest, ParsedPage, Source
from crawler_client.sources.ecshop import EcshopSource
from crawler_client.sources.jd import JdSource
from crawler_client.sources.weibo_mobile import WeiboMobileSource
from crawler_client.sources.weibo_pc import WeiboPcSource
from icecrawler.errors import ConfigError

__all__ = [
    "SOURCES",
    "EcshopSource",
    "FetchedPage",
    "Item",
    "JdSource",
    "PageRequest",
    "ParsedPage",
    "Source",
    "WeiboMobileSource",
    "WeiboPcSource",
    "get_source",
]

#: Source name (the middle part of a task id) → its class.
SOURCES: dict[str, type[Source]] = {
    WeiboPcSource.name: WeiboPcSource,
    WeiboMobileSource.name: WeiboMobileSource,
    EcshopSource.name: EcshopSource,
    JdSource.name: JdSource,
}


def get_source(name: str) -> Source:
    """A fresh instance of the named source; ``ConfigError`` (a ValueError) naming the known ones otherwise."""
    try:
        return SOURCES[name]()
    except KeyError:
        raise ConfigError(f"unknown source {name!r} (known: {', '.join(sorted(SOURCES))})") from None
