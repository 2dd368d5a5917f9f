"""Ban, rate-limit, verification and firewall answers the sites give in 2024–2026, over real HTTP.

A stand-in for the sites runs on loopback as a plain HTTP proxy, so every request and every redirect keeps the site's
own host name (``club.jd.com``, ``pc-frequent-pro.pf.jd.com``, ``security.weibo.com``...): the client sends, follows
and reads them as it would the real ones, and the sources classify the final URL they end on. The bodies are our own
minimal stand-ins (docs/SITE_RESPONSES.md says what each signal is and where it is seen), not copies of real pages.
"""

from __future__ import annotations

import json
import logging
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler

import pytest

from crawler_client.crawl import CrawlResult, crawl_task
from crawler_client.http import Fetcher, FetchPolicy
from crawler_client.sources import get_source
from crawler_client.transport import HttpSession, Urllib3Transport
from icecrawler.models import Outcome, Report, Task, TaskKind
from sandbox.samples import jd_comments, mbloglist_page
from scheduler_server.config import SchedulerConfig
from scheduler_server.outcomes import outcome_effects
from tests.client._util import NOW_MS, make_task
from tests.helpers import serving_http
from tests.scheduler.conftest import make_settings

#: One answer: status, headers, body.
Answer = tuple[int, dict[str, str], bytes]
#: What the stand-in answers for a request: (host, path, query) -> Answer.
Site = Callable[[str, str, dict[str, str]], Answer]

POLICY = FetchPolicy(
    timeout_s=5.0, total_timeout_s=10.0, retries=0, backoff_s=0.01, max_body_bytes=1 << 20, user_agent="t"
)
CONFIG = SchedulerConfig.from_settings(make_settings(scheduler__host_block_s=300.0, scheduler__account_freeze_s=600.0))
SKU = "100012043978"
#: Where JD sends a client it rate-limits (the item page's landing in 2026 public tools: ``reason=403``).
JD_FREQUENT = "http://pc-frequent-pro.pf.jd.com/?from=pc_item&reason=403"


def page_html(title: str, extra: str = "") -> bytes:
    """A minimal HTML page of our own, with ``title`` and ``extra`` in its body."""
    head = f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{title}</title></head>"
    return f"{head}<body>{extra}</body></html>".encode()


@contextmanager
def stand_in(site: Site) -> Iterator[str]:
    """The stand-in sites as a forward proxy on 127.0.0.1 (its URL); ``site`` picks each answer by host and path."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            parts = urllib.parse.urlsplit(self.path)
            query = dict(urllib.parse.parse_qsl(parts.query, keep_blank_values=True))
            status, headers, body = site(parts.hostname or "", parts.path, query)
            self.send_response(status)
            for name, value in {**headers, "Content-Length": str(len(body))}.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            """Quiet."""

    with serving_http(Handler) as url:
        yield url


def crawl(site: Site, task: Task, base_url: str, **options: str) -> CrawlResult:
    """``task`` crawled by its source through the stand-in, as the client crawls it (redirects followed)."""
    with stand_in(site) as proxy:
        session = HttpSession(proxy)
        try:
            fetcher = Fetcher(Urllib3Transport(session), POLICY)
            source = get_source(task.source, options)
            return crawl_task(task, source, fetcher, base_url=base_url, max_pages=10, now_ms=lambda: NOW_MS)
        finally:
            session.close()


def effects(report: Report, account: str = "") -> tuple[bool, bool, float]:
    """(host blocked, account frozen, task delay) the scheduler applies for ``report``."""
    done = outcome_effects(report, attempts=0, account_id=account, host="h", wall=0.0, config=CONFIG)
    return done.block_host is not None, done.freeze_account is not None, done.delay_s


def redirect(to: str) -> Answer:
    return 302, {"Location": to}, b""


# --- JD --------------------------------------------------------------------------------------------------------------


def jd_site(page1: Answer, *, frequent: Answer | None = None) -> Site:
    """JD: page 0 of three answers ten reviews, page 1 answers ``page1``; the rate-limit host answers its page."""

    def answer(host: str, path: str, query: dict[str, str]) -> Answer:
        if host.endswith("pf.jd.com"):
            return frequent or (200, {"Content-Type": "text/html"}, page_html("京东", "请稍后重试"))
        if host in ("www.jd.com", "jd.com"):  # JD's home page, whatever the query
            return 200, {"Content-Type": "text/html"}, page_html("京东", "<div id='J_cate'>全部商品分类</div>")
        page = int(query["page"]) if "page" in query else int(query.get("body", '"page":0').split('"page":')[1][0])
        if page == 0:
            return 200, {"Content-Type": "text/html;charset=utf-8"}, jd_comments(int(SKU), max_page=3)
        return page1

    return answer


@pytest.mark.parametrize(
    ("endpoint", "base_url"), [("club", "http://club.jd.com"), ("api", "http://api.m.jd.com")], ids=["club", "api"]
)
def test_a_jd_call_sent_to_the_rate_limit_host_is_banned_keeps_page_one_and_blocks_the_host(
    endpoint: str, base_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """JD's item pages send a client it throttles to ``pc-frequent-pro.pf.jd.com`` (an HTML page, HTTP 200); a comment
    call redirected there was read as an unparsable answer (ParseError: a task failure, no host backoff). It is JD
    refusing this client: Banned ``jd-frequent-redirect``, the host blocked, the reviews of page 0 kept, the cursor
    left where it was so the task is walked again, never parked as NotFound."""
    task = make_task("jd", SKU)
    with caplog.at_level(logging.INFO, logger="crawler_client.crawl"):
        done = crawl(jd_site(redirect(JD_FREQUENT)), task, base_url, endpoint=endpoint)
    report = done.report
    assert (report.outcome, report.error_class) == (Outcome.Banned, "jd-frequent-redirect"), caplog.text
    assert "pc-frequent-pro" in caplog.text and "reason=403" in caplog.text  # the log says where JD sent it
    assert len(done.reviews) == 10  # page 0, fetched before the redirect, is stored
    assert report.cursor == task.cursor
    assert effects(report) == (True, False, 0.0)
    assert effects(report, account="acct")[:2] == (True, True)  # JD's block follows the logged-in account


@pytest.mark.parametrize(
    "landing",
    [
        "http://www.jd.com/?from=pc_item&reason=403",
        "http://www.jd.com/?from=pc_item_sd",
        "http://www.jd.com?from=pc_item&reason=403",
        "http://www.jd.com/?reason=403&from=pc_item",
        "http://jd.com/?from=pc_item&reason=403",
    ],
    ids=["reason-403", "pc-item-sd", "no-slash", "reason-first", "bare-host"],
)
def test_a_jd_call_sent_to_the_home_page_as_a_refused_item_is_banned(landing: str) -> None:
    """Before the rate-limit host, JD sent a refused item page to its home page with the reason in the query
    (``?from=pc_item&reason=403``, or ``?from=pc_item_sd``; public scripts of 2024–2025 stop on either address, "the
    account is restricted"). A comment call redirected there read JD's home page as an unparsable answer (ParseError:
    no host backoff, the account never rested): it is the same refusal, Banned ``jd-frequent-redirect``, however the
    address is written (no slash before the query, the parameters in another order, ``jd.com`` for ``www.jd.com``)."""
    task = make_task("jd", SKU)
    done = crawl(jd_site(redirect(landing)), task, "http://club.jd.com")
    assert (done.report.outcome, done.report.error_class) == (Outcome.Banned, "jd-frequent-redirect")
    assert len(done.reviews) == 10 and done.report.cursor == task.cursor
    assert effects(done.report) == (True, False, 0.0)


def test_the_rate_limit_page_answering_403_is_named_as_that_page() -> None:
    """The landing page may itself answer HTTP 403 (its address says ``reason=403``): still ``jd-frequent-redirect``,
    so the report says where JD sent the call rather than only that something answered 403."""
    site = jd_site(redirect(JD_FREQUENT), frequent=(403, {"Content-Type": "text/html"}, page_html("京东")))
    done = crawl(site, make_task("jd", SKU), "http://club.jd.com")
    assert (done.report.outcome, done.report.error_class) == (Outcome.Banned, "jd-frequent-redirect")


def test_a_jd_page_whose_script_sends_to_the_rate_limit_host_is_banned() -> None:
    """The same page reached by a script (``location.href``) rather than an HTTP redirect."""
    script = page_html("京东", f"<script>window.location.href='{JD_FREQUENT}'</script>")
    done = crawl(jd_site((200, {"Content-Type": "text/html"}, script)), make_task("jd", SKU), "http://club.jd.com")
    assert (done.report.outcome, done.report.error_class) == (Outcome.Banned, "jd-frequent-redirect")
    assert len(done.reviews) == 10


def test_the_api_gateways_queue_answer_is_a_rate_limit_for_the_wait_it_names() -> None:
    """``api.m.jd.com`` throttles with ``{"code":"601","echo":"Queuing","tips":…,"wait":"5"}`` (HTTP 200; a 2023 issue
    quotes it, a 2026 script counts code 601 as risk control). Having an ``echo`` and a non-zero code, it was taken
    for the gateway refusing a malformed call (ParseError ``jd-bad-request``). It is a rate limit: RateLimited
    ``jd-queuing`` for the ``wait`` it names, page 0 kept."""
    body = '{"code":"601","echo":"Queuing","tips":"人太多了，请稍候","wait":"5"}'.encode()
    done = crawl(
        jd_site((200, {"Content-Type": "application/json"}, body)),
        make_task("jd", SKU),
        "http://api.m.jd.com",
        endpoint="api",
    )
    assert (done.report.outcome, done.report.error_class) == (Outcome.RateLimited, "jd-queuing")
    assert done.report.retry_after_s == 5.0
    assert len(done.reviews) == 10
    assert effects(done.report, account="acct") == (True, False, 0.0)


def test_the_api_gateways_too_crowded_answer_is_a_rate_limit_not_a_login_wall() -> None:
    """``api.m.jd.com`` also turns calls away with ``{"code":"402","message":"<too crowded, come back in a while>"}``
    (HTTP 200; several public JD scripts reported it through 2024, a fresh cookie not helping). An answer without
    comments, it was the login wall (LoginRequired ``jd-blocked``), which rested the logged-in account for a busy
    gateway. It is RateLimited ``jd-crowded``: the host is held, no account rests, page 0's reviews are kept."""
    body = '{"code":"402","message":"人太多了，过一会儿再来吧"}'.encode()
    done = crawl(
        jd_site((200, {"Content-Type": "application/json"}, body)),
        make_task("jd", SKU),
        "http://api.m.jd.com",
        endpoint="api",
    )
    assert (done.report.outcome, done.report.error_class) == (Outcome.RateLimited, "jd-crowded")
    assert len(done.reviews) == 10
    assert effects(done.report, account="acct")[:2] == (True, False)


@pytest.mark.parametrize(
    ("page1", "expected"),
    [
        (redirect("http://cfe.m.jd.com/privatedomain/risk_handler/03101900/?returnurl=x"), "jd-risk-redirect"),
        (
            redirect("http://passport.jd.com/new/login.aspx?ReturnUrl=http%3A%2F%2Fitem.jd.com%2F1.html"),
            "login-redirect",
        ),
        ((403, {}, b""), "jd-risk-403"),
        ((200, {"Content-Type": "application/json"}, b'{"code":"605","msg":"x"}'), "jd-risk-605"),
    ],
    ids=["risk_handler", "passport-new-login", "403-empty", "code-605"],
)
def test_jds_other_refusals_over_http_were_already_classified(page1: Answer, expected: str) -> None:
    """What earlier rounds handled, checked again end to end: none of them is a parse error or NotFound."""
    done = crawl(jd_site(page1), make_task("jd", SKU), "http://club.jd.com")
    assert done.report.error_class == expected
    assert done.report.outcome in (Outcome.Banned, Outcome.LoginRequired)
    assert len(done.reviews) == 10


# --- Weibo -----------------------------------------------------------------------------------------------------------

#: Each Weibo source with the host its calls go to.
WEIBO = [("weibo_mobile", "http://m.weibo.cn"), ("weibo_web", "http://weibo.com"), ("weibo_pc", "http://weibo.com")]
UID = "1669879400"


def weibo_site(first: Answer) -> Site:
    """Weibo: the source's first call answers ``first``; the pages it may be sent to answer a page of their own."""

    def answer(host: str, path: str, query: dict[str, str]) -> Answer:
        landing = path.startswith(("/sorry", "/unfreeze", "/newlogin"))
        if host.startswith(("security.", "passport.", "login.")) or landing:
            return 200, {"Content-Type": "text/html"}, page_html("微博", "<div id='app'></div>")
        return first

    return answer


def weibo_crawl(source: str, base_url: str, first: Answer) -> Report:
    return crawl(weibo_site(first), make_task(source, UID, domain="100505"), base_url).report


@pytest.mark.parametrize(("source", "base_url"), WEIBO)
def test_a_weibo_call_sent_to_the_user_not_exists_page_is_not_found_not_a_login_wall(
    source: str, base_url: str
) -> None:
    """Weibo sends a request for an account that is gone (closed, or banned by Weibo) to
    ``weibo.com/sorry?usernotexists``; the page there is HTML, which the JSON sources took for a login page
    (LoginRequired: the asking account frozen, a visitor session renewed, on every visit of the target). It is the
    target that is gone: NotFound ``user-not-exists``."""
    report = weibo_crawl(source, base_url, redirect("http://weibo.com/sorry?usernotexists&code=20003"))
    assert (report.outcome, report.error_class) == (Outcome.NotFound, "user-not-exists")
    assert effects(report, account="acct")[:2] == (False, False)


@pytest.mark.parametrize(("source", "base_url"), WEIBO)
def test_a_weibo_call_sent_to_security_weibo_com_is_an_account_to_verify(source: str, base_url: str) -> None:
    """``security.weibo.com`` (a geetest captcha, a phone check) is where Weibo sends a logged-in account it wants a
    person to verify; its HTML was taken for a login page. AccountFrozen ``account-verify``: the account rests (the
    same freeze as a login wall), and the report says what a person must do."""
    report = weibo_crawl(source, base_url, redirect("http://security.weibo.com/captcha/geetest?type=1"))
    assert (report.outcome, report.error_class) == (Outcome.AccountFrozen, "account-verify")
    assert effects(report, account="acct")[:2] == (False, True)


@pytest.mark.parametrize(("source", "base_url"), WEIBO[:2])
def test_an_answer_that_names_the_user_not_exists_page_is_not_found(source: str, base_url: str) -> None:
    """The same page named in a JSON answer's ``url`` (``{"ok":0,"url":"…/sorry?usernotexists…"}``, as a 2025 public
    client's tests have it) rather than reached by a redirect: NotFound, not the verification wall a bare ``url`` is."""
    body = b'{"ok":0,"error_type":"link","url":"https://weibo.com/sorry?usernotexists&msg=x"}'
    report = weibo_crawl(source, base_url, (200, {"Content-Type": "application/json"}, body))
    assert (report.outcome, report.error_class) == (Outcome.NotFound, "user-not-exists")


@pytest.mark.parametrize(("source", "base_url"), WEIBO)
@pytest.mark.parametrize(
    ("sent_to", "expected", "held"),
    [
        ("http://weibo.com/sorry?userblock&is_viewer&code=20003", (Outcome.AccountFrozen, "account-blocked"), True),
        ("http://weibo.com/unfreeze", (Outcome.AccountFrozen, "account-unfreeze"), True),
        ("http://weibo.com/sorry?sysbusy", (Outcome.Busy, "sysbusy"), False),
        ("http://weibo.com/sorry?pagenotfound&", (Outcome.Busy, "sorry-page"), False),
        ("http://weibo.com/sorry?notseenyet&code=1", (Outcome.Busy, "sorry-page"), False),
    ],
    ids=["userblock", "unfreeze", "sysbusy", "pagenotfound", "other-sorry"],
)
def test_a_weibo_call_sent_to_a_blocked_account_or_busy_page_is_what_that_page_means(
    source: str, base_url: str, sent_to: str, expected: tuple[Outcome, str], held: bool
) -> None:
    """weibo.com sends an account it has blocked to ``sorry?userblock`` (``is_viewer``: the account asking) and a frozen
    one to ``/unfreeze``, where a person must unlock it; a moment the system is busy goes to ``sorry?sysbusy``.
    Crawlers in public code rest the account for the first two and wait out the third. The HTML there was taken for
    a login page (a busy moment froze the account). The blocked and frozen pages rest the account
    (AccountFrozen), the busy one retries the task with the account untouched (Busy); neither blocks the host. Any
    other ``sorry`` page (page-not-found as a redirect proves nothing about the target) is the site's error page:
    Busy, whatever its HTML holds (a page without our markers was a login page that rested the account)."""
    report = weibo_crawl(source, base_url, redirect(sent_to))
    assert (report.outcome, report.error_class) == expected
    assert effects(report, account="acct")[:2] == (False, held)


@pytest.mark.parametrize(
    ("body", "expected", "held"),
    [
        (
            b'{"code":"100003","msg":"","data":"http:\\/\\/weibo.com\\/sorry?userblock&code=20003"}',
            (Outcome.AccountFrozen, "account-blocked"),
            (False, True),
        ),
        (
            b'{"code":"100005","msg":"","data":"https:\\/\\/weibo.com\\/sorry?sysbusy"}',
            (Outcome.Busy, "sysbusy"),
            (False, False),
        ),
        (
            b'{"code":"100002","msg":"","data":"https:\\/\\/weibo.com\\/login.php?url=x"}',
            (Outcome.LoginRequired, "login-redirect"),
            (False, True),
        ),
        (  # today's login page (weibo.com/newlogin): was a code naming no known page, a ban that blocked the host
            b'{"code":"100002","msg":"","data":"https:\\/\\/weibo.com\\/newlogin?tabtype=weibo&url=x"}',
            (Outcome.LoginRequired, "login-redirect"),
            (False, True),
        ),
    ],
    ids=["userblock", "sysbusy", "login", "newlogin"],
)
def test_a_v6_answer_naming_where_to_go_is_what_that_page_means_not_a_ban(
    body: bytes, expected: tuple[Outcome, str], held: tuple[bool, bool]
) -> None:
    """weibo.com's v6 AJAX calls (weibo_pc) are answered ``{"code":…,"msg":"","data":"<page>"}`` where a page load
    would be redirected; weibo_pc read every such code but page-not-found as a ban, blocking the host for an account
    blocked, a busy moment or a lost login."""
    report = weibo_crawl("weibo_pc", "http://weibo.com", (200, {"Content-Type": "application/json"}, body))
    assert (report.outcome, report.error_class) == expected
    assert effects(report, account="acct")[:2] == held


@pytest.mark.parametrize(("source", "base_url"), WEIBO)
def test_a_weibo_page_saying_the_system_is_busy_retries_the_task_and_holds_nothing(source: str, base_url: str) -> None:
    """A GBK page saying 系统繁忙 in place of the answer (HTTP 200) was a login page: the account asking was frozen for
    the site's busy moment (weibo_pc: a ban when a v6 answer's ``msg`` said it, the host blocked too). Busy: the task
    is retried, neither the account nor the host is held."""
    page = page_html("微博", "<p>系统繁忙，请稍后再试</p>").decode().encode("gbk")
    report = weibo_crawl(source, base_url, (200, {"Content-Type": "text/html; charset=utf-8"}, page))
    assert (report.outcome, report.error_class) == (Outcome.Busy, "busy")
    assert effects(report, account="acct")[:2] == (False, False)


def test_weibo_pc_stops_at_an_empty_page_the_pager_promised_and_keeps_its_cursor() -> None:
    """weibo.com answered page 2 of a three-page feed with its empty-feed placeholder ("暂时没有内容哦，稍后再来试试吧",
    what public scrapers meet when it restricts an account mid-crawl). That was the end of the feed: the crawl
    succeeded and its cursor passed over pages 2 and 3 for good. It fails Busy instead: the 45 posts of page 1 are
    kept, the cursor stays, nothing is held, and the next visit walks on."""
    placeholder = "<div class='WB_empty'><p class='text'>咦？暂时没有内容哦，稍后再来试试吧~</p></div>"
    empty = json.dumps({"code": "100000", "msg": "", "data": placeholder}).encode()
    chunks = iter([*mbloglist_page(int(UID), 1, count_page=3), empty])

    def site(host: str, path: str, query: dict[str, str]) -> Answer:
        if path.endswith("/getlongtext"):  # a truncated post's full text
            return 200, {"Content-Type": "application/json"}, b'{"code":"100000","msg":"","data":{"html":"full"}}'
        return 200, {"Content-Type": "application/json"}, next(chunks)

    task = make_task("weibo_pc", UID, domain="100505")
    done = crawl(site, task, "http://weibo.com")
    assert (done.report.outcome, done.report.error_class) == (Outcome.Busy, "weibo_pc-empty-page")
    assert len(done.posts) == 45 and done.report.cursor == task.cursor
    assert effects(done.report, account="acct")[:2] == (False, False)


def test_a_403_that_says_too_frequent_is_a_rate_limit_on_weibo_pc_as_on_the_json_sources() -> None:
    """weibo.com answers ``{"ok":0,"errno":"100005","msg":"请求过于频繁"}`` with HTTP 403 when it throttles a client.
    weibo_mobile and weibo_web read it as the rate limit it names; weibo_pc (the same host) took the 403 for a ban,
    freezing the account for a limit."""
    body = '{"ok":0,"errno":"100005","msg":"请求过于频繁"}'.encode()
    report = weibo_crawl("weibo_pc", "http://weibo.com", (403, {"Content-Type": "application/json"}, body))
    assert (report.outcome, report.error_class) == (Outcome.RateLimited, "too-frequent")
    assert effects(report, account="acct")[:2] == (True, False)


@pytest.mark.parametrize(("source", "base_url"), WEIBO)
@pytest.mark.parametrize("status", [200, 403])
def test_errno_100005_is_a_rate_limit_whatever_its_message_says(source: str, base_url: str, status: int) -> None:
    """``errno`` 100005 is Weibo's code for "too frequent"; an answer that gives the code with an empty or reworded
    ``msg`` was an empty first page (NotFound, parked for the longest period) or, on a 403, a ban."""
    body = b'{"ok":0,"errno":"100005","msg":""}'
    report = weibo_crawl(source, base_url, (status, {"Content-Type": "application/json"}, body))
    assert (report.outcome, report.error_class) == (Outcome.RateLimited, "too-frequent")


@pytest.mark.parametrize(("source", "base_url"), WEIBO)
@pytest.mark.parametrize(
    ("first", "expected"),
    [
        ((418, {}, b""), (Outcome.Banned, "http-418")),
        ((432, {}, b""), (Outcome.Banned, "http-432")),
        (redirect("http://passport.weibo.com/visitor/visitor?entry=miniblog"), (Outcome.LoginRequired, "visitor")),
        (redirect("http://login.sina.com.cn/sso/login.php?url=x"), (Outcome.LoginRequired, "login-redirect")),
        # today's weibo.com login page, by its address: its HTML shell was read only as "HTML instead of JSON"
        (redirect("http://weibo.com/newlogin?tabtype=weibo&url=x"), (Outcome.LoginRequired, "login-redirect")),
        (
            (
                200,
                {"Content-Type": "application/json"},
                b'{"ok":-100,"url":"https://passport.weibo.cn/signin/welcome"}',
            ),
            (Outcome.LoginRequired, "login-wall"),
        ),
    ],
    ids=["418", "432", "visitor", "sso", "newlogin", "ok-100"],
)
def test_weibos_other_refusals_over_http_were_already_classified(
    source: str, base_url: str, first: Answer, expected: tuple[Outcome, str]
) -> None:
    report = weibo_crawl(source, base_url, first)
    assert (report.outcome, report.error_class) == expected


# --- ECSHOP behind web firewalls --------------------------------------------------------------------------------------

SHOP = "http://shop.example.cn"
#: What the firewalls that front Chinese PHP shops answer in place of the page (our own minimal stand-ins of them).
WAF_BLOCK = page_html(
    "网站防火墙", "<p>您的请求带有不合法参数，已被网站管理员设置拦截！</p>"
)  # 宝塔 (btwaf), ngx_lua_waf
SAFEDOG = page_html("网站防火墙", "<span>如果您是网站管理员，请登录安全狗</span>")
YUNSUO_CHECK = b"<html><script>location.href='/goods.php?id=7&security_verify_data=313932302c31303830'</script></html>"
CF_PAGE = page_html("Just a moment...", "<script>window._cf_chl_opt={cType:'managed'};</script>")
#: An ngx_lua_waf configuration whose interception page keeps only the family's title and a bare line.
WAF_TITLE_ONLY = page_html("网站防火墙", " bad request ")


def shop_site(answer: Answer) -> Site:
    return lambda host, path, query: answer


@pytest.mark.parametrize("kind", [TaskKind.ProductReviews, TaskKind.Listing], ids=["goods", "category"])
@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ((200, {"Content-Type": "text/html"}, WAF_BLOCK), "waf-block"),
        ((200, {"Content-Type": "text/html"}, SAFEDOG), "waf-block"),
        ((200, {"Content-Type": "text/html"}, WAF_TITLE_ONLY), "waf-block"),
        ((200, {"Content-Type": "text/html"}, YUNSUO_CHECK), "waf-challenge"),
        ((200, {"Content-Type": "text/html"}, CF_PAGE), "cf-challenge"),
        ((503, {"Content-Type": "text/html", "cf-mitigated": "challenge"}, CF_PAGE), "cf-challenge"),
        ((403, {"Content-Type": "text/html", "cf-mitigated": "challenge"}, CF_PAGE), "cf-challenge"),
    ],
    ids=["btwaf", "safedog", "waf-title-only", "yunsuo-script", "cloudflare-200", "cloudflare-503", "cloudflare-403"],
)
def test_a_firewalls_answer_in_place_of_a_shop_page_is_banned(kind: TaskKind, answer: Answer, expected: str) -> None:
    """A shop's web firewall answers in place of its page: an interception notice (宝塔/btwaf, 安全狗, ngx_lua_waf), a
    script check we cannot pass (云锁's ``security_verify_data``), or Cloudflare's challenge (``cf-mitigated:
    challenge``). They were ParseErrors (a task failure, retried at once by every task of the shop) or, on a 503, an
    HttpError: it is the shop refusing this client, Banned, so the whole host is held off."""
    report = crawl(shop_site(answer), make_task("ecshop", "7", kind), SHOP).report
    assert (report.outcome, report.error_class) == (Outcome.Banned, expected)
    assert effects(report) == (True, False, 0.0)


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ((503, {"Retry-After": "120"}, page_html("Service Unavailable")), (Outcome.RateLimited, "http-503")),
        ((403, {}, page_html("403 Forbidden")), (Outcome.Banned, "http-403")),
    ],
    ids=["503-retry-after", "403"],
)
def test_a_shops_503_with_retry_after_and_its_403_were_already_classified(
    answer: Answer, expected: tuple[Outcome, str]
) -> None:
    report = crawl(shop_site(answer), make_task("ecshop", "7", TaskKind.ProductReviews), SHOP).report
    assert (report.outcome, report.error_class) == expected
    assert report.retry_after_s == (120.0 if report.outcome is Outcome.RateLimited else 0.0)


#: ECSHOP's closed-shop line in each charset's language pack: zh_cn for the UTF-8 and GBK editions, zh_tw for Big5.
_CLOSED_LINES = {
    "utf-8": "本店盘点中，请您稍后再来...",
    "gbk": "本店盘点中，请您稍后再来...",
    "big5": "本店盤點中，請您稍後再來...",
}


@pytest.mark.parametrize("kind", [TaskKind.ProductReviews, TaskKind.Listing], ids=["goods", "category"])
@pytest.mark.parametrize("charset", sorted(_CLOSED_LINES))
def test_a_shop_its_owner_closed_is_busy_over_http(kind: TaskKind, charset: str) -> None:
    """ECSHOP's ``init.php`` answers every page of a shop its owner closed with its own notice (本店盘点中，请您稍后
    再来..., then the owner's words; HTTP 200, in the shop's charset). It was a ParseError (a task failure) on a goods
    page and, on a listing, a page that is not the shop: it is the shop closed for a while, Busy, nobody held off."""
    notice = (
        '<div style="margin: 150px; text-align: center; font-size: 14px">'
        f"<p>{_CLOSED_LINES[charset]}</p><p>維護</p></div>"
    ).encode(charset)
    answer = (200, {"Content-Type": f"text/html; charset={charset}"}, notice)
    report = crawl(shop_site(answer), make_task("ecshop", "7", kind), SHOP).report
    assert (report.outcome, report.error_class) == (Outcome.Busy, "shop-closed")
    assert effects(report)[:2] == (False, False)


def test_a_big5_shops_reviews_keep_their_characters_over_http() -> None:
    """A shop installed as ECSHOP's Big5 edition says ``charset=big5`` in its ``Content-Type``; the goods page and the
    ``comment.php`` answer (written byte by byte, 許 and 功 ending in a backslash byte) are read as Big5, through the
    client's fetcher as it hands the header over. Both were read as GB18030: every review stored with other
    characters, or the comment page a ParseError."""
    texts = {1: "許多功能", 2: "蓋子很緊"}

    def fragment(page: int) -> str:
        nxt = "javascript:gotoPage(2,7,0)" if page == 1 else "javascript:;"
        return (
            f'<ul class="comments"><li class="word"><font class="f2">會員</font> <font class="f3">( 2024-05-0{page} '
            f'08:30:00 )</font><br /><img src="../images/stars4.gif" /><p>{texts[page]}</p></li></ul><div id="pager">'
            f'總計 2 個記錄，共 2 頁。 <a href="javascript:gotoPage(1,7,0)">第一頁</a> <a href="{nxt}">下一頁</a></div>'
        )

    def envelope(content: str) -> bytes:
        escaped = content.encode("big5").replace(b"\\", b"\\\\").replace(b'"', b'\\"')
        return b'{"error":0,"message":"","content":"' + escaped + b'"}'

    big5 = {"Content-Type": "text/html; charset=big5"}

    def answer(host: str, path: str, query: dict[str, str]) -> Answer:
        if path.endswith("/comment.php"):
            return 200, big5, envelope(fragment(2))
        return 200, big5, f'<html><body><div id="ECS_COMMENT">{fragment(1)}</div></body></html>'.encode("big5")

    done = crawl(answer, make_task("ecshop", "7", TaskKind.ProductReviews), SHOP)
    assert done.report.outcome == Outcome.Ok, done.report
    assert sorted(review.content for review in done.reviews) == sorted(texts.values())
    assert {review.user for review in done.reviews} == {"會員"}
