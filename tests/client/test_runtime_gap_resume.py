"""A page-cap gap resumed by a client whose session already holds weibo.com's XSRF-TOKEN cookie, with real parts: the
sandbox's weibo.com JSON API and passport over HTTP (every API call must echo the cookie in X-XSRF-TOKEN once the
session has one), a visitor session minted there, and one TaskRunner crawling the same user twice.

The first visit stops at the page cap and keeps the page to resume from in the task's cursor; the second visit
starts from that saved request. Before the fix the saved request lost its ``cookie_headers``, so the resumed page
went out without X-XSRF-TOKEN: the site answered 403, the crawl was reported Banned, and the scheduler blocked the
whole host (weibo.com: every weibo_web and weibo_pc task) for ``scheduler.host_block_s``, at every resume, for good.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import pytest

from crawler_client.runner import RunnerConfig, TaskRunner
from icecrawler.clock import Clock
from icecrawler.models import Account, Outcome, Task, TaskKind
from icecrawler.resume import is_gap
from sandbox.scenario import Scenario, WeiboUser
from sandbox.schedules import Schedule
from sandbox.server import SandboxServer
from sandbox.sources import source_settings
from scheduler_server.visitors import mint_visitor
from tests.scheduler.conftest import make_settings

UID = "3000000101"


@pytest.fixture()
def sandbox() -> Iterator[SandboxServer]:
    # 20 posts a page on weibo.com's API: 75 posts are four pages, two more than the cap below.
    user = WeiboUser(uid=int(UID), sites=("web",), cursor="page", backlog=75, pinned=False, schedule=Schedule("static"))
    with SandboxServer(Scenario(seed=5, users=(user,)), speed=0) as server:
        yield server


def test_a_gap_resumed_in_a_session_holding_the_xsrf_cookie_echoes_it(sandbox: SandboxServer) -> None:
    sites = source_settings(sandbox.url)
    settings = make_settings(
        client__retries=0, client__max_pages=2, **{key.replace(".", "__"): value for key, value in sites.items()}
    )
    config = RunnerConfig.from_settings(settings)
    runner = TaskRunner(config, config.make_source, clock=Clock(), cancel=threading.Event())
    cookies = mint_visitor(settings.get_str("sources.weibo_web.visitor_url"))
    account = Account("visitor:weibo_web:1", json.dumps({"cookies": cookies}))

    def visit(cursor: str) -> tuple[Outcome, str, int]:
        task = Task(
            id=f"user:weibo_web:{UID}",
            kind=TaskKind.WeiboUser,
            source="weibo_web",
            target=UID,
            lease_token="t",
            cursor=cursor,
            account=account,
        )
        report = runner.run(task).report
        return report.outcome, report.cursor, report.http_status

    try:
        outcome, cursor, _ = visit("")
        assert outcome is Outcome.Ok and is_gap(cursor), "the first visit should stop at the page cap"
        outcome, cursor, status = visit(cursor)  # the jar now holds XSRF-TOKEN: the resumed page must echo it
    finally:
        runner.close()
    refused = [row for row in sandbox.requests(site="web")["requests"] if row["status"] == 403]
    assert refused == [], "a resumed page went out without X-XSRF-TOKEN"
    assert (outcome, status) == (Outcome.Ok, 200)
