"""How each source's items order, so the runtime's generic incremental stop can say "we already have this".

The runtime keeps ``Task.cursor`` = ``source.cursor_of(newest item of the last crawl)`` and stops a crawl at
the first item with ``source.is_older_or_equal(item, task.cursor)``. Three orders exist:

* **Posts** (both Weibo sources): the cursor is the post's mid as a decimal string. Weibo mids grow with
  time, so ``int(post.id) <= int(cursor)`` means "seen". Pinned posts (``Post.pinned``) come first and out of
  date order: they never end a walk ("older" is never said of them), but their mid counts like any other in
  ``newest_cursor``: an old one cannot lower it, and one the account has just published and pinned is new once,
  not at every visit. Nothing between the old cursor and it is passed over: the walk went on below it down to the
  old cursor (or a page-cap gap keeps the cursor where it was until it is closed: ``crawler_client.gaps``).
* **Reviews** (ECSHOP, JD time order): ``"{created_at}|{id}"`` — ISO 8601 +08:00 strings compare in time
  order. A review is seen when it is strictly older than the cursor's time, or is the cursor's own review
  (reviews from the same second are kept: the store deduplicates by id).
* **Listings** (ECSHOP, items are product-id strings): no order, so a string item is never "older" and
  leaves no cursor; every listing crawl walks all pages (up to the runtime's page cap).
"""

from __future__ import annotations

from collections.abc import Iterable

from icecrawler.models import Post, Review

__all__ = ["PostOrder", "ReviewOrder"]

Item = Post | Review | str


class PostOrder:
    """Cursor semantics for Weibo posts (mid order; a pinned post never ends a walk)."""

    @staticmethod
    def cursor_of(item: Item) -> str:
        """The cursor an item leaves behind: its mid."""
        return str(item.id) if isinstance(item, Post) else ""

    @staticmethod
    def is_older_or_equal(item: Item, cursor: str) -> bool:
        """True when ``item`` is at or behind ``cursor``; never for pinned posts or an empty cursor."""
        if not isinstance(item, Post) or item.pinned or not cursor.isdigit():
            return False
        return item.id <= int(cursor)

    @classmethod
    def newest_cursor(cls, items: Iterable[Item], current: str = "") -> str:
        """The cursor to store after a crawl: the highest mid seen, a pinned post's too (or ``current``). Leaving a
        pinned post out made one newer than the rest (an account pinning what it has just published) new at every
        visit until the account posted again."""
        best = int(current) if current.isdigit() else -1
        for item in items:
            if isinstance(item, Post):
                best = max(best, item.id)
        return str(best) if best >= 0 else current


class ReviewOrder:
    """Cursor semantics for reviews listed newest first (``created_at`` then id)."""

    @staticmethod
    def cursor_of(item: Item) -> str:
        """The review's time and id (listing strings leave no cursor)."""
        return f"{item.created_at}|{item.id}" if isinstance(item, Review) else ""

    @staticmethod
    def is_older_or_equal(item: Item, cursor: str) -> bool:
        """Strictly older than the cursor's time, or the cursor's own review."""
        if not isinstance(item, Review) or not cursor:
            return False
        created_at, _, review_id = cursor.rpartition("|")
        if item.id == review_id:
            return True
        return bool(created_at and item.created_at) and item.created_at < created_at

    @classmethod
    def newest_cursor(cls, items: Iterable[Item], current: str = "") -> str:
        """The cursor of the newest dated review seen (or ``current``)."""
        best = current
        for item in items:
            if isinstance(item, Review) and item.created_at:
                candidate = cls.cursor_of(item)
                if not best or candidate.rpartition("|")[0] > best.rpartition("|")[0]:
                    best = candidate
        return best
