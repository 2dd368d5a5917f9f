"""Answers both Weibo JSON APIs (weibo.com's ``/ajax``, m.weibo.cn) give, as public clients of 2024–2026 record them:
a captcha wall, a limit served with HTTP 403, the empty object of a cookie no longer accepted, and long-text answers
that are empty or say the post is gone."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from crawler_client.crawl import LongTextSource
from crawler_client.sources import get_source
from crawler_client.sources.weibo_mobile import WeiboMobileSource
from icecrawler.errors import FetchError, ParseError
from icecrawler.models import Post
from tests.client._util import BASE, NOW_MS, fetched, make_task, parse

SOURCES = ("weibo_web", "weibo_mobile")


def _refusal(name: str, body: bytes, status: int = 200) -> FetchError:
    """The error the source's first timeline page raises for ``body``."""
    task = make_task(name, "1669879400")
    with pytest.raises(FetchError) as info:
        parse(name, task, get_source(name).first_request(task, BASE), body, status=status)
    return info.value


@pytest.mark.parametrize("name", SOURCES)
def test_a_captcha_wall_is_told_from_a_logged_out_cookie(name: str) -> None:
    body = b'{"ok":-100,"errno":"-100","msg":"","url":"https://m.weibo.cn/captcha/show?backUrl=","extra":""}'
    error = _refusal(name, body)
    assert (error.outcome, error.error_class) == ("LoginRequired", "captcha")
    login = _refusal(name, b'{"ok":-100,"url":"https://passport.weibo.com/sso/signin?entry=wapsso"}')
    assert (login.outcome, login.error_class) == ("LoginRequired", "login-wall")


@pytest.mark.parametrize("name", SOURCES)
def test_a_geetest_captcha_wall_is_a_captcha_too(name: str) -> None:
    """m.weibo.cn also walls a session with ``{"ok":-100,…,"url":"https://m.weibo.cn/api/geetest?testType=1&backUrl=/"}``
    (a 2025 weibo-crawler issue: a fresh cookie did not help). It was a ``login-wall``, which tells the operator to
    replace the cookie; it is a captcha someone must solve in a browser, as ``/captcha/show`` is."""
    body = b'{"ok":-100,"errno":"-100","msg":"","url":"https://m.weibo.cn/api/geetest?testType=1&backUrl=/","extra":""}'
    error = _refusal(name, body)
    assert (error.outcome, error.error_class) == ("LoginRequired", "captcha")


@pytest.mark.parametrize("name", SOURCES)
def test_a_limit_served_with_http_403_is_a_rate_limit_not_a_ban(name: str) -> None:
    """HTTP 403 ``{"ok":0,"errno":"100005","msg":"请求过于频繁"}``: taken for a ban it blocked the host and froze the
    account; a 403 whose body names nothing (or is not JSON, or nests too deep to read) is still a ban. Only 403:
    432 still ends a visitor session, 418 is still an IP ban and 429 keeps its Retry-After, whatever their body."""
    limit = _refusal(name, '{"ok":0,"errno":"100005","msg":"请求过于频繁"}'.encode(), status=403)
    assert (limit.outcome, limit.error_class, limit.http_status) == ("RateLimited", "too-frequent", 403)
    login = _refusal(name, '{"ok":0,"msg":"请先登录"}'.encode(), status=403)
    assert login.outcome == "LoginRequired"
    for body in (b'{"ok":0,"msg":"forbidden"}', b"<html>403</html>", b"", b"{" + b'"a":[' * 5000):
        ban = _refusal(name, body, status=403)
        assert (ban.outcome, ban.error_class) == ("Banned", "http-403")
    said = '{"ok":0,"msg":"请先登录"}'.encode()
    assert _refusal(name, said, status=432).error_class == "http-432"
    assert _refusal(name, said, status=418).error_class == "http-418"
    task = make_task(name, "1669879400")
    with pytest.raises(FetchError) as info:
        parse(
            name,
            task,
            get_source(name).first_request(task, BASE),
            '{"ok":0,"msg":"请求过于频繁"}'.encode(),
            status=429,
            headers={"Retry-After": "600"},
        )
    assert (info.value.outcome, info.value.retry_after_s) == ("RateLimited", 600.0)


@pytest.mark.parametrize("name", SOURCES)
def test_system_busy_is_the_sites_busy_moment_not_a_login_page(name: str) -> None:
    """A GBK page saying only 系统繁忙 ("the system is busy") in place of the JSON was a login page (the account frozen,
    a visitor session renewed for nothing); said in an ``ok:0``'s ``msg`` it was an answer we did not know. Both are
    the site's busy moment, as 网络繁忙 is: Busy ``busy``."""
    page = "<html><head><meta charset='utf-8'><title>微博</title></head><body><p>系统繁忙，请稍后再试</p></body></html>"
    for body in (page.encode("gbk"), '{"ok":0,"msg":"系统繁忙，请稍后再试"}'.encode()):
        error = _refusal(name, body)
        assert (error.outcome, error.error_class) == ("Busy", "busy")


def test_an_empty_object_from_the_ajax_api_is_a_cookie_it_no_longer_accepts() -> None:
    """What 2025–2026 clients record for weibo.com's ``/ajax`` API; m.weibo.cn's ``{}`` has no such record and
    stays unparsable."""
    error = _refusal("weibo_web", b"{}")
    assert (error.outcome, error.error_class) == ("LoginRequired", "empty-answer")
    assert not isinstance(error, ParseError)
    assert isinstance(_refusal("weibo_mobile", b"{}"), ParseError)


@pytest.mark.parametrize("name", SOURCES)
def test_long_text_answers_that_are_empty_or_gone(name: str) -> None:
    source = get_source(name)
    assert isinstance(source, LongTextSource)
    request = source.extend_request(BASE, 4700000000007000)
    post = Post(id=4700000000007000, user_id=1, text="长文开头 ...全文", html="长文开头 ...全文")
    empty = source.parse_extend(request, fetched(b'{"ok":1,"data":{"ok":1,"longTextContent":""}}', request), NOW_MS)
    assert source.with_long_text(post, empty).text == "长文开头 ...全文"
    assert post.html == "长文开头 ...全文"
    for gone in ('{"ok":0,"msg":"该微博不存在"}', '{"ok":0,"msg":"该微博已被删除"}', '{"ok":0}'):
        with pytest.raises(FetchError) as info:
            source.parse_extend(request, fetched(gone.encode(), request), NOW_MS)
        assert (info.value.outcome, info.value.error_class) == ("NotFound", "long-text-gone")
    with pytest.raises(FetchError) as info:  # any other message is not taken for a deleted post
        source.parse_extend(request, fetched('{"ok":0,"msg":"参数错误"}'.encode(), request), NOW_MS)
    assert (info.value.outcome, info.value.error_class) == ("Busy", "unexpected-long-text-answer")
    missing = source.parse_extend(request, fetched(b'{"ok":1,"data":{}}', request), NOW_MS)
    assert missing == ""  # no longTextContent at all: the post keeps its truncated text, on both sources
    with pytest.raises(FetchError) as info:  # a limit on the long-text call is still the session's
        source.parse_extend(request, fetched('{"ok":0,"msg":"访问频次过高"}'.encode(), request), NOW_MS)
    assert info.value.outcome == "RateLimited"


#: What the ``/ajax`` API and m.weibo.cn say of an account that can no longer be viewed: closed by its owner, closed
#: after complaints, or held until its owner passes a verification (Weibo's fixed phrases; the answers around them,
#: urls included, are ours).
_UNAVAILABLE = (
    "该账号因用户自行申请关闭，现已无法查看。",
    "该账号因被投诉违反《微博社区公约》的相关规定，现已无法查看。",
    "该账号已关闭，现无法查看。",
    "该账号行为异常，存在安全风险，用户验证之前暂时不能查看。",
)


@pytest.mark.parametrize("name", SOURCES)
@pytest.mark.parametrize("reason", _UNAVAILABLE, ids=["closed-by-owner", "banned", "closed", "held"])
def test_an_account_that_cannot_be_viewed_is_not_a_login_wall(name: str, reason: str) -> None:
    """A closed, banned or held account's answer is ``{"ok":0,"error_type":"link","url":…}`` (the reason is in the
    url, percent-encoded) or a ``toast`` with the reason as its ``msg``. Read as a verification wall (LoginRequired)
    it froze the logged-in account that asked, once per visit of the target; read as an unknown ``ok:0`` it was
    retried soon, forever. It is the target that is gone: NotFound, as for a user that does not exist."""
    link = f'{{"ok":0,"error_type":"link","url":"https://weibo.com/u/page/notice?reason={quote(reason)}"}}'
    toast = f'{{"ok":0,"error_type":"toast","msg":"{reason}"}}'
    for body in (link, toast):
        error = _refusal(name, body.encode())
        assert (error.outcome, error.error_class) == ("NotFound", "account-unavailable"), body
    # A url that says nothing of the account is still a verification wall.
    wall = _refusal(name, b'{"ok":0,"error_type":"link","url":"https://weibo.com/u/page/notice?from=ajax"}')
    assert (wall.outcome, wall.error_class) == ("LoginRequired", "verify-wall")


def test_an_account_that_cannot_be_viewed_ends_the_mobile_walk_at_once() -> None:
    """The reason names the account, not the tab: m.weibo.cn tries no other candidate tab, and a remembered tab is
    not sent back to the profile."""
    source = WeiboMobileSource()
    task = make_task("weibo_mobile", "1669879400")
    request = source.timeline_request(BASE, "1669879400", "1076031669879400", ("2304131669879400_-_WEIBO_SECOND",))
    remembered = source.timeline_request(BASE, "1669879400", "1076031669879400")
    remembered.state["remembered"] = "1"
    body = f'{{"ok":0,"msg":"{_UNAVAILABLE[0]}"}}'.encode()
    for asked in (request, remembered):
        with pytest.raises(FetchError) as info:
            parse("weibo_mobile", task, asked, body)
        assert (info.value.outcome, info.value.error_class) == ("NotFound", "account-unavailable")


@pytest.mark.parametrize("name", SOURCES)
def test_a_long_text_the_reader_may_no_longer_see_is_gone_not_a_failed_crawl(name: str) -> None:
    """A post whose author restricted it after its timeline page was read (to fans, to the last half year): its long
    text is refused in the words Weibo uses for a post that cannot be seen (暂无查看权限, 没有这条微博的查看权限, 此微博
    已不可见). Taken for an unknown answer (Busy) it failed the whole crawl at that post on every visit; it is the post
    that is gone, and the crawl keeps its truncated text as for a deleted one."""
    source = get_source(name)
    assert isinstance(source, LongTextSource)
    request = source.extend_request(BASE, 4700000000007001)
    for refused in (
        '{"ok":0,"msg":"微博不存在或暂无查看权限!"}',
        '{"ok":0,"msg":"暂无查看权限"}',
        '{"ok":0,"msg":"抱歉，由于作者设置，你暂时没有这条微博的查看权限哦。"}',
        '{"ok":0,"msg":"抱歉，作者已设置仅展示半年内微博，此微博已不可见。"}',
    ):
        with pytest.raises(FetchError) as info:
            source.parse_extend(request, fetched(refused.encode(), request), NOW_MS)
        assert (info.value.outcome, info.value.error_class) == ("NotFound", "long-text-gone"), refused


@pytest.mark.parametrize("name", SOURCES)
def test_a_refusal_worded_in_message_rather_than_msg_is_read(name: str) -> None:
    """weibo.com's ``/ajax`` API words its ``ok:0`` answers in ``message`` (beside an ``error_code``), not in ``msg``
    as m.weibo.cn does: ``{"ok":0,"error_code":20101,"message":"该微博不存在"}`` (2025–2026 clients of
    ``/ajax/statuses/show`` read it so). Read as saying nothing, a limit on the first page was a user without posts
    (NotFound, the target parked for its longest period) and on a later page the end of the list (the cursor passed
    over the posts not reached yet). Both keys are read, on both JSON sources."""
    source = get_source(name)
    task = make_task(name, "1669879400")
    limit = _refusal(name, '{"ok":0,"error_code":10023,"message":"访问频次过高，请稍后再试"}'.encode())
    assert (limit.outcome, limit.error_class) == ("RateLimited", "too-frequent")
    login = _refusal(name, '{"ok":0,"message":"请先登录"}'.encode())
    assert login.outcome == "LoginRequired"
    unknown = _refusal(name, '{"ok":0,"message":"服务器开小差了"}'.encode())
    assert (unknown.outcome, unknown.error_class) == ("Busy", "unexpected-ok0")
    gone = _refusal(name, '{"ok":0,"message":"该账号已关闭，现无法查看。"}'.encode())
    assert (gone.outcome, gone.error_class) == ("NotFound", "account-unavailable")
    # Weibo's error code for a user that does not exist, in whatever words (its API's English ones included).
    missing = _refusal(name, b'{"ok":0,"error_code":20003,"message":"User does not exists!"}')
    assert (missing.outcome, missing.error_class) == ("NotFound", "no-content")
    later = source.first_request(task, BASE)
    later.params["page"] = "3"
    later.params["since_id"] = "4700000000000001"
    for body, outcome in (
        ('{"ok":0,"message":"访问频次过高，请稍后再试"}', "RateLimited"),
        ('{"ok":0,"message":"服务器开小差了"}', "Busy"),
    ):
        with pytest.raises(FetchError) as info:
            parse(name, task, later, body.encode())
        assert info.value.outcome == outcome, body
    assert parse(name, task, later, '{"ok":0,"message":"暂无数据"}'.encode()).items == []  # the end, as before


@pytest.mark.parametrize("name", SOURCES)
@pytest.mark.parametrize(
    "body",
    [
        b'{"ok":0,"error_code":10023,"message":"User requests out of rate limit!"}',
        b'{"ok":0,"error_code":"10022","message":"IP requests out of rate limit!"}',
        b'{"ok":0,"error_code":10024}',
        '{"ok":0,"msg":"请求频率过高"}'.encode(),
        b'{"error":"User requests out of rate limit!","error_code":10023,"request":"/2/statuses/user_timeline.json"}',
        '{"error":"请求频率过高","error_code":10001,"request":"/2/statuses/user_timeline.json"}'.encode(),
    ],
    ids=["10023-english", "10022-string", "10024-bare", "frequency-wording", "open-api-shape-no-ok", "words-in-error"],
)
def test_a_rate_limit_named_by_weibos_error_code_or_worded_as_a_frequency_is_a_rate_limit(
    name: str, body: bytes
) -> None:
    """Weibo's error codes 10022–10024 (IP / user / one interface's requests out of rate limit) say the limit whatever
    the words beside them: in its API's English, or none, the first page read as an unknown answer (Busy, retried soon,
    the host never held) or as an empty account, and a later page the same. So did a limit worded 请求频率过高 (a 2026
    client's example of Weibo's limit message), which no word we knew matched. RateLimited ``too-frequent``, on the
    first page, a later one, a long-text call and a 403 alike."""
    source = get_source(name)
    task = make_task(name, "1669879400")
    error = _refusal(name, body)
    assert (error.outcome, error.error_class) == ("RateLimited", "too-frequent")
    assert _refusal(name, body, status=403).outcome == "RateLimited"  # not the ban a 403 otherwise is
    later = source.first_request(task, BASE)
    later.params["page"] = "3"
    later.params["since_id"] = "4700000000000001"
    with pytest.raises(FetchError) as info:
        parse(name, task, later, body)
    assert info.value.outcome == "RateLimited"
    assert isinstance(source, LongTextSource)
    request = source.extend_request(BASE, 4700000000007002)
    with pytest.raises(FetchError) as info:
        source.parse_extend(request, fetched(body, request), NOW_MS)
    assert info.value.outcome == "RateLimited"


@pytest.mark.parametrize("name", SOURCES)
def test_a_long_text_refused_by_weibo_error_code_or_privacy_wording_is_gone(name: str) -> None:
    """A long post whose author's privacy setting hides it now: ``{"ok":0,"error_code":20112,"message":…}``
    saying 由于作者隐私设置，你没有权限查看此微博, and a deleted one ``error_code`` 20101 (Weibo's codes for both,
    read by 2025–2026 clients of weibo.com's ``/ajax``). The post is gone for this reader, whatever the wording:
    NotFound ``long-text-gone``, the crawl keeps the truncated text. A limit in ``message`` is still the session's."""
    source = get_source(name)
    assert isinstance(source, LongTextSource)
    request = source.extend_request(BASE, 4700000000007002)
    for refused in (
        '{"ok":0,"error_code":20112,"message":"由于作者隐私设置，你没有权限查看此微博"}',
        '{"ok":0,"msg":"由于作者隐私设置，你没有权限查看此微博"}',
        '{"ok":0,"error_code":20101,"message":"target weibo does not exist!"}',
        '{"ok":0,"error_code":"20101"}',
    ):
        with pytest.raises(FetchError) as info:
            source.parse_extend(request, fetched(refused.encode(), request), NOW_MS)
        assert (info.value.outcome, info.value.error_class) == ("NotFound", "long-text-gone"), refused
    with pytest.raises(FetchError) as info:
        source.parse_extend(request, fetched('{"ok":0,"message":"访问频次过高"}'.encode(), request), NOW_MS)
    assert info.value.outcome == "RateLimited"


#: ``{"ok":0,"errno":"100006","msg":"请求非法"}`` and its variants, with the HTTP status each comes with.
_ILLEGAL_REQUEST = [
    (b'{"ok":0,"errno":"100006","msg":"\\u8bf7\\u6c42\\u975e\\u6cd5"}', 403),  # escaped, as sent
    ('{"ok":0,"errno":"100006","msg":"请求非法"}'.encode(), 200),
    (b'{"ok":0,"errno":"100006","msg":""}', 403),  # the number alone
    ('{"ok":0,"msg":"请求非法"}'.encode(), 200),  # the words alone
]


@pytest.mark.parametrize("name", [*SOURCES, "weibo_pc"])
@pytest.mark.parametrize(("body", "status"), _ILLEGAL_REQUEST, ids=["403-escaped", "200", "errno-only", "msg-only"])
def test_an_illegal_request_answer_is_the_session_refused_not_a_ban(name: str, body: bytes, status: int) -> None:
    """``{"ok":0,"errno":"100006","msg":"请求非法"}`` (HTTP 403, or 200) is Weibo refusing the request: a 2025
    parser-plugin issue shows it answered to an anonymous m.weibo.cn session's second call, fresh cookies answering
    again; a WeiboBot issue (2022) to a logged-in bot's likes after its first, its reporter concluding the address was
    blocked. As a 200 it was an unknown answer retried with the same session. It is LoginRequired ``illegal-request``:
    a visitor session is renewed, and on an account's lease the scheduler blocks the host without freezing the
    account (``scheduler_server.outcomes.REQUEST_REFUSALS``)."""
    error = _refusal(name, body, status=status)
    assert (error.outcome, error.error_class, error.http_status) == ("LoginRequired", "illegal-request", status)


@pytest.mark.parametrize("name", SOURCES)
@pytest.mark.parametrize(
    "body",
    ['{"ok":0,"msg":"需要登录才能查看"}', '{"ok":0,"message":"登录状态已过期"}', '{"ok":-1,"msg":"登录超时"}'],
    ids=["msg", "message", "other-ok"],
)
def test_an_answer_that_speaks_of_logging_in_is_a_login_wall(name: str, body: str) -> None:
    """A 2026 client of both Weibo JSON APIs takes any refusal whose message speaks of logging in (登录) for a login
    wall, not only the wordings we knew (请先登录, 请登录, 登录后, 未登录, 重新登录). Others were an unknown answer:
    Busy ``unexpected-ok0``, retried soon with the same session for ever, the logged-in account never rested and an
    anonymous task never backed off as for a login wall. LoginRequired ``login``, on the first page and a later one."""
    source = get_source(name)
    task = make_task(name, "1669879400")
    error = _refusal(name, body.encode())
    assert (error.outcome, error.error_class) == ("LoginRequired", "login")
    later = source.first_request(task, BASE)
    later.params["page"] = "3"
    later.params["since_id"] = "4700000000000001"
    with pytest.raises(FetchError) as info:
        parse(name, task, later, body.encode())
    assert (info.value.outcome, info.value.error_class) == ("LoginRequired", "login")


def test_a_v6_code_whose_message_speaks_of_logging_in_is_a_login_wall_not_a_ban() -> None:
    """The legacy feed reads an error code's ``msg`` through the same words: a code whose message speaks of logging in
    in other words than we knew (登录状态已过期) was a code naming nothing, ``Banned`` ``weibo-code-…`` (the host
    blocked as well as the account rested)."""
    task = make_task("weibo_pc", "1669879400", domain="100505")
    body = '{"code":"100001","msg":"登录状态已过期","data":""}'.encode()
    with pytest.raises(FetchError) as info:
        parse("weibo_pc", task, get_source("weibo_pc").first_request(task, BASE), body)
    assert (info.value.outcome, info.value.error_class) == ("LoginRequired", "login")


@pytest.mark.parametrize(
    ("code", "msg", "sent_to", "expected"),
    [
        ("100002", "帐号登录异常", "https://weibo.com/unfreeze", ("AccountFrozen", "account-unfreeze")),
        ("100002", "登录异常", "https://security.weibo.com/account/check", ("AccountFrozen", "account-verify")),
        (
            "100002",
            "请确认登录用户",
            "https://weibo.com/sorry?usernotexists&code=100002",
            ("NotFound", "user-not-exists"),
        ),
    ],
    ids=["unfreeze", "account-check", "user-not-exists"],
)
def test_a_v6_code_sent_to_a_known_page_is_that_page_whatever_its_message_says_of_logging_in(
    code: str, msg: str, sent_to: str, expected: tuple[str, str]
) -> None:
    """登录 is the last reading of a refusal, not the first: a v6 code whose ``data`` sends the browser to the unfreeze
    page, the account check or the user-gone page is what that page means, though its message speaks of logging in
    (帐号登录异常, 请确认登录用户). Read by the word first, a frozen account was sent to log in again (its freeze never
    seen) and a gone user's target froze the account that asked."""
    task = make_task("weibo_pc", "1669879400", domain="100505")
    body = f'{{"code":"{code}","msg":"{msg}","data":"{sent_to}"}}'.encode()
    with pytest.raises(FetchError) as info:
        parse("weibo_pc", task, get_source("weibo_pc").first_request(task, BASE), body)
    assert (info.value.outcome, info.value.error_class) == expected


@pytest.mark.parametrize("name", SOURCES)
def test_a_closed_account_or_a_gone_post_is_gone_though_its_message_speaks_of_logging_in(name: str) -> None:
    """A closed account's message may end with a link to log in (…现已无法查看。登录微博), and a gone post's long text
    say 登录查看更多: NotFound, as without those words (a login wall froze the account that asked on every visit of a
    gone target). A message whose only reading is 登录 is still a login wall, and 请求非法 or 频繁 still win over it."""
    closed = _refusal(name, '{"ok":0,"msg":"该账号因用户自行申请关闭，现已无法查看。登录微博"}'.encode())
    assert (closed.outcome, closed.error_class) == ("NotFound", "account-unavailable")
    source = get_source(name)
    assert isinstance(source, LongTextSource)
    request = source.extend_request(BASE, 4700000000007002)
    expected = {
        '{"ok":0,"msg":"该微博不存在，登录查看更多"}': ("NotFound", "long-text-gone"),
        '{"ok":0,"msg":"登录超时"}': ("LoginRequired", "login"),
        '{"ok":0,"msg":"请求非法，登录态无效"}': ("LoginRequired", "illegal-request"),
        '{"ok":0,"msg":"登录过于频繁"}': ("RateLimited", "too-frequent"),
    }
    for body, outcome in expected.items():
        with pytest.raises(FetchError) as info:
            source.parse_extend(request, fetched(body.encode(), request), NOW_MS)
        assert (info.value.outcome, info.value.error_class) == outcome, body
    for body, outcome in list(expected.items())[1:]:
        error = _refusal(name, body.encode())
        assert (error.outcome, error.error_class) == outcome, body
