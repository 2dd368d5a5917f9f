"""A visitor session expiring in the middle of a crawl, in one process with real parts: the scheduler core (its
account pool minting visitor sessions from the sandbox's passport over HTTP), a TaskRunner crawling weibo.com's
JSON API in the sandbox over HTTP (X-XSRF-TOKEN echoed from the session's cookie), and the sandbox ending every
visitor session while a page-2 request of a crawl is on its way.

The crawl that meets the 432 reports Banned/http-432 and keeps what it had; the core renews the session once
(without blocking the host: the task is leased again at once, with the new session), and the re-crawl from the
old cursor fetches the rest. Nothing published is missing, nothing is stored twice."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from crawler_client.runner import RunnerConfig, TaskRunner
from icecrawler.clock import Clock
from icecrawler.errors import NoWorkError
from icecrawler.models import Account, Outcome, Post, Report, Task, TaskKind
from sandbox.misbehave import Misbehaviour, MisbehaviourRule
from sandbox.scenario import Scenario, WeiboUser
from sandbox.schedules import Schedule
from sandbox.server import SandboxServer
from sandbox.sources import source_settings
from scheduler_server.core import SchedulerCore
from scheduler_server.store import MemoryQueueStore
from tests.scheduler.conftest import ManualClocks, make_settings

SINCE_ID_USER, PAGE_USER = "3000000001", "3000000002"


@pytest.fixture()
def sandbox() -> Iterator[SandboxServer]:
    scenario = Scenario(
        seed=4,
        users=(
            WeiboUser(
                uid=int(SINCE_ID_USER),
                sites=("web",),
                cursor="since_id",
                backlog=55,
                long_text_every=4,
                schedule=Schedule("static"),
            ),
            WeiboUser(
                uid=int(PAGE_USER), sites=("web",), cursor="page", backlog=31, pinned=False, schedule=Schedule("static")
            ),
        ),
    )
    slow = MisbehaviourRule("web", "", Misbehaviour(slow_rate=1.0, slow_ms=400))
    with SandboxServer(scenario, speed=0, misbehave=(slow,)) as server:
        yield server


def expire_during_a_second_page(server: SandboxServer, stop: threading.Event) -> threading.Thread:
    """End every visitor session as soon as a page-2 timeline request is being answered (slowly)."""

    def watch() -> None:
        while not stop.wait(0.02):
            rows = server.requests(site="web", path="/ajax/statuses/mymblog")["requests"]
            if any("page=2" in row["query"] and row["status"] == 0 for row in rows):
                server.visitors.expire_all()
                return

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def lease_one(core: SchedulerCore, timeout_s: float = 10.0) -> Task:
    """The next task; the first visitor session is minted in the background, so the first leases wait."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return core.lease("worker", 1)[0]
        except NoWorkError:
            assert time.monotonic() < deadline, "no task could be leased"
            time.sleep(0.05)


def test_a_crawl_survives_its_visitor_session_expiring_mid_crawl(sandbox: SandboxServer) -> None:
    sites = source_settings(sandbox.url)
    settings = make_settings(
        scheduler__visitor_renew_s=0.0,
        scheduler__host_block_s=3600.0,
        client__retries=0,
        client__max_pages=20,
        **{key.replace(".", "__"): value for key, value in sites.items()},
    )
    core = SchedulerCore.from_settings(settings, MemoryQueueStore(), ManualClocks(start=time.time()))
    core.add([f"weibo_web:{SINCE_ID_USER}", f"weibo_web:{PAGE_USER}"], TaskKind.WeiboUser)
    runner = TaskRunner(
        RunnerConfig.from_settings(settings),
        RunnerConfig.from_settings(settings).make_source,
        clock=Clock(),
        cancel=threading.Event(),
    )
    stop = threading.Event()
    watcher = expire_during_a_second_page(sandbox, stop)
    stored: dict[int, Post] = {}
    reports: list[tuple[str, Report, str]] = []
    try:
        while not {t for t, r, _ in reports if r.outcome is Outcome.Ok} >= {
            f"user:weibo_web:{SINCE_ID_USER}",
            f"user:weibo_web:{PAGE_USER}",
        }:
            assert len(reports) < 8, reports
            task = lease_one(core)
            result = runner.run(task)
            for post in result.posts:
                assert post.id not in stored or stored[post.id].text == post.text
                stored[post.id] = post
            reports.append((task.id, result.report, task.account.id))
            core.report([result.report])
    finally:
        stop.set()
        watcher.join(5)
        runner.close()

    failed = [(task_id, report, account) for task_id, report, account in reports if report.outcome is not Outcome.Ok]
    assert len(failed) == 1, reports
    task_id, report, account = failed[0]
    assert (report.outcome, report.http_status, report.error_class) == (Outcome.Banned, 432, "http-432")
    assert account == "visitor:weibo_web:1" and report.fetches >= 2
    retry = next(acct for tid, r, acct in reports if tid == task_id and r.outcome is Outcome.Ok)
    assert retry == "visitor:weibo_web:2"  # leased again at once (host not blocked), with the renewed session
    for uid in (SINCE_ID_USER, PAGE_USER):
        truth = {int(item["id"]) for item in sandbox.truth("weibo_web", uid)["items"]}
        assert {p.id for p in stored.values() if p.user_id == int(uid)} == truth, uid
    long_posts = [p for p in stored.values() if "展开" in p.html]
    assert long_posts == [], "a long post kept its truncated text"
    accounts = core.stats()["detail"]["accounts"]
    assert accounts["visitor:weibo_web"]["renewals"] == 1 and sandbox.visitors.minted == 2
    xsrf = [row for row in sandbox.requests(site="web")["requests"] if row["status"] == 403]
    assert xsrf == [], "the X-XSRF-TOKEN header was not echoed"


def test_a_recrawl_from_the_cursor_reads_one_page_despite_the_old_pinned_post(sandbox: SandboxServer) -> None:
    import json

    from scheduler_server.visitors import mint_visitor

    sites = source_settings(sandbox.url)
    settings = make_settings(client__retries=0, **{key.replace(".", "__"): value for key, value in sites.items()})
    config = RunnerConfig.from_settings(settings)
    runner = TaskRunner(config, config.make_source, clock=Clock(), cancel=threading.Event())
    blob = json.dumps({"cookies": mint_visitor(sites["sources.weibo_web.visitor_url"])})

    def task(cursor: str) -> Task:
        return Task(
            id=f"user:weibo_web:{SINCE_ID_USER}",
            kind=TaskKind.WeiboUser,
            source="weibo_web",
            target=SINCE_ID_USER,
            lease_token="t",
            cursor=cursor,
            account=Account("visitor:weibo_web:1", blob),
        )

    try:
        first = runner.run(task(""))
        assert first.report.outcome is Outcome.Ok and first.report.new_items == 55
        again = runner.run(task(first.report.cursor))
    finally:
        runner.close()
    pinned = [post for post in first.posts if post.pinned]
    assert len(pinned) == 1 and str(pinned[0].id) < first.report.cursor  # old, on top, not the cursor
    assert again.report.outcome is Outcome.Ok and again.report.new_items == 0 and again.report.fetches == 1
