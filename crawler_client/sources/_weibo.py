"""What the Weibo sources share: for the JSON APIs (m.weibo.cn's getIndex, weibo.com's ``/ajax`` API) tolerant field
access, the post markers both use and the session signals of their envelopes; for all three, whose posts a timeline
page holds (``others_posts``).

Both APIs wrap answers in ``{"ok": 1, "data": ...}``; ``ok: -100`` (with a login ``url``) is a login wall (a
captcha wall when that url is Weibo's captcha page), a top-level ``url`` without ``data`` a verification wall, and
``ok: 0`` "nothing here" (no such user, or past the end) unless its ``msg`` names a limit or a login. Fields may be
missing or have the wrong type in any answer, so every access goes through ``as_dict``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import unquote

from crawler_client.sources._counts import parse_id
from crawler_client.sources._decode import as_dict, decode_body, first_text, load_json, strip_jsonp
from crawler_client.sources._detect import (
    WEIBO_MARKERS,
    Marker,
    check_final_url,
    check_http,
    fail,
    landing_error,
    scan_markers,
    unparsable,
)
from crawler_client.sources.base import LONG_TEXT_GONE, FetchedPage, Item, PageRequest
from icecrawler.errors import FetchError, ParseError
from icecrawler.models import Outcome, Post, Task
from icecrawler.resume import decode_cursor

__all__ = [
    "END_AFTER_CURSOR_RETRIES",
    "GONE",
    "MESSAGE_WORDS",
    "NOTHING_MORE",
    "NOTHING_NEW",
    "UNAVAILABLE",
    "as_dict",
    "author_id",
    "check_403_said",
    "check_answer",
    "check_end_after_cursor",
    "check_end_of_list",
    "checked_text",
    "end_keeps_cursor",
    "first_page_ok0",
    "https_url",
    "inline_long_text",
    "is_pinned",
    "is_quick_repost",
    "json_envelope",
    "login_worded",
    "long_text_content",
    "long_text_refused",
    "mblog_id",
    "message_error",
    "nothing_new_yet",
    "others_posts",
    "own_posts",
    "said",
    "since_id_of",
    "truthy",
    "unavailable_account",
    "wall_of",
]

#: What the Weibo JSON APIs say with ``ok:0`` when there is nothing (more) to show: m.weibo.cn past the last page,
#: or a user without posts.
NOTHING_MORE = ("这里还没有内容", "没有更多", "暂无数据", "暂无内容", "暂无微博")
#: What they say with ``ok:0`` for a user that does not exist (该用户不存在 too). Whole phrases: "接口不存在" or
#: "containerid不存在" say nothing about the user, and NotFound parks a target for its longest period.
GONE = ("用户不存在", "账号不存在", "帐号不存在")
#: What they say of an account that can no longer be viewed: closed by its owner (…自行申请关闭，现已无法查看), after
#: complaints (因被投诉违反…现已无法查看), or held until its owner passes a verification (用户验证之前暂时不能查看).
#: Said in an ``ok:0``'s ``msg``, or percent-encoded in the ``url`` of an ``error_type: "link"`` answer.
UNAVAILABLE = ("现已无法查看", "现无法查看", "用户验证之前暂时不能查看")
#: Weibo's ``error_code`` for a user that does not exist (its API words it 用户不存在, or "User does not exists!").
USER_GONE_CODES = ("20003",)


#: A timeline page of at least this many posts, all one other account's, is that account's timeline.
FOREIGN_TIMELINE_MIN = 3


def others_posts(
    target: str, authors: Sequence[int], http_status: int, quick: Sequence[bool] | None = None
) -> list[bool]:
    """Which posts of a timeline page are another account's, given each post's author uid (0 when it names none).

    Weibo shows posts the account liked, or quick-reposted (快转), among its own, under their own authors. They are
    not its posts, and they are as old as they like and out of date order: taken for its posts, an old one near the
    top would end the incremental walk before newer posts. The owner is the task's uid, or, for a target that is not
    a number, the author most posts name. A page of several posts that are all one other account's is that
    account's timeline (a moved or merged uid): a ParseError, instead of a quiet "nothing new" on every visit. Posts
    marked as this account's quick reposts (``quick``, by ``is_quick_repost``) are left out like the rest but are no
    sign of that: a fan club's page of them, all one author's, is still its own timeline."""
    counts = Counter(author for author in authors if author)
    owner = parse_id(target) or (counts.most_common(1)[0][0] if counts else 0)
    foreign = [author not in (0, owner) for author in authors]
    marked = quick if quick is not None else [False] * len(authors)
    telling = [author for author, reposted in zip(authors, marked, strict=True) if not reposted]
    strangers = {author for author in telling if author not in (0, owner)}
    if len(telling) >= FOREIGN_TIMELINE_MIN and all(a not in (0, owner) for a in telling) and len(strangers) == 1:
        raise ParseError(
            f"the timeline is account {strangers.pop()}'s, not {target}'s",
            error_class="feed-of-another-account",
            http_status=http_status,
        )
    return foreign


def own_posts[T](
    target: str,
    posts: Sequence[T],
    author: Callable[[T], int],
    http_status: int,
    quick: Callable[[T], bool] | None = None,
) -> tuple[list[T], int]:
    """The posts of a timeline page that are the account's own (``others_posts``, given how to read a post's
    author and, where the answer marks them, which are quick reposts), and how many were another account's: what
    every Weibo source reports as ``other_accounts``."""
    marked = [quick(post) for post in posts] if quick is not None else None
    others = others_posts(target, [author(post) for post in posts], http_status, marked)
    return [post for post, other in zip(posts, others, strict=True) if not other], sum(others)


def https_url(url: str) -> str:
    """Protocol-relative image URLs made absolute."""
    return "https:" + url if url.startswith("//") else url


def truthy(value: object) -> bool:
    """JSON flags come as true, 1, "1" or "true"."""
    return value in (True, 1, "1", "true")


def author_id(mblog: dict[str, Any]) -> int:
    """The uid of a post's author: ``user.id``, else ``user.idstr`` (0 when the answer names none)."""
    user = as_dict(mblog.get("user"))
    return parse_id(user.get("id")) or parse_id(user.get("idstr"))


def mblog_id(mblog: dict[str, Any]) -> int:
    """A post's numeric id: ``id``, else ``idstr``, else ``mid`` (0 when none is a usable number)."""
    return parse_id(mblog.get("id")) or parse_id(mblog.get("idstr")) or parse_id(mblog.get("mid"))


def is_quick_repost(mblog: dict[str, Any]) -> bool:
    """A quick repost (快转) as the JSON APIs mark it: an ``ori_mid`` naming the original (public clients of 2025–2026
    skip, or undo, quick reposts by that key). The item shows the original under its author."""
    return bool(parse_id(mblog.get("ori_mid")))


def inline_long_text(mblog: dict[str, Any]) -> str:
    """The full text a long post carries inline ("" when none): ``longText.longTextContent`` (m.weibo.cn's answers)
    or ``longText.content`` (weibo.com's ``/ajax/statuses/show?…&isGetLongText=true``, plain text with newlines). A
    post that has it needs no long-text call."""
    inline = as_dict(mblog.get("longText"))
    for key in ("longTextContent", "content"):
        value = inline.get(key)
        if isinstance(value, str) and value.strip():
            return value
    return ""


def is_pinned(mblog: dict[str, Any]) -> bool:
    """Pinned posts come first and out of date order: ``isTop``, ``mblogtype`` 2, or a "置顶" title."""
    return (
        truthy(mblog.get("isTop"))
        or mblog.get("mblogtype") in (2, "2")
        or as_dict(mblog.get("title")).get("text") == "置顶"
    )


def said(doc: dict[str, Any]) -> str:
    """What an envelope says: its ``msg`` (m.weibo.cn, and the older answers of both APIs), else its ``message``
    (weibo.com's ``/ajax`` API words its ``ok:0`` answers so, beside an ``error_code``), else its ``error`` (the open
    API's shape: ``error``, ``error_code``, ``request``, no ``ok``); "" when none is text."""
    return first_text(doc, ("msg", "message", "error"))


#: errno 100006's words: what that errno is (``ERRNO_ILLEGAL_REQUEST``), whatever its ``msg`` says.
ILLEGAL_REQUEST = Marker("请求非法", Outcome.LoginRequired, "illegal-request")
#: Words of a refusal's ``msg`` (not of a page: only an envelope's message is searched for them) beyond the byte
#: markers: the wordings public clients of 2024–2026 classify (访问频次过高, 请登录后查看, 操作太快…). A bare 登录
#: is not among them: it is read last, where nothing else reads the answer (``LOGIN_WORD``).
MESSAGE_WORDS: tuple[Marker, ...] = (
    Marker("频次", Outcome.RateLimited, "too-frequent"),
    Marker("频繁", Outcome.RateLimited, "too-frequent"),
    Marker("太快", Outcome.RateLimited, "too-frequent"),
    Marker("频率", Outcome.RateLimited, "too-frequent"),  # 请求频率过高 (a 2026 client's example of Weibo's limit msg)
    Marker("未登录", Outcome.LoginRequired, "login"),
    Marker("登录后", Outcome.LoginRequired, "login"),
    Marker("请登录", Outcome.LoginRequired, "login"),
    Marker("重新登录", Outcome.LoginRequired, "login"),
    ILLEGAL_REQUEST,
    Marker("非法请求", Outcome.LoginRequired, "illegal-request"),
)
#: Any other refusal message that speaks of logging in (登录), as a 2026 client of both APIs reads one (cv-cat/catbus,
#: ``src/platforms/weibo/web/client.ts``, ``check``): a login wall, but only where the answer is otherwise unknown
#: (``login_worded``). Read first, it outranked what says more: the page a v6 code sends to (帐号登录异常 with
#: ``/unfreeze``), a closed account (…现已无法查看。登录微博), a gone post (该微博不存在，登录查看更多).
LOGIN_WORD = Marker("登录", Outcome.LoginRequired, "login")


#: Weibo's error number for "too frequent" (``{"ok":0,"errno":"100005","msg":"请求过于频繁"}``): the limit, whatever
#: wording (or none) its ``msg`` has.
ERRNO_TOO_FREQUENT = "100005"
#: Weibo's API error codes for a rate limit, as its ``error_code`` names them (weibo.com's ``/ajax`` answers carry
#: Weibo's codes there, 20101 and 20003 among them): 10022 IP requests, 10023 user requests, 10024 user requests for
#: one interface out of rate limit (IP请求频次超过上限, 用户请求频次超过上限…; the English wording is its open API's).
#: The limit whatever the message says: in English, or none, it was an unknown answer or an empty account.
RATE_LIMIT_ERROR_CODES = ("10022", "10023", "10024")
#: Weibo's error number for a request it refuses as illegal (``{"ok":0,"errno":"100006","msg":"请求非法"}``, HTTP 403
#: or 200), whatever wording its ``msg`` has: ``LoginRequired`` ``illegal-request``. What it refuses depends on who
#: asked: an anonymous m.weibo.cn session's calls after its first, fresh cookies answering again (a 2025 parser
#: plugin's issue), so a visitor session is renewed; a logged-in bot's likes after its first, which its reporter took
#: for the address being blocked and got past with a mobile User-Agent (a 2022 bot's issue), so for an account the
#: scheduler blocks the host and freezes nothing (``scheduler_server.outcomes.REQUEST_REFUSALS``).
ERRNO_ILLEGAL_REQUEST = "100006"


def message_error(doc: dict[str, Any], http_status: int) -> FetchError | None:
    """The classified error an envelope's ``errno`` (100005, too frequent; 100006, the session refused as illegal),
    ``error_code`` (10022–10024, a rate limit) or ``msg`` names (访问过于频繁, 帐号存在异常, 请先登录, 访问频次过高,
    请求非法…), else None: in escaped JSON the body's byte markers cannot be seen, the decoded message can."""
    message = said(doc)
    errno, error_code = str(doc.get("errno", "")), str(doc.get("error_code", ""))
    if errno == ERRNO_TOO_FREQUENT or error_code in RATE_LIMIT_ERROR_CODES:
        return fail(
            Outcome.RateLimited,
            f"too-frequent: {'errno ' + errno if errno == ERRNO_TOO_FREQUENT else 'error_code ' + error_code}"
            f" {message[:60]!r}",
            error_class="too-frequent",
            http_status=http_status,
        )
    if errno == ERRNO_ILLEGAL_REQUEST:
        marker: Marker | None = ILLEGAL_REQUEST
    else:
        marker = next((m for m in (*WEIBO_MARKERS, *MESSAGE_WORDS) if message and m.text in message), None)
    if marker is None:
        return None
    return fail(
        marker.outcome,
        f"{marker.error_class}: {'errno ' + errno + ' ' if errno else ''}{message[:80]!r}",
        error_class=marker.error_class,
        http_status=http_status,
    )


def login_worded(message: str, http_status: int) -> FetchError | None:
    """LoginRequired ``login`` when ``message`` speaks of logging in (``LOGIN_WORD``), else None. For the answers
    nothing else reads (what would be Busy, an unknown code's ban or unparsable): every more specific reading comes
    first, so a word in passing does not turn a frozen account, a gone user or a gone post into a login wall."""
    if LOGIN_WORD.text not in message:
        return None
    return fail(
        LOGIN_WORD.outcome,
        f"{LOGIN_WORD.error_class}: {message[:80]!r} (speaks of logging in)",
        error_class=LOGIN_WORD.error_class,
        http_status=http_status,
    )


def since_id_of(value: object) -> str:
    """An answer's ``since_id`` (the next page's cursor) as text; "" when it names none (missing, empty, 0, or not
    a number or string)."""
    if not isinstance(value, (int, str)) or isinstance(value, bool) or str(value) in ("", "0"):
        return ""
    return str(value)


def check_end_of_list(doc: dict[str, Any], http_status: int) -> None:
    """An ``ok:0`` after the first page ends the walk when it says nothing, or that there is nothing more
    (``NOTHING_MORE``). One that speaks of logging in is a login wall (``login_worded``); any other message (a user
    gone mid-walk, a limit we have no marker for) fails the crawl as Busy: taken for the end, the crawl would succeed
    and its new cursor would pass over the posts it had not reached yet; failed, it keeps the cursor, stores what it
    saw, and the next attempt walks again."""
    message = said(doc)
    if not message or any(text in message for text in NOTHING_MORE):
        return
    raise login_worded(message, http_status) or fail(
        Outcome.Busy,
        f"ok:0 {message[:60]!r} in the middle of a walk (not an end-of-list answer)",
        error_class="unexpected-ok0",
        http_status=http_status,
    )


#: Failed visits in a row (the task's ``attempts``) for which an end of the list on a later page, before the post the
#: walk stops at, is read as a throttled answer (``check_end_after_cursor``; m.weibo.cn's 暂无微博 notice there too).
#: Not ``EMPTY_PAGE_RETRIES``: the scheduler retries a task's first ``scheduler.backoff_after_attempts`` (3) failures
#: at once and then waits ``scheduler.min_period_s`` (60 s) doubling, so three visits span one minute, and a
#: risk-control episode of a few minutes went past them and moved the cursor over the posts not reached, for good.
#: Six span 0 + 0 + 60 + 120 + 240 + 480 = 900 s under the default settings: the end is taken at the seventh visit, at
#: least a quarter of an hour after the first failed one. The count is the task's ``attempts``, which every failure
#: adds to (a timeout, an HTTP error, a Busy of any kind): after failures of another kind fewer visits are left, but
#: the backoff they earned already separates the first failure of the streak from that seventh visit by as much.
END_AFTER_CURSOR_RETRIES = 6

#: ``PageRequest.state`` key set on a later page's request while no page of the walk so far held a post above the
#: post it stops at (``nothing_new_yet``): then an end of the list there leaves the cursor where it was.
NOTHING_NEW = "nothing_new"


def nothing_new_yet(
    task: Task, request: PageRequest, first: bool, posts: Sequence[Item], following: PageRequest | None
) -> None:
    """Mark ``following`` (the request for the page after ``request``'s, if any) when neither that page (``first``:
    the walk's first page) nor any before it held a post above the task's cursor, its pinned posts included (they
    count in the cursor, ``PostOrder.newest_cursor``); unmark it otherwise. ``check_end_after_cursor`` reads it.
    Absent, the end is read as a throttled answer: a request built without it is never taken for harmless."""
    if following is None:
        return
    stop_at, _ = decode_cursor(task.cursor)
    limit = int(stop_at) if stop_at.isdigit() else -1  # no usable cursor: any post would move it
    above = any(isinstance(post, Post) and post.id > limit for post in posts)
    if (first or request.state.get(NOTHING_NEW)) and not above:
        following.state[NOTHING_NEW] = "1"
    else:
        following.state.pop(NOTHING_NEW, None)


def end_keeps_cursor(task: Task, request: PageRequest) -> bool:
    """Whether a crawl that took the end of the list at ``request``'s page for the end would report the cursor it
    started with: the task has a post to stop at, no page-cap gap is open (closing one moves the cursor to the gap's
    top), and no page of the walk held a post above that post (``NOTHING_NEW``). The report's cursor is then the
    newest of the posts seen and the old one (``gaps.closed_cursor``), i.e. the old one: whatever the walk did not
    reach is still above it, new at the next visit, and nothing is passed over whether the end is real or a throttled
    answer. Such an end must be taken: an account that shows only posts at or below its cursor (only its pinned post,
    the cursor's own; or pinned posts below a cursor whose post was deleted) has its later page asked for at every
    visit (a pinned post never ends a walk), and read as a throttled answer it failed
    ``END_AFTER_CURSOR_RETRIES`` visits, then was Ok once (the attempts reset), then failed again, for ever. Nothing
    here depends on how the site orders a page; stopping the walk at a page of known pinned posts instead would (a
    pinned post equal to the cursor and no ordinary post on page 1), would still cycle for pinned posts below a deleted
    cursor post, and would not reach the account's own new posts on page 2 while page 1 is full of others' quick
    reposts (left out of its posts)."""
    stop_at, gap = decode_cursor(task.cursor)
    return bool(stop_at) and gap is None and bool(request.state.get(NOTHING_NEW))


def check_end_after_cursor(task: Task, request: PageRequest, what: str, http_status: int, site: str) -> None:
    """Busy ``{site}-empty-page`` when a later page ends the list (``what``: an ``ok:0``, a page of no posts naming
    no next one) in a walk that has a post to stop at (the task's cursor, or an open gap's base); else nothing. A later
    page is asked for only while the walk has not met that post (it stops after the page holding it), so the end comes
    before posts the site showed at an earlier visit: the sites answer so under their limits too (m.weibo.cn's
    这里还没有内容 is also its risk-control wording, SITE_RESPONSES.md §2.6), and taken for the end, the crawl would
    succeed and its new cursor pass over the posts it had not reached, for good. Busy keeps the cursor, for
    ``END_AFTER_CURSOR_RETRIES`` failed visits in a row (about a quarter of an hour under the default backoff); then
    the end (the known posts deleted, or no longer shown to this session). Without a post to stop at (a first crawl,
    or its page-cap gap) the end is the end, and so it is when taking it leaves the cursor as it was
    (``end_keeps_cursor``)."""
    stop_at, _ = decode_cursor(task.cursor)
    if not stop_at or task.attempts >= END_AFTER_CURSOR_RETRIES or end_keeps_cursor(task, request):
        return
    raise fail(
        Outcome.Busy,
        f"{what} on a later page, before the post the task already has (a throttled answer, not the end)",
        error_class=f"{site}-empty-page",
        http_status=http_status,
    )


def first_page_ok0(doc: dict[str, Any], http_status: int) -> FetchError:
    """The error for ``ok:0`` on a timeline's first page. Saying nothing, that there is nothing (``NOTHING_MORE``:
    这里还没有内容) or that the user does not exist (``GONE``, or ``error_code`` 20003 in any words), it is NotFound.
    One that speaks of logging in is a login wall (``login_worded``); any other message (a limit in words we have no
    marker for) is Busy, a failed attempt retried with the task's backoff: taken for
    NotFound, the target would wait its longest period and the host would never be backed off."""
    message = said(doc)
    unavailable = unavailable_account(message, http_status)
    if unavailable is not None:
        return unavailable
    gone = str(doc.get("error_code", "")) in USER_GONE_CODES
    if gone or not message.strip() or any(text in message for text in (*NOTHING_MORE, *GONE)):
        return fail(
            Outcome.NotFound,
            f"ok:0 {message[:60]!r} on the first page",
            error_class="no-content",
            http_status=http_status,
        )
    return login_worded(message, http_status) or fail(
        Outcome.Busy,
        f"ok:0 {message[:60]!r} on the first page (not a known answer)",
        error_class="unexpected-ok0",
        http_status=http_status,
    )


def unavailable_account(message: str, http_status: int) -> FetchError | None:
    """NotFound ``account-unavailable`` when ``message`` (a message, or a url the reason is percent-encoded in) says the
    account can no longer be viewed (``UNAVAILABLE``), else None. The target is gone, not our session: a login wall
    would freeze the account that asked, once per visit of the target."""
    text = unquote(message)
    if not any(phrase in text for phrase in UNAVAILABLE):
        return None
    return fail(
        Outcome.NotFound,
        f"the account cannot be viewed: {text[:80]!r}",
        error_class="account-unavailable",
        http_status=http_status,
    )


#: What the ``url`` of an ``ok:-100`` wall names when it is a captcha to solve in a browser: the captcha page
#: (``/captcha/show``) or m.weibo.cn's geetest check (``/api/geetest?testType=1``, 2025).
CAPTCHA_URL_PARTS = ("/captcha/", "geetest")


def wall_of(doc: dict[str, Any], http_status: int) -> FetchError | None:
    """The LoginRequired error an envelope signals (``ok:-100``, a bare verification ``url``), else None; a ``url``
    that says the account cannot be viewed (``unavailable_account``) is NotFound instead."""
    if doc.get("ok") in (-100, "-100"):
        sent_to = str(doc.get("url", ""))
        captcha = any(part in sent_to for part in CAPTCHA_URL_PARTS)
        return fail(
            Outcome.LoginRequired,
            f"ok:-100 {said(doc)[:60]!r}" + (" (a captcha to solve in a browser)" if captcha else ""),
            # Not a logged-out cookie: someone must solve the captcha with this account (or wait it out).
            error_class="captcha" if captcha else "login-wall",
            http_status=http_status,
        )
    url = doc.get("url")
    if isinstance(url, str) and url and not doc.get("data"):
        unavailable = unavailable_account(f"{url} {said(doc)}", http_status) or landing_error(url, http_status)
        if unavailable is not None:
            return unavailable
        return fail(
            Outcome.LoginRequired, f"verification wall: {url[:120]}", error_class="verify-wall", http_status=http_status
        )
    return None


def checked_text(request: PageRequest, page: FetchedPage, now_ms: int) -> str:
    """The decoded body (JSONP wrapper removed) after the HTTP status and redirect checks both JSON APIs make. A 403
    whose JSON body names a limit or a login (``{"ok":0,"errno":"100005","msg":"请求过于频繁"}``) is what the body
    says: a rate limit must not block the host as a ban and freeze the account. Other statuses mean what they say
    (432 ends a visitor session, 418 is an IP ban, 429 carries its Retry-After), whatever their body."""
    check_answer(request, page, now_ms)
    return strip_jsonp(decode_body(page.body))


def check_answer(request: PageRequest, page: FetchedPage, now_ms: int) -> None:
    """The checks every Weibo answer gets before its body is read, in order: what a 403's JSON says, the HTTP
    status, and where a redirect went (``checked_text``'s reasons)."""
    check_403_said(page)
    check_http(page, now_ms)
    check_final_url(page, request.url)


def check_403_said(page: FetchedPage) -> None:
    """Raise what a 403's JSON body names (a limit, a login), if it names one: weibo.com and m.weibo.cn throttle with
    ``{"ok":0,"errno":"100005","msg":"请求过于频繁"}`` and HTTP 403, which taken for a ban would freeze the account."""
    if page.status != 403:
        return
    text = strip_jsonp(decode_body(page.body))
    if not text.startswith("{"):
        return
    try:
        doc = load_json(text, what="a 403 answer", http_status=page.status)
    except ParseError:
        return
    error = message_error(doc, page.status) if isinstance(doc, dict) else None
    if error is not None:
        raise error


#: What a long-text answer says of a post that is gone (该微博不存在, 已被删除) or that its author has since hidden from
#: this reader (暂无查看权限, 没有这条微博的查看权限, 此微博已不可见, 由于作者隐私设置，你没有权限查看此微博).
POST_GONE = ("不存在", "删除", "查看权限", "不可见", "没有权限")
#: Weibo's ``error_code`` for a post that does not exist (20101) and for one its author's privacy setting hides from
#: this reader (20112), as weibo.com's ``/ajax`` answers name them beside their ``message``.
POST_GONE_CODES = ("20101", "20112")


def long_text_refused(message: str, http_status: int, what: str) -> FetchError:
    """The error for a long-text answer that gives no text (its walls and named limits raised already). Saying
    nothing, or that the post is gone (``POST_GONE``), it is NotFound ``long-text-gone``: the crawl keeps the
    truncated text, for a post deleted since its timeline page was read. One that speaks of logging in is a login
    wall (``login_worded``), and any other message is Busy, as on a timeline page: a limit in words we have no marker
    for must fail the crawl (cursor kept), not pass the posts."""
    if not message.strip() or any(word in message for word in POST_GONE):
        return fail(Outcome.NotFound, f"{what}: {message[:60]!r}", error_class=LONG_TEXT_GONE, http_status=http_status)
    return login_worded(message, http_status) or fail(
        Outcome.Busy,
        f"{what}: {message[:60]!r} (not a known answer)",
        error_class="unexpected-long-text-answer",
        http_status=http_status,
    )


def long_text_content(doc: dict[str, Any], page: FetchedPage, what: str) -> str:
    """``data.longTextContent`` of a long-text envelope; "" when the answer holds none (the post keeps its truncated
    text). An ``ok:0`` answer raises ``long_text_refused`` (NotFound at once for a ``POST_GONE_CODES`` error code),
    another ``ok`` is unparsable."""
    if doc.get("ok") in (0, "0"):
        code = str(doc.get("error_code", ""))
        if code in POST_GONE_CODES:
            raise fail(
                Outcome.NotFound,
                f"{what}: error_code {code} {said(doc)[:60]!r}",
                error_class=LONG_TEXT_GONE,
                http_status=page.status,
            )
        raise long_text_refused(said(doc), page.status, what)
    if doc.get("ok") not in (1, "1"):
        raise unparsable(page.body, WEIBO_MARKERS, page.status, f"{what}: ok={str(doc.get('ok'))[:20]!r}")
    content = as_dict(doc.get("data")).get("longTextContent")
    return content if isinstance(content, str) else ""


def json_envelope(page: FetchedPage, text: str, what: str) -> dict[str, Any]:
    """``text`` (the decoded body, JSONP wrapper removed) as a Weibo JSON envelope. HTML in its place is the
    login or visitor page of a gone session (LoginRequired), unless it carries one of Weibo's ban/busy markers;
    login and verification walls raise; anything else that is not a JSON object is unparsable."""
    if not text.startswith("{"):
        if text.startswith("<") and scan_markers(page.body, WEIBO_MARKERS) is None:
            raise fail(
                Outcome.LoginRequired,
                f"{what}: HTML instead of JSON (a login page)",
                error_class="html-instead-of-json",
                http_status=page.status,
            )
        raise unparsable(page.body, WEIBO_MARKERS, page.status, f"{what}: not a JSON object")
    doc = load_json(text, what=what, http_status=page.status)
    if not isinstance(doc, dict):
        raise unparsable(page.body, WEIBO_MARKERS, page.status, f"{what}: not a JSON object")
    wall = wall_of(doc, page.status)
    if wall is not None:
        raise wall
    ok = doc.get("ok")
    if ok not in (1, "1", None) or (ok is None and "error_code" in doc):  # the open API's errors carry no ``ok``
        error = message_error(doc, page.status)
        if error is None and ok not in (0, "0"):  # ok:0 is read further by each source; another ok is unparsable
            error = login_worded(said(doc), page.status)
        if error is not None:
            raise error
    return doc
