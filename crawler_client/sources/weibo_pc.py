"""weibo.com desktop timeline: the v6 ``mbloglist`` AJAX endpoint, a JSON envelope around an HTML feed.

This is the *legacy* feed of the seed paper's time (weibo.com's v6 pages, until 2021); today's weibo.com reads
timelines from its JSON API, which is the ``weibo_web`` source. Kept for archived pages and for the paper's
set-up (docs/SOURCES.md).

Request model (our choice, docs/SITE_RESPONSES.md §1.1): one visible page N holds 45 posts in three chunks of 15, and we
fetch all three as AJAX calls to ``/p/aj/v6/mblog/mbloglist`` using the (pre_page, page, pagebar) triple
``(N-1, N, 0)``, ``(N, N, 0)``, ``(N, N, 1)`` — the first replaces the server-rendered profile page, which
we never fetch. ``PageRequest.page`` is the visible page N and ``state["chunk"]`` is 0, 1 or 2. Only the
last chunk carries the pager (``countPage`` = total pages). ``__rnd`` is a cache-buster in epoch ms: the
fetch time of the previous response, or the task's lease deadline for the first request (sources read no
clock). ``domain`` (the page prefix, ``100505`` for people, ``100206`` for companies) comes from
``task.params["domain"]``.

A profile page served in place of chunk 0 (``FM.view({...,"html":...})`` scripts) is parsed too.

Truncated posts (展开全文) are listed in ``ParsedPage.info["long_text_ids"]``; ``extend_request`` /
``parse_extend`` / ``with_long_text`` fetch and apply the full text (``getlongtext``), with the same
signatures as weibo_mobile's ``statuses/extend`` helpers. Cursor semantics:
``PostOrder`` (mid order; a pinned post never ends a walk).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import parse_qs

from crawler_client.sources._counts import parse_count, parse_id
from crawler_client.sources._cursor import PostOrder
from crawler_client.sources._dates import created_at_of, iso_of_ms, resolve_created_at
from crawler_client.sources._decode import decode_body, html_text, is_tag, load_json, make_soup, with_html
from crawler_client.sources._detect import (
    WEIBO_MARKERS,
    check_not_cut_short,
    fail,
    scan_markers,
    sent_to_error,
    split_url,
    unparsable,
)
from crawler_client.sources._headers import DESKTOP_UA
from crawler_client.sources._weibo import (
    check_answer,
    login_worded,
    long_text_refused,
    message_error,
    own_posts,
    said,
    wall_of,
)
from crawler_client.sources.base import FetchedPage, Item, PageRequest, ParsedPage, SavedPages, SourceSpec, sniff
from icecrawler.errors import FetchError, ParseError
from icecrawler.models import Outcome, Post, Task, TaskKind

if TYPE_CHECKING:
    from bs4 import Tag

__all__ = ["SOURCE", "SPEC", "WeiboPcSource"]

#: ``$CONFIG['domain']`` of a personal profile; enterprise pages use 100206.
DEFAULT_DOMAIN = "100505"
#: The envelope's success code (a string).
OK_CODE = "100000"
#: (pre_page offset, pagebar) of the three chunks of a visible page.
CHUNKS: tuple[tuple[int, int], ...] = ((-1, 0), (0, 0), (0, 1))

_COUNT_PAGE_RE = re.compile(r"countPage=(\d+)")
_PAGE_LINK_RE = re.compile(r"[?&]page=(\d+)")
_FM_VIEW_RE = re.compile(r"FM\.view\((\{.*?\})\)\s*;?\s*</script>", re.DOTALL)
#: A weibo.com page rendered for a logged-in session says so in its ``$CONFIG``, and which page it is.
_LOGGED_IN_RE = re.compile(r"\$CONFIG\['islogin'\]\s*=\s*'1'")
_LOCATION_RE = re.compile(r"\$CONFIG\['location'\]\s*=\s*'([\w-]{1,60})'")
_COUNT_ACTIONS = (("reposts", "fl_forward"), ("comments", "fl_comment"), ("likes", "fl_like"))


def _attr(node: Tag | None, name: str) -> str:
    """An attribute as a string (bs4 returns lists for multi-valued ones); "" when absent."""
    value = node.get(name) if node is not None else None
    return value if isinstance(value, str) else ""


SPEC = SourceSpec(
    name="weibo_pc",
    kinds=frozenset({TaskKind.WeiboUser}),
    default_kind=TaskKind.WeiboUser,
    table="weibo",
    identity="(owner uid, mid): the post's mid attribute",
    base_url="http://127.0.0.1:8800/pc",
    sandbox_site="pc",
)
#: A feed item's ``tbinfo="ouid=…"`` names its author: the timeline's owner, or an account whose post it liked
#: (``rouid=``, a repost's original author, is not matched).
_OUID_RE = re.compile(rb"(?<![A-Za-z])ouid=(\d{1,20})")
#: The pager's ``action-data`` names the visible page a saved chunk belongs to.
_CURRENT_PAGE_RE = re.compile(rb"currentPage=(\d{1,6})")


class WeiboPcSource(PostOrder, SavedPages):
    """Source for ``user:weibo_pc:{uid}`` tasks."""

    spec: ClassVar[SourceSpec] = SPEC
    sniffers: ClassVar[tuple[re.Pattern[bytes], ...]] = (_OUID_RE,)
    #: What the v6 profile page's script sent with its feed calls.
    default_headers: ClassVar[dict[str, str]] = {
        "Accept": "*/*",
        "Accept-Language": "zh-CN,zh;q=0.9",
        "X-Requested-With": "XMLHttpRequest",
        "User-Agent": DESKTOP_UA,
    }

    def saved_target(self, kind: TaskKind, body: bytes) -> str:
        """The owner most feed items name: the feed may show another account's post (a liked one) first."""
        owners = Counter(_OUID_RE.findall(body[: 1 << 20]))
        return owners.most_common(1)[0][0].decode("ascii") if owners else ""

    def first_request(self, task: Task, base_url: str) -> PageRequest:
        """Chunk 0 of page 1."""
        return self.chunk_request(task, base_url.rstrip("/") + "/p/aj/v6/mblog/mbloglist", 1, 0, task.lease_deadline_ms)

    def saved_request(self, task: Task, base_url: str, body: bytes, page: int, chunk: int | None) -> PageRequest:
        """Chunk ``chunk`` of ``page`` (without one, the page its pager names, else 1); without a chunk, the one with
        the pager (``countPage``) is the last."""
        page = page or parse_id(sniff((_CURRENT_PAGE_RE,), body)) or 1
        request = self.first_request(task, base_url)
        chunk = chunk if chunk is not None else (2 if b"countPage" in body else 0)
        request.state["chunk"] = str(chunk)
        request.params.update(
            {
                "page": str(page),
                "pagebar": "1" if chunk == 2 else "0",
                "pre_page": str(page - 1 if chunk == 0 else page),
            }
        )
        request.page = page
        return request

    @staticmethod
    def chunk_request(
        task: Task, url: str, page: int, chunk: int, rnd_ms: int, pages: int | None = None
    ) -> PageRequest:
        """Chunk ``chunk`` (0-2) of visible page ``page``, exactly as the site's own AJAX call; ``pages``: the page
        count the previous page's pager gave (kept in the request's state, so an empty chunk before the last page is
        known for a throttled answer)."""
        domain = task.params.get("domain", DEFAULT_DOMAIN)
        pre_offset, pagebar = CHUNKS[chunk]
        params = {
            "ajwvr": "6",
            "domain": domain,
            "pagebar": str(pagebar),
            "is_ori": "1",
            "id": f"{domain}{task.target}",
            "page": str(page),
            "pre_page": str(page + pre_offset),
            "__rnd": str(rnd_ms),
        }
        state = {"chunk": str(chunk)} | ({"pages": str(pages)} if pages else {})
        return PageRequest(url=url, params=params, page=page, state=state)

    def parse(self, task: Task, request: PageRequest, page: FetchedPage, now_ms: int) -> ParsedPage:
        """Feed items of one chunk; the next request walks chunk 0→1→2, then page N+1 while N < countPage."""
        check_answer(request, page, now_ms)
        html = self._fragment(page)
        chunk = parse_id(request.state.get("chunk", "0"))
        soup = make_soup(html)
        fetched_at = iso_of_ms(now_ms)
        items: list[Item] = []
        long_ids: list[str] = []
        nodes = _all(soup, "action-type", "feed_list_item", "div")
        pages = parse_id(request.state.get("pages", "")) or None  # what the previous page's pager counted
        if not nodes:  # an empty chunk of a page the pager promised is a throttled answer, not the end
            check_not_cut_short(0, request.page, pages, attempts=task.attempts, site=self.name, http_status=page.status)
        owned, others = own_posts(task.target, nodes, _author, page.status)  # leaves out posts the account liked
        for node in owned:
            truncated = _by(node, "action-type", "fl_unfold") is not None  # post_of removes the link
            post = self.post_of(node, task, now_ms, fetched_at)
            if post is not None:
                items.append(post)
                if truncated:
                    long_ids.append(str(post.id))
        total_pages = _count_page(soup, html)
        result = ParsedPage(items=items, total_pages=total_pages, info={"chunk": str(chunk)})
        if long_ids:
            result.info["long_text_ids"] = ",".join(long_ids)
        if others:
            result.info["other_accounts"] = str(others)
        if nodes and chunk < 2:  # a chunk of only another account's posts is not the end of the feed
            result.next_request = self.chunk_request(task, request.url, request.page, chunk + 1, now_ms, pages)
        elif chunk >= 2 and total_pages is not None and request.page < total_pages:
            result.next_request = self.chunk_request(task, request.url, request.page + 1, 0, now_ms, total_pages)
        return result

    def _fragment(self, page: FetchedPage) -> str:
        """The feed HTML: the envelope's ``data`` (``""`` = end of feed), or a profile page's FM.view html."""
        data = _envelope_data(page, "mbloglist", Outcome.Banned)
        if data is None or data == "":
            return ""
        if isinstance(data, dict) and isinstance(data.get("html"), str):
            return str(data["html"])  # a getlongtext answer given to parse: its html holds no feed items
        if not isinstance(data, str):
            raise unparsable(page.body, WEIBO_MARKERS, page.status, "mbloglist: data is not an HTML string")
        return data

    # --- long text (展开全文) ----------------------------------------------------------------------------
    @staticmethod
    def extend_request(base_url: str, post_id: int | str) -> PageRequest:
        """The full text of a truncated post: ``/p/aj/mblog/getlongtext?ajwvr=6&mid={mid}`` (what the
        展开全文 link's ``action-data`` asks for)."""
        return PageRequest(
            url=f"{base_url.rstrip('/')}/p/aj/mblog/getlongtext",
            params={"ajwvr": "6", "mid": str(post_id)},
            state={"extend": str(post_id)},
        )

    def parse_extend(self, request: PageRequest, page: FetchedPage, now_ms: int) -> str:
        """``data.html`` of a getlongtext envelope; an unknown mid (code ≠ 100000) is NotFound. A code-100000 answer
        that holds nothing (``data`` empty, null, or without ``html``) gives "": the post keeps its truncated text, as
        on the JSON sources; failed, the crawl would fail on every visit while the site answers so."""
        check_answer(request, page, now_ms)
        data = _envelope_data(page, "getlongtext", None)
        if data in (None, "", [], {}) or (isinstance(data, dict) and data.get("html") is None):
            return ""
        html = data.get("html") if isinstance(data, dict) else None
        if not isinstance(html, str):
            raise unparsable(page.body, WEIBO_MARKERS, page.status, "getlongtext: no data.html")
        return html

    @staticmethod
    def with_long_text(post: Post, html: str) -> Post:
        """``post`` with the full text from ``parse_extend`` (in place, returned for chaining)."""
        return with_html(post, html)

    def post_of(self, node: Tag, task: Task, now_ms: int, fetched_at: str) -> Post | None:
        """One ``feed_list_item`` as a Post; None without a numeric ``mid``. (Whether the item is the timeline
        owner's post or one it liked is the feed's question: ``parse`` asks it.)"""
        post_id = parse_id(_attr(node, "mid"))
        if not post_id:
            return None
        forward = _by(node, "node-type", "feed_list_forwardContent")
        retweeted_id = parse_id(_attr(node, "omid"))
        if forward is not None:
            if not retweeted_id:
                inner = _by(forward, "mid", True) or _by(forward, "node-type", "feed_list_item_date")
                retweeted_id = parse_id(_attr(inner, "mid") or _attr(inner, "name"))
            forward.extract()  # the original's author, text and counts are not this post's
        user_id = _author(node) or parse_id(task.target)
        content = _by(node, "node-type", "feed_list_content")
        for unfold in _all(content, "action-type", "fl_unfold") if content is not None else []:
            unfold.extract()
        pinned = _is_pinned(node)  # before its badge leaves the text
        for badge in content.find_all(class_="W_icon_feedpin") if content is not None else []:
            holder = badge.parent
            if is_tag(holder) and holder.name == "a" and holder.get_text(strip=True) == badge.get_text(strip=True):
                badge = holder  # the badge's own link goes with it
            badge.extract()
        date = _by(node, "node-type", "feed_list_item_date")
        return Post(
            id=post_id,
            user_id=user_id,
            user_name=_user_name(node),
            text=html_text(content) if content is not None else "",
            html=content.decode_contents().strip() if content is not None else "",
            created_at=_created_at(date, now_ms),
            pinned=pinned,
            retweeted_id=retweeted_id,
            pictures=_pictures(node),
            permalink=_permalink(_attr(date, "href")),
            fetched_at=fetched_at,
            source=self.name,
            **_counts(node),
        )


def _by(node: Tag, attr: str, value: str | bool) -> Tag | None:
    """First descendant with ``attr == value`` (``find`` is several times faster than CSS selectors)."""
    attrs: dict[str, Any] = {attr: value}
    found = node.find(None, attrs)
    return found if is_tag(found) else None


def _all(node: Tag, attr: str, value: str, name: str | None = None) -> list[Tag]:
    """Every descendant (optionally of tag ``name``) with ``attr == value``."""
    attrs: dict[str, Any] = {attr: value}
    return [tag for tag in node.find_all(name, attrs) if is_tag(tag)]


def _envelope_data(page: FetchedPage, what: str, bad_code: Outcome | None) -> Any:
    """``data`` of a ``{"code":"100000","msg":"","data":...}`` envelope. A profile page answers with its
    FM.view feed html; other HTML is a ban/login page (docs/SITE_RESPONSES.md §1.4); another code raises what its
    ``msg`` names (请先登录, 请求过于频繁…), else what the page its ``data`` sends the browser to means (a login, a
    ``sorry`` page, ``/unfreeze``: ``sent_to_error``), else a login wall if its message speaks of logging in
    (``login_worded``), else ``bad_code`` (None: a long-text answer, ``long_text_refused``)."""
    text = decode_body(page.body).strip()
    if not text.startswith("{"):
        fragment = _profile_feed(text)
        if fragment is not None:
            return fragment
        if scan_markers(page.body, WEIBO_MARKERS) is None and text.startswith("<"):
            if _LOGGED_IN_RE.search(text):  # the session works: another page of the site (a profile's info tab)
                location = _LOCATION_RE.search(text)
                raise ParseError(
                    f"{what}: a weibo.com page with no feed ({location[1] if location else 'unnamed'}), "
                    "rendered for a logged-in session",
                    error_class="page-without-feed",
                    http_status=page.status,
                )
            raise fail(
                Outcome.LoginRequired,
                f"{what}: HTML instead of JSON",
                error_class="html-instead-of-json",
                http_status=page.status,
            )
        raise unparsable(page.body, WEIBO_MARKERS, page.status, f"{what}: not JSON")
    doc = load_json(text, what=what, http_status=page.status)
    if isinstance(doc, dict) and "code" not in doc and "ok" in doc:
        wall = wall_of(doc, page.status) or message_error(doc, page.status)
        if wall is not None:
            raise wall
        raise unparsable(
            page.body,
            WEIBO_MARKERS,
            page.status,
            f'{what}: an {{"ok": ...}} answer of today\'s JSON APIs, not the v6 code/msg/data envelope '
            "(parse weibo.com /ajax answers with the weibo_web source, m.weibo.cn with weibo_mobile)",
        )
    if not isinstance(doc, dict) or "code" not in doc:
        raise unparsable(page.body, WEIBO_MARKERS, page.status, f"{what}: not a code/msg/data envelope")
    code = str(doc["code"])
    if code != OK_CODE:
        named = message_error(doc, page.status)  # a msg that names a login, a rate limit or a frozen account
        if named is not None:
            raise named
        data = doc.get("data")
        if "pagenotfound" in str(data)[:300]:  # data: "https://weibo.com/sorry?pagenotfound&"
            raise fail(
                Outcome.NotFound,
                f"{what} code {code[:20]!r}: the site's page-not-found",
                error_class="page-not-found",
                http_status=page.status,
            )
        sent = sent_to_error(data[:300], page.status) if isinstance(data, str) else None
        if sent is not None:  # data: the page its script goes to ("https://weibo.com/sorry?sysbusy")
            raise sent
        if bad_code is None:
            raise long_text_refused(said(doc), page.status, f"{what} code {code[:20]!r}")
        raise login_worded(said(doc), page.status) or fail(
            bad_code,
            f"{what} code {code[:20]!r}: {said(doc)[:60]!r}",
            error_class=f"weibo-code-{code[:20]}",
            http_status=page.status,
        )
    return doc.get("data")


def _profile_feed(text: str) -> str | None:
    """The feed block of a full profile page (the ``FM.view`` whose html holds ``feed_list_item``)."""
    if "FM.view(" not in text:
        return None
    for match in _FM_VIEW_RE.finditer(text):
        try:
            view = load_json(match[1], what="FM.view")
        except FetchError:
            continue
        html = view.get("html") if isinstance(view, dict) else None
        if isinstance(html, str) and "feed_list_item" in html:
            return html
    return None


def _user_name(node: Tag) -> str:
    """The author's nick: the WB_info link, else ``nick-name``, else the avatar's title."""
    info = node.find("div", class_="WB_info")
    candidates = (
        (info.find("a") if is_tag(info) else None, ""),
        (_by(node, "node-type", "feed_list_content"), "nick-name"),
        (node.find("a", class_="W_face_radius"), "title"),
    )
    for found, attr in candidates:
        if is_tag(found):
            name = _attr(found, attr) if attr else found.get_text(strip=True)
            if name:
                return name
    return ""


def _created_at(date: Tag | None, now_ms: int) -> str:
    """``@date`` (epoch ms) first, then ``@title`` (YYYY-MM-DD HH:MM), then the display text."""
    if date is None:
        return ""
    return (
        created_at_of(_attr(date, "date"), now_ms)
        or resolve_created_at(_attr(date, "title"), now_ms)
        or resolve_created_at(date.get_text(), now_ms)
    )


def _author(node: Tag) -> int:
    """The ``ouid`` a feed item's ``tbinfo`` names (0 when it names none): the owner's, or, for a post the account
    liked ("她5小时前赞过的微博"), its author's."""
    return parse_id((parse_qs(_attr(node, "tbinfo")).get("ouid") or [""])[0])


def _is_pinned(node: Tag) -> bool:
    """The pinned post is marked ``feedtype="top"`` and/or carries a "置顶" badge above its author line
    (``span.W_icon_feedpin``, or a ``WB_cardtitle_b`` title); none of these is in the saved samples that
    docs/SITE_RESPONSES.md was checked against."""
    if node.get("feedtype") == "top" or node.find(class_="W_icon_feedpin") is not None:
        return True
    badge = node.find("div", class_="WB_cardtitle_b") or _by(node, "node-type", "feed_list_top")
    return is_tag(badge) and "置顶" in badge.get_text()


def _counts(node: Tag) -> dict[str, int]:
    """转发/评论/赞: the last ``em`` of each action link is the number, or the label when it is zero."""
    counts: dict[str, int] = {}
    for field_name, action in _COUNT_ACTIONS:
        link = _by(node, "action-type", action)
        ems = link.find_all("em") if link is not None else []
        counts[field_name] = parse_count(ems[-1].get_text(strip=True)) if ems else 0
    return counts


def _pictures(node: Tag) -> list[str]:
    """The post's own preview images (a repost's are the original's, removed before); a video's cover
    (inside an element carrying ``video_src``) is not a picture."""
    urls: list[str] = []
    for media in _all(node, "node-type", "feed_list_media_prev"):
        for img in media.find_all("img"):
            src = _attr(img, "src")
            if src and src not in urls and img.find_parent(attrs={"video_src": True}) is None:
                urls.append("https:" + src if src.startswith("//") else src)
    return urls


def _permalink(href: str) -> str:
    """``/{uid}/{bid}?from=...`` → ``https://weibo.com/{uid}/{bid}``; "" for a link whose host Python's URL parser
    refuses (``//[weibo.com/...``), as for none: a bad link loses the post's permalink, not the page."""
    if not href:
        return ""
    if (parts := split_url(href if not href.startswith("//") else "https:" + href)) is None:
        return ""
    return f"https://weibo.com{parts.path}" if not parts.netloc else f"https://{parts.netloc}{parts.path}"


def _count_page(soup: Tag, html: str) -> int | None:
    """``countPage`` from the pager (last chunk only), else the highest ``page=K`` of its page list."""
    if match := _COUNT_PAGE_RE.search(html):
        return int(match[1]) if len(match[1]) < 10 else None
    pages = [
        int(m[1])
        for a in _all(soup, "bpfilter", "page", "a")
        if (m := _PAGE_LINK_RE.search(_attr(a, "href"))) and len(m[1]) < 10
    ]
    return max(pages) if pages else None


#: What the source registry (``icecrawler.sourcespec``) reads from this module.
SOURCE = WeiboPcSource
