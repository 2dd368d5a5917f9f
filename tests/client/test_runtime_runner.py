"""One worker's TaskRunner against the real sandbox sites over HTTP (no Ice): the ECSHOP form login with
credentials from the settings or from the account blob, a wrong password, no credentials, a 429 with
Retry-After, an unreadable cookie blob, an unknown source, and a plain incremental recrawl."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from crawler_client.crawl import fingerprint_result
from crawler_client.runner import RunnerConfig, TaskRunner
from crawler_client.sources import get_source
from icecrawler.clock import Clock
from icecrawler.models import Account, Outcome, Task, TaskKind
from icecrawler.settings import Settings
from sandbox.misbehave import Misbehaviour, MisbehaviourRule
from sandbox.scenario import Product, Scenario
from sandbox.schedules import Schedule
from sandbox.server import SandboxServer
from shhd.fingerprint import fingerprint_texts

LIMITED = "100008348542"
#: A product whose 429 asks for a wait of 400 digits: more seconds than a float holds.
ENDLESS = "100008348543"


@pytest.fixture(scope="module")
def sandbox() -> Iterator[SandboxServer]:
    scenario = Scenario(
        seed=2,
        products=(
            Product("ecshop", "12", backlog=12, schedule=Schedule("static")),
            Product("jd", "100012043978", backlog=25, schedule=Schedule("static")),
            Product("jd", LIMITED, backlog=3, schedule=Schedule("static")),
            Product("jd", ENDLESS, backlog=3, schedule=Schedule("static")),
        ),
        accounts=(("member", "s3cret"),),
        misbehave=(
            MisbehaviourRule("ecshop", "", Misbehaviour(login_wall=True)),
            MisbehaviourRule("jd", LIMITED, Misbehaviour(retry_after_rate=1.0, retry_after_s=90)),
            MisbehaviourRule("jd", ENDLESS, Misbehaviour(retry_after_rate=1.0, retry_after_s=10**399)),
        ),
    )
    with SandboxServer(scenario) as server:
        yield server


def runner(sandbox: SandboxServer, **overrides: str) -> TaskRunner:
    settings = Settings()
    for name, prefix in (("ecshop", "ecshop"), ("jd", "jd")):
        settings.set(f"sources.{name}.base_url", sandbox.base_url(prefix))
    settings.set("client.retries", 0)
    for key, value in overrides.items():
        settings.set(key.replace("__", "."), value)
    return TaskRunner(RunnerConfig.from_settings(settings), get_source, clock=Clock(), cancel=threading.Event())


def task(source: str, target: str, *, blob: str = "", cursor: str = "") -> Task:
    return Task(
        id=f"reviews:{source}:{target}",
        kind=TaskKind.ProductReviews,
        source=source,
        target=target,
        lease_token="t",
        cursor=cursor,
        account=Account("acc", blob) if blob else Account(),
    )


def test_ecshop_login_wall_logs_in_with_the_settings_credentials(sandbox: SandboxServer) -> None:
    worker = runner(sandbox, sources__ecshop__username="member", sources__ecshop__password="s3cret")
    result = worker.run(task("ecshop", "12"))
    assert result.report.outcome is Outcome.Ok, result.report
    assert len(result.reviews) == 12
    # The session keeps the login: the next task of the same account needs no new login.
    again = worker.run(task("ecshop", "12"))
    assert again.report.outcome is Outcome.Ok
    assert again.report.fetches < result.report.fetches
    worker.close()


def test_ecshop_login_with_credentials_from_the_account_blob(sandbox: SandboxServer) -> None:
    worker = runner(sandbox)
    result = worker.run(task("ecshop", "12", blob='{"username": "member", "password": "s3cret"}'))
    assert result.report.outcome is Outcome.Ok and len(result.reviews) == 12
    worker.close()


def test_wrong_password_is_login_required_login_failed(sandbox: SandboxServer) -> None:
    worker = runner(sandbox, sources__ecshop__username="member", sources__ecshop__password="wrong")
    result = worker.run(task("ecshop", "12"))
    assert (result.report.outcome, result.report.error_class) == (Outcome.LoginRequired, "login-failed")
    assert result.reviews == []
    worker.close()


def test_login_wall_without_credentials_is_login_required(sandbox: SandboxServer) -> None:
    worker = runner(sandbox)
    result = worker.run(task("ecshop", "12"))
    assert (result.report.outcome, result.report.error_class) == (Outcome.LoginRequired, "no-credentials")
    worker.close()


def test_429_with_retry_after_is_reported_rate_limited(sandbox: SandboxServer) -> None:
    worker = runner(sandbox)
    result = worker.run(task("jd", LIMITED))
    assert result.report.outcome is Outcome.RateLimited
    assert (result.report.http_status, result.report.retry_after_s) == (429, 90.0)
    assert result.report.fetches == 1
    worker.close()


def test_a_retry_after_past_what_a_float_holds_is_a_wait_the_scheduler_takes(sandbox: SandboxServer) -> None:
    """``Retry-After`` of 400 digits read as ``inf``: the scheduler refuses a wait that is not finite, so the report
    was dropped (logged as a bug), the host never held and the task waited for its lease to run out. It is read as
    2**31 seconds now, which the scheduler takes and cuts to ``scheduler.max_period_s``."""
    from scheduler_server.checks import check_report

    worker = runner(sandbox)
    report = worker.run(task("jd", ENDLESS)).report
    worker.close()
    assert (report.outcome, report.http_status, report.retry_after_s) == (Outcome.RateLimited, 429, 2.0**31)
    check_report(report, 0)


def test_unreadable_cookie_blob_and_unknown_source_are_classified(sandbox: SandboxServer) -> None:
    worker = runner(sandbox)
    bad_blob = worker.run(task("jd", "100012043978", blob="{broken"))
    assert (bad_blob.report.outcome, bad_blob.report.error_class) == (Outcome.LoginRequired, "bad-cookie-blob")
    unknown = worker.run(Task(id="reviews:nosuch:1", kind=TaskKind.ProductReviews, source="nosuch", target="1"))
    assert (unknown.report.outcome, unknown.report.error_class) == (Outcome.ParseError, "unknown-source")
    worker.close()


def test_recrawl_from_the_cursor_fetches_one_page_and_finds_nothing_new(sandbox: SandboxServer) -> None:
    worker = runner(sandbox)
    first = worker.run(task("jd", "100012043978"))
    assert first.report.outcome is Outcome.Ok and first.report.new_items == 25
    assert first.report.fetches == 3 and first.report.cursor
    again = worker.run(task("jd", "100012043978", cursor=first.report.cursor))
    assert (again.report.new_items, again.report.fetches, again.report.cursor) == (0, 1, first.report.cursor)
    assert again.reviews == []
    assert len(again.window_texts) == 10  # the first page's reviews, fingerprinted later by the sink
    fingerprint_result(first, fingerprint_texts)
    fingerprint_result(again, fingerprint_texts)
    assert first.report.fingerprint != 0 and again.report.fingerprint != 0
    worker.close()
