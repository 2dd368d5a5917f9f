"""What a report's outcome does: the pure ``outcome_effects`` (each outcome -> its effects as data), and the core
applying those effects only after its transaction committed, yet withholding a just-blocked host or just-frozen
account from the later calls of the same group."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from icecrawler.errors import NoWorkError
from icecrawler.models import Outcome, Report, TaskKind
from scheduler_server.config import SchedulerConfig
from scheduler_server.core import SchedulerCore, check_consistency
from scheduler_server.outcomes import Hold, OutcomeEffects, backoff_s, outcome_effects
from scheduler_server.store import MemoryQueueStore
from tests.scheduler.conftest import ManualClocks, illegal_request, make_settings, queued_together

CONFIG = SchedulerConfig.from_settings(
    make_settings(scheduler__backoff_after_attempts=2, scheduler__host_block_s=300.0, scheduler__account_freeze_s=600.0)
)
WALL = 1000.0
#: A task with 2 failed attempts, leased with account "a1" for a site on host "h", reported at WALL without a
#: Retry-After: every outcome and its effects.
EXPECTED = {
    Outcome.Ok: OutcomeEffects(attempts=0, observe=True),
    Outcome.NotFound: OutcomeEffects(attempts=2, delay_s=3600.0),
    **{
        outcome: OutcomeEffects(attempts=3, delay_s=20.0)  # the first failure over the limit: min_period * 2
        for outcome in (
            Outcome.HttpError,
            Outcome.Timeout,
            Outcome.ConnectionError,
            Outcome.ParseError,
            Outcome.Busy,
            Outcome.TooLarge,
        )
    },
    Outcome.RateLimited: OutcomeEffects(attempts=2, block_host=Hold("h", 1300.0, "RateLimited")),
    Outcome.Banned: OutcomeEffects(
        attempts=2, block_host=Hold("h", 1300.0, "Banned"), freeze_account=Hold("a1", 1600.0, "Banned")
    ),
    Outcome.LoginRequired: OutcomeEffects(attempts=2, freeze_account=Hold("a1", 1600.0, "LoginRequired")),
    Outcome.AccountFrozen: OutcomeEffects(attempts=2, freeze_account=Hold("a1", 1600.0, "AccountFrozen")),
}


def effects(outcome: Outcome, account_id: str = "a1", attempts: int = 2, **fields: Any) -> OutcomeEffects:
    report = Report(task_id="user:weibo_pc:1", lease_token="t", outcome=outcome, **fields)
    return outcome_effects(report, attempts=attempts, account_id=account_id, host="h", wall=WALL, config=CONFIG)


def test_every_outcome_has_its_effects() -> None:
    assert set(EXPECTED) == set(Outcome)
    for outcome, expected in EXPECTED.items():
        assert effects(outcome) == expected, outcome


def test_retry_after_sets_the_block_and_lengthens_the_freeze() -> None:
    assert effects(Outcome.Banned, retry_after_s=100.0) == OutcomeEffects(
        attempts=2, block_host=Hold("h", 1100.0, "Banned"), freeze_account=Hold("a1", 1600.0, "Banned")
    )
    assert effects(Outcome.LoginRequired, retry_after_s=900.0).freeze_account == Hold("a1", 1900.0, "LoginRequired")


def test_a_sites_wait_past_every_limit_holds_as_long_as_the_longest_of_them() -> None:
    """A wait is cut to ``max_period_s``, but never below the block or freeze the outcome sets without one: a site
    asking for a day, with ``host_block_s`` longer than ``max_period_s``, held its host less than one saying nothing."""
    config = SchedulerConfig.from_settings(
        make_settings(scheduler__max_period_s=600.0, scheduler__host_block_s=900.0, scheduler__account_freeze_s=1200.0)
    )
    report = Report(task_id="user:weibo_pc:1", lease_token="t", outcome=Outcome.Banned, retry_after_s=86400.0)
    held = outcome_effects(report, attempts=0, account_id="a1", host="h", wall=WALL, config=config)
    assert (held.block_host, held.freeze_account) == (Hold("h", 1900.0, "Banned"), Hold("a1", 2200.0, "Banned"))
    held = effects(Outcome.Banned, retry_after_s=86400.0)  # max_period_s 3600 over both: cut to it
    assert (held.block_host, held.freeze_account) == (Hold("h", 4600.0, "Banned"), Hold("a1", 4600.0, "Banned"))


def test_failures_back_off_from_the_limit_up_to_max_period() -> None:
    assert [backoff_s(attempts, CONFIG) for attempts in (1, 2, 3, 4, 100)] == [0.0, 10.0, 20.0, 40.0, 3600.0]
    assert effects(Outcome.Timeout, attempts=0) == OutcomeEffects(attempts=1, delay_s=0.0)


def test_no_account_means_nothing_to_freeze_and_a_login_wall_backs_the_task_off() -> None:
    """Without an account, a login wall is the target's: the task backs off like a failed attempt (it used to be
    due again at once, and came round at every host slot for ever)."""
    assert effects(Outcome.LoginRequired, account_id="") == OutcomeEffects(attempts=3, delay_s=20.0)
    assert effects(Outcome.AccountFrozen, account_id="", attempts=0) == OutcomeEffects(attempts=1, delay_s=0.0)
    assert effects(Outcome.Banned, account_id="") == OutcomeEffects(attempts=2, block_host=Hold("h", 1300.0, "Banned"))


def test_an_ended_visitor_session_is_renewed_instead_of_blocking_or_freezing() -> None:
    visitor = "visitor:weibo_pc:3"
    assert effects(Outcome.Banned, visitor, http_status=432) == OutcomeEffects(attempts=2, renew_visitor=visitor)
    assert effects(Outcome.LoginRequired, visitor, error_class="visitor") == OutcomeEffects(
        attempts=2, renew_visitor=visitor
    )
    # A visitor session is never frozen; a real ban still blocks the host.
    assert effects(Outcome.Banned, visitor, http_status=418) == OutcomeEffects(
        attempts=2, block_host=Hold("h", 1300.0, "Banned")
    )
    # A wall the visitor session did not end (ok:-100: the content needs a real login): the task backs off.
    assert effects(Outcome.LoginRequired, visitor, error_class="login-wall") == OutcomeEffects(attempts=3, delay_s=20.0)


def test_a_request_refused_as_illegal_blocks_the_host_and_freezes_no_account() -> None:
    """Weibo's errno 100006 (请求非法, ``LoginRequired`` ``illegal-request``) refuses the request, not the login: fresh
    cookies answer again for a visitor session (renewed), but a logged-in session's refusal was its address's. Frozen
    for it, each pooled account was frozen in turn as it was leased, the whole pool paused within a few leases, while
    the host went on being asked. It blocks the host as a ban does (its Retry-After, else ``host_block_s``) and backs
    the task off, on an account's lease or none; a visitor session is renewed."""
    refused = OutcomeEffects(attempts=3, delay_s=20.0, block_host=Hold("h", 1300.0, "LoginRequired illegal-request"))
    assert effects(Outcome.LoginRequired, error_class="illegal-request", http_status=403) == refused
    assert effects(Outcome.LoginRequired, "", error_class="illegal-request") == refused
    waited = effects(Outcome.LoginRequired, error_class="illegal-request", retry_after_s=100.0)
    assert waited.block_host == Hold("h", 1100.0, "LoginRequired illegal-request") and waited.freeze_account is None
    visitor = "visitor:weibo_pc:3"
    assert effects(Outcome.LoginRequired, visitor, error_class="illegal-request") == OutcomeEffects(
        attempts=2, renew_visitor=visitor
    )


def test_an_account_refused_as_illegal_stays_in_the_pool_and_its_host_waits(
    tmp_path: Path, clocks: ManualClocks
) -> None:
    (tmp_path / "accounts").mkdir()
    (tmp_path / "accounts" / "pool.toml").write_text(
        '[[account]]\nid = "a1"\ncookies = "SUB=x"\n\n[[account]]\nid = "a2"\ncookies = "SUB=y"\n'
    )
    settings = make_settings(
        scheduler__accounts_dir=str(tmp_path / "accounts"),
        scheduler__account_sources="weibo_pc",
        scheduler__host_block_s=300.0,
    )
    core = SchedulerCore.from_settings(settings, MemoryQueueStore(), clocks)
    core.add(["weibo_pc:1", "weibo_pc:2"], TaskKind.WeiboUser)
    task = core.lease("w", 1)[0]
    core.report([illegal_request(task)])
    detail = core.stats()["detail"]
    assert {name: detail["accounts"][name]["state"] for name in ("a1", "a2")} == {"a1": "ok", "a2": "ok"}
    assert detail["hosts"]["127.0.0.1:8800"]["block"]["reason"] == "LoginRequired illegal-request"
    with pytest.raises(NoWorkError):
        core.lease("w", 2)  # the host is blocked: neither account is sent to it meanwhile
    assert core.task_info(task.id)["attempts"] == 1
    clocks.advance(301)
    again = core.lease("w", 2)
    assert {t.id for t in again} == {task.id, "user:weibo_pc:2"} and task.account.id in {t.account.id for t in again}


class _FailingMetaStore(MemoryQueueStore):
    """A memory store whose transactions fail on writing a ``meta`` key with ``fail_prefix`` (armed by a test)."""

    fail_prefix = b""

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        with super().transaction() as txn:
            store = self

            class Failing:
                def __getattr__(self, name: str) -> Any:
                    return getattr(txn, name)

                def put(self, table: str, key: bytes, value: bytes) -> None:
                    if store.fail_prefix and table == "meta" and key.startswith(store.fail_prefix):
                        raise OSError("no space left on device")
                    txn.put(table, key, value)

            yield Failing()


def test_a_rolled_back_ban_leaves_no_block_in_memory(clocks: ManualClocks) -> None:
    store = _FailingMetaStore()
    core = SchedulerCore.from_settings(make_settings(), store, clocks)
    core.add(["jd:1", "jd:2"], TaskKind.ProductReviews)
    task = core.lease("w", 1)[0]
    store.fail_prefix = b"host:"
    banned = Report(task_id=task.id, lease_token=task.lease_token, outcome=Outcome.Banned, retry_after_s=100.0)
    with pytest.raises(OSError, match="no space"):
        core.report([banned])
    assert core.stats()["detail"]["hosts"]["127.0.0.1:8800"]["block"]["reason"] == ""
    assert [t.id for t in core.lease("w", 2)] == ["reviews:jd:2"]  # the host is not blocked
    assert check_consistency(store, queues=core.queues, records=core.records)[1] == []
    store.fail_prefix = b""
    core.report([banned])  # the lease survived the rolled-back report; now the ban applies
    assert core.stats()["detail"]["hosts"]["127.0.0.1:8800"]["block"]["reason"] == "Banned"


def test_a_ban_withholds_its_host_from_later_leases_of_the_same_group(clocks: ManualClocks) -> None:
    core = SchedulerCore.from_settings(make_settings(), MemoryQueueStore(), clocks)
    core.add(["jd:1", "jd:2"], TaskKind.ProductReviews)
    core.add(["weibo_pc:1"], TaskKind.WeiboUser)  # (the id queued_together adds: known, so it changes nothing)
    task = core.lease("w", 1)[0]
    with queued_together(core):
        report = core.report_async([Report(task_id=task.id, lease_token=task.lease_token, outcome=Outcome.Banned)])
        lease = core.lease_async("w", 5)
    assert report.result(10) is None
    with pytest.raises(NoWorkError):
        lease.result(10)  # two tasks are due, but on the host (every source's, in these settings) just banned
    assert core.stats()["detail"]["hosts"]["127.0.0.1:8800"]["block"]["reason"] == "Banned"


def test_a_freeze_withholds_its_account_from_later_leases_of_the_same_group(
    tmp_path: Path, clocks: ManualClocks
) -> None:
    (tmp_path / "accounts").mkdir()
    (tmp_path / "accounts" / "pool.toml").write_text('[[account]]\nid = "a1"\ncookies = "SUB=x"\n')
    settings = make_settings(scheduler__accounts_dir=str(tmp_path / "accounts"), scheduler__account_sources="weibo_pc")
    core = SchedulerCore.from_settings(settings, MemoryQueueStore(), clocks)
    core.add(["weibo_pc:1", "weibo_pc:2"], TaskKind.WeiboUser)
    task = core.lease("w", 1)[0]
    assert task.account.id == "a1"
    with queued_together(core):
        report = core.report_async(
            [Report(task_id=task.id, lease_token=task.lease_token, outcome=Outcome.LoginRequired)]
        )
        lease = core.lease_async("w", 5)
    assert report.result(10) is None
    with pytest.raises(NoWorkError):
        lease.result(10)  # the other task is due, but its only account was frozen by the report before it
    assert core.stats()["detail"]["accounts"]["a1"]["state"] == "frozen"
