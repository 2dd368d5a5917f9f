"""Ban, rate-limit, verification and firewall answers the sites give in 2024–2026, over real HTTP.

A stand-in for the sites runs on loopback as a plain HTTP proxy, so every request and every redirect keeps the site's
own host name (``club.jd.com``, ``pc-frequent-pro.pf.jd.com``, ``security.weibo.com``...): the client sends, follows
and reads them as it would the real ones, and the sources classify the final URL they end on. The bodies are our own
minimal stand-ins (docs/SITE_RESPONSES.md says what each signal is and where it is seen), not copies of real pages.
"""

from __future__ import annotations

import logging
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from crawler_client.crawl import CrawlResult, crawl_task
from crawler_client.http import Fetcher, FetchPolicy
from crawler_client.sources import get_source
from crawler_client.transport import HttpSession, Urllib3Transport
from icecrawler.models import Outcome, Report, Task
from sandbox.samples import jd_comments
from scheduler_server.config import SchedulerConfig
from scheduler_server.outcomes import outcome_effects
from tests.client._util import NOW_MS, make_task
from tests.scheduler.conftest import make_settings

#: One answer: status, headers, body.
Answer = tuple[int, dict[str, str], bytes]
#: What the stand-in answers for a request: (host, path, query) -> Answer.
Site = Callable[[str, str, dict[str, str]], Answer]

POLICY = FetchPolicy(timeout_s=5.0, total_timeout_s=10.0, retries=0, backoff_s=0.01, max_body_bytes=1 << 20, user_agent="t")
CONFIG = SchedulerConfig.from_settings(make_settings(scheduler__host_block_s=300.0, scheduler__account_freeze_s=600.0))
SKU = "100012043978"
#: Where JD sends a client it rate-limits (the item page's landing in 2026 public tools: ``reason=403``).
JD_FREQUENT = "http://pc-frequent-pro.pf.jd.com/?from=pc_item&reason=403"


def page_html(title: str, extra: str = "") -> bytes:
    """A minimal HTML page of our own, with ``title`` and ``extra`` in its body."""
    return f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{title}</title></head><body>{extra}</body></html>".encode()


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

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


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


def test_a_jd_page_whose_script_sends_to_the_rate_limit_host_is_banned() -> None:
    """The same page reached by a script (``location.href``) rather than an HTTP redirect."""
    script = page_html("京东", f"<script>window.location.href='{JD_FREQUENT}'</script>")
    done = crawl(jd_site((200, {"Content-Type": "text/html"}, script)), make_task("jd", SKU), "http://club.jd.com")
    assert (done.report.outcome, done.report.error_class) == (Outcome.Banned, "jd-frequent-redirect")
    assert len(done.reviews) == 10


@pytest.mark.parametrize(
    ("page1", "expected"),
    [
        (redirect("http://cfe.m.jd.com/privatedomain/risk_handler/03101900/?returnurl=x"), "jd-risk-redirect"),
        (redirect("http://passport.jd.com/new/login.aspx?ReturnUrl=http%3A%2F%2Fitem.jd.com%2F1.html"), "login-redirect"),
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
