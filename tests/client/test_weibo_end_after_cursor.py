"""weibo_web and weibo_mobile over real HTTP, visit after visit, the task's ``attempts`` kept as the scheduler keeps
them (``scheduler_server.outcomes.outcome_effects`` with the default settings): how an end of the list on a later
page of an incremental walk is read (``check_end_after_cursor`` in ``crawler_client/sources/_weibo.py``).

The stand-in answers page 1 of an account's timeline with the posts a test gives, and every later page with the end
of the list the way the site words it (``ok:0`` 这里还没有内容, ``{"ok":1}`` without data, an empty list or a page of
no cards, m.weibo.cn's 暂无微博 notice card)."""

from __future__ import annotations

import dataclasses
import json
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from crawler_client.crawl import CrawlResult, crawl_task
from crawler_client.http import Fetcher, FetchPolicy
from crawler_client.sources import get_source
from crawler_client.sources._weibo import END_AFTER_CURSOR_RETRIES
from crawler_client.transport import HttpSession, Urllib3Transport
from icecrawler.models import Outcome, Task
from icecrawler.settings import Settings
from scheduler_server.config import SchedulerConfig
from scheduler_server.outcomes import outcome_effects
from tests.client._util import NOW_MS, make_task
from tests.helpers import serving_http

UID = "5612345678"
CONTAINER = "107603" + UID
POLICY = FetchPolicy(
    timeout_s=5.0, total_timeout_s=10.0, retries=0, backoff_s=0.01, max_body_bytes=1 << 20, user_agent="t"
)
#: The scheduler as shipped: no delay before ``backoff_after_attempts`` (3) failures, then ``min_period_s`` (60 s)
#: doubling.
DEFAULTS = SchedulerConfig.from_settings(Settings())
#: A post the account pinned; its mid is the cursor once a crawl has seen it.
PINNED = 4900000000000000

#: How each source's stand-in answers a later page at the end of the list (every wording the source reads as one).
ENDS: dict[str, dict[str, Any]] = {
    "weibo_web": {
        "ok0": {"ok": 0, "msg": "这里还没有内容"},
        "no-data": {"ok": 1},
        "empty-list": {"ok": 1, "data": {"since_id": "", "list": [], "total": 1}},
    },
    "weibo_mobile": {
        "ok0": {"ok": 0, "msg": "这里还没有内容", "data": {"cards": []}},
        "no-cards": {"ok": 1, "data": {"cardlistInfo": {"containerid": CONTAINER, "total": 1}, "cards": []}},
        "notice": {
            "ok": 1,
            "data": {
                "cardlistInfo": {"containerid": CONTAINER, "total": 1},
                "cards": [{"card_type": 58, "name": "暂无微博"}],
            },
        },
    },
}
CASES = [(source, end) for source, ends in ENDS.items() for end in ends]


def mblog(mid: int, *, pinned: bool = False, author: str = UID) -> dict[str, Any]:
    """One post as both APIs list it (``isTop`` marks a pinned one)."""
    return {
        "id": mid,
        "idstr": str(mid),
        "mid": str(mid),
        "isTop": 1 if pinned else 0,
        "mblogtype": 2 if pinned else 0,
        "created_at": "Mon Jul 05 10:00:00 +0800 2021",
        "text": f"post {mid}",
        "text_raw": f"post {mid}",
        "user": {"id": int(author), "screen_name": "u"},
        "mblogid": f"M{mid % 1000}",
    }


def first_page(source: str, mblogs: list[dict[str, Any]]) -> dict[str, Any]:
    """Page 1 holding ``mblogs``, naming a next page as the site does while it thinks there is more."""
    if source == "weibo_web":
        return {"ok": 1, "data": {"since_id": "", "list": mblogs, "total": len(mblogs)}}
    cards = [{"card_type": 9, "mblog": post} for post in mblogs]
    info = {"containerid": CONTAINER, "since_id": PINNED - 10**6, "total": len(mblogs)}
    return {"ok": 1, "data": {"cardlistInfo": info, "cards": cards}}


@contextmanager
def timeline(source: str, page1: list[dict[str, Any]], end: str) -> Iterator[tuple[str, list[dict[str, str]]]]:
    """The stand-in on loopback (its base URL) and the query of every request it was sent."""
    sent: list[dict[str, str]] = []
    answers = (json.dumps(first_page(source, page1)), json.dumps(ENDS[source][end]))

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(self.path).query, keep_blank_values=True))
            sent.append(query)
            later = query.get("page", "1") != "1" or "since_id" in query
            body = answers[later].encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            """Quiet."""

    with serving_http(Handler) as url:
        yield url, sent


def task_of(source: str) -> Task:
    return make_task(source, UID, containerid=CONTAINER) if source == "weibo_mobile" else make_task(source, UID)


def visits(
    source: str, base_url: str, task: Task, count: int, until: Callable[[CrawlResult], bool] = lambda _: False
) -> list[tuple[CrawlResult, float]]:
    """Up to ``count`` visits of ``task``, each crawled as the client crawls it, its report applied as the scheduler
    applies it: Ok resets ``attempts`` and takes the report's cursor, a failure adds one and waits ``delay_s``. Each
    visit's result and the scheduler's delay after it; stops after the first one ``until`` accepts."""
    done: list[tuple[CrawlResult, float]] = []
    session = HttpSession()
    try:
        fetcher = Fetcher(Urllib3Transport(session), POLICY)
        for _ in range(count):
            result = crawl_task(
                task, get_source(source), fetcher, base_url=base_url, max_pages=10, now_ms=lambda: NOW_MS
            )
            report = result.report
            effects = outcome_effects(
                report, attempts=task.attempts, account_id="", host="h", wall=0.0, config=DEFAULTS
            )
            done.append((result, effects.delay_s))
            cursor = report.cursor if report.outcome is Outcome.Ok else task.cursor
            task = dataclasses.replace(task, attempts=effects.attempts, cursor=cursor)
            if until(result):
                break
    finally:
        session.close()
    return done


def outcomes(done: list[tuple[CrawlResult, float]]) -> list[str]:
    """Each visit as ``Ok/<new items>`` or ``<outcome>/<error class>``."""
    return [
        f"Ok/{r.report.new_items}" if r.report.outcome is Outcome.Ok else f"{r.report.outcome}/{r.report.error_class}"
        for r, _ in done
    ]


@pytest.mark.parametrize(("source", "end"), CASES)
def test_an_end_after_posts_above_the_cursor_is_busy_for_a_quarter_of_an_hour(source: str, end: str) -> None:
    """Page 1 holds posts newer than the cursor (the pinned cursor post among them: it does not end the walk), page 2
    ends the list before the walk met the post the crawl already has: m.weibo.cn's risk-control answer, or the end
    for an account shown only its last half year. Taken at once, the crawl's new cursor would pass over every post
    between page 1 and the old cursor. Busy, cursor kept, for ``END_AFTER_CURSOR_RETRIES`` failed visits in a row,
    then the end. With the scheduler's default backoff those visits span 0 + 0 + 60 + 120 + 240 + 480 = 900 s before
    the end is taken (three visits were retried at once and a minute later: a five-minute risk-control episode went
    past them for good)."""
    newer = [mblog(PINNED, pinned=True), mblog(PINNED + 2 * 10**6), mblog(PINNED + 10**6)]
    task = dataclasses.replace(task_of(source), cursor=str(PINNED))
    with timeline(source, newer, end) as (base_url, _):
        done = visits(source, base_url, task, 12, until=lambda r: r.report.outcome is Outcome.Ok)
    failed = done[:-1]
    assert outcomes(failed) == [f"Busy/{source}-empty-page"] * END_AFTER_CURSOR_RETRIES
    assert all(r.report.cursor == str(PINNED) and len(r.posts) == 2 for r, _ in failed)  # stored, cursor kept
    assert outcomes(done[-1:]) == ["Ok/2"] and done[-1][0].report.cursor == str(PINNED + 2 * 10**6)
    assert sum(delay for _, delay in failed) == 900.0
