"""JD product reviews, through one of two endpoints (``sources.jd.endpoint``) that answer the same body:

* ``club`` (default): ``club.jd.com/comment/productPageComments.action`` as JSONP ``fetchJSON_comment98(...)``
  (or plain JSON without ``callback``), still answered without a cookie in 2025;
* ``api``: ``api.m.jd.com/?appid=item-v3&functionId=pc_club_productPageComments&client=pc&body={...}``, the
  form JD's item pages moved to in 2025 (``base_url`` is then the API host). Its risk control wants signed
  calls (``h5st``); we do not sign (out of scope, docs/SOURCES.md), so an unsigned call may be refused.

Requests ask for ``sortType=6`` (time order) from ``page=0`` (0-based; ``PageRequest.page`` stays 1-based)
and follow pages while the response has comments and ``page + 1 < maxPage`` (or ``hasMore``/``hasNextPage``; an
answer that gives no page count, like the older ``productpage`` form, by its comment total, else while its pages are
full). Ids are
int64 (kept as decimal strings), counts may be strings ("100万+"), ``content`` carries HTML entities. Newer item
pages read reviews from ``getLegoWareDetailComment``, whose ``commentInfoList[]`` rows (``commentId``,
``userNickName``, ``commentData`` or ``tagCommentContent``, ``commentDate``, ``commentScore``) parse too, and so do
the same rows of ``getCommentListPage`` (the 2025 item page's signed call, which we do not make; a browser's saved
answer checks with ``icecrawler parse``): under ``result.floors[]`` (or their ``subFloors``), the floor whose ``mId`` is
``commentlist-list`` holds them in ``data[]``, the pager is ``result.pageInfo.data`` (``hasNextPage``, ``maxPage``).

Refusals: an empty body, ``{}`` or an object without comments is LoginRequired ("blocked", what JD answers
without a logged-in cookie since ≈2023). Risk control is Banned with its own ``error_class``: HTTP 403
(``jd-risk-403``), an ``x-rp-content`` header or body carrying code 605 (``jd-risk-605``; the API gateway's queue,
code 601, is RateLimited ``jd-queuing`` for the ``wait`` it names), a "系统繁忙"
answer (``jd-system-busy``), or a redirect to the ``risk_handler`` page (``jd-risk-redirect``) or to the
``pc-frequent-pro.pf.jd.com`` rate-limit page (``jd-frequent-redirect``), by HTTP or by a page's script. A login page
served in place of the answer is LoginRequired (``jd-login-page``), and so is an answer saying there is no login
(code 3, ``resultCode`` -100, 未登录, "pin is null", a passport ``url``: ``jd-not-login``); risk control's
``disposal`` in the body is Banned (``jd-risk-disposal``). Cursor semantics: ``ReviewOrder``.
"""

from __future__ import annotations

import base64
import binascii
import html
import json
import re
from collections.abc import Callable
from typing import Any, ClassVar
from urllib.parse import parse_qs

from crawler_client.sources._counts import parse_count
from crawler_client.sources._cursor import ReviewOrder
from crawler_client.sources._dates import created_at_of, iso_of_ms
from crawler_client.sources._decode import as_dict, decode_body, first_text, load_json, strip_jsonp
from crawler_client.sources._detect import (
    TOO_FREQUENT_MARKERS,
    check_final_url,
    check_http,
    check_not_cut_short,
    fail,
    header,
    redirect_target,
    split_url,
    unparsable,
)
from crawler_client.sources._headers import DESKTOP_UA
from crawler_client.sources.base import FetchedPage, Item, PageRequest, ParsedPage, SavedPages, SourceSpec
from icecrawler.errors import ConfigError, FetchError, ParseError
from icecrawler.models import Outcome, Review, Task, TaskKind

__all__ = ["ENDPOINTS", "SOURCE", "SPEC", "JdSource"]

#: The callback name JD's own page uses.
CALLBACK = "fetchJSON_comment98"
#: Bodies shorter than this cannot hold a comment page: the "blocked" answer.
MIN_BODY = 8
CLUB_PATH = "/comment/productPageComments.action"
#: Comments per page we ask for; a full page of an answer without a page count may have more after it.
PAGE_SIZE = 10
#: The most pages JD serves of one product's comments (``maxPage`` is at most this).
MAX_PAGES = 100
#: The keys by which an answer says how many pages there are (or whether one more follows).
_PAGING_KEYS = ("maxPage", "totalPage", "hasMore", "hasNextPage")
#: ``getCommentListPage``'s floor of comment rows (its ``data`` list).
_LIST_FLOOR = "commentlist-list"
#: The API gateway's code for a call without a valid login: public JD scripts read ``code`` 3 from api.m.jd.com's
#: ``client.action`` as "the cookie has expired" (NobyDa's JD_DailyBonus), and JD's 7FRESH front end its gateway's 3 as
#: "not logged in". With an ``echo`` beside it, it was taken for our own malformed call (``jd-bad-request``).
NOT_LOGGED_IN_CODE = "3"
#: The same in the ``{"resultCode": …, "resultMsg": …, "success": false}`` shape other api.m.jd.com services answer
#: (-100 用户未登录, as a 2026 JD client's tests record it from a real device).
NOT_LOGGED_IN_RESULT = "-100"
#: Where a JD answer words a refusal: ``msg``/``message`` (club, the gateway), ``echo`` (the gateway's own errors),
#: ``resultMsg`` (the ``resultCode`` shape, e.g. ``{"resultCode":500,"resultMsg":"系统繁忙"}``).
_MESSAGE_KEYS = ("msg", "message", "echo", "resultMsg")
#: ``sources.jd.endpoint`` values.
ENDPOINTS = ("club", "api")
#: The keys comment rows sit under in the answers we know (``getLegoWareDetailComment`` nests them).
_ROW_KEYS = ("comments", "commentInfoList")
#: Where a row's text is, first found first: ``content`` (club), ``commentData`` (the item page's rows), and
#: ``tagCommentContent``, which 2025–2026 item-page rows fill instead when ``commentData`` is empty.
_TEXT_KEYS = ("content", "commentData", "tagCommentContent")
#: Where a row's time is, first readable one first: ``creationTime`` (club), ``commentDate`` (the item page's rows);
#: either may be text, epoch seconds or epoch ms, a number or a digit string (``created_at_of``), or null.
_DATE_KEYS = ("creationTime", "commentDate")
#: How deep and how many JSON nodes ``_rows`` looks through for them.
_MAX_DEPTH = 5
_MAX_NODES = 2000
_BUSY = ("系统繁忙", "系統繁忙")
#: JD's login pages by host: the desktop passport, the mobile login and its older address.
_LOGIN_HOSTS = ("passport.jd.com", "plogin.m.jd.com", "passport.m.jd.com")
#: What JD's login page carries (served in place of the answer, without a redirect).
_LOGIN_PAGE = (*_LOGIN_HOSTS, "欢迎登录")
#: How JD's services word a call without a valid login beside the gateway's codes: 未登录 (用户未登录) and the cart's
#: "pin is null" (a 2026 JD client reads both, and a ``url`` to a login page, as the login wall).
_NOT_LOGGED_IN_WORDS = ("未登录", "pin is null")
#: JD's home page, by its two host names: ``_is_refused_item_landing`` reads the address an ``_HOME_URL_RE`` match is.
_HOME_HOSTS = frozenset({"www.jd.com", "jd.com"})
#: An address on JD's home page hosts, absolute or protocol-relative, up to the quote, space or tag around it.
_HOME_URL_RE = re.compile(r"(?<![\w.-])(?:https?:)?//(?:www\.)?jd\.com(?![\w.-])[^\s\"'<>\\]*", re.IGNORECASE)


def _is_refused_item_landing(url: str) -> bool:
    """Whether ``url`` is JD's home page as the landing of a refused item page: host ``www.jd.com`` or ``jd.com``,
    path ``/`` or none, and in its query ``from=pc_item…`` with ``reason=403``, or ``from=pc_item_sd`` (parameters in
    any order; ``&amp;`` as an HTML attribute writes ``&``). The home page's other addresses say nothing."""
    parts = split_url(html.unescape(url))  # a protocol-relative address splits as well
    if parts is None or (parts.hostname or "").lower() not in _HOME_HOSTS or parts.path not in ("", "/"):
        return False
    query = parse_qs(parts.query)
    sent_from, reasons = query.get("from", []), query.get("reason", [])
    return "pc_item_sd" in sent_from or (any(f.startswith("pc_item") for f in sent_from) and "403" in reasons)


#: The pages JD sends a client it refuses to, by their address (an HTTP redirect's target, or a page's script):
#: risk control's verification page (``cfe.m.jd.com/privatedomain/risk_handler/...``) and, seen from item pages in
#: 2025–2026, the rate-limit page on ``pc-frequent-pro.pf.jd.com`` (``?from=pc_item&reason=403``), or its older form,
#: JD's home page with the refusal in its query (``www.jd.com/?from=pc_item&reason=403``, ``?from=pc_item_sd``: public
#: scripts of 2024–2025 stop on either, "the account is restricted"). All are Banned: the host is held off and the
#: logged-in account rests, whose block public reports say follows it.
#: Each is found by a pattern and, where its address alone is not enough, confirmed by a test of the match.
_REFUSAL_PAGES: tuple[tuple[re.Pattern[str], Callable[[str], bool] | None, str, str], ...] = (
    (re.compile(r"/risk_handler\b"), None, "jd-risk-redirect", "risk control"),
    (
        re.compile(r"[\w-]*frequent[\w-]*\.pf\.jd\.com", re.IGNORECASE),
        None,
        "jd-frequent-redirect",
        "rate-limit page",
    ),
    (_HOME_URL_RE, _is_refused_item_landing, "jd-frequent-redirect", "home page for a refused item"),
)


def _as_str_id(value: object) -> str:
    """An int64 id (int or digit string) as a decimal string; JSON ints beyond 2^53 stay exact."""
    if isinstance(value, bool):
        return ""
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return value.strip()
    return ""


SPEC = SourceSpec(
    name="jd",
    kinds=frozenset({TaskKind.ProductReviews}),
    default_kind=TaskKind.ProductReviews,
    table="review",
    identity="(jd, product id, commentId)",
    base_url="http://127.0.0.1:8800/jd",
    sandbox_site="jd",
    # "club" (productPageComments.action JSONP) or "api" (api.m.jd.com; base_url is then the API host).
    options={"endpoint": "club"},
)
_PRODUCT_RE = re.compile(rb'"productId"\s*:\s*"?(\d{1,20})')


class JdSource(ReviewOrder, SavedPages):
    """Source for ``reviews:jd:{sku}`` tasks."""

    spec: ClassVar[SourceSpec] = SPEC
    sniffers: ClassVar[tuple[re.Pattern[bytes], ...]] = (_PRODUCT_RE,)
    #: What the item page's script sends with its comment calls.
    default_headers: ClassVar[dict[str, str]] = {
        "Accept": "*/*",
        "Accept-Language": "zh-CN,zh;q=0.9",
        "User-Agent": DESKTOP_UA,
    }
    #: ``sources.jd.*`` settings this source reads (``get_source`` passes them).
    OPTIONS: ClassVar[tuple[str, ...]] = ("endpoint",)

    def __init__(self, endpoint: str = "club") -> None:
        if endpoint not in ENDPOINTS:
            raise ConfigError(f"sources.jd.endpoint must be one of {', '.join(ENDPOINTS)}, got {endpoint!r}")
        self.endpoint = endpoint

    def first_request(self, task: Task, base_url: str) -> PageRequest:
        """Page 0, newest first (``sortType=6``)."""
        root = base_url.rstrip("/")
        return self.page_request(task, root + ("/" if self.endpoint == "api" else CLUB_PATH), 0)

    def saved_request(self, task: Task, base_url: str, body: bytes, page: int, chunk: int | None) -> PageRequest:
        page = page or 1
        request = self.page_request(task, self.first_request(task, base_url).url, page - 1)
        request.page = page
        return request

    def page_request(self, task: Task, url: str, page0: int) -> PageRequest:
        """Page ``page0`` (0-based) with the query JD's product page sends; ``score``/``sortType`` may be
        overridden through ``task.params``."""
        query = {
            "productId": task.target,
            "score": task.params.get("score", "0"),
            "sortType": task.params.get("sortType", "6"),
            "page": str(page0),
            "pageSize": str(PAGE_SIZE),
            "isShadowSku": "0",
            "rid": "0",
            "fold": "1",
        }
        item_page = f"https://item.jd.com/{task.target}.html"
        headers = {"Referer": item_page}
        if self.endpoint == "api":
            # The item page's script calls the gateway across sites: the page's Origin, and the gateway's own
            # headers naming the page and the client kind (docs/SOURCES.md, jd "Headers").
            headers.update(
                {
                    "Accept": "application/json, text/plain, */*",
                    "Origin": "https://item.jd.com",
                    "x-referer-page": item_page,
                    "x-rp-client": "h5_1.0.0",
                }
            )
            body = json.dumps(
                {k: int(v) if v.isdigit() and k != "productId" else v for k, v in query.items()}, separators=(",", ":")
            )
            params = {
                "appid": "item-v3",
                "functionId": "pc_club_productPageComments",
                "client": "pc",
                "clientVersion": "1.0.0",
                "body": body,
            }
        else:
            params = {"callback": CALLBACK, **query}
        return PageRequest(url=url, params=params, page=page0 + 1, headers=headers, state={"page0": str(page0)})

    def parse(self, task: Task, request: PageRequest, page: FetchedPage, now_ms: int) -> ParsedPage:
        """Risk control is Banned, blocked answers LoginRequired; never an empty product."""
        _check_risk(page, now_ms)
        check_final_url(page, request.url)
        text = strip_jsonp(decode_body(page.body))
        if len(text) < MIN_BODY and text.strip() in ("", "{}", "null", "[]", "()"):
            raise _header_refusal(page) or fail(
                Outcome.LoginRequired,
                f"blocked: {len(page.body)}-byte body",
                error_class="jd-blocked",
                http_status=page.status,
            )
        if not text.startswith("{"):
            # A refusal page by its address first: its own words (a rate limit's) must not make it a lighter outcome.
            refused = _refusal_page(text, page.status, "a page whose script sends to") if text.startswith("<") else None
            said = refused or _said_refusal(text, page.status)
            if said is not None:
                raise said
            if text.startswith("<") and any(mark in text for mark in _LOGIN_PAGE):
                raise fail(
                    Outcome.LoginRequired,
                    "JD: a login page instead of comments",
                    error_class="jd-login-page",
                    http_status=page.status,
                )
            raise _header_refusal(page) or unparsable(page.body, (), page.status, "JD: not a JSON object")
        doc = load_json(text, what="JD comments", http_status=page.status)
        if not isinstance(doc, dict):
            raise unparsable(page.body, (), page.status, "JD: not a JSON object")
        _check_risk_body(doc, page.status)
        rows, holder = _rows(doc)
        if rows is None and isinstance(url := doc.get("url"), str) and url:
            # A refusal page named in the body is what it is whatever else the answer says (a login passport in
            # that page's own query included): _not_logged_in reads only a url that is itself a login page.
            refused = _refusal_page(url, page.status, "an answer whose url names")
            if refused is not None:
                raise refused
        if rows is None and isinstance(disposal := doc.get("disposal"), dict) and disposal:
            # Risk control's verdict (what to verify, and how) in the body, as the x-rp-content header carries it: a
            # 2026 JD client takes it, whatever the code, for the captcha code 605 asks, which a person must pass.
            raise fail(
                Outcome.Banned,
                f"JD risk control: a disposal in the body (code {str(doc.get('code', '-'))[:10]})"
                f" {str(disposal)[:60]!r}",
                error_class="jd-risk-disposal",
                http_status=page.status,
            )
        if rows is None and _not_logged_in(doc):
            # The gateway's "not logged in", with or without an ``echo``: a login mends it, unlike a malformed call.
            raise _header_refusal(page) or fail(
                Outcome.LoginRequired,
                f"JD: not logged in (code {str(doc.get('code', doc.get('resultCode', '-')))[:10]})"
                f" {first_text(doc, _MESSAGE_KEYS)[:60]!r}",
                error_class="jd-not-login",
                http_status=page.status,
            )
        if rows is None and "echo" in doc and str(doc.get("code", "")) not in ("", "0"):
            # The gateway refusing the call itself ("required string parameter 'functionId' is not present"): our
            # request is wrong, which no login mends.
            raise ParseError(
                f"JD: the API refused the request: code {str(doc.get('code'))[:10]} {str(doc.get('echo'))[:80]!r}",
                error_class="jd-bad-request",
                http_status=page.status,
            )
        if rows is None:
            raise _header_refusal(page) or fail(
                Outcome.LoginRequired, "blocked: no comments key", error_class="jd-blocked", http_status=page.status
            )
        fetched_at = iso_of_ms(now_ms)
        product = task.target
        items: list[Item] = [
            review for raw in rows if (review := self._review(raw, product, now_ms, fetched_at)) is not None
        ]
        holder = _pager(doc, holder)
        max_page = (
            parse_count(holder.get("maxPage"))
            or parse_count(holder.get("totalPage"))
            or parse_count(doc.get("maxPage"))
            or None
        )
        says_pages = any(key in holder or key in doc for key in _PAGING_KEYS)
        counted = None if says_pages else _pages_by_count(doc)  # older answers give only the comment count
        page0 = _page0(request)
        # This answer's page count, else the one the page before gave (a throttled answer may say maxPage 0).
        known_pages = max_page or parse_count(request.state.get("max_page", "")) or counted or None
        check_not_cut_short(
            len(rows), page0 + 1, known_pages, attempts=task.attempts, site="JD", http_status=page.status
        )
        result = ParsedPage(items=items, total_pages=max_page or counted, info=_summary(doc))
        if max_page is None and ("hasMore" in holder or "hasNextPage" in holder):
            more = holder.get("hasMore", holder.get("hasNextPage")) in (True, 1, "1", "true")
        elif known_pages is not None:
            more = page0 + 1 < known_pages
        else:  # nothing says how many pages there are: a full page may have more after it
            more = not says_pages and len(rows) >= PAGE_SIZE
        if items and more:
            result.next_request = self.page_request(task, request.url, page0 + 1)
            if known_pages is not None:
                result.next_request.state["max_page"] = str(known_pages)
            if self.endpoint == "club" and "body" not in request.params:
                result.next_request.params.update({k: v for k, v in request.params.items() if k != "page"})
        return result

    def _review(self, raw: Any, product: str, now_ms: int, fetched_at: str) -> Review | None:
        """One comment row (either shape) as a Review; None for rows without an id or guid."""
        if not isinstance(raw, dict):
            return None
        review_id = _as_str_id(raw.get("id")) or _as_str_id(raw.get("commentId")) or str(raw.get("guid") or "")
        if not review_id:
            return None
        content = first_text(raw, _TEXT_KEYS)
        created = next((iso for key in _DATE_KEYS if (iso := created_at_of(raw.get(key), now_ms))), "")
        return Review(
            id=review_id,
            product_id=product,
            source=self.name,
            user=str(raw.get("nickname") or raw.get("userNickName") or ""),
            content=html.unescape(content).strip(),
            score=min(parse_count(raw.get("score", raw.get("commentScore"))), 5),
            created_at=created,
            fetched_at=fetched_at,
        )


def _said_refusal(text: str, status: int) -> FetchError | None:
    """The refusal an answer without comments words (its message, or the page itself): "系统繁忙" is risk control
    (Banned ``jd-system-busy``), "…过于频繁" (``TOO_FREQUENT_MARKERS``) a rate limit on the host (RateLimited
    ``jd-too-frequent``: no account rests, as one would for the login wall such an answer was taken for)."""
    if any(busy in text for busy in _BUSY):
        return fail(Outcome.Banned, "JD risk control: 系统繁忙", error_class="jd-system-busy", http_status=status)
    frequent = next((marker.text for marker in TOO_FREQUENT_MARKERS if marker.text in text), None)
    if frequent is not None:
        return fail(
            Outcome.RateLimited, f"JD: {frequent} (too frequent)", error_class="jd-too-frequent", http_status=status
        )
    return None


def _check_risk(page: FetchedPage, now_ms: int) -> None:
    """Risk control before anything else: 403, a redirect to a refusal page, or an ``x-rp-content`` header with code
    605 (what risk control adds to a refused answer, usually with HTTP 200 and an empty body; the header with
    another code counts only where the answer holds no comments: ``_header_refusal``)."""
    refused = _refusal_page(redirect_target(page), page.status, "sent to")  # first: the page says more than a 403
    if refused is not None:
        raise refused
    if page.status == 403:
        raise fail(
            Outcome.Banned,
            "JD risk control: HTTP 403 (unsigned or refused call)",
            error_class="jd-risk-403",
            http_status=403,
        )
    risk = header(page.headers, "x-rp-content")
    if risk and _risk_code(risk) == "605":
        raise fail(
            Outcome.Banned,
            f"JD risk control: x-rp-content code 605 ({risk[:60]!r})",
            error_class="jd-risk-605",
            http_status=page.status,
        )
    check_http(page, now_ms)


def _refusal_page(text: str, status: int, how: str) -> FetchError | None:
    """Banned when ``text`` (a redirect's target, or an HTML page) names one of JD's refusal pages, else None."""
    for pattern, confirms, error_class, what in _REFUSAL_PAGES:
        found = (m for m in pattern.finditer(text) if confirms is None or confirms(m[0]))
        if match := next(found, None):
            start = max(0, match.start() - 60) if text.startswith("<") else 0
            return fail(
                Outcome.Banned,
                f"JD {what}: {how} {text[start : match.end() + 60]!r}",
                error_class=error_class,
                http_status=status,
            )
    return None


def _header_refusal(page: FetchedPage) -> FetchError | None:
    """Risk control by an ``x-rp-content`` header with another (or no readable) code, for an answer that holds no
    comments: Banned ``jd-risk-header`` rather than the "blocked" login wall. An answer with comments is used,
    whatever the header says."""
    risk = header(page.headers, "x-rp-content")
    if not risk:
        return None
    return fail(
        Outcome.Banned,
        f"JD risk control: x-rp-content code {_risk_code(risk) or '?'} ({risk[:60]!r}) and no comments",
        error_class="jd-risk-header",
        http_status=page.status,
    )


def _risk_code(header_value: str) -> str:
    """The ``code`` an ``x-rp-content`` header carries: JSON as it is, or (as JD sends it since 2024) base64url of
    the JSON; "" when neither reads. Characters past the JSON are ignored: a few stray ones after the base64 (seen in
    2026; a 2026 JD client drops up to three before decoding) decode to bytes after its closing brace."""
    text = header_value.strip()
    if not text.startswith("{"):
        text = text.rstrip("=")
        if len(text) % 4 == 1:  # a stray character past the last whole group: no base64 ends so
            text = text[:-1]
        try:
            text = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode("utf-8", "replace")
        except (ValueError, binascii.Error):
            return ""
    try:
        doc, _ = json.JSONDecoder().raw_decode(text.lstrip())
    except (ValueError, RecursionError):  # RecursionError: a header nesting deeper than the parser goes
        return "605" if '"605"' in text else ""
    return str(doc.get("code", "")) if isinstance(doc, dict) else ""


#: The API gateway's answers for a busy moment, by code: its queue (``{"code":"601","echo":"Queuing","tips":"…",
#: "wait":"5"}``, seconds to wait in ``wait``) and "too crowded, come back in a while" (``{"code":"402","message":
#: "活动现在挤不进去呀，待会再来试试吧"}``, what api.m.jd.com answered unsigned calls of public scripts through 2024,
#: a fresh cookie not helping). Rate limits on the host: no account rests for them.
_GATEWAY_BUSY = {"601": "jd-queuing", "402": "jd-crowded"}


def _check_risk_body(doc: dict[str, Any], status: int) -> None:
    """A JSON refusal instead of comments: ``{"code": "605", ...}`` (risk control), ``{"code": "601", ...}`` or
    ``{"code": "402", ...}`` (the API gateway busy, a rate limit: ``_GATEWAY_BUSY``) or a "系统繁忙" message."""
    if any(key in doc for key in _ROW_KEYS):
        return
    code = str(doc.get("code", ""))
    message = first_text(doc, _MESSAGE_KEYS)
    if code == "605":
        raise fail(
            Outcome.Banned, f"JD risk control: code 605 {message[:60]!r}", error_class="jd-risk-605", http_status=status
        )
    if code in _GATEWAY_BUSY:
        wait = parse_count(doc.get("wait"))
        raise fail(
            Outcome.RateLimited,
            f"JD API gateway busy: code {code} {message[:60]!r} {str(doc.get('tips', ''))[:60]!r}, "
            f"wait {wait or '-'} s",
            error_class=_GATEWAY_BUSY[code],
            http_status=status,
            retry_after_s=float(wait),
        )
    said = _said_refusal(message, status)
    if said is not None:
        raise said


def _not_logged_in(doc: dict[str, Any]) -> bool:
    """Whether an answer without comments says the call has no valid login: the gateway's code 3, the services'
    ``resultCode`` -100, their words for it (``_NOT_LOGGED_IN_WORDS``, in any message key) or a ``url`` whose host
    is a login page's (``_LOGIN_HOSTS``; not one naming a passport only in its query, as a refusal page's return
    address may). A login mends it, unlike our own malformed call, which also has a code and an echo."""
    if str(doc.get("code", "")) == NOT_LOGGED_IN_CODE or str(doc.get("resultCode", "")) == NOT_LOGGED_IN_RESULT:
        return True
    said = " ".join(value for key in _MESSAGE_KEYS if isinstance(value := doc.get(key), str)).lower()
    url = doc.get("url")
    return any(words in said for words in _NOT_LOGGED_IN_WORDS) or (
        isinstance(url, str)
        and (parts := split_url(url)) is not None
        and (parts.hostname or "").lower() in _LOGIN_HOSTS
    )


def _rows(doc: dict[str, Any]) -> tuple[list[Any] | None, dict[str, Any]]:
    """The comment rows and the object holding them: the top level first, then objects nested in it (``result``,
    ``data``, floors of a lego page...), breadth first and bounded; (None, {}) when there are none."""
    queue: list[tuple[Any, int]] = [(doc, 0)]
    seen = 0
    while queue and seen < _MAX_NODES:
        node, depth = queue.pop(0)
        seen += 1
        if isinstance(node, dict):
            for key in _ROW_KEYS:
                if isinstance(node.get(key), list):
                    return [_unwrap(row) for row in node[key]], node
            if node.get("mId") == _LIST_FLOOR and isinstance(node.get("data"), list):
                return [_unwrap(row) for row in node["data"]], node
            children: list[Any] = list(node.values())
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth < _MAX_DEPTH:
            queue.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return None, {}


def _pager(doc: dict[str, Any], holder: dict[str, Any]) -> dict[str, Any]:
    """Where the answer says how many pages there are: the object holding the rows, unless it says nothing and
    ``result.pageInfo.data`` (``getCommentListPage``) does."""
    if any(key in holder for key in _PAGING_KEYS):
        return holder
    info = as_dict(as_dict(as_dict(doc.get("result")).get("pageInfo")).get("data"))
    return info if any(key in info for key in _PAGING_KEYS) else holder


def _unwrap(row: Any) -> Any:
    """Rows that wrap the comment (``{"commentInfo": {...}}``) give the comment."""
    inner = row.get("commentInfo") if isinstance(row, dict) else None
    return inner if isinstance(inner, dict) else row


def _page0(request: PageRequest) -> int:
    """The 0-based page a request asked for (its state, else its query)."""
    if "page0" in request.state:
        return parse_count(request.state["page0"])
    if "body" in request.params:
        try:
            body = json.loads(request.params["body"])
        except ValueError:
            return 0
        return parse_count(body.get("page")) if isinstance(body, dict) else 0
    return parse_count(request.params.get("page", "0"))


def _comment_count(doc: dict[str, Any]) -> int:
    """The summary's comment total: ``commentCountStr`` ("100万+") wins over ``commentCount`` (zeroed today)."""
    summary = doc.get("productCommentSummary")
    if not isinstance(summary, dict):
        return 0
    return parse_count(summary.get("commentCountStr")) or parse_count(summary.get("commentCount"))


def _pages_by_count(doc: dict[str, Any]) -> int | None:
    """Pages an answer without a page count holds by its comment total (JD serves at most ``MAX_PAGES``)."""
    count = _comment_count(doc)
    return min(-(-count // PAGE_SIZE), MAX_PAGES) if count else None


def _summary(doc: dict[str, Any]) -> dict[str, str]:
    """What ``icecrawler parse`` prints of the answer's totals: the comment total and ``maxPage``."""
    info: dict[str, str] = {}
    count = _comment_count(doc)
    if count:
        info["comment_count"] = str(count)
    if "maxPage" in doc:
        info["max_page"] = str(doc["maxPage"])[:20]
    return info


#: What the source registry (``icecrawler.sourcespec``) reads from this module.
SOURCE = JdSource
