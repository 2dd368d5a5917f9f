"""m.weibo.cn timeline: ``api/container/getIndex?type=uid&value={uid}&containerid=107603{uid}``.

Paging follows whatever cursor the response hands back (docs/FORMATS.md §2.2): ``cardlistInfo.since_id`` → the next
request passes ``&since_id=`` (never computed by us: it can be smaller than the last mid), else
``cardlistInfo.page`` → ``&page=N``; no cursor, an empty/zero ``since_id`` or no cards ends the timeline.

Long posts (``isLongText``) arrive truncated with a "全文" link. Their ids are listed in
``ParsedPage.info["long_text_ids"]`` (comma separated); the runtime fetches ``extend_request(base_url, id)``,
reads the full HTML with ``parse_extend`` and applies it with ``with_long_text``.

A profile answer (``userInfo``/``tabsInfo``, no cards) parses to no items plus its facts in ``info``; a
``/detail/{id}`` page (``var $render_data = [{"status": …}]``) parses to its one post.

Cursor semantics: ``PostOrder`` (mid order; pinned posts are never "older" and never the cursor).
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

from crawler_client.sources._counts import parse_count, parse_id
from crawler_client.sources._cursor import PostOrder
from crawler_client.sources._dates import iso_of_ms, resolve_created_at
from crawler_client.sources._decode import decode_body, html_text, html_texts, load_json, make_soup, with_html
from crawler_client.sources._detect import WEIBO_MARKERS, check_final_url, check_http, fail, unparsable
from crawler_client.sources.base import FetchedPage, Item, PageRequest, ParsedPage
from icecrawler.errors import FetchError
from icecrawler.models import Outcome, Post, Task, TaskKind

__all__ = ["WeiboMobileSource"]

#: The timeline tab's containerid is this prefix + uid (``107603{uid}``).
TIMELINE_PREFIX = "107603"
_RENDER_DATA_RE = re.compile(r"\$render_data\s*=\s*(\[.*\])\s*\[0\]", re.DOTALL)
#: What m.weibo.cn says for no such user / no posts / past the end (``ok:0``).
NO_CONTENT = "这里还没有内容"


def _as_dict(value: object) -> dict[str, Any]:
    """``value`` if it is a JSON object, else {} (every field may have the wrong type)."""
    return value if isinstance(value, dict) else {}


def _https(url: str) -> str:
    """Protocol-relative image URLs made absolute."""
    return "https:" + url if url.startswith("//") else url


class WeiboMobileSource(PostOrder):
    """Source for ``user:weibo_mobile:{uid}`` tasks."""

    name: ClassVar[str] = "weibo_mobile"
    kinds: ClassVar[frozenset[TaskKind]] = frozenset({TaskKind.WeiboUser})

    # --- requests ---------------------------------------------------------------------------------------
    def first_request(self, task: Task, base_url: str) -> PageRequest:
        """Page 1 of the timeline: the real client sends no ``page``/``since_id`` for it."""
        uid = task.target
        return PageRequest(url=f"{base_url.rstrip('/')}/api/container/getIndex",
                           params={"type": "uid", "value": uid, "containerid": f"{TIMELINE_PREFIX}{uid}"})

    @staticmethod
    def extend_request(base_url: str, post_id: int | str) -> PageRequest:
        """The full text of an ``isLongText`` post: ``statuses/extend?id={id}``."""
        return PageRequest(url=f"{base_url.rstrip('/')}/statuses/extend", params={"id": str(post_id)},
                           state={"extend": str(post_id)})

    # --- parsing ----------------------------------------------------------------------------------------
    def parse(self, task: Task, request: PageRequest, page: FetchedPage, now_ms: int) -> ParsedPage:
        """Walls raise; ``ok:0`` is NotFound on page 1 and the end later; cards become posts."""
        doc = self._envelope(request, page, now_ms)
        # Before 2017 the cards sat at the top level (no "data" wrapper).
        data = _as_dict(doc.get("data")) if "data" in doc else doc
        cards = data.get("cards")
        if doc.get("ok") in (0, "0"):
            first = "since_id" not in request.params and request.params.get("page", "1") == "1"
            if first:
                raise fail(Outcome.NotFound, f"ok:0 {str(doc.get('msg', ''))[:60]!r} on the first page",
                           error_class="no-content", http_status=page.status)
            return ParsedPage(items=[], info={"end": "ok:0"})
        if doc.get("ok") in (1, "1", None) and not isinstance(cards, list):
            if isinstance(data.get("userInfo"), dict):
                return _profile_page(data)
            if isinstance(data.get("longTextContent"), str):  # a statuses/extend answer given to parse
                return ParsedPage(items=[], info={"long_text": html_text(make_soup(data["longTextContent"]))})
        if doc.get("ok") not in (1, "1", None) or not isinstance(cards, list):
            raise unparsable(page.body, WEIBO_MARKERS, page.status,
                             f"getIndex: unexpected envelope ok={str(doc.get('ok'))[:20]!r}")
        fetched_at = iso_of_ms(now_ms)
        items: list[Item] = []
        long_ids: list[str] = []
        skipped = 0
        mblogs = _mblogs(cards)
        texts = html_texts([mblog["text"] if isinstance(mblog.get("text"), str) else "" for mblog in mblogs])
        for mblog, text in zip(mblogs, texts, strict=True):
            post = self.post_of(mblog, task, now_ms, fetched_at, text=text)
            if post is None:
                skipped += 1
                continue
            items.append(post)
            embedded = _as_dict(mblog.get("longText")).get("longTextContent")
            if isinstance(embedded, str) and embedded:
                with_html(post, embedded)  # some responses carry the full text inline
            elif mblog.get("isLongText") in (True, 1, "1", "true"):
                long_ids.append(str(post.id))
        info = _as_dict(data.get("cardlistInfo"))
        result = ParsedPage(items=items, next_request=self._next(request, info, bool(cards)))
        result.info = {key: str(info[key]) for key in ("total", "since_id", "page") if key in info}
        if long_ids:
            result.info["long_text_ids"] = ",".join(long_ids)
        if skipped:
            result.info["skipped"] = str(skipped)
        return result

    def parse_extend(self, request: PageRequest, page: FetchedPage, now_ms: int) -> str:
        """The ``longTextContent`` HTML of a ``statuses/extend`` response (bans raise like ``parse``)."""
        doc = self._envelope(request, page, now_ms)
        data = _as_dict(doc.get("data"))
        content = data.get("longTextContent")
        if doc.get("ok") not in (1, "1") or not isinstance(content, str):
            raise unparsable(page.body, WEIBO_MARKERS, page.status, "statuses/extend: no longTextContent")
        return content

    @staticmethod
    def with_long_text(post: Post, html: str) -> Post:
        """``post`` with its full text from ``parse_extend`` (in place, returned for chaining)."""
        return with_html(post, html)

    def post_of(self, mblog: dict[str, Any], task: Task, now_ms: int, fetched_at: str,
                text: str | None = None) -> Post | None:
        """One ``mblog`` as a Post; None when it has no usable id. ``text``: the plain text of its html when the
        caller already has it (``parse`` extracts a whole page's texts from one soup)."""
        post_id = parse_id(mblog.get("id")) or parse_id(mblog.get("mid")) or parse_id(mblog.get("idstr"))
        if not post_id:
            return None
        user = _as_dict(mblog.get("user"))
        user_id = parse_id(user.get("id")) or parse_id(task.target)
        raw_text = mblog.get("text")
        html = raw_text if isinstance(raw_text, str) else ""
        retweeted = _as_dict(mblog.get("retweeted_status"))
        raw_bid = mblog.get("bid")
        bid = raw_bid if isinstance(raw_bid, str) else ""
        title = _as_dict(mblog.get("title"))
        created = mblog.get("created_at")
        return Post(
            id=post_id,
            user_id=user_id,
            user_name=str(user.get("screen_name") or ""),
            text=(text if text is not None else html_text(make_soup(html))) if html else "",
            html=html,
            created_at=resolve_created_at(created, now_ms) if isinstance(created, str) else "",
            reposts=parse_count(mblog.get("reposts_count")),
            comments=parse_count(mblog.get("comments_count")),
            likes=parse_count(mblog.get("attitudes_count")),
            pinned=mblog.get("isTop") in (1, True, "1") or title.get("text") == "置顶",
            retweeted_id=(parse_id(retweeted.get("id")) or parse_id(retweeted.get("mid"))) if retweeted else 0,
            pictures=_pictures(mblog),
            permalink=f"https://weibo.com/{user_id}/{bid}" if bid else f"https://m.weibo.cn/status/{post_id}",
            fetched_at=fetched_at,
            source=self.name,
        )

    # --- helpers ----------------------------------------------------------------------------------------
    @staticmethod
    def _envelope(request: PageRequest, page: FetchedPage, now_ms: int) -> dict[str, Any]:
        """The JSON object, after HTTP/redirect checks; login walls (``ok:-100``, a top-level ``url``) raise."""
        check_http(page, now_ms)
        check_final_url(page, request.url)
        text = decode_body(page.body).strip()
        if not text.startswith("{"):
            status = _render_data_status(text)
            if status is not None:  # a /detail/{id} page: one post, shaped like a timeline card
                return {"ok": 1, "data": {"cards": [{"card_type": 9, "mblog": status}]}}
            raise unparsable(page.body, WEIBO_MARKERS, page.status, "m.weibo.cn: not a JSON object")
        doc = load_json(text, what="m.weibo.cn")
        if not isinstance(doc, dict):
            raise unparsable(page.body, WEIBO_MARKERS, page.status, "m.weibo.cn: not a JSON object")
        if doc.get("ok") in (-100, "-100"):
            raise fail(Outcome.LoginRequired, f"ok:-100 {str(doc.get('msg', ''))[:60]!r}",
                       error_class="login-wall", http_status=page.status)
        if isinstance(doc.get("url"), str) and doc["url"] and not doc.get("data"):
            raise fail(Outcome.LoginRequired, f"verification wall: {doc['url'][:120]}",
                       error_class="verify-wall", http_status=page.status)
        return doc

    @staticmethod
    def _next(request: PageRequest, info: dict[str, Any], had_cards: bool) -> PageRequest | None:
        """Follow the response's own cursor: ``since_id`` first, then ``page``."""
        if not had_cards:
            return None
        params = {key: value for key, value in request.params.items() if key not in ("page", "since_id")}
        since_id = info.get("since_id")
        if isinstance(since_id, (int, str)) and not isinstance(since_id, bool) and str(since_id) not in ("", "0"):
            if str(since_id) == request.params.get("since_id"):
                return None  # the site repeated our cursor: following it would loop
            params["since_id"] = str(since_id)
        else:
            next_page = parse_id(info.get("page"))
            if next_page <= parse_id(request.params.get("page", "1")) or next_page == 0:
                return None
            params["page"] = str(next_page)
        return PageRequest(url=request.url, params=params, page=request.page + 1)


def _render_data_status(text: str) -> dict[str, Any] | None:
    """``status`` of a ``/detail/{id}`` page's ``var $render_data = [{"status": {...}, ...}][0] || {};``."""
    start = text.find("$render_data")
    if start < 0:
        return None
    match = _RENDER_DATA_RE.search(text, start)
    if match is None:
        return None
    try:
        data = load_json(match[1], what="$render_data")
    except FetchError:
        return None
    first = _as_dict(data[0]) if isinstance(data, list) and data else {}
    status = first.get("status")
    return status if isinstance(status, dict) else None


def _profile_page(data: dict[str, Any]) -> ParsedPage:
    """A profile answer (``getIndex?type=uid&value={uid}`` without the timeline containerid): no posts, but
    the facts worth printing and the timeline tab's containerid (``tabsInfo.tabs[tab_type == "weibo"]``)."""
    user = _as_dict(data.get("userInfo"))
    info = {"screen_name": str(user.get("screen_name") or ""),
            "statuses_count": str(parse_count(user.get("statuses_count"))),
            "followers_count": str(parse_count(user.get("followers_count")))}
    tabs = _as_dict(data.get("tabsInfo")).get("tabs")
    for tab in tabs if isinstance(tabs, list) else []:
        tab = _as_dict(tab)
        if tab.get("tab_type") == "weibo" and tab.get("containerid"):
            info["timeline_containerid"] = str(tab["containerid"])
    return ParsedPage(items=[], info=info)


def _mblogs(cards: list[Any]) -> list[dict[str, Any]]:
    """Every ``mblog`` in the cards, including those nested in ``card_group``s; other cards are skipped."""
    found: list[dict[str, Any]] = []
    for card in cards:
        card = _as_dict(card)
        if isinstance(card.get("mblog"), dict):
            found.append(card["mblog"])
        elif isinstance(card.get("card_group"), list):
            found.extend(_as_dict(c)["mblog"] for c in card["card_group"] if isinstance(_as_dict(c).get("mblog"), dict))
    return found


def _pictures(mblog: dict[str, Any]) -> list[str]:
    """Large picture URLs (``pics[].large.url``, else ``pics[].url``, else ``original_pic``)."""
    urls: list[str] = []
    pics = mblog.get("pics")
    for pic in pics if isinstance(pics, list) else []:
        pic = _as_dict(pic)
        url = _as_dict(pic.get("large")).get("url") or pic.get("url")
        if isinstance(url, str) and url:
            urls.append(_https(url))
    if not urls and isinstance(mblog.get("original_pic"), str) and mblog["original_pic"]:
        urls.append(_https(mblog["original_pic"]))
    return urls
