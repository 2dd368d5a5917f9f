"""What the desktop and mobile Weibo sites share: one post text, marked up two ways, and the session check.

The two front-ends show the same posts (same mids), so only the markup differs: each site passes a
``WeiboMarkup`` with its own topic, emoji and "read more" renderings.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import quote

from sandbox.content import SimPost, beijing
from sandbox.web import SimRequest

__all__ = ["LONG_TEXT_CUT", "WeiboMarkup", "has_weibo_session", "rfc2822_beijing", "text_html", "topic_query"]

#: Characters of a long post shown before the "全文" / "展开全文" link.
LONG_TEXT_CUT = 40
_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


@dataclass(frozen=True)
class WeiboMarkup:
    topic: Callable[[str], str]
    emoji: Callable[[str], str]
    more: Callable[[SimPost], str]


def topic_query(topic: str) -> str:
    return quote(topic, safe="")


def text_html(post: SimPost, markup: WeiboMarkup, *, full: bool) -> str:
    """The post text as the site's HTML; long posts are cut unless ``full``."""
    body = post.text
    if post.long_text and not full:
        body = body[:LONG_TEXT_CUT]
    parts = [markup.topic(post.topic)] if post.topic else []
    parts.append(html.escape(body))
    if post.emoji and (full or not post.long_text):
        parts.append(markup.emoji(post.emoji))
    if post.long_text and not full:
        parts.append(markup.more(post))
    return "".join(parts)


def rfc2822_beijing(ms: int) -> str:
    """``Tue Jun 08 09:35:04 +0800 2021``, independent of the process locale."""
    when = beijing(ms)
    return f"{_DAYS[when.weekday()]} {_MONTHS[when.month - 1]} {when:%d %H:%M:%S} +0800 {when.year}"


def has_weibo_session(request: SimRequest) -> bool:
    """A logged-in Weibo request carries a non-empty ``SUB`` cookie."""
    return bool(request.cookies.get("SUB"))
