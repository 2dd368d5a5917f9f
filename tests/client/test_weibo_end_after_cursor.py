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
from crawler_client.gaps import request_to_dict
from crawler_client.http import Fetcher, FetchPolicy
from crawler_client.sources import get_source
from crawler_client.sources._weibo import END_AFTER_CURSOR_RETRIES
from crawler_client.transport import HttpSession, Urllib3Transport
from icecrawler.models import Outcome, Task
from icecrawler.resume import Gap, encode_cursor
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
def test_an_account_showing_only_its_pinned_post_is_ok_at_every_visit(source: str, end: str) -> None:
    """The account's one visible post is pinned (a new account, or its other posts deleted). Since the pinned post
    counts in the cursor, the first crawl leaves its mid as the cursor; a pinned post never ends a walk, so every later
    walk asked for page 2, and the end of the list there was the Busy guard's "throttled answer": Busy, Busy, Busy, then
    Ok (attempts reset) and Busy again, for ever, never a quiet Ok. Nothing above the cursor was met, so taking the end
    leaves the cursor where it was and passes over nothing: every visit is Ok, with nothing new after the first."""
    ok = Outcome.Ok
    with timeline(source, [mblog(PINNED, pinned=True)], end) as (base_url, _):
        # the first crawl (m.weibo.cn's 暂无微博 notice on a later page is Busy first even then: the history below it)
        first = visits(
            source, base_url, task_of(source), END_AFTER_CURSOR_RETRIES + 1, until=lambda r: r.report.outcome is ok
        )
        assert outcomes(first)[-1] == "Ok/1" and first[-1][0].report.cursor == str(PINNED)
        task = dataclasses.replace(task_of(source), cursor=str(PINNED))
        done = visits(source, base_url, task, 8)
    assert outcomes(done) == ["Ok/0"] * 8
    assert {r.report.cursor for r, _ in done} == {str(PINNED)}


@pytest.mark.parametrize(("source", "end"), CASES)
def test_pinned_posts_below_a_cursor_whose_post_is_gone_are_ok_at_every_visit(source: str, end: str) -> None:
    """The cursor's post (the account's newest ordinary one) was deleted, or is no longer shown, and only older pinned
    posts remain: the same endless Busy/Ok cycle, with the cursor above every post shown. Ok at every visit, the
    cursor kept."""
    cursor = str(PINNED + 10**6)
    task = dataclasses.replace(task_of(source), cursor=cursor)
    pinned = [mblog(PINNED, pinned=True), mblog(PINNED - 10**6, pinned=True)]
    with timeline(source, pinned, end) as (base_url, _):
        done = visits(source, base_url, task, 8)
    assert outcomes(done) == ["Ok/0"] * 8
    assert {r.report.cursor for r, _ in done} == {cursor}


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


@pytest.mark.parametrize("source", ENDS)
def test_a_new_pinned_post_with_nothing_else_shown_is_busy_first_then_known(source: str) -> None:
    """Page 1 of an account showing only pinned posts holds one newer than the cursor (pinned as soon as published):
    taking the end at once would move the cursor over anything page 1 did not show, so it is the Busy guard's case;
    once its Ok has the new post as the cursor, the next visits are quiet Oks."""
    page1 = [mblog(PINNED + 10**6, pinned=True), mblog(PINNED, pinned=True)]
    task = dataclasses.replace(task_of(source), cursor=str(PINNED))
    end = next(iter(ENDS[source]))
    with timeline(source, page1, end) as (base_url, _):
        done = visits(source, base_url, task, END_AFTER_CURSOR_RETRIES + 3)
    assert outcomes(done) == [f"Busy/{source}-empty-page"] * END_AFTER_CURSOR_RETRIES + ["Ok/1", "Ok/0", "Ok/0"]


@pytest.mark.parametrize("source", ENDS)
def test_a_first_page_of_other_accounts_posts_still_leads_to_the_next(source: str) -> None:
    """Page 1 holds the known pinned post and posts of another account the account quick-reposted (left out of its
    own): the walk still asks for page 2, where the account's own newer posts would be (a walk that stopped at a
    page of known pinned posts would never see them while the reposts stay on top)."""
    reposts = [dict(mblog(PINNED + k, author="1669879400"), ori_mid=str(PINNED + k)) for k in (9, 8, 7)]
    task = dataclasses.replace(task_of(source), cursor=str(PINNED))
    end = next(iter(ENDS[source]))
    with timeline(source, [mblog(PINNED, pinned=True), *reposts], end) as (base_url, sent):
        done = visits(source, base_url, task, 1)
    assert len(sent) == 2  # page 2 asked for
    assert outcomes(done) == ["Ok/0"] and done[0][0].report.cursor == str(PINNED)


@pytest.mark.parametrize(("source", "end"), CASES)
def test_an_end_in_a_walk_resuming_an_open_gap_is_busy_first(source: str, end: str) -> None:
    """A walk resuming an open page-cap gap closes it at the end of the list, and its cursor becomes the gap's top: an
    end there would pass over the posts the gap had not reached, whatever the walk met. Busy first, as before, even
    when the resumed page holds nothing above the gap's base."""
    with timeline(source, [mblog(PINNED, pinned=True)], end) as (base_url, _):
        resume = get_source(source).first_request(task_of(source), base_url)
        top = str(PINNED + 10**6)
        gap = Gap(base=str(PINNED), top=top, low="", request=request_to_dict(resume, base_url), visits=1)
        task = dataclasses.replace(task_of(source), cursor=encode_cursor(gap))
        done = visits(source, base_url, task, 1)
    assert outcomes(done) == [f"Busy/{source}-empty-page"]
    assert done[0][0].report.cursor == task.cursor
