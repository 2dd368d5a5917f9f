"""m.weibo.cn as its web app calls it: ``api/container/getIndex`` for the profile, then for the timeline tab.

Requests, as the browser makes them: the profile answer (``getIndex?type=uid&value={uid}``) lists the tabs in
``tabsInfo``; the timeline is ``getIndex?type=uid&value={uid}&containerid={the 微博 tab's containerid}``. The
containerid is read from the profile once per task and remembered (``ContainerMemo``, per client process; a
task may also name it in ``task.params["containerid"]``); ``107603{uid}`` is only the fallback when the
profile names no 微博 tab. When the first page of a tab is empty (``ok:0``), the next candidate tab is tried
(``230413{uid}_-_WEIBO_SECOND_PROFILE_WEIBO``, then ``107603{uid}``); a remembered containerid that turns up
empty sends the crawl back to the profile. Headers: ``MWeibo-Pwa: 1``, ``X-Requested-With``, a Referer and
``X-XSRF-TOKEN`` from the ``XSRF-TOKEN`` cookie when the session has one, on the long-text call too.

Paging follows whatever cursor the response hands back (docs/SITE_RESPONSES.md §2.2): ``cardlistInfo.since_id``
→ the next request passes ``&since_id=`` (never computed by us: it can be smaller than the last mid), else
``cardlistInfo.page`` → ``&page=N``; no cursor, an empty/zero ``since_id`` or no cards ends the timeline (on a later
page of an incremental crawl, no cards or an ``ok:0`` is Busy first: ``check_end_after_cursor``).

Long posts (``isLongText``) arrive truncated with a "全文" link. Their ids are listed in
``ParsedPage.info["long_text_ids"]`` (comma separated); the runtime fetches ``extend_request(base_url, id)``,
reads the full HTML with ``parse_extend`` and applies it with ``with_long_text``.

A ``/detail/{id}`` page (``var $render_data = [{"status": …}]``) parses to its one post.

Cursor semantics: ``PostOrder`` (mid order; a pinned post is never "older": it never ends a walk).
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from typing import Any, ClassVar

from crawler_client.sources._counts import parse_count, parse_id
from crawler_client.sources._cursor import PostOrder
from crawler_client.sources._dates import created_at_of, iso_of_ms
from crawler_client.sources._decode import (
    html_text,
    html_texts,
    load_json,
    make_soup,
    with_html,
)
from crawler_client.sources._detect import EMPTY_PAGE_RETRIES, WEIBO_MARKERS, fail, unparsable
from crawler_client.sources._headers import MOBILE_UA, XHR_JSON
from crawler_client.sources._weibo import (
    END_AFTER_CURSOR_RETRIES,
    NOTHING_MORE,
    USER_GONE_CODES,
    as_dict,
    author_id,
    check_end_after_cursor,
    check_end_of_list,
    checked_text,
    end_keeps_cursor,
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
    unavailable_account,
)
from crawler_client.sources.base import FetchedPage, Item, PageRequest, ParsedPage, SavedPages, SourceSpec, sniff
from icecrawler.errors import FetchError
from icecrawler.models import Outcome, Post, Task, TaskKind

__all__ = ["CONTAINERS", "SOURCE", "SPEC", "ContainerMemo", "WeiboMobileSource"]

#: The fallback timeline containerid is this prefix + uid (``107603{uid}``).
TIMELINE_PREFIX = "107603"
#: The profile tab's "all posts" list, the empty-tab fallback some crawlers use.
SECOND_PROFILE = "230413{uid}_-_WEIBO_SECOND_PROFILE_WEIBO"
GET_INDEX = "/api/container/getIndex"
#: The ``profile_type_id`` prefix of the card that holds a profile's pinned post.
PINNED_CARD = "proweibotop"
#: The base62 post id a card's ``scheme`` link names (``…/status/X?mblogid=X&…``).
_SCHEME_MBLOGID_RE = re.compile(r"[?&]mblogid=([0-9A-Za-z]{1,20})(?![0-9A-Za-z])")
_RENDER_DATA_RE = re.compile(r"\$render_data\s*=\s*(\[.*\])\s*\[0\]", re.DOTALL)

# Kept as names for the code that imported them from here.
_as_dict = as_dict
_https = https_url


class ContainerMemo:
    """Task id → the timeline containerid its profile named (bounded, least recently used dropped first;
    thread-safe: one memo serves every worker of a client)."""

    def __init__(self, size: int = 100_000) -> None:
        self._size = size
        self._known: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, task_id: str) -> str:
        with self._lock:
            found = self._known.get(task_id, "")
            if found:
                self._known.move_to_end(task_id)
            return found

    def put(self, task_id: str, containerid: str) -> None:
        with self._lock:
            self._known[task_id] = containerid
            self._known.move_to_end(task_id)
            while len(self._known) > self._size:
                self._known.popitem(last=False)

    def forget(self, task_id: str) -> None:
        with self._lock:
            self._known.pop(task_id, None)


#: The memo every WeiboMobileSource of this process shares (unless given its own).
CONTAINERS = ContainerMemo()


SPEC = SourceSpec(
    name="weibo_mobile",
    kinds=frozenset({TaskKind.WeiboUser}),
    default_kind=TaskKind.WeiboUser,
    table="weibo",
    identity="(owner uid, mid): the mid weibo.com shows too, so a post is one row",
    base_url="http://127.0.0.1:8800/m",
    login="visitor",
    sandbox_site="m",
)
#: What a saved answer says about whose timeline it is: the containerid (107603 + uid), a profile's
#: ``userInfo.id``, a post's ``user.id``; and any containerid (the tab the answer came from).
_CONTAINER_RE = re.compile(rb'"containerid"\s*:\s*"107603(\d{1,20})"')
_USER_INFO_RE = re.compile(rb'"userInfo"\s*:\s*\{\s*"id"\s*:\s*"?(\d{1,20})')
_USER_ID_RE = re.compile(rb'"user"\s*:\s*\{\s*"id"\s*:\s*"?(\d{1,20})')
_ANY_CONTAINER_RE = re.compile(rb'"cardlistInfo"\s*:\s*\{[^{}]*?"containerid"\s*:\s*"([^"\\]{1,100})"')


class WeiboMobileSource(PostOrder, SavedPages):
    """Source for ``user:weibo_mobile:{uid}`` tasks."""

    spec: ClassVar[SourceSpec] = SPEC
    sniffers: ClassVar[tuple[re.Pattern[bytes], ...]] = (_CONTAINER_RE, _USER_INFO_RE, _USER_ID_RE)
    #: What the m.weibo.cn web app sends with its getIndex calls.
    default_headers: ClassVar[dict[str, str]] = {**XHR_JSON, "MWeibo-Pwa": "1", "User-Agent": MOBILE_UA}
    cookie_headers: ClassVar[dict[str, str]] = {"X-XSRF-TOKEN": "XSRF-TOKEN"}

    def __init__(self, memo: ContainerMemo | None = None) -> None:
        self.memo = memo if memo is not None else CONTAINERS

    # --- requests ---------------------------------------------------------------------------------------
    def first_request(self, task: Task, base_url: str) -> PageRequest:
        """The timeline's first page when the task's containerid is known, else the profile answer."""
        known = task.params.get("containerid", "")
        if known:
            return self.timeline_request(base_url, task.target, known)
        remembered = self.memo.get(task.id)
        if remembered:
            request = self.timeline_request(base_url, task.target, remembered)
            request.state["remembered"] = "1"
            return request
        return self.profile_request(base_url, task.target)

    def saved_request(self, task: Task, base_url: str, body: bytes, page: int, chunk: int | None) -> PageRequest:
        """A profile answer (``userInfo``) or a timeline tab (its containerid sniffed from the answer)."""
        page = page or 1
        if b'"userInfo"' in body[: 1 << 20]:
            request = self.profile_request(base_url, task.target)
        else:
            containerid = sniff((_ANY_CONTAINER_RE,), body) or task.params.get("containerid", "")
            request = self.timeline_request(base_url, task.target, containerid)
        if page > 1:
            request.params["page"] = str(page)
        request.page = page
        return request

    def _request(self, base_url: str, uid: str, params: dict[str, str], state: dict[str, str]) -> PageRequest:
        root = base_url.rstrip("/")
        return PageRequest(
            url=root + GET_INDEX,
            params={"type": "uid", "value": uid, **params},
            state=state,
            headers={"Referer": f"{root}/u/{uid}"},
            cookie_headers=dict(self.cookie_headers),
        )

    def profile_request(self, base_url: str, uid: str) -> PageRequest:
        """The profile answer (``userInfo``, ``tabsInfo``), no containerid."""
        return self._request(base_url, uid, {}, {"profile": "1"})

    def timeline_request(
        self, base_url: str, uid: str, containerid: str = "", fallbacks: tuple[str, ...] = ()
    ) -> PageRequest:
        """Page 1 of a timeline tab (the real client sends no ``page``/``since_id`` for it); ``fallbacks``:
        the tabs to try, in order, if this one is empty."""
        state = {"fallbacks": ",".join(fallbacks)} if fallbacks else {}
        return self._request(base_url, uid, {"containerid": containerid or f"{TIMELINE_PREFIX}{uid}"}, state)

    def extend_request(self, base_url: str, post_id: int | str) -> PageRequest:
        """The full text of an ``isLongText`` post: ``statuses/extend?id={id}``, asked as the web app asks it from
        the post's page (its Referer, and the ``XSRF-TOKEN`` echo the app puts on every call)."""
        root = base_url.rstrip("/")
        return PageRequest(
            url=f"{root}/statuses/extend",
            params={"id": str(post_id)},
            state={"extend": str(post_id)},
            headers={"Referer": f"{root}/detail/{post_id}"},
            cookie_headers=dict(self.cookie_headers),
        )

    # --- parsing ----------------------------------------------------------------------------------------
    def parse(self, task: Task, request: PageRequest, page: FetchedPage, now_ms: int) -> ParsedPage:
        """Walls raise; a profile leads to its timeline tab; ``ok:0`` is an empty tab (the next candidate is
        tried), NotFound on page 1 and the end later; cards become posts."""
        doc = self._envelope(request, page, now_ms)
        # Before 2017 the cards sat at the top level (no "data" wrapper).
        data = _as_dict(doc.get("data")) if "data" in doc else doc
        cards = data.get("cards")
        first = "since_id" not in request.params and request.params.get("page", "1") == "1"
        if doc.get("ok") in (0, "0"):
            if first:
                return self._empty_tab(task, request, doc, page.status)
            check_end_of_list(doc, page.status)
            check_end_after_cursor(task, request, f"ok:0 {said(doc)[:40]!r}", page.status, self.name)
            return ParsedPage(items=[], info={"end": "ok:0"})
        if doc.get("ok") in (1, "1", None) and not isinstance(cards, list):
            if isinstance(data.get("userInfo"), dict):
                return self._profile(task, request, data)
            if isinstance(data.get("longTextContent"), str):  # a statuses/extend answer given to parse
                return ParsedPage(items=[], info={"long_text": html_text(make_soup(data["longTextContent"]))})
        if doc.get("ok") not in (1, "1", None) or not isinstance(cards, list):
            if isinstance(data.get("list"), list):
                hint = " (a weibo.com /ajax answer: parse it with the weibo_web source)"
            elif mblog_id(data):
                hint = " (one post, as statuses/show answers: not a timeline page)"
            else:
                hint = ""
            problem = (
                "no cards" if doc.get("ok") in (1, "1", None) else f"unexpected envelope ok={str(doc.get('ok'))[:20]!r}"
            )
            raise unparsable(page.body, WEIBO_MARKERS, page.status, f"getIndex: {problem}{hint}")
        info = _as_dict(data.get("cardlistInfo"))
        notice = _nothing_notice(cards)
        if notice is not None and not _new_since_id(request, info):
            # ok:1 with no post, only a notice that there are none (more): what ok:0 says in words. A page naming a
            # new since_id says there is more, whatever its notice: it is followed (``_next``; the one we sent,
            # repeated, is no cursor: the notice is read).
            if first:
                return self._empty_tab(task, request, {"ok": 0, "msg": notice}, page.status)
            return _notice_later(task, request, notice, page.status)
        containerid = request.params.get("containerid", "")
        if first and cards and containerid and not request.state.get("remembered"):
            self.memo.put(task.id, containerid)
        fetched_at = iso_of_ms(now_ms)
        items: list[Item] = []
        long_ids: list[str] = []
        skipped = 0
        mblogs, others = own_posts(task.target, _mblogs(cards), author_id, page.status, is_quick_repost)
        texts = html_texts([mblog["text"] if isinstance(mblog.get("text"), str) else "" for mblog in mblogs])
        for mblog, text in zip(mblogs, texts, strict=True):
            post = self.post_of(mblog, task, now_ms, fetched_at, text=text)
            if post is None:
                skipped += 1
                continue
            items.append(post)
            embedded = inline_long_text(mblog)
            if embedded:
                with_html(post, embedded)  # some responses carry the full text inline
            elif mblog.get("isLongText") in (True, 1, "1", "true"):
                long_ids.append(str(post.id))
        result = ParsedPage(items=items, next_request=self._next(request, info, bool(cards)))
        nothing_new_yet(task, request, first, items, result.next_request)
        if not first and not cards and result.next_request is None:
            check_end_after_cursor(task, request, "a page of no cards naming no next page", page.status, self.name)
        result.info = {key: str(info[key]) for key in ("total", "since_id", "page") if key in info}
        if long_ids:
            result.info["long_text_ids"] = ",".join(long_ids)
        if skipped:
            result.info["skipped"] = str(skipped)
        if others:  # posts of other accounts shown in this one's timeline (快转, liked)
            result.info["other_accounts"] = str(others)
        return result

    def parse_extend(self, request: PageRequest, page: FetchedPage, now_ms: int) -> str:
        """The ``longTextContent`` HTML of a ``statuses/extend`` response (bans raise like ``parse``; "" when the
        site gives an empty one: the post keeps its truncated text)."""
        return long_text_content(self._envelope(request, page, now_ms), page, "statuses/extend")

    @staticmethod
    def with_long_text(post: Post, html: str) -> Post:
        """``post`` with its full text from ``parse_extend`` (in place, returned for chaining; unchanged for an
        empty one)."""
        return with_html(post, html)

    def post_of(
        self, mblog: dict[str, Any], task: Task, now_ms: int, fetched_at: str, text: str | None = None
    ) -> Post | None:
        """One ``mblog`` as a Post; None when it has no usable id. ``text``: the plain text of its html when the
        caller already has it (``parse`` extracts a whole page's texts from one soup)."""
        post_id = parse_id(mblog.get("id")) or parse_id(mblog.get("mid")) or parse_id(mblog.get("idstr"))
        if not post_id:
            return None
        user = _as_dict(mblog.get("user"))
        user_id = author_id(mblog) or parse_id(task.target)
        raw_text = mblog.get("text")
        html = raw_text if isinstance(raw_text, str) else ""
        retweeted = _as_dict(mblog.get("retweeted_status"))
        raw_bid = mblog.get("bid")
        bid = raw_bid if isinstance(raw_bid, str) else ""
        return Post(
            id=post_id,
            user_id=user_id,
            user_name=str(user.get("screen_name") or ""),
            text=(text if text is not None else html_text(make_soup(html))) if html else "",
            html=html,
            created_at=created_at_of(mblog.get("created_at"), now_ms),
            reposts=parse_count(mblog.get("reposts_count")),
            comments=parse_count(mblog.get("comments_count")),
            likes=parse_count(mblog.get("attitudes_count")),
            pinned=is_pinned(mblog),
            retweeted_id=(parse_id(retweeted.get("id")) or parse_id(retweeted.get("mid"))) if retweeted else 0,
            pictures=_pictures(mblog),
            permalink=f"https://weibo.com/{user_id}/{bid}" if bid else f"https://m.weibo.cn/status/{post_id}",
            fetched_at=fetched_at,
            source=self.name,
        )

    # --- tabs -------------------------------------------------------------------------------------------
    def _profile(self, task: Task, request: PageRequest, data: dict[str, Any]) -> ParsedPage:
        """A profile answer: its facts, and (for our own profile request) the timeline tab it names next, with
        the other candidate tabs as fallbacks. A profile served for a timeline request moves on to the next
        candidate (or ends): it must never send the crawl back and forth."""
        result = _profile_page(data)
        base = request.url[: -len(GET_INDEX)] if request.url.endswith(GET_INDEX) else request.url
        uid = task.target
        if request.state.get("profile"):
            named = result.info.get("timeline_containerid", "")
            candidates = _candidates(uid, named)
            result.next_request = self.timeline_request(base, uid, candidates[0], candidates[1:])
            if parse_count(result.info.get("statuses_count")):  # what an empty tab is measured against
                result.next_request.state["posts"] = result.info["statuses_count"]
        else:
            result.next_request = self._fallback(request, base, uid)
        return result

    def _empty_tab(self, task: Task, request: PageRequest, doc: dict[str, Any], status: int) -> ParsedPage:
        """``ok:0`` on the first page: the next candidate tab, the profile again (a remembered tab went
        empty: the account's tabs changed), or NotFound (no such user, or no posts anywhere; ``first_page_ok0``)."""
        base = request.url[: -len(GET_INDEX)] if request.url.endswith(GET_INDEX) else request.url
        empty = request.params.get("containerid", "")
        unavailable = unavailable_account(said(doc), status)
        if unavailable is not None:  # the account, not this tab: no other tab would answer
            raise unavailable
        if request.state.get("remembered"):
            self.memo.forget(task.id)
            return ParsedPage(items=[], next_request=self.profile_request(base, task.target), info={"empty_tab": empty})
        following = self._fallback(request, base, task.target)
        if following is not None:
            return ParsedPage(items=[], next_request=following, info={"empty_tab": empty})
        error = first_page_ok0(doc, status)
        counted = parse_count(request.state.get("posts", ""))
        # Not a user gone (GONE's words are not NOTHING_MORE's; nor is error_code 20003, whatever the words).
        says_nothing_here = any(text in said(doc) for text in NOTHING_MORE)
        says_nothing_here &= str(doc.get("error_code", "")) not in USER_GONE_CODES
        if error.outcome is Outcome.NotFound and says_nothing_here and counted and task.attempts < EMPTY_PAGE_RETRIES:
            # The profile just counted posts and every tab says there are none: m.weibo.cn's risk control answers
            # 这里还没有内容 so (2026 clients moved to weibo.com's API for it). Busy, retried with the task's backoff;
            # after EMPTY_PAGE_RETRIES such visits in a row the account is taken to show none (half-year visibility).
            raise fail(
                Outcome.Busy,
                f"every timeline tab answered {said(doc)[:40]!r} while the profile counts {counted} posts",
                error_class="weibo_mobile-empty-timeline",
                http_status=status,
            )
        raise error

    def _fallback(self, request: PageRequest, base: str, uid: str) -> PageRequest | None:
        """Page 1 of the next candidate tab this request carried, if any (with the profile's post count)."""
        left = tuple(part for part in request.state.get("fallbacks", "").split(",") if part)
        if not left:
            return None
        following = self.timeline_request(base, uid, left[0], left[1:])
        if request.state.get("posts"):
            following.state["posts"] = request.state["posts"]
        return following

    # --- helpers ----------------------------------------------------------------------------------------
    @staticmethod
    def _envelope(request: PageRequest, page: FetchedPage, now_ms: int) -> dict[str, Any]:
        """The JSON object, after HTTP/redirect checks; login walls (``ok:-100``, a top-level ``url``) raise."""
        text = checked_text(request, page, now_ms)
        if not text.startswith("{"):
            status = _render_data_status(text)
            if status is not None:  # a /detail/{id} page: one post, shaped like a timeline card
                return {"ok": 1, "data": {"cards": [{"card_type": 9, "mblog": status}]}}
        return json_envelope(page, text, "m.weibo.cn")

    @staticmethod
    def _next(request: PageRequest, info: dict[str, Any], had_cards: bool) -> PageRequest | None:
        """Follow the response's own cursor: ``since_id`` first, then ``page``. An empty page ends the walk unless
        it names a new ``since_id`` (a page whose posts were all filtered out: ending there would put the rest
        behind the new cursor)."""
        since_id = since_id_of(info.get("since_id"))
        if not had_cards and not since_id:
            return None
        params = {key: value for key, value in request.params.items() if key not in ("page", "since_id")}
        if not params.get("containerid") and isinstance(info.get("containerid"), str) and info["containerid"]:
            params["containerid"] = info["containerid"][:100]
        if since_id:
            if since_id == request.params.get("since_id"):
                return None  # the site repeated our cursor: following it would loop
            params["since_id"] = since_id
        else:
            next_page = parse_id(info.get("page"))
            if next_page <= parse_id(request.params.get("page", "1")) or next_page == 0:
                return None
            params["page"] = str(next_page)
        return PageRequest(
            url=request.url,
            params=params,
            page=request.page + 1,
            headers=dict(request.headers),
            cookie_headers=dict(request.cookie_headers),
        )


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
    the facts worth printing and the timeline tab's containerid (the 微博 tab of ``tabsInfo.tabs``)."""
    user = _as_dict(data.get("userInfo"))
    info = {
        "screen_name": str(user.get("screen_name") or ""),
        "statuses_count": str(parse_count(user.get("statuses_count"))),
        "followers_count": str(parse_count(user.get("followers_count"))),
    }
    tabs = _as_dict(data.get("tabsInfo")).get("tabs")
    for tab in tabs if isinstance(tabs, list) else []:
        tab = _as_dict(tab)
        is_weibo = tab.get("tab_type") == "weibo" or tab.get("tabKey") == "weibo" or tab.get("title") == "微博"
        if is_weibo and isinstance(tab.get("containerid"), (str, int)) and str(tab["containerid"]):
            info["timeline_containerid"] = str(tab["containerid"])[:100]
            break
    return ParsedPage(items=[], info=info)


def _candidates(uid: str, named: str) -> tuple[str, ...]:
    """Timeline tabs to try, in order: the one the profile named (else 107603{uid}), the profile's all-posts
    list, then 107603{uid}."""
    fallback = f"{TIMELINE_PREFIX}{uid}"
    ordered = (named or fallback, SECOND_PROFILE.format(uid=uid), fallback)
    return tuple(dict.fromkeys(c for c in ordered if c))


def _mblogs(cards: list[Any]) -> list[dict[str, Any]]:
    """Every ``mblog`` in the cards, including those nested in ``card_group``s; other cards are skipped. A card whose
    ``profile_type_id`` starts with ``proweibotop`` holds the pinned post, even when its mblog does not say so; at the
    top level or inside a group (page 1 may open with a ``card_type`` 11 whose one grouped card is the pinned post)."""
    found: list[dict[str, Any]] = []
    for card in cards:
        card = _as_dict(card)
        if isinstance(card.get("mblog"), dict):
            found.append(_card_mblog(card))
        elif isinstance(card.get("card_group"), list):
            found.extend(_card_mblog(c) for c in map(_as_dict, card["card_group"]) if isinstance(c.get("mblog"), dict))
    return found


#: The ``card_type`` of a notice card: a line of text (its ``name``) in place of, or after, the posts.
NOTICE_CARD = "58"


def _nothing_notice(cards: list[Any]) -> str | None:
    """The words of a page whose cards hold no post and a notice card saying there is nothing (more) to show
    (``NOTHING_MORE``: 暂无微博, 没有更多内容了), as m.weibo.cn answers an empty tab with ``ok:1``; else None. Other
    cards beside it (no post among them) change nothing: the page still shows no post."""
    if _mblogs(cards):
        return None
    for card in map(_as_dict, cards):
        name = card.get("name")
        if str(card.get("card_type")) == NOTICE_CARD and isinstance(name, str) and any(w in name for w in NOTHING_MORE):
            return name[:80]
    return None


def _new_since_id(request: PageRequest, info: dict[str, Any]) -> bool:
    """Whether an answer's ``cardlistInfo`` names a ``since_id`` other than the one the request sent."""
    since_id = since_id_of(info.get("since_id"))
    return bool(since_id) and since_id != request.params.get("since_id")


#: The words of a notice card that closes a list (没有更多内容了): after the first page, the end.
NOTICE_END = ("没有更多",)


def _notice_later(task: Task, request: PageRequest, notice: str, status: int) -> ParsedPage:
    """A page after the first holding only a notice of nothing (more), and no new ``since_id``. 没有更多内容了
    (``NOTICE_END``) is the end of the list. Any other (暂无微博: "this account has no posts", also the wording of
    m.weibo.cn's risk-control answer on a first page) contradicts the pages before it: taken for the end, the crawl
    would succeed, close its open gaps and move its cursor over the posts not reached yet (in a first crawl, leave the
    older ones unfetched). It is Busy (the cursor kept, retried with the task's backoff) for
    ``END_AFTER_CURSOR_RETRIES`` failed visits in a row, about a quarter of an hour, as an end of the list after the
    cursor is (``check_end_after_cursor``); then the end, since an account that stops showing its older posts would
    meet it on every visit. It is the end at once where taking it leaves the cursor as it was (``end_keeps_cursor``:
    an account showing only posts at or below its cursor, such as its one pinned post)."""
    done = any(words in notice for words in NOTICE_END) or task.attempts >= END_AFTER_CURSOR_RETRIES
    if done or end_keeps_cursor(task, request):
        return ParsedPage(items=[], info={"end": notice})
    raise fail(
        Outcome.Busy,
        f"a later page holds only the notice {notice[:40]!r} (not an end-of-list notice)",
        error_class="weibo_mobile-empty-page",
        http_status=status,
    )


def _card_mblog(card: dict[str, Any]) -> dict[str, Any]:
    """A card's ``mblog``, marked pinned when only its card says so (left out of the date order like the rest), and
    given the base62 id its card's ``scheme`` names (``?mblogid=…``) when its own ``bid`` is empty."""
    mblog: dict[str, Any] = card["mblog"]
    if str(card.get("profile_type_id", "")).startswith(PINNED_CARD) and not is_pinned(mblog):
        mblog = {**mblog, "isTop": 1}
    if not (isinstance(mblog.get("bid"), str) and mblog["bid"]) and isinstance(card.get("scheme"), str):
        match = _SCHEME_MBLOGID_RE.search(card["scheme"])
        if match:
            mblog = {**mblog, "bid": match[1]}
    return mblog


def _pictures(mblog: dict[str, Any]) -> list[str]:
    """Large picture URLs (``pics[].large.url``, else ``pics[].url``, else ``original_pic``)."""
    urls: list[str] = []
    pics = mblog.get("pics")
    if isinstance(pics, dict):  # also sent as {"0": {...}, "1": {...}}
        pics = [pics[key] for key in sorted(pics, key=lambda k: (len(str(k)), str(k)))]
    for pic in pics if isinstance(pics, list) else []:
        pic = _as_dict(pic)
        url = _as_dict(pic.get("large")).get("url") or pic.get("url")
        if isinstance(url, str) and url:
            urls.append(_https(url))
    if not urls and isinstance(mblog.get("original_pic"), str) and mblog["original_pic"]:
        urls.append(_https(mblog["original_pic"]))
    return urls


#: What the source registry (``icecrawler.sourcespec``) reads from this module.
SOURCE = WeiboMobileSource
