"""weibo.com as its web client reads it today: the JSON API ``/ajax/statuses/mymblog?uid={uid}&page={n}&feature=0``.

Answer: ``{"ok": 1, "data": {"list": [mblog, ...], "since_id": ..., "total": N}}``. Paging follows the answer:
when it carries a non-empty ``since_id`` the next request passes it back (with ``page`` + 1, as the web client
does); a ``since_id`` that is present but empty or 0 ends the timeline; without the key we page by ``page``
while pages have posts. An empty list, ``{"ok": 1}`` without ``data`` (what the site answers past the end) or
``ok: 0`` after the first page ends it too (in an incremental crawl, Busy first: ``check_end_after_cursor``); ``ok: 0``
on the first page is NotFound.

Posts: ``id``/``idstr``/``mid`` (the same mid as m.weibo.cn's, so a post is one storage row whichever Weibo
source fetched it), ``mblogid`` (the base62 id of its URL), ``text`` (HTML) and ``text_raw`` (plain),
``created_at`` (``Sat Jun 05 12:00:00 +0800 2021``), counts, pictures as ``pic_ids`` + a ``pic_infos`` map,
``retweeted_status``, and pinned posts (``isTop``, ``mblogtype`` 2, a "置顶" title) first and out of order.
An ``/ajax/statuses/show?id=`` answer (one post, at the top level or under ``data``) parses to that post.

Long posts (``isLongText``) are truncated: their ids go to ``ParsedPage.info["long_text_ids"]`` and
``extend_request`` asks ``/ajax/statuses/longtext?id={mblogid}`` for the full text (plain text with newlines).

Sessions: the API needs a session cookie (a login, or a visitor ``SUB``/``SUBP`` from the passport visitor
flow); the web client sends ``X-XSRF-TOKEN`` (the ``XSRF-TOKEN`` cookie's value), ``X-Requested-With`` and a
Referer. An HTML answer (the login or visitor page) means the session is gone: LoginRequired. HTTP 432 is
the visitor cookie expiring (Banned, ``http-432``: the scheduler renews a visitor session on it).
Cursor semantics: ``PostOrder``.
"""

from __future__ import annotations

import html
import re
from typing import Any, ClassVar

from crawler_client.sources._counts import parse_count, parse_id
from crawler_client.sources._cursor import PostOrder
from crawler_client.sources._dates import created_at_of, iso_of_ms
from crawler_client.sources._decode import ZERO_WIDTH_SPACE, html_texts, with_html
from crawler_client.sources._detect import WEIBO_MARKERS, fail, unparsable
from crawler_client.sources._headers import DESKTOP_UA, WEIBO_COM_BUILD, XHR_JSON
from crawler_client.sources._weibo import (
    as_dict,
    author_id,
    check_end_after_cursor,
    check_end_of_list,
    checked_text,
    first_page_ok0,
    https_url,
    inline_long_text,
    is_pinned,
    is_quick_repost,
    json_envelope,
    long_text_content,
    mblog_id,
    nothing_new_yet,
    own_posts,
    said,
    since_id_of,
    truthy,
)
from crawler_client.sources.base import FetchedPage, Item, PageRequest, ParsedPage, SavedPages, SourceSpec
from icecrawler.models import Outcome, Post, Task, TaskKind

__all__ = ["LONGTEXT_PATH", "SOURCE", "SPEC", "TIMELINE_PATH", "WeiboWebSource"]

TIMELINE_PATH = "/ajax/statuses/mymblog"
LONGTEXT_PATH = "/ajax/statuses/longtext"
#: A longtext answer that is HTML rather than plain text (older answers sent markup).
_MARKUP_RE = re.compile(r"<(?:a|br|span|img|p|div)\b", re.IGNORECASE)
#: ``pic_infos`` sizes, best first.
_PICTURE_SIZES = ("largest", "original", "mw2000", "large", "bmiddle", "thumbnail")


SPEC = SourceSpec(
    name="weibo_web",
    kinds=frozenset({TaskKind.WeiboUser}),
    default_kind=TaskKind.WeiboUser,
    table="weibo",
    identity="(owner uid, mid): the mid m.weibo.cn shows too, so a post is one row",
    base_url="http://127.0.0.1:8800/web",
    login="visitor",
    sandbox_site="web",
    options={"visitor_url": "http://127.0.0.1:8800/passport/visitor/genvisitor2"},
)
#: A post's ``user.id`` names the timeline's owner.
_USER_ID_RE = re.compile(rb'"user"\s*:\s*\{\s*"id"\s*:\s*"?(\d{1,20})')


class WeiboWebSource(PostOrder, SavedPages):
    """Source for ``user:weibo_web:{uid}`` tasks."""

    spec: ClassVar[SourceSpec] = SPEC
    sniffers: ClassVar[tuple[re.Pattern[bytes], ...]] = (_USER_ID_RE,)
    default_headers: ClassVar[dict[str, str]] = {**XHR_JSON, **WEIBO_COM_BUILD, "User-Agent": DESKTOP_UA}
    #: weibo.com's client copies the XSRF-TOKEN cookie into this header on every API call.
    cookie_headers: ClassVar[dict[str, str]] = {"X-XSRF-TOKEN": "XSRF-TOKEN"}

    def __init__(self) -> None:
        #: mid → mblogid of this crawl's truncated posts (``longtext`` is asked by mblogid).
        self._mblogids: dict[int, str] = {}

    # --- requests ---------------------------------------------------------------------------------------
    def first_request(self, task: Task, base_url: str) -> PageRequest:
        """Page 1, pinned posts included (``feature=0``: all posts)."""
        return self.page_request(base_url, task.target, 1)

    def page_request(self, base_url: str, uid: str, page: int, since_id: str = "") -> PageRequest:
        """Timeline page ``page`` (1-based), with the previous answer's ``since_id`` when it gave one."""
        root = base_url.rstrip("/")
        params = {"uid": uid, "page": str(page), "feature": "0"}
        if since_id:
            params["since_id"] = since_id
        return PageRequest(
            url=root + TIMELINE_PATH,
            params=params,
            page=page,
            headers={"Referer": f"{root}/u/{uid}"},
            cookie_headers=dict(self.cookie_headers),
        )

    def extend_request(self, base_url: str, post_id: int | str) -> PageRequest:
        """The full text of an ``isLongText`` post (by its mblogid when the page gave one)."""
        root = base_url.rstrip("/")
        key = self._mblogids.get(parse_id(post_id)) or str(post_id)
        return PageRequest(
            url=root + LONGTEXT_PATH,
            params={"id": key},
            state={"extend": str(post_id)},
            headers={"Referer": f"{root}/"},
            cookie_headers=dict(self.cookie_headers),
        )

    def saved_request(self, task: Task, base_url: str, body: bytes, page: int, chunk: int | None) -> PageRequest:
        page = page or 1
        return self.page_request(base_url, task.target, page)

    # --- parsing ----------------------------------------------------------------------------------------
    def parse(self, task: Task, request: PageRequest, page: FetchedPage, now_ms: int) -> ParsedPage:
        """Walls raise; ``ok:0`` is NotFound on page 1 and later the end, if it says so (``first_page_ok0``,
        ``check_end_of_list``);
        ``data.list`` becomes posts."""
        doc = self._envelope(request, page, now_ms, TIMELINE_PATH)
        first = request.params.get("page", "1") in ("", "1") and not request.params.get("since_id")
        if doc.get("ok") in (0, "0"):
            if first:
                raise first_page_ok0(doc, page.status)
            check_end_of_list(doc, page.status)
            check_end_after_cursor(task, request, f"ok:0 {said(doc)[:40]!r}", page.status, self.name)
            return ParsedPage(items=[], info={"end": "ok:0"})
        if doc.get("ok") not in (1, "1"):
            hint = " (a v6 mbloglist answer: use weibo_pc)" if "code" in doc and "data" in doc else ""
            raise unparsable(
                page.body,
                WEIBO_MARKERS,
                page.status,
                f"mymblog: unexpected envelope ok={str(doc.get('ok'))[:20]!r}{hint}",
            )
        data = doc.get("data")
        post = doc if _is_post(doc) else data if _is_post(data) else None  # /ajax/statuses/show: bare or under "data"
        single = post is not None
        if single:
            data = {"list": [post]}
        elif data is None or data in ({}, []):  # {"ok":1}: what the site answers past the last page
            if not first:
                check_end_after_cursor(task, request, "an answer without data", page.status, self.name)
            return ParsedPage(items=[], info={"end": "no data"})
        data = as_dict(data)
        posts = data.get("list")
        if not isinstance(posts, list):
            if isinstance(data.get("longTextContent"), str):  # a longtext answer given to parse
                return ParsedPage(items=[], info={"long_text": data["longTextContent"][:2000]})
            if isinstance(data.get("user"), dict):  # /ajax/profile/info
                return _profile_page(as_dict(data["user"]))
            hint = " (an m.weibo.cn getIndex answer: use weibo_mobile)" if "cards" in data else ""
            raise unparsable(page.body, WEIBO_MARKERS, page.status, f"mymblog: data has no list{hint}")
        mblogs = [mblog for mblog in posts if isinstance(mblog, dict)]
        owned, others = own_posts(task.target, mblogs, author_id, page.status, is_quick_repost)
        items, long_ids = self._posts(owned, task, now_ms)
        result = ParsedPage(items=items, next_request=None if single else self._next(request, data, bool(posts)))
        nothing_new_yet(task, request, first, items, result.next_request)
        if not first and not single and not posts and result.next_request is None:
            check_end_after_cursor(task, request, "an empty list naming no next page", page.status, self.name)
        result.info = {key: str(data[key])[:40] for key in ("since_id", "total") if key in data}
        if long_ids:
            result.info["long_text_ids"] = ",".join(long_ids)
        skipped = (len(posts) - len(mblogs)) + (len(owned) - len(items))  # not an object, or without a usable id
        if skipped:
            result.info["skipped"] = str(skipped)
        if others:  # posts of other accounts shown in this one's timeline (快转, liked)
            result.info["other_accounts"] = str(others)
        return result

    def _posts(self, mblogs: list[dict[str, Any]], task: Task, now_ms: int) -> tuple[list[Item], list[str]]:
        """Posts of the ``list`` entries, and the ids of the truncated ones (entries without a usable id are left)."""
        fetched_at = iso_of_ms(now_ms)
        need_html = [i for i, mblog in enumerate(mblogs) if not isinstance(mblog.get("text_raw"), str)]
        texts = html_texts([str(mblogs[i].get("text") or "") for i in need_html])
        html_of = dict(zip(need_html, texts, strict=True))
        items: list[Item] = []
        long_ids: list[str] = []
        for index, mblog in enumerate(mblogs):
            post = self.post_of(mblog, task, now_ms, fetched_at, text=html_of.get(index))
            if post is None:
                continue
            items.append(post)
            mblogid = mblog.get("mblogid")
            inline = inline_long_text(mblog)
            if inline:  # ``/ajax/statuses/show?…&isGetLongText=true`` carries the full text: no longtext call
                with_html(post, long_text_html(inline))
            elif truthy(mblog.get("isLongText")):
                long_ids.append(str(post.id))
                if isinstance(mblogid, str) and mblogid:
                    self._mblogids[post.id] = mblogid
        return items, long_ids

    def post_of(
        self, mblog: dict[str, Any], task: Task, now_ms: int, fetched_at: str, text: str | None = None
    ) -> Post | None:
        """One ``mblog`` as a Post; None without a usable id. ``text``: its plain text when the caller already
        extracted it from ``text`` (used only when ``text_raw`` is missing)."""
        post_id = mblog_id(mblog)
        if not post_id:
            return None
        user = as_dict(mblog.get("user"))
        user_id = author_id(mblog) or parse_id(task.target)
        raw_html = mblog.get("text")
        body = raw_html if isinstance(raw_html, str) else ""
        raw_text = mblog.get("text_raw")
        if isinstance(raw_text, str):
            plain = raw_text.replace(ZERO_WIDTH_SPACE, "").strip()
        else:
            plain = text if text is not None else (html_texts([body])[0] if body else "")
        retweeted = as_dict(mblog.get("retweeted_status"))
        mblogid = mblog.get("mblogid")
        return Post(
            id=post_id,
            user_id=user_id,
            user_name=str(user.get("screen_name") or ""),
            text=plain,
            html=body,
            created_at=created_at_of(mblog.get("created_at"), now_ms),
            reposts=parse_count(mblog.get("reposts_count")),
            comments=parse_count(mblog.get("comments_count")),
            likes=parse_count(mblog.get("attitudes_count")),
            pinned=is_pinned(mblog),
            retweeted_id=mblog_id(retweeted) if retweeted else 0,
            pictures=pictures(mblog),
            permalink=(
                f"https://weibo.com/{user_id}/{mblogid}"
                if isinstance(mblogid, str) and mblogid
                else f"https://weibo.com/detail/{post_id}"
            ),
            fetched_at=fetched_at,
            source=self.name,
        )

    def parse_extend(self, request: PageRequest, page: FetchedPage, now_ms: int) -> str:
        """The full text of a ``longtext`` answer as HTML ("" when the site has none: the post keeps its
        truncated text rather than failing the crawl)."""
        content = long_text_content(self._envelope(request, page, now_ms, LONGTEXT_PATH), page, "longtext")
        return long_text_html(content) if content.strip() else ""

    @staticmethod
    def with_long_text(post: Post, html_text: str) -> Post:
        """``post`` with its full text from ``parse_extend`` (unchanged for an empty one)."""
        return with_html(post, html_text)

    # --- helpers ----------------------------------------------------------------------------------------
    @staticmethod
    def _envelope(request: PageRequest, page: FetchedPage, now_ms: int, what: str) -> dict[str, Any]:
        """The JSON object after HTTP/redirect checks. HTML is a login or visitor page (the session is
        gone), unless it is one of Weibo's busy/ban interstitials; ``ok:-100`` is a login wall, and so is an empty
        object ``{}``: what this API answers a cookie it no longer accepts (2025–2026 clients record it)."""
        doc = json_envelope(page, checked_text(request, page, now_ms), what)
        if not doc:
            raise fail(
                Outcome.LoginRequired,
                f"{what}: an empty object (a cookie the site no longer accepts)",
                error_class="empty-answer",
                http_status=page.status,
            )
        return doc

    def _next(self, request: PageRequest, data: dict[str, Any], had_posts: bool) -> PageRequest | None:
        """``since_id`` when the answer gives one, else ``page`` + 1 (also after an empty ``since_id``). An empty
        page ends the walk unless it names a new ``since_id`` (a page whose posts were all filtered out: ending there
        would put the rest behind the new cursor)."""
        page = parse_id(request.params.get("page", "1")) or 1
        base = request.url[: -len(TIMELINE_PATH)] if request.url.endswith(TIMELINE_PATH) else request.url
        uid = request.params.get("uid", "")
        since_id = since_id_of(data.get("since_id"))
        if since_id:
            if since_id == request.params.get("since_id"):
                return None  # the site repeated our cursor (following it would loop)
            return self.page_request(base, uid, page + 1, since_id[:64])
        # No since_id, or an empty one: real first pages give "" with many pages still to come; page on by number.
        if not had_posts:
            return None
        return self.page_request(base, uid, page + 1)


def long_text_html(content: str) -> str:
    """A long text as HTML: today's answers are plain text with newlines (escaped, newlines as ``<br />``); older
    ones sent markup, kept as it is."""
    if _MARKUP_RE.search(content):
        return content
    return html.escape(content, quote=False).replace("\n", "<br />")


def pictures(mblog: dict[str, Any]) -> list[str]:
    """The best URL of each picture, in ``pic_ids`` order from the ``pic_infos`` map (a post without
    ``pic_ids`` lists its ``pic_infos`` keys); a picture without info is its ``large`` URL by pid. Posts mixing
    pictures and videos list them in ``mix_media_info.items`` instead (``type`` "pic", sizes under ``data``)."""
    infos = as_dict(mblog.get("pic_infos"))
    pids = mblog.get("pic_ids")
    order = [pid for pid in pids if isinstance(pid, str) and pid] if isinstance(pids, list) else list(infos)
    urls: list[str] = []
    for pid in order:
        url = _best_url(as_dict(infos.get(pid)))
        urls.append(https_url(url) if url else f"https://wx1.sinaimg.cn/large/{pid}.jpg")
    if not urls:
        items = as_dict(mblog.get("mix_media_info")).get("items")
        for item in items if isinstance(items, list) else []:
            item = as_dict(item)
            if item.get("type") == "pic" and (url := _best_url(as_dict(item.get("data")))):
                urls.append(https_url(url))
    return urls


def _best_url(info: dict[str, Any]) -> str:
    """The URL of the largest size a picture info lists ("" when none)."""
    return next((u for size in _PICTURE_SIZES if isinstance(u := as_dict(info.get(size)).get("url"), str) and u), "")


def _is_post(value: object) -> bool:
    """Whether ``value`` is one post (``/ajax/statuses/show``'s answer) rather than a page: a usable id and a post's
    own fields. A profile answer's ``data`` holds a ``user`` too, but no id of its own."""
    return isinstance(value, dict) and bool(mblog_id(value)) and ("mblogid" in value or "text_raw" in value)


def _profile_page(user: dict[str, Any]) -> ParsedPage:
    """An ``/ajax/profile/info`` answer: no posts, the facts worth printing."""
    return ParsedPage(
        items=[],
        info={
            "screen_name": str(user.get("screen_name") or "")[:100],
            "statuses_count": str(parse_count(user.get("statuses_count"))),
            "followers_count": str(parse_count(user.get("followers_count"))),
        },
    )


#: What the source registry (``icecrawler.sourcespec``) reads from this module.
SOURCE = WeiboWebSource
