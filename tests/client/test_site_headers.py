"""What the client really puts on the wire for each site, checked on a local HTTP server over loopback: the
sources' own requests (timeline pages, long texts, review pages) sent through the real Fetcher, transport and
session cache with the headers the runner builds for them, against a stand-in that records every request's
headers and answers as the site does (``XSRF-TOKEN`` set on the first answer, then refreshed mid-crawl).

The expectations are those of weibo.com's, m.weibo.cn's and JD's own web clients as docs/SOURCES.md describes
them ("Headers" and each source's "Headers" line)."""

from __future__ import annotations

import dataclasses
import http.server
import threading
from collections.abc import Iterator
from typing import ClassVar

import pytest

from crawler_client.headers import source_headers
from crawler_client.http import Fetcher, FetchPolicy
from crawler_client.runner import RunnerConfig, TaskRunner
from crawler_client.sources import get_source
from crawler_client.sources.base import PageRequest
from crawler_client.transport import SessionCache, Urllib3Transport
from icecrawler.clock import Clock
from icecrawler.models import Account
from tests.client._util import make_task
from tests.helpers import serving_http

POLICY = FetchPolicy(
    timeout_s=2.0, total_timeout_s=5.0, retries=0, backoff_s=0.01, max_body_bytes=100_000, user_agent=""
)


class _Recorder(http.server.BaseHTTPRequestHandler):
    """Records each request's path and headers (lower-cased names); answers ``{"ok":1}`` and sets the cookies
    the test queued for the next answer."""

    seen: ClassVar[list[tuple[str, dict[str, str]]]] = []
    #: Each request's header lines as sent (a name sent twice is there twice).
    raw: ClassVar[list[list[tuple[str, str]]]] = []
    set_cookies: ClassVar[list[str]] = []
    #: Answer every request with a 302 to this URL when it is set.
    redirect_to = ""
    lock = threading.Lock()

    def do_GET(self) -> None:
        with self.lock:
            self.seen.append((self.path, {name.lower(): value for name, value in self.headers.items()}))
            self.raw.append(list(self.headers.items()))
            cookies, self.set_cookies[:] = list(self.set_cookies), []
        body = b'{"ok":1}'
        if self.redirect_to:
            self.send_response(302)
            self.send_header("Location", self.redirect_to)
        else:
            self.send_response(200)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        for cookie in cookies:
            self.send_header("Set-Cookie", cookie)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


class _Elsewhere(http.server.BaseHTTPRequestHandler):
    """Another site: records the Cookie header of each request ("" when none)."""

    cookies: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        self.cookies.append(self.headers.get("Cookie", ""))
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def site() -> Iterator[str]:
    _Recorder.seen, _Recorder.raw, _Recorder.set_cookies, _Recorder.redirect_to = [], [], [], ""
    with serving_http(_Recorder) as base:
        yield base


def _fetcher(source_name: str, blob: str) -> tuple[Fetcher, SessionCache]:
    """A fetcher as ``TaskRunner.run`` builds it for one task of ``source_name`` leased with ``blob``."""
    source = get_source(source_name)
    cache = SessionCache()
    session = cache.session(source_name, Account("acct", blob))
    return Fetcher(Urllib3Transport(session), POLICY, headers=source_headers(source.default_headers, "", "")), cache


def _sent(fetcher: Fetcher, request: PageRequest) -> dict[str, str]:
    """The headers ``request`` reached the site with."""
    before = len(_Recorder.seen)
    fetcher.fetch(request)
    assert len(_Recorder.seen) == before + 1
    return _Recorder.seen[-1][1]


def test_weibo_web_sends_what_weibo_com_s_own_client_sends_and_echoes_each_xsrf_token(site: str) -> None:
    """weibo.com's web client puts its build (``client-version``) and the server build it was served with
    (``server-version``) on every /ajax call beside ``X-Requested-With``, the JSON Accept and a desktop browser;
    ``X-XSRF-TOKEN`` echoes the ``XSRF-TOKEN`` cookie the site set, and a value the site sets mid-crawl is echoed
    from the next request on."""
    source = get_source("weibo_web")
    fetcher, cache = _fetcher("weibo_web", "SUB=login; SUBP=p")
    first = source.first_request(make_task("weibo_web", "5612345678"), site)
    _Recorder.set_cookies.append("XSRF-TOKEN=first; path=/")
    sent = _sent(fetcher, first)
    assert sent["x-requested-with"] == "XMLHttpRequest" and sent["accept"] == "application/json, text/plain, */*"
    assert sent["referer"] == f"{site}/u/5612345678" and "Windows NT" in sent["user-agent"]
    assert sent["client-version"].startswith("v2.") and sent["server-version"].startswith("v20")
    assert "x-xsrf-token" not in sent  # the session held no XSRF-TOKEN yet
    second = source.page_request(site, "5612345678", 2)  # type: ignore[attr-defined]
    _Recorder.set_cookies.append("XSRF-TOKEN=refreshed; path=/")
    sent = _sent(fetcher, second)
    assert sent["x-xsrf-token"] == "first" and "XSRF-TOKEN=first" in sent["cookie"]
    sent = _sent(fetcher, source.extend_request(site, 4700000000000001))  # type: ignore[attr-defined]
    assert sent["x-xsrf-token"] == "refreshed" and sent["cookie"] == "SUB=login; SUBP=p; XSRF-TOKEN=refreshed"
    assert sent["client-version"].startswith("v2.")
    cache.close()


def test_weibo_mobile_long_text_is_asked_as_the_web_app_asks_it(site: str) -> None:
    """m.weibo.cn's app sends ``MWeibo-Pwa``, ``X-Requested-With`` and the ``XSRF-TOKEN`` echo on all its calls,
    the long text of a post (``statuses/extend``) from that post's page included: a Referer naming the post."""
    source = get_source("weibo_mobile")
    fetcher, cache = _fetcher("weibo_mobile", "SUB=login; XSRF-TOKEN=m-token")
    timeline = source.first_request(make_task("weibo_mobile", "5612345678"), site)
    sent = _sent(fetcher, timeline)
    assert sent["mweibo-pwa"] == "1" and sent["x-requested-with"] == "XMLHttpRequest"
    assert sent["x-xsrf-token"] == "m-token" and sent["referer"] == f"{site}/u/5612345678"
    assert "iPhone" in sent["user-agent"]
    sent = _sent(fetcher, source.extend_request(site, 4700000000007000))  # type: ignore[attr-defined]
    assert sent["mweibo-pwa"] == "1" and sent["x-requested-with"] == "XMLHttpRequest"
    assert sent["x-xsrf-token"] == "m-token"
    assert sent["referer"] == f"{site}/detail/4700000000007000"
    cache.close()


def test_jd_sends_an_item_page_referer_and_a_desktop_browser(site: str) -> None:
    """JD's comment calls come from the item page: its Referer and a desktop browser. The club endpoint is a JSONP
    script the page loads (``Accept: */*``, no Origin); the API gateway (api.m.jd.com) is called by the page's script
    across sites, with the page's Origin and the gateway's own ``x-referer-page`` and ``x-rp-client`` headers."""
    fetcher, cache = _fetcher("jd", "")
    task = make_task("jd", "100012043978")
    sent = _sent(fetcher, get_source("jd").first_request(task, site))
    assert sent["referer"] == "https://item.jd.com/100012043978.html"
    assert sent["accept"] == "*/*" and "Windows NT" in sent["user-agent"] and "cookie" not in sent
    assert "origin" not in sent and "x-rp-client" not in sent
    sent = _sent(fetcher, get_source("jd", {"endpoint": "api"}).first_request(task, site))
    assert sent["referer"] == sent["x-referer-page"] == "https://item.jd.com/100012043978.html"
    assert sent["origin"] == "https://item.jd.com" and sent["x-rp-client"] == "h5_1.0.0"
    assert sent["accept"] == "application/json, text/plain, */*"
    cache.close()


def weibo_web_runner(site: str, max_pages: int) -> TaskRunner:
    """A task runner crawling weibo_web at ``site`` with the source's own headers."""
    config = RunnerConfig(
        policy=POLICY,
        max_pages=max_pages,
        base_urls={"weibo_web": site},
        headers={"weibo_web": source_headers(get_source("weibo_web").default_headers, "", "")},
    )
    return TaskRunner(config, get_source, clock=Clock(), cancel=threading.Event())


def test_an_accounts_cookies_stay_on_the_site_they_were_given_for(site: str) -> None:
    """An account's blob names no domain, as a browser's Cookie header does not; the client sent its cookies to
    every host, so a redirect to another site (a shortener, a CDN, a partner's login page) carried the login along.
    They belong to the site the source crawls, as the site scoped them (``.weibo.com``, ``.weibo.cn``,
    ``.jd.com``): here the sandbox-like site on 127.0.0.1 redirects to ``localhost``, another host."""
    _Elsewhere.cookies = []
    with serving_http(_Elsewhere) as elsewhere:
        other = elsewhere.replace("127.0.0.1", "localhost")
        _Recorder.redirect_to = f"{other}/landing"
        runner = weibo_web_runner(site, max_pages=1)
        task = dataclasses.replace(make_task("weibo_web", "5612345678"), account=Account("acct", "SUB=login; SUBP=p"))
        runner.run(task)
        runner.close()
    assert _Recorder.seen and _Recorder.seen[0][1]["cookie"] == "SUB=login; SUBP=p"
    assert _Elsewhere.cookies == [""], "the account's login went to another site"


@pytest.mark.parametrize(
    ("base_url", "mine", "not_mine"),
    [
        (
            "https://weibo.com",
            ["https://weibo.com/ajax/x", "https://passport.weibo.com/visitor/visitor"],
            ["https://m.weibo.cn/api/config", "https://weibo.com.example.org/", "https://notweibo.com/"],
        ),
        (
            "https://m.weibo.cn",
            ["https://m.weibo.cn/api/container/getIndex", "https://passport.weibo.cn/signin"],
            ["https://weibo.com/ajax/x"],
        ),
        (
            "https://club.jd.com",
            ["https://club.jd.com/comment/x", "https://api.m.jd.com/", "https://item.jd.com/1.html"],
            ["https://jd.example.com/"],
        ),
        (
            "http://shop.example.com.cn/mall",
            ["http://shop.example.com.cn/user.php", "http://img.example.com.cn/a"],
            ["http://other.com.cn/"],
        ),
        (
            "http://127.0.0.1:8800/x",
            ["http://127.0.0.1:9/passport/visitor"],
            ["http://localhost:8800/x", "http://127.0.0.2/"],
        ),
    ],
)
def test_which_hosts_an_accounts_cookies_go_to(base_url: str, mine: list[str], not_mine: list[str]) -> None:
    cache = SessionCache()
    jar = cache.session("weibo_web", Account("acct", "SUB=login"), base_url).cookies
    assert [url for url in mine if jar.value_for(url, "SUB") != "login"] == []
    assert [url for url in not_mine if jar.value_for(url, "SUB") is not None] == []
    cache.close()


def test_a_login_the_site_refreshes_mid_crawl_is_used_at_once_and_reported(site: str) -> None:
    """The site answers with a new ``SUB`` (with an expiry, as a login's is) and a session ``XSRF-TOKEN``: the next
    request, and the next task on this worker, send the new login, and the report carries the account's blob with
    it for the scheduler to lease from then on; the session token stays out of it (it dies with the session). A
    visitor session reports nothing (the scheduler renews those itself)."""
    runner = weibo_web_runner(site, max_pages=2)
    blob = "SUB=pasted; SUBP=p; XSRF-TOKEN=old"
    task = dataclasses.replace(make_task("weibo_web", "5612345678"), account=Account("acct", blob))
    _Recorder.set_cookies.extend(["SUB=refreshed; Max-Age=2592000; Path=/", "XSRF-TOKEN=new; Path=/"])
    first = runner.run(task)
    assert first.report.account_cookies == "SUB=refreshed; SUBP=p; XSRF-TOKEN=old"
    again = runner.run(task)  # the same lease blob: this worker's session keeps the site's cookies
    assert _Recorder.seen[-1][1]["cookie"] == "SUB=refreshed; SUBP=p; XSRF-TOKEN=new"
    assert again.report.account_cookies == "SUB=refreshed; SUBP=p; XSRF-TOKEN=old"
    visitor = dataclasses.replace(task, account=Account("visitor:weibo_web:1", "SUB=v"))
    _Recorder.set_cookies.append("SUB=v2; Max-Age=600; Path=/")
    assert runner.run(visitor).report.account_cookies == ""
    runner.close()
    assert "refreshed" not in repr(first.report)


def test_a_refresh_the_report_cannot_carry_is_left_out_and_the_report_kept(
    site: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Five refreshed cookies of 4000 characters are more than a report's ``accountCookies`` may hold: sent, the
    scheduler would refuse the whole report (the crawl's outcome and cursor with it). The client leaves the refresh
    out; the crawl itself is reported as ever. Every later crawl of the account finds the same: one log line says
    so, not one per crawl."""
    runner = weibo_web_runner(site, max_pages=1)
    names = ["SUB", "SUBP", "ALF", "SCF", "SSOLoginState"]
    blob = "; ".join(f"{name}=short" for name in names)
    task = dataclasses.replace(make_task("weibo_web", "5612345678"), account=Account("acct-unfit", blob))
    _Recorder.set_cookies.extend(f"{name}={'v' * 4000}; Max-Age=2592000; Path=/" for name in names)
    first_request = len(_Recorder.seen)
    result = runner.run(task)
    again = runner.run(task)  # the session keeps the site's big cookies: the refresh does not fit again
    runner.close()
    assert result.report.account_cookies == "" and result.report.outcome == "Ok"
    assert again.report.account_cookies == "" and again.report.outcome == "Ok"
    assert caplog.text.count("do not fit a report") == 1
    assert _Recorder.seen[first_request][1]["cookie"] == blob  # the first request went out with the blob's cookies


def test_headers_named_in_another_case_replace_rather_than_repeat(site: str) -> None:
    """Header names are case-insensitive, and a browser's "copy as fetch" writes them in lower case: an operator who
    pastes ``accept``, ``referer`` or ``x-xsrf-token`` into ``sources.<name>.headers`` overrides the default or is
    overridden by the request's own, as the docs say; before, both went out (two Accepts, two Referers, and two
    ``X-XSRF-TOKEN`` values the site reads as one token that matches no cookie)."""
    source = get_source("weibo_web")
    setting = "accept: text/html\nreferer: https://weibo.com/\nx-xsrf-token: pasted\naccept-encoding: gzip"
    cache = SessionCache()
    session = cache.session("weibo_web", Account("acct", "SUB=login; XSRF-TOKEN=live"), site)
    fetcher = Fetcher(Urllib3Transport(session), POLICY, headers=source_headers(source.default_headers, "", setting))
    fetcher.fetch(source.first_request(make_task("weibo_web", "5612345678"), site))
    cache.close()
    names = [name.lower() for name, _ in _Recorder.raw[-1]]
    assert sorted(name for name in set(names) if names.count(name) > 1) == []
    sent = _Recorder.seen[-1][1]
    assert sent["accept"] == "text/html" and sent["accept-encoding"] == "gzip"  # the setting over the defaults
    assert sent["referer"] == f"{site}/u/5612345678" and sent["x-xsrf-token"] == "live"  # the request's own on top
