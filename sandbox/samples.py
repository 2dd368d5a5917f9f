"""Sample pages of every source for the parser tests and the client benchmark, rendered by the sites' renderers.

Nothing here writes markup: it only chooses the data (how many posts or reviews, which ones, pinned or not, the
cursor, the pager) and hands it to the pure renderers in ``sandbox.sites.<source>``, the functions the running
sandbox serves its pages with. So a parser tested on these pages is tested on what the sandbox serves, and a
format lives in one place. Items come from ``sandbox.content`` like the world's; everything is deterministic for
a given ``seed`` and dated against ``SAMPLE_NOW_MS``.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from icecrawler.clock import BEIJING
from sandbox.content import SimPost, SimReview, item_rng, make_post, make_review
from sandbox.sites import ecshop, jd, weibo_mobile, weibo_pc, weibo_web

__all__ = [
    "SAMPLE_NOW_MS",
    "ecshop_comment_json",
    "ecshop_goods_page",
    "jd_comments",
    "mbloglist_chunk",
    "mbloglist_page",
    "mobile_timeline",
    "sample_posts",
    "sample_reviews",
    "web_timeline",
]

#: The fixed "fetch time" the samples are dated against: 2021-07-06 12:00:00 +08:00.
SAMPLE_NOW_MS = int(datetime(2021, 7, 6, 12, 0, tzinfo=BEIJING).timestamp() * 1000)
#: A user's post count as the timelines report it (larger than any sample page).
_STATUSES = 582
_HOUR_MS = 3_600_000
_PINNED_AGE_MS = 40 * 24 * _HOUR_MS


def sample_posts(uid: int, count: int, *, first: int = 0, seed: int = 0, now_ms: int = SAMPLE_NOW_MS) -> list[SimPost]:
    """Posts ``first`` .. ``first + count - 1`` of ``uid``'s timeline, newest first, one an hour from 3 hours
    before ``now_ms``: every 5th (from the 4th) a repost, every 7th (from the 3rd) a long text; topics, emoji,
    pictures and zero or huge counts as ``sandbox.content`` draws them."""
    name = f"用户{uid % 10_000}"
    posts = []
    for index in range(first, first + count):
        created_ms = now_ms - (3 + index) * _HOUR_MS
        rng = item_rng(seed, "sample", uid, index)
        long_text, retweet = index % 7 == 2, index % 5 == 3
        posts.append(make_post(rng, uid, name, uid, index + 1, created_ms, long_text=long_text, retweet=retweet))
    return posts


def _pinned_post(uid: int, seed: int) -> SimPost:
    """An older post pinned on top of page 1 (out of date order); 999 is a post number no sample page reaches."""
    (post,) = sample_posts(uid, 1, first=999, seed=seed, now_ms=SAMPLE_NOW_MS - _PINNED_AGE_MS)
    return replace(post, pinned=True)


def _timeline(uid: int, posts: int, pinned: bool, seed: int) -> list[SimPost]:
    """Page 1 of ``posts`` posts: the pinned post first (when ``pinned``), then the newest."""
    top = [_pinned_post(uid, seed)] if pinned and posts else []
    return top + sample_posts(uid, posts - len(top), seed=seed)


def sample_reviews(
    product: str, count: int, *, first: int = 0, with_id: bool = True, seed: int = 0, now_ms: int = SAMPLE_NOW_MS
) -> list[SimReview]:
    """Reviews ``first`` .. ``first + count - 1`` of ``product``, newest first, one an hour before ``now_ms``;
    ``with_id=False`` for sites without review ids (ECSHOP)."""
    reviews = []
    for index in range(first, first + count):
        rng = item_rng(seed, "sample", product, index)
        created_ms = now_ms - (1 + index) * _HOUR_MS
        reviews.append(make_review(rng, product, int(product) % 10_000, 1000 - index, created_ms, with_id=with_id))
    return reviews


# --- Weibo ----------------------------------------------------------------------------------------------------


def mbloglist_chunk(
    uid: int = 1163218074,
    page: int = 1,
    chunk: int = 0,
    *,
    posts: int = weibo_pc.CHUNK_SIZE,
    count_page: int = 18,
    seed: int = 0,
    domain: str = "100505",
) -> bytes:
    """One weibo_pc ``mbloglist`` response: ``posts`` posts of chunk ``chunk`` (0-2) of visible page ``page``, with
    the lazy-load placeholder (chunks 0, 1) or the pager of ``count_page`` pages (chunk 2)."""
    first = ((page - 1) * weibo_pc.CHUNKS_PER_PAGE + chunk) * weibo_pc.CHUNK_SIZE
    shown = sample_posts(uid, posts, first=first, seed=seed)
    fragment = weibo_pc.chunk_html(
        shown, uid=uid, domain=domain, page=page, chunk=chunk, pages=count_page, now_ms=SAMPLE_NOW_MS
    )
    return weibo_pc.mbloglist_body(fragment)


def mbloglist_page(uid: int = 1163218074, page: int = 1, *, count_page: int = 18, seed: int = 0) -> list[bytes]:
    """The three chunks (15 + 15 + 15 = 45 posts) of visible page ``page``."""
    return [mbloglist_chunk(uid, page, chunk, count_page=count_page, seed=seed) for chunk in range(3)]


def mobile_timeline(
    uid: int = 1907518591,
    *,
    posts: int = weibo_mobile.PAGE_SIZE,
    pinned: bool = True,
    cursor: str = "page",
    next_value: int = 2,
    seed: int = 0,
) -> bytes:
    """An m.weibo.cn getIndex timeline page of ``posts`` posts (a pinned older one first when ``pinned``);
    ``cursor`` is "page" or "since_id" (its value ``next_value``), or "" for the last page."""
    cursor_value = {cursor: next_value} if cursor else {}
    return weibo_mobile.timeline_body(
        _timeline(uid, posts, pinned, seed),
        containerid=f"{weibo_mobile.TIMELINE_PREFIX}{uid}",
        total=_STATUSES,
        cursor=cursor_value,
    )


def web_timeline(
    uid: int = 1669879400,
    *,
    posts: int = weibo_web.PAGE_SIZE,
    pinned: bool = True,
    since_id: bool = True,
    seed: int = 0,
) -> bytes:
    """A weibo.com ``/ajax/statuses/mymblog`` page of ``posts`` posts (a pinned older one first when
    ``pinned``); ``since_id`` points at the next page's first post, or is left out (paging by ``page``)."""
    shown = _timeline(uid, posts, pinned, seed)
    following = sample_posts(uid, 1, first=sum(1 for post in shown if not post.pinned), seed=seed)[0]
    return weibo_web.mymblog_body(shown, total=_STATUSES, since_id=f"{following.mid}kp2" if since_id else None)


# --- shops ----------------------------------------------------------------------------------------------------


def _ecshop_comments(goods_id: int, page: int, comments: int, record_count: int, page_count: int, seed: int) -> str:
    shown = sample_reviews(str(goods_id), comments, first=(page - 1) * comments, with_id=False, seed=seed)
    return ecshop.comments_html(str(goods_id), shown, page=page, pages=page_count, total=record_count)


def ecshop_goods_page(
    goods_id: int = 42, *, comments: int = 5, record_count: int = 23, page_count: int = 5, seed: int = 0
) -> bytes:
    """ECSHOP's ``goods.php?id=N`` with page 1 of ``page_count`` (``comments`` of ``record_count`` comments)."""
    fragment = _ecshop_comments(goods_id, 1, comments, record_count, page_count, seed)
    return ecshop.goods_html(str(goods_id), f"商品{goods_id}", 3, fragment).encode()


def ecshop_comment_json(
    goods_id: int = 42,
    page: int = 2,
    *,
    comments: int = 5,
    record_count: int = 23,
    page_count: int = 5,
    seed: int = 0,
) -> bytes:
    """ECSHOP's ``comment.php?act=gotopage`` answer for page ``page`` of ``page_count``."""
    return ecshop.gotopage_body(_ecshop_comments(goods_id, page, comments, record_count, page_count, seed))


def jd_comments(
    sku: int = 100012043978,
    *,
    comments: int = 10,
    page: int = 0,
    max_page: int = 100,
    jsonp: bool = True,
    seed: int = 0,
) -> bytes:
    """JD's ``productPageComments.action`` page ``page`` (0-based) of ``max_page``, as JSONP (the
    ``fetchJSON_comment98`` callback) or plain JSON; the summary counts a million more good reviews."""
    product = str(sku)
    shown = sample_reviews(product, comments, first=page * comments, seed=seed)
    text = jd.comments_json(shown, product, summary=jd.summary_json(product, shown, 1_000_000), max_page=max_page)
    return jd.jsonp("fetchJSON_comment98", text) if jsonp else text.encode()
