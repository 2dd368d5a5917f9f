"""ECSHOP malls: product reviews (``goods.php`` + ``comment.php?act=gotopage``) and category listings
(``category.php?id=N&page=P``), one Source for both task kinds.

Reviews (``reviews:ecshop:{goods_id}``): page 1 is the product page, whose ``#ECS_COMMENT`` div holds the
rendered ``comments_list.lbi``; pages 2.. are ``comment.php?act=gotopage&page=P&id=N&type=0&{ms}`` JSON
envelopes ``{error, message, content}`` whose ``content`` is the same fragment (``message`` is noise, extra
keys such as ``pages`` are ignored, old installs answer raw GBK). The pager says "总计 N 个记录，共 M 页".
The markup has no comment ids, so ``Review.id`` is a stable hash of (product, user, displayed time, text).
The star rank lives only in the image file name (``stars5.gif``). Admin replies (``管理员：``) are not reviews.
Cursor semantics: ``ReviewOrder`` (comment_id DESC order ≈ newest first).

Listings (``listing:ecshop:{cat_id}``): every ``goods.php?id=N`` in the goods list, in page order, as
product-id strings; the pager's page links/"共 M 页" give the total. A missing category redirects to the shop
index (``Location: ./``), which we report as NotFound. String items are never "older" (no cursor).

Login (members-only shops): ``login_request`` builds the ``user.php`` form POST; ``is_logged_in`` and
``shows_login_wall`` read a response.
"""

from __future__ import annotations

import hashlib
import re
from typing import TYPE_CHECKING, Any, ClassVar

from crawler_client.sources._cursor import ReviewOrder
from crawler_client.sources._dates import iso_of_ms, resolve_created_at
from crawler_client.sources._decode import (
    decode_body,
    html_text,
    is_utf8,
    legacy_charset,
    load_bytewise_json,
    load_json,
    make_soup,
    strip_php_notices,
)
from crawler_client.sources._detect import (
    ECSHOP_MARKERS,
    check_final_url,
    check_http,
    check_not_cut_short,
    fail,
    header,
    redirect_target,
    scan_markers,
    split_url,
    unparsable,
)
from crawler_client.sources._headers import DESKTOP_UA
from crawler_client.sources.base import (
    FetchedPage,
    FormLogin,
    Item,
    PageRequest,
    ParsedPage,
    SavedPages,
    SourceSpec,
    sniff,
)
from icecrawler.errors import ParseError
from icecrawler.models import Outcome, Review, Task, TaskKind

if TYPE_CHECKING:
    from bs4 import Tag

__all__ = ["SOURCE", "SPEC", "EcshopSource", "is_logged_in", "login_request", "shows_login_wall"]

#: The empty comment list's text.
NO_COMMENTS = "暂时还没有任何用户评论"
#: The label (``font.f1``) that starts an admin reply paragraph.
ADMIN_REPLY = "管理员"

_PAGER_RE = re.compile(r"总计\s*(\d{1,9})\s*个记录.{0,40}?共\s*(\d{1,9})\s*页", re.DOTALL)
_RECORD_COUNT_RE = re.compile(r"共\s*(\d{1,9})\s*条评论")
_GOTO_PAGE_RE = re.compile(r"gotoPage\(\s*(\d{1,9})")
_STARS_RE = re.compile(r"stars?[_-]?(\d)\D*$", re.IGNORECASE)
_GOODS_LINK_RE = re.compile(r"goods\.php\?(?:[^\"'#]*?&(?:amp;)?)?id=(\d{1,18})(?!\d)")
_PAGE_PARAM_RE = re.compile(r"[?&;]page=(\d{1,9})(?!\d)")


def login_request(base_url: str, username: str, password: str) -> PageRequest:
    """The ``user.php`` login POST exactly as the default theme's ``formLogin`` sends it."""
    return PageRequest(
        url=f"{base_url.rstrip('/')}/user.php",
        method="POST",
        data={
            "username": username,
            "password": password,
            "remember": "1",
            "act": "act_login",
            "back_act": "",
            "submit": "",
        },
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )


def is_logged_in(page: FetchedPage) -> bool:
    """A logged-in ECSHOP page shows the member zone with a logout link (or the 登录成功 message page)."""
    body = page.body
    return b"act=logout" in body or any(m in body for m in ("登录成功".encode(), "登录成功".encode("gbk")))


def shows_login_wall(page: FetchedPage) -> bool:
    """The response is (or redirected to) the member login form instead of the content asked for."""
    parts = split_url(redirect_target(page))  # None: an address Python refuses says nothing of a login form
    if parts is not None and "user.php" in parts.path and not is_logged_in(page):
        return True
    return scan_markers(page.body, ECSHOP_MARKERS[:2]) is not None and not is_logged_in(page)


SPEC = SourceSpec(
    name="ecshop",
    kinds=frozenset({TaskKind.ProductReviews, TaskKind.Listing}),
    default_kind=TaskKind.ProductReviews,
    table="review",
    identity="(ecshop, goods id, hash of user + displayed time + text): the pages show no ids",
    base_url="http://127.0.0.1:8800/ecshop",
    login="form",
    sandbox_site="ecshop",
    shows_item_ids=False,
)
#: Saved answers: a goods page or comment pager names its goods id, a listing its category.
_GOODS_ID_RE = re.compile(rb"(?:goods\.php\?id=|gotoPage\(\d+,\s*)(\d{1,18})")
_CATEGORY_ID_RE = re.compile(rb"category\.php\?(?:[^\"'>]*?&(?:amp;)?)?id=(\d{1,18})")


class EcshopSource(ReviewOrder, SavedPages):
    """Source for ``reviews:ecshop:{goods_id}`` and ``listing:ecshop:{cat_id}`` tasks."""

    spec: ClassVar[SourceSpec] = SPEC
    #: Members-only shops: the ``user.php`` form.
    form_login: ClassVar[FormLogin] = FormLogin(login_request, is_logged_in)
    #: A browser's page request (ECSHOP's own comment pager calls use the same session).
    default_headers: ClassVar[dict[str, str]] = {
        "Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
        "Accept-Language": "zh-CN,zh;q=0.9",
        "User-Agent": DESKTOP_UA,
    }

    def first_request(self, task: Task, base_url: str) -> PageRequest:
        """Listing: ``category.php?id=N&page=1``; reviews: ``goods.php?id=N`` (page 1 of the comments)."""
        base = base_url.rstrip("/")
        if task.kind is TaskKind.Listing:
            return PageRequest(url=f"{base}/category.php", params={"id": task.target, "page": "1"})
        return PageRequest(url=f"{base}/goods.php", params={"id": task.target})

    # --- saved answers (``icecrawler parse``) --------------------------------------------------------------
    def saved_kind(self, body: bytes) -> TaskKind:
        """A goods list without a comment box is a listing."""
        listing = b"ECS_COMMENT" not in body and b"comments" not in body and b"goods.php?id=" in body
        return TaskKind.Listing if listing else TaskKind.ProductReviews

    def saved_target(self, kind: TaskKind, body: bytes) -> str:
        return sniff((_CATEGORY_ID_RE,) if kind is TaskKind.Listing else (_GOODS_ID_RE,), body)

    def saved_request(self, task: Task, base_url: str, body: bytes, page: int, chunk: int | None) -> PageRequest:
        """A JSON review answer is a ``comment.php`` page (2 unless told); a goods page keeps page 1."""
        if task.kind is TaskKind.ProductReviews and body.lstrip().startswith(b"{"):
            number = page or 2
            return PageRequest(
                url=f"{base_url}/comment.php?act=gotopage&page={number}&id={task.target}&type=0&0", page=number
            )
        page = page or 1
        request = self.first_request(task, base_url)
        if page > 1:
            request.params["page"] = str(page)
        if task.kind is TaskKind.Listing:
            request.page = page
        return request

    @staticmethod
    def comment_page_request(base_url: str, goods_id: str, page: int, cache_ms: int) -> PageRequest:
        """``comment.php?act=gotopage&page=P&id=N&type=0&{ms}``: the trailing cache-buster has no name, so
        the query is written into the URL as ``common.js`` builds it."""
        return PageRequest(
            url=f"{base_url.rstrip('/')}/comment.php?act=gotopage&page={page}&id={goods_id}&type=0&{cache_ms}",
            page=page,
        )

    def parse(self, task: Task, request: PageRequest, page: FetchedPage, now_ms: int) -> ParsedPage:
        """A shop sent to its installer first (whatever that answers), login walls (members-only shops redirect to
        ``user.php``), then by task kind."""
        if _sent_to_installer(page, request.url):
            raise fail(
                Outcome.Busy,
                f"ECSHOP sent us to its installer ({redirect_target(page)[:120]}): its install lock is missing",
                error_class="shop-installer",
                http_status=page.status,
            )
        check_http(page, now_ms)
        check_final_url(page, request.url)
        if shows_login_wall(page):
            raise fail(
                Outcome.LoginRequired,
                "ECSHOP login form instead of content",
                error_class="login-form",
                http_status=page.status,
            )
        if task.kind is TaskKind.Listing:
            return self._parse_listing(task, request, page)
        return self._parse_reviews(task, request, page, now_ms)

    # --- reviews ----------------------------------------------------------------------------------------
    def _parse_reviews(self, task: Task, request: PageRequest, page: FetchedPage, now_ms: int) -> ParsedPage:
        """A goods page or a ``comment.php`` envelope: the same comment list either way."""
        # A shop running with display_errors on prints PHP notices into its answers, around the JSON too.
        legacy = _charset_of(page)
        text = strip_php_notices(decode_body(page.body, legacy))
        if text.startswith("{"):
            fragment = _envelope_content(_load_envelope(page.body, text, page.status, legacy), page)
        else:
            if _redirected_away(page, "goods.php"):
                raise fail(
                    Outcome.NotFound,
                    f"goods {task.target} redirected to {redirect_target(page)[:120]}",
                    error_class="no-such-goods",
                    http_status=page.status,
                )
            fragment = text
        soup = make_soup(fragment)
        box = soup.select_one("#ECS_COMMENT") or soup
        comment_list = box.select_one("ul.comments")
        base = request.url.split("/goods.php")[0].split("/comment.php")[0]
        if comment_list is None and NO_COMMENTS not in fragment and not box.select("li.word"):
            if box is not soup and "/goods.php" in request.url and scan_markers(page.body, ECSHOP_MARKERS) is None:
                # The goods page's comment box without its list: a theme that fills it by script, or a page cached
                # whole with the ``insert`` placeholder left in it. Page 1 comes from comment.php, as such a script
                # asks for it (a comment.php answer without a list is an error: no loop).
                return ParsedPage(
                    items=[],
                    next_request=self.comment_page_request(base, task.target, 1, now_ms),
                    info={"page": "1", "comments": "loaded by script"},
                )
            raise unparsable(page.body, ECSHOP_MARKERS, page.status, "ECSHOP: no comment list in the response")
        fetched_at = iso_of_ms(now_ms)
        items: list[Item] = [
            review
            for li in (comment_list or box).select("li")
            if (review := self._review(li, task.target, now_ms, fetched_at)) is not None
        ]
        pager_text = (box.select_one("#pager") or box).get_text(" ")
        record_count, page_count = _pager_counts(pager_text, box)
        current = _current_page(request)
        check_not_cut_short(
            len(items), current, page_count, attempts=task.attempts, site="ECSHOP", http_status=page.status
        )
        result = ParsedPage(items=items, total_pages=page_count, info={"page": str(current)})
        if record_count is not None:
            result.info["record_count"] = str(record_count)
        if items and page_count is not None and current < page_count:
            result.next_request = self.comment_page_request(base, task.target, current + 1, now_ms)
        return result

    def _review(self, li: Tag, goods_id: str, now_ms: int, fetched_at: str) -> Review | None:
        """One ``li`` of the list as a Review; None for the empty-list line and anything without a body."""
        user_node, time_node = li.select_one("font.f2"), li.select_one("font.f3")
        if user_node is None and time_node is None:
            return None
        user = user_node.get_text(strip=True) if user_node is not None else ""
        shown_time = time_node.get_text(" ", strip=True).strip("()（） ") if time_node is not None else ""
        paragraphs = [p for p in li.select("p") if not _is_admin_reply(p)]
        content = html_text(paragraphs[0]) if paragraphs else ""
        # The id hashes the text with its zero-width spaces, as ids were made before they were dropped from the
        # text: a review stored then keeps its id (and its one row) when crawled again.
        hashed = html_text(paragraphs[0], keep_zero_width=True) if paragraphs else ""
        digest = hashlib.sha1("\x1f".join((goods_id, user, shown_time, hashed)).encode("utf-8")).hexdigest()
        return Review(
            id=digest[:20],
            product_id=goods_id,
            source=self.name,
            user=user or "匿名用户",
            content=content,
            score=_stars(li),
            created_at=resolve_created_at(shown_time, now_ms),
            fetched_at=fetched_at,
        )

    # --- listings ---------------------------------------------------------------------------------------
    def _parse_listing(self, task: Task, request: PageRequest, page: FetchedPage) -> ParsedPage:
        """Product ids of the goods list, in page order; missing categories are NotFound."""
        if _redirected_away(page, "category.php"):
            raise fail(
                Outcome.NotFound,
                f"category {task.target} redirected to {redirect_target(page)[:120]}",
                error_class="no-such-category",
                http_status=page.status,
            )
        html = decode_body(page.body, _charset_of(page))
        soup = make_soup(html)
        scope = (
            soup.select_one('form[name="compareForm"]')
            or soup.select_one(".goodsList")
            or soup.select_one("#goodsList")
            or soup
        )
        ids: list[str] = []
        for anchor in scope.select("a[href]"):
            href = anchor.get("href")
            match = _GOODS_LINK_RE.search(href) if isinstance(href, str) else None
            if match and match[1] not in ids:
                ids.append(match[1])
        pager = soup.select_one("#pager") or soup.select_one(".pagebar")
        if scope is soup and not _mentions_category(html, task.target):
            if not ids or scan_markers(page.body, ECSHOP_MARKERS) is not None:
                # Not the shop at all (a closed shop, a database error, a firewall's notice): no word on the category.
                raise unparsable(page.body, ECSHOP_MARKERS, page.status, f"category {task.target}: no goods list")
            # The shop, but not this category (its index served without a visible redirect).
            raise fail(
                Outcome.NotFound,
                f"category {task.target}: no goods list form and no self-link",
                error_class="no-such-category",
                http_status=page.status,
            )
        current = _current_page(request)
        page_count = _listing_page_count(pager) if pager is not None else None
        items: list[Item] = list(ids)
        result = ParsedPage(
            items=items, total_pages=page_count or (current if ids else None), info={"page": str(current)}
        )
        if ids and page_count is not None and current < page_count:
            params = dict(request.params)
            params["page"] = str(current + 1)
            result.next_request = PageRequest(url=request.url, params=params, page=request.page + 1)
        return result


def _envelope_content(doc: Any, page: FetchedPage) -> str:
    """``content`` of a ``{error, message, content}`` envelope; ``error:1`` or no content is a ParseError."""
    if not isinstance(doc, dict) or not isinstance(doc.get("content"), str):
        raise unparsable(page.body, ECSHOP_MARKERS, page.status, "comment.php: no content in the envelope")
    if doc.get("error") not in (0, "0", None, False):
        raise ParseError(
            f"comment.php error {str(doc.get('error'))[:10]}: {str(doc.get('message'))[:60]}",
            error_class="ecshop-error",
            http_status=page.status,
        )
    content: str = doc["content"]
    return content


def _charset_of(page: FetchedPage) -> str:
    """The codec for a shop's non-UTF-8 answer: Big5 where the shop says so (ECSHOP's Big5 edition), else GB18030."""
    return legacy_charset(page.body, header(page.headers, "content-type"))


def _load_envelope(body: bytes, text: str, status: int, legacy: str) -> Any:
    """The ``comment.php`` envelope: a GBK or Big5 shop's (not UTF-8) as ``cls_json`` wrote it, byte by byte
    (``load_bytewise_json``), else as text; such an answer that does not parse on its bytes gets the text's verdict."""
    if not is_utf8(body):
        try:
            return load_bytewise_json(body, what="comment.php", http_status=status, charset=legacy)
        except ParseError:
            pass
    return load_json(text, what="comment.php", http_status=status)


def _redirected_away(page: FetchedPage, script: str) -> bool:
    """ECSHOP answers an unknown goods/category id with ``Location: ./``: a redirect away from ``script`` to the shop
    index (a path ending in ``/`` or ``index.php``, without a query). A redirect anywhere else (a firewall's
    verification page) is no proof the target is gone: the page it leads to is read like any other."""
    target = redirect_target(page)
    if not target or script in target or (parts := split_url(target)) is None:
        return False
    return not parts.query and (parts.path.endswith("/") or parts.path.endswith("index.php") or parts.path in ("", "."))


#: The installer's address, where ECSHOP's ``init.php`` (and its forks') sends every request while the install lock
#: file is missing: ``./install/index.php``, or the ``install/`` folder itself.
_INSTALLER_PATH_RE = re.compile(r"(?:^|/)install/(?:index\.php)?$", re.IGNORECASE)


def _sent_to_installer(page: FetchedPage, request_url: str) -> bool:
    """The answer redirects (or was redirected) to the shop's installer: a shop out of order, not a gone goods or
    category (that path also ends in ``index.php`` without a query, as the index does) and not the site refusing us.
    Checked before the HTTP status: where the owner removed the installer, the redirect lands on a 404."""
    target = redirect_target(page)
    if not target or target == request_url or (parts := split_url(target)) is None:
        return False
    return _INSTALLER_PATH_RE.search(parts.path) is not None


def _current_page(request: PageRequest) -> int:
    """The page number a request asked for (``page=`` in its params or URL), else ``request.page``."""
    value = request.params.get("page", "")
    if not value and (match := _PAGE_PARAM_RE.search(request.url)):
        value = match[1]
    return int(value) if value.isdigit() else max(request.page, 1)


def _pager_counts(pager_text: str, box: Tag) -> tuple[int | None, int | None]:
    """(record_count, page_count) from "总计 N 个记录，共 M 页", else from "共N条评论" and gotoPage links."""
    if match := _PAGER_RE.search(pager_text):
        return int(match[1]), int(match[2])
    record = _RECORD_COUNT_RE.search(box.get_text(""))
    pages = [int(m[1]) for a in box.select("a[href]") if (m := _GOTO_PAGE_RE.search(str(a.get("href"))))]
    return (int(record[1]) if record else None), (max(pages) if pages else None)


def _listing_page_count(pager: Tag) -> int | None:
    """ "共 M 页" if the simple pager shows it, else the highest ``page=K`` among the pager's links."""
    if match := _PAGER_RE.search(pager.get_text(" ")):
        return int(match[2])
    pages = [int(m[1]) for a in pager.select("a[href]") if (m := _PAGE_PARAM_RE.search(str(a.get("href"))))]
    for now in pager.select(".page_now"):
        text = now.get_text(strip=True)
        if text.isascii() and text.isdigit() and len(text) < 10:  # isdigit alone takes ² (int refuses it)
            pages.append(int(text))
    for option in pager.select("option[value]"):
        value = option.get("value")
        if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) < 10:
            pages.append(int(value))
    return max(pages) if pages else 1


def _mentions_category(html: str, cat_id: str) -> bool:
    """A real category page links to itself (breadcrumb, sort links, pager form)."""
    return (
        re.search(rf"category\.php\?(?:[^\"'>]*?&(?:amp;)?)?id={re.escape(cat_id)}(?!\d)", html) is not None
        or f'name="category" value="{cat_id}"' in html
    )


def _is_admin_reply(paragraph: Tag) -> bool:
    """The shop's reply: its paragraph opens with the label (管理员：) in ``font.f1``. The review's own paragraph has no
    label, and a buyer's text may well start with the word itself (addressing the shop): still the review."""
    label = paragraph.select_one("font.f1")
    return label is not None and ADMIN_REPLY in label.get_text()[:8]


def _stars(li: Tag) -> int:
    """The rank from the ``stars{N}.gif`` file name: the only place ECSHOP puts it."""
    for img in li.select("img[src]"):
        match = _STARS_RE.search(str(img.get("src")).rsplit("/", 1)[-1].split(".")[0])
        if match:
            return min(max(int(match[1]), 0), 5)
    return 0


#: What the source registry (``icecrawler.sourcespec``) reads from this module.
SOURCE = EcshopSource
