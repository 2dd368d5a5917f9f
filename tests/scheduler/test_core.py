"""SchedulerCore without Ice: leases, reports, releases, expiry, backoff, politeness, accounts, validation.
Every test runs against the memory store and the Berkeley DB store (the ``store`` fixture)."""

from __future__ import annotations

import json
import logging
import math
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from icecrawler.clock import ClockJumpWatch
from icecrawler.errors import ConfigError, InvalidArgumentError, LeaseLostError, NoWorkError, StorageUnavailableError
from icecrawler.models import Outcome, Report, TaskKind
from scheduler_server.core import SchedulerCore, check_consistency
from scheduler_server.server import Maintenance
from scheduler_server.store import MemoryQueueStore, QueueStore
from shhd.policies import Decision, Observation
from tests.scheduler.conftest import ManualClocks, make_settings, queued_together

USERS = ["weibo_pc:1", "weibo_pc:2", "weibo_mobile:3"]


def ok(task_id: str, token: str, **fields: object) -> Report:
    return Report(task_id=task_id, lease_token=token, **fields)  # type: ignore[arg-type]


def snapshot(store: QueueStore) -> tuple[dict[str, int], list[str]]:
    return check_consistency(store)


def test_add_is_idempotent_and_counts_new(core: SchedulerCore) -> None:
    assert core.add(USERS, TaskKind.WeiboUser) == 3
    assert core.add([*USERS, "weibo_pc:4", "weibo_pc:4"], TaskKind.WeiboUser) == 1
    stats = core.stats()
    assert (stats["tasks"], stats["pending"], stats["inflight"], stats["due_soon"]) == (4, 4, 0, 4)


def test_lease_hands_out_each_due_task_once(core: SchedulerCore, store: QueueStore) -> None:
    core.add(USERS, TaskKind.WeiboUser)
    first = core.lease("w1", 2)
    second = core.lease("w2", 5)
    assert len(first) == 2 and len(second) == 1
    assert len({task.id for task in first + second}) == 3
    assert all(task.lease_token and task.lease_deadline_ms > 0 for task in first + second)
    assert {task.lease_s for task in first + second} == {30.0}  # make_settings' lease_s: a client times it itself
    with pytest.raises(NoWorkError) as caught:
        core.lease("w3", 1)
    assert caught.value.next_due_in_ms == -1
    counts, problems = snapshot(store)
    assert problems == [] and counts == {"tasks": 3, "pending": 0, "inflight": 3}


def test_report_requeues_after_the_period(core: SchedulerCore, clocks: ManualClocks) -> None:
    core.add(["jd:100012043978"], TaskKind.ProductReviews)
    task = core.lease("w", 1)[0]
    assert task.id == "reviews:jd:100012043978" and task.period_s == 60.0
    core.report(
        [
            ok(
                task.id,
                task.lease_token,
                fingerprint=2**64 - 1,
                new_items=3,
                window_items=10,
                newest_item_ms=1_700_000_000_000,
                cursor="r9",
            )
        ]
    )
    with pytest.raises(NoWorkError) as caught:
        core.lease("w", 1)
    assert caught.value.next_due_in_ms == 60_000
    clocks.advance(60)
    again = core.lease("w", 1)[0]
    assert (again.cursor, again.attempts) == ("r9", 0)
    info = core.task_info(task.id)
    assert (info["item_count"], info["fingerprint"], info["crawls"]) == (3, 2**64 - 1, 1)
    assert info["history"][0]["new_items"] == 3 and info["history"][0]["period_s"] == 60.0
    assert info["lease_token"] == "<held>"


def test_stale_and_unknown_tokens_are_rejected_without_changes(
    core: SchedulerCore, store: QueueStore, clocks: ManualClocks
) -> None:
    core.add(USERS, TaskKind.WeiboUser)
    tasks = core.lease("w", 3)
    before = snapshot(store)
    with pytest.raises(LeaseLostError) as caught:
        core.report([ok(tasks[0].id, tasks[0].lease_token), ok(tasks[1].id, "not-a-token")])
    assert (caught.value.code, caught.value.index, caught.value.task_id) == ("UnknownLease", 1, tasks[1].id)
    assert snapshot(store) == before
    clocks.advance(31)  # the leases expire
    with pytest.raises(LeaseLostError) as caught:
        core.report([ok(tasks[2].id, tasks[2].lease_token)])
    assert caught.value.code == "StaleLease"
    assert core.reap() == 3  # the rejected call changed nothing; the reaper still finds all three leases
    assert core.task_info(tasks[2].id)["attempts"] == 1


@pytest.mark.parametrize(
    ("reports", "code", "field"),
    [
        ([], "EmptyBatch", "reports"),
        ([Report("user:weibo_pc:1", "t")] * 51, "BatchTooLarge", "reports"),
        ([Report("user:nowhere:1", "t")], "InvalidId", "reports[0].taskId"),
        ([Report("user:weibo_pc:99", "t")], "UnknownTask", "reports[0].taskId"),
        ([Report("user:weibo_pc:1", "")], "InvalidField", "reports[0].leaseToken"),
        ([Report("user:weibo_pc:1", "t", new_items=-1)], "InvalidField", "reports[0].newItems"),
        ([Report("user:weibo_pc:1", "t", retry_after_s=float("nan"))], "InvalidField", "reports[0].retryAfterS"),
        ([Report("user:weibo_pc:1", "t", http_status=1000)], "InvalidField", "reports[0].httpStatus"),
        (
            [Report("user:weibo_pc:1", "t", new_items=1, new_item_times_ms=(2, 1))],
            "InvalidField",
            "reports[0].newItemTimesMs",
        ),
        (
            [Report("user:weibo_pc:1", "t", new_items=2, new_item_times_ms=(5, -1))],
            "InvalidField",
            "reports[0].newItemTimesMs",
        ),
    ],
)
def test_bad_reports_raise_typed_errors(
    core: SchedulerCore, store: QueueStore, reports: list[Report], code: str, field: str
) -> None:
    core.add(USERS, TaskKind.WeiboUser)
    core.lease("w", 1)
    before = snapshot(store)
    with pytest.raises(InvalidArgumentError) as caught:
        core.report(reports)
    assert (caught.value.code, caught.value.field) == (code, field)
    assert snapshot(store) == before


def test_bad_lease_and_add_arguments(core: SchedulerCore) -> None:
    for call, code, field in [
        (lambda: core.lease("w", 0), "InvalidField", "max"),
        (lambda: core.lease("w", 51), "BatchTooLarge", "max"),
        (lambda: core.lease("", 1), "InvalidField", "workerId"),
        (lambda: core.add([], TaskKind.WeiboUser), "EmptyBatch", "ids"),
        (lambda: core.add(["weibo_pc:1", "jd:1"], TaskKind.WeiboUser), "InvalidId", "ids[1]"),
        (lambda: core.add(["weibo_pc"], TaskKind.WeiboUser), "InvalidId", "ids[0]"),
        (lambda: core.task_info("user:weibo_pc:404"), "UnknownTask", "taskId"),
        (lambda: core.task_info("garbage"), "InvalidId", "taskId"),
        (lambda: core.release([("user:weibo_pc:1", "")]), "InvalidField", "leases[0].leaseToken"),
    ]:
        with pytest.raises(InvalidArgumentError) as caught:
            call()
        assert (caught.value.code, caught.value.field) == (code, field)
    assert core.stats()["tasks"] == 0


def test_release_makes_tasks_due_at_once_without_an_attempt(core: SchedulerCore, store: QueueStore) -> None:
    core.add(USERS, TaskKind.WeiboUser)
    tasks = core.lease("w", 3)
    with pytest.raises(LeaseLostError):
        core.release([(tasks[0].id, tasks[0].lease_token), (tasks[1].id, "wrong")])
    assert snapshot(store)[0]["inflight"] == 3
    core.release([(task.id, task.lease_token) for task in tasks])
    again = core.lease("w", 3)
    assert sorted(task.id for task in again) == sorted(task.id for task in tasks)
    assert all(task.attempts == 0 for task in again)


def test_expired_leases_return_with_an_attempt_and_not_before(core: SchedulerCore, clocks: ManualClocks) -> None:
    core.add(USERS[:1], TaskKind.WeiboUser)
    task = core.lease("dead-worker", 1)[0]
    clocks.advance(29.9)
    assert core.reap() == 0
    with pytest.raises(NoWorkError):
        core.lease("w", 1)
    clocks.advance(0.2)
    again = core.lease("w", 1)[0]  # the check on every getUsers reaps it
    assert again.id == task.id and again.attempts == 1 and again.lease_token != task.lease_token


def test_a_rolled_back_report_leaves_records_and_queues_as_they_were(
    core: SchedulerCore, store: QueueStore, clocks: ManualClocks
) -> None:
    core.add(USERS, TaskKind.WeiboUser)
    first = core.lease("w", 1)[0]
    clocks.advance(20)
    second, third = core.lease("w", 2)
    clocks.advance(15)  # the first lease has expired; the report below reaps it in its own transaction
    with pytest.raises(LeaseLostError):
        core.report([ok(second.id, second.lease_token), ok(third.id, "wrong")])
    counts, problems = check_consistency(store, queues=core.queues, records=core.records)
    assert problems == [] and counts == {"tasks": 3, "pending": 0, "inflight": 3}
    core.report([ok(second.id, second.lease_token)])  # neither the report nor the expiry stuck: both happen now
    assert core.stats()["done"] == 2
    counts, problems = check_consistency(store, queues=core.queues, records=core.records)
    assert problems == [] and counts == {"tasks": 3, "pending": 2, "inflight": 1}
    assert [task.id for task in core.lease("w", 3)] == [first.id]  # the reported one is due in 60 s


def test_a_new_core_rebuilds_the_queues_from_the_records(store: QueueStore, clocks: ManualClocks) -> None:
    core = SchedulerCore.from_settings(make_settings(), store, clocks)
    core.add(USERS, TaskKind.WeiboUser)
    leased, reported = core.lease("w", 2)
    core.report([ok(reported.id, reported.lease_token)])  # due again in 60 s
    reopened = SchedulerCore.from_settings(make_settings(), store, clocks)
    counts, problems = check_consistency(store, queues=reopened.queues)
    assert problems == [] and counts == {"tasks": 3, "pending": 2, "inflight": 1}
    stats = reopened.stats()
    assert (stats["pending"], stats["inflight"], stats["due_soon"]) == (2, 1, 1)  # the reported one: in 60 s
    assert [task.id for task in reopened.lease("w", 3)] == ["user:weibo_pc:2"]  # neither leased nor reported
    reopened.report([ok(leased.id, leased.lease_token)])  # the lease survived the restart
    clocks.advance(60)
    assert len(reopened.lease("w", 3)) == 3  # two reported, one expired


def test_a_lease_lives_in_its_inflight_entry_not_in_the_record(store: QueueStore, clocks: ManualClocks) -> None:
    core = SchedulerCore.from_settings(make_settings(), store, clocks)
    core.add(["weibo_pc:1"], TaskKind.WeiboUser)
    with store.transaction() as txn:
        before = txn.get("tasks", b"user:weibo_pc:1")
    task = core.lease("worker-7", 1)[0]
    with store.transaction() as txn:
        assert txn.get("tasks", b"user:weibo_pc:1") == before  # leasing wrote only the queue entries
    reopened = SchedulerCore.from_settings(make_settings(), store, clocks)  # a restart: no cached records
    info = reopened.task_info(task.id)
    assert (info["state"], info["lease_token"], info["worker"]) == ("inflight", "<held>", "worker-7")
    assert info["lease_deadline_ms"] == task.lease_deadline_ms
    with pytest.raises(LeaseLostError):
        reopened.report([ok(task.id, "0" * 16)])
    reopened.report([ok(task.id, task.lease_token)])
    (entry,) = done_entries(store)
    assert entry["worker"] == "worker-7" and entry["deadline_wall_ms"] == task.lease_deadline_ms
    assert check_consistency(store, queues=reopened.queues)[1] == []


def done_entries(store: QueueStore) -> list[dict[str, Any]]:
    with store.transaction() as txn:
        return [json.loads(value) for _, value in txn.scan("done")]


def test_the_in_memory_queues_must_match_the_tables(core: SchedulerCore, store: QueueStore) -> None:
    core.add(USERS, TaskKind.WeiboUser)
    core.lease("w", 1)
    assert check_consistency(store, queues=core.queues, records=core.records)[1] == []
    with store.transaction() as txn:  # a pending key the core never wrote: the audit sees the difference
        txn.put("pending", b"\0" * 8 + b"user:weibo_pc:9", b"")
    problems = check_consistency(store, queues=core.queues, records=core.records)[1]
    assert "the in-memory pending queue differs from the pending table" in problems


def test_failures_back_off_exponentially_and_are_never_dropped(core: SchedulerCore, clocks: ManualClocks) -> None:
    core.add(USERS[:1], TaskKind.WeiboUser)
    delays = []
    for _ in range(6):
        task = core.lease("w", 1)[0]
        core.report([ok(task.id, task.lease_token, outcome=Outcome.Timeout, error_class="ReadTimeout")])
        delays.append(core.task_info(task.id)["due_in_s"])
        clocks.advance(delays[-1])
    assert delays == [0.0, 0.0, 10.0, 20.0, 40.0, 80.0]  # backoff_after_attempts=3, min_period 10
    assert core.task_info(USERS[0].replace("weibo_pc", "user:weibo_pc", 1))["attempts"] == 6


def test_ok_report_resets_attempts(core: SchedulerCore) -> None:
    core.add(USERS[:1], TaskKind.WeiboUser)
    task = core.lease("w", 1)[0]
    core.report([ok(task.id, task.lease_token, outcome=Outcome.ParseError)])
    task = core.lease("w", 1)[0]
    assert task.attempts == 1
    core.report([ok(task.id, task.lease_token)])
    assert core.task_info(task.id)["attempts"] == 0


def test_host_spacing_one_task_in_flight_per_host(store: QueueStore, clocks: ManualClocks) -> None:
    core = SchedulerCore.from_settings(make_settings(scheduler__host_spacing_s=2.0), store, clocks)
    core.add(["jd:1", "jd:2", "jd:3"], TaskKind.ProductReviews)
    first = core.lease("w", 3)
    assert len(first) == 1  # every source shares the sandbox host 127.0.0.1:8800
    with pytest.raises(NoWorkError) as caught:
        core.lease("w", 1)
    assert caught.value.next_due_in_ms > 0
    clocks.advance(5)
    core.report([ok(first[0].id, first[0].lease_token)])
    with pytest.raises(NoWorkError) as caught:
        core.lease("w", 1)  # ended just now: wait the spacing again
    assert caught.value.next_due_in_ms == 2000
    clocks.advance(2)
    assert len(core.lease("w", 3)) == 1


def test_a_wall_clock_set_back_never_stalls_a_spaced_host_longer_than_the_spacing(
    store: QueueStore, clocks: ManualClocks
) -> None:
    """The host's last lease and end are wall times; after the clock is set back an hour they lie in the future,
    and the host must not wait out the hour on top of its spacing."""
    core = SchedulerCore.from_settings(make_settings(scheduler__host_spacing_s=2.0), store, clocks)
    core.add(["jd:1"], TaskKind.ProductReviews)
    first = core.lease("w", 1)[0]
    core.report([ok(first.id, first.lease_token)])
    clocks.wall_s -= 3600
    core.add(["jd:2"], TaskKind.ProductReviews)  # due at the new "now"
    with pytest.raises(NoWorkError) as caught:
        core.lease("w", 1)
    assert caught.value.next_due_in_ms == 2000
    clocks.advance(2)
    assert [task.id for task in core.lease("w", 1)] == ["reviews:jd:2"]


def test_ban_blocks_the_host_until_retry_after(store: QueueStore, clocks: ManualClocks) -> None:
    core = SchedulerCore.from_settings(make_settings(), store, clocks)
    core.add(["jd:1", "jd:2"], TaskKind.ProductReviews)
    task = core.lease("w", 1)[0]
    core.report([ok(task.id, task.lease_token, outcome=Outcome.Banned, http_status=418, retry_after_s=100)])
    with pytest.raises(NoWorkError) as caught:
        core.lease("w", 2)
    assert caught.value.next_due_in_ms == 100_000
    assert core.stats()["detail"]["hosts"]["127.0.0.1:8800"]["block"]["reason"] == "Banned"
    # the block is durable: a new core over the same store still honours it
    reopened = SchedulerCore.from_settings(make_settings(), store, clocks)
    with pytest.raises(NoWorkError):
        reopened.lease("w", 2)
    clocks.advance(100)
    assert len(reopened.lease("w", 2)) == 2


def write_accounts(directory: Path) -> None:
    directory.mkdir()
    (directory / "pool.toml").write_text(
        '[[account]]\nid = "a1"\ncookies = "SUB=secret-one"\n\n'
        '[[account]]\nid = "a2"\ncookies = "SUB=secret-two"\nsources = ["weibo_mobile"]\n'
    )


def test_accounts_are_leased_frozen_and_thawed(tmp_path: Path, clocks: ManualClocks) -> None:
    write_accounts(tmp_path / "accounts")
    settings = make_settings(
        scheduler__accounts_dir=str(tmp_path / "accounts"),
        scheduler__account_sources="weibo_pc,weibo_mobile",
        scheduler__account_freeze_s=50.0,
    )
    core = SchedulerCore.from_settings(settings, MemoryQueueStore(), clocks)
    core.add(["weibo_pc:1", "weibo_pc:2"], TaskKind.WeiboUser)
    core.add(["jd:1"], TaskKind.ProductReviews)
    tasks = {task.id: task for task in core.lease("w", 3)}
    assert tasks["reviews:jd:1"].account.id == ""
    assert {tasks["user:weibo_pc:1"].account.id, tasks["user:weibo_pc:2"].account.id} == {"a1"}
    first = tasks["user:weibo_pc:1"]
    core.report([ok(first.id, first.lease_token, outcome=Outcome.LoginRequired)])
    with pytest.raises(NoWorkError):
        core.lease("w", 1)  # a1 is frozen, a2 only serves weibo_mobile: the task waits
    status = core.stats()["detail"]["accounts"]
    assert status["a1"]["state"] == "frozen" and "secret" not in repr(core.stats())
    clocks.advance(50)
    assert core.lease("w", 1)[0].account.id == "a1"


@pytest.mark.parametrize("source", ["jd", "weibo_web"])
def test_an_account_serves_the_sources_its_file_names_without_account_sources(
    source: str, tmp_path: Path, clocks: ManualClocks
) -> None:
    """An account whose file names its sources serves them even when scheduler.account_sources leaves them out (the
    default, ""): its tasks were leased with no account, so a login-walled site turned every crawl away, and for
    weibo.com's API the account also switched its visitor sessions off, leaving the tasks no session at all."""
    accounts = tmp_path / "accounts"
    accounts.mkdir()
    (accounts / "pool.toml").write_text(f'[[account]]\nid = "a1"\ncookies = "SUB=s; thor=t"\nsources = ["{source}"]\n')
    settings = make_settings(
        scheduler__accounts_dir=str(accounts),
        sources__weibo_web__visitor_url="http://127.0.0.1:9/passport/visitor/genvisitor2",
    )
    core = SchedulerCore.from_settings(settings, MemoryQueueStore(), clocks)
    core.add([f"{source}:1"], TaskKind.WeiboUser if source == "weibo_web" else TaskKind.ProductReviews)
    task = core.lease("w", 1)[0]
    assert task.account.id == "a1" and task.account.cookie_blob == "SUB=s; thor=t"
    core.report([ok(task.id, task.lease_token, outcome=Outcome.LoginRequired)])
    with pytest.raises(NoWorkError):
        core.lease("w", 1)  # its only account is frozen: the task waits rather than going out without a login
    assert core.stats()["detail"]["accounts"]["a1"]["state"] == "frozen"


def test_account_budget_per_minute(tmp_path: Path, clocks: ManualClocks) -> None:
    write_accounts(tmp_path / "accounts")
    settings = make_settings(
        scheduler__accounts_dir=str(tmp_path / "accounts"),
        scheduler__account_sources="weibo_pc",
        scheduler__account_budget_per_min=2,
    )
    core = SchedulerCore.from_settings(settings, MemoryQueueStore(), clocks)
    core.add([f"weibo_pc:{n}" for n in range(5)], TaskKind.WeiboUser)
    assert len(core.lease("w", 5)) == 2
    clocks.advance(61)
    assert len(core.lease("w", 5)) == 2


@pytest.mark.parametrize("why", ["frozen", "over-budget"])
def test_due_tasks_waiting_for_an_account_ask_idle_clients_back_after_the_retry_hint(
    why: str, store: QueueStore, tmp_path: Path, clocks: ManualClocks
) -> None:
    """A due task whose host is ready but whose accounts all refuse (frozen for an hour, or their per-minute budget
    spent) told idle clients to come back in 1 ms: every idle client's lease loop then called getUsers about a
    thousand times a second, each call a group transaction, for as long as the accounts refused."""
    write_accounts(tmp_path / "accounts")
    settings = make_settings(
        scheduler__accounts_dir=str(tmp_path / "accounts"),
        scheduler__account_sources="weibo_pc",
        scheduler__account_freeze_s=3600.0,
        scheduler__account_budget_per_min=1,
    )
    core = SchedulerCore.from_settings(settings, store, clocks)
    core.add(["weibo_pc:1", "weibo_pc:2"], TaskKind.WeiboUser)
    task = core.lease("w", 1)[0]  # a1 (the only account of weibo_pc) has spent its budget of the minute
    if why == "frozen":
        core.report([ok(task.id, task.lease_token, outcome=Outcome.LoginRequired)])
        clocks.advance(61)  # the budget is back, the freeze is not over
    with pytest.raises(NoWorkError) as caught:
        core.lease("w", 1)
    assert caught.value.next_due_in_ms == 200  # core._RETRY_HINT_MS


@pytest.mark.parametrize(("why", "jd_due_in_ms"), [("host-spacing", 1000), ("account-budget", 125)])
def test_a_source_that_waits_never_hides_a_task_due_sooner_on_another(
    why: str, jd_due_in_ms: int, store: QueueStore, tmp_path: Path, clocks: ManualClocks
) -> None:
    """When a due task waited (its host's spacing, or its accounts all refusing), NoWork gave that wait alone and
    not when the next task of another source came due: a jd task due in 1 s was told "20 s" while weibo.com's host
    was spaced 20 s, so idle clients slept past it (up to ``client.idle_sleep_s``). The hint is the sooner of the
    two."""
    write_accounts(tmp_path / "accounts")
    waits = {"scheduler__host_spacing_s": 20.0} if why == "host-spacing" else {"scheduler__account_budget_per_min": 1}
    settings = make_settings(
        scheduler__accounts_dir=str(tmp_path / "accounts"),
        scheduler__account_sources="weibo_pc",
        sources__jd__base_url="http://127.0.0.2:8800/jd",  # a host of its own, not spaced with weibo_pc's
        **waits,
    )
    core = SchedulerCore.from_settings(settings, store, clocks)
    core.add(["jd:1"], TaskKind.ProductReviews)
    jd = core.lease("w", 1)[0]
    core.report([ok(jd.id, jd.lease_token)])  # due again in 60 s
    clocks.advance(60 - jd_due_in_ms / 1000)
    core.add(["weibo_pc:1", "weibo_pc:2"], TaskKind.WeiboUser)
    weibo = core.lease("w", 1)[0]  # a1, weibo_pc's only account, has spent its budget, if it has one
    core.report([ok(weibo.id, weibo.lease_token)])  # weibo_pc's host is spaced from here, if it is
    with pytest.raises(NoWorkError) as caught:
        core.lease("w", 1)  # weibo_pc:2 is due and waits (20 s for the host, or 200 ms for an account)
    assert caught.value.next_due_in_ms == jd_due_in_ms
    clocks.advance(jd_due_in_ms / 1000)
    assert [task.id for task in core.lease("w", 1)] == [jd.id]


def test_a_wall_clock_set_back_never_holds_an_accounts_budget_longer_than_its_minute(
    store: QueueStore, tmp_path: Path, clocks: ManualClocks
) -> None:
    """The per-minute budget counts an account's requests by wall time: after the clock was set back an hour, the
    requests of the minute before lay in the future and counted against the budget for the whole hour, so a source
    whose accounts had spent it was not crawled for that long. As for a host's spacing, they count as made now."""
    write_accounts(tmp_path / "accounts")
    settings = make_settings(
        scheduler__accounts_dir=str(tmp_path / "accounts"),
        scheduler__account_sources="weibo_pc",
        scheduler__account_budget_per_min=1,
    )
    core = SchedulerCore.from_settings(settings, store, clocks)
    core.add(["weibo_pc:1"], TaskKind.WeiboUser)
    first = core.lease("w", 1)[0]  # a1, the only account of weibo_pc, has spent its budget of the minute
    core.report([ok(first.id, first.lease_token)])
    clocks.wall_s -= 3600
    core.add(["weibo_pc:2"], TaskKind.WeiboUser)  # due at the new "now"
    with pytest.raises(NoWorkError):
        core.lease("w", 1)
    clocks.advance(60)
    assert [task.id for task in core.lease("w", 1)] == ["user:weibo_pc:2"]


def test_bad_account_files_and_policies_fail_clearly(tmp_path: Path, clocks: ManualClocks) -> None:
    (tmp_path / "bad.toml").write_text('[[account]]\nid = "x"\n')
    with pytest.raises(ConfigError, match="cookies"):
        SchedulerCore.from_settings(make_settings(scheduler__accounts_dir=str(tmp_path)), MemoryQueueStore(), clocks)
    with pytest.raises(ConfigError, match=r"scheduler\.policy"):
        SchedulerCore.from_settings(make_settings(scheduler__policy="no-such-policy"), MemoryQueueStore(), clocks)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("lease_s", math.nan),  # passed "lease_s <= 0", then failed every lease
        ("done_retention_s", -1.0),
        ("account_budget_per_min", 0),
        ("shards", 0),
        ("min_period_s", math.inf),
        ("record_cache", -1),
    ],
)
def test_the_config_applies_every_rule_of_its_settings(key: str, value: float) -> None:
    """``SchedulerConfig`` checks each field by its setting's rule (``RULES``, one place per bound), also for
    settings that did not come through ``load_settings``, which applies the same rules."""
    from icecrawler.settings import load_settings
    from scheduler_server.config import SchedulerConfig

    with pytest.raises(ConfigError, match=rf"scheduler\.{key}"):
        SchedulerConfig.from_settings(make_settings(**{f"scheduler__{key}": value}))
    with pytest.raises(ConfigError, match=rf"scheduler\.{key}"):
        load_settings(environ={}, assignments=[f"scheduler.{key}={value}"])


def test_the_config_refuses_periods_out_of_order() -> None:
    from scheduler_server.config import SchedulerConfig

    with pytest.raises(ConfigError, match="min_period_s <= initial_period_s <= max_period_s"):
        SchedulerConfig.from_settings(make_settings(scheduler__initial_period_s=5.0))
    with pytest.raises(ConfigError, match=r"scheduler\.shard < scheduler\.shards"):
        SchedulerConfig.from_settings(make_settings(scheduler__shards=2, scheduler__shard=2))


def test_shutting_down_refuses_new_leases(core: SchedulerCore) -> None:
    core.add(USERS, TaskKind.WeiboUser)
    task = core.lease("w", 1)[0]
    core.stop_leasing()
    with pytest.raises(NoWorkError) as caught:
        core.lease("w", 1)
    assert caught.value.code == "ShuttingDown"
    core.report([ok(task.id, task.lease_token)])  # reports still land
    assert core.stats()["detail"]["shutting_down"] is True


def test_done_log_is_pruned_after_retention(store: QueueStore, clocks: ManualClocks) -> None:
    core = SchedulerCore.from_settings(make_settings(scheduler__done_retention_s=100.0), store, clocks)
    core.add(USERS, TaskKind.WeiboUser)
    for task in core.lease("w", 3):
        core.report([ok(task.id, task.lease_token)])
    assert core.stats()["done"] == 3
    clocks.advance(101)
    assert core.prune_done() == 3 and core.stats()["done"] == 0


class StopAfter(threading.Event):
    """A stop request that comes after ``checks`` looks at it (between two chunks of a prune)."""

    def __init__(self, checks: int) -> None:
        super().__init__()
        self.checks = checks

    def is_set(self) -> bool:
        self.checks -= 1
        return self.checks < 0 or super().is_set()


def test_a_prune_pass_ends_between_chunks_once_stopped_and_the_next_pass_goes_on(
    store: QueueStore, clocks: ManualClocks
) -> None:
    """The first pass over a large completion log runs thousands of chunk transactions: without a look at the stop
    request between them, stopping the maintenance thread waited for all of them (and its 10 s join gave up)."""
    core = SchedulerCore.from_settings(make_settings(scheduler__done_retention_s=100.0), store, clocks)
    core.add(USERS, TaskKind.WeiboUser)
    for task in core.lease("w", 3):
        core.report([ok(task.id, task.lease_token)])
    clocks.advance(101)
    assert core.prune_done(chunk=1, stop=StopAfter(1)) == 1  # one chunk, then the stop request
    assert core.stats()["done"] == 2
    assert core.prune_done(chunk=1) == 2 and core.stats()["done"] == 0


def test_a_stopped_maintenance_thread_prunes_nothing_more(store: QueueStore, clocks: ManualClocks) -> None:
    core = SchedulerCore.from_settings(make_settings(scheduler__done_retention_s=100.0), store, clocks)
    core.add(USERS, TaskKind.WeiboUser)
    for task in core.lease("w", 3):
        core.report([ok(task.id, task.lease_token)])
    clocks.advance(101)
    maintenance = Maintenance(core, interval_s=3600.0, checkpoint_s=3600.0)
    maintenance.stopped.set()  # its own stop request reaches the prune
    maintenance.tick()
    assert core.stats()["done"] == 3


#: The core's method behind each maintenance step (``Maintenance.failures`` counts by step).
_STEP_METHODS = {"reap": "reap", "prune": "prune_done", "budget": "rebalance_budget", "checkpoint": "checkpoint"}


@pytest.mark.parametrize("broken", list(_STEP_METHODS))
def test_a_maintenance_step_that_fails_every_pass_stops_none_of_the_others(
    store: QueueStore,
    clocks: ManualClocks,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    broken: str,
) -> None:
    """A bug in one maintenance step (an exception on every pass, as the budget's KeyError under a changed
    ``scheduler.policy`` was) ended every pass there, for as long as the daemon ran: with the rebalance or the prune
    failing no checkpoint ever ran, so Berkeley DB kept every log file (``DB_LOG_AUTO_REMOVE`` removes only those
    a checkpoint passed) until the disk was full; with the reap failing, the completion log was never pruned
    either. Each step now runs on every pass whatever the others did; a failing one is counted (the metrics'
    ``maintenance_failures_total{step}``) and its traceback logged once a minute, not once a pass."""
    core = SchedulerCore.from_settings(make_settings(scheduler__done_retention_s=100.0), store, clocks)
    core.add(USERS, TaskKind.WeiboUser)
    for task in core.lease("w", 3):
        core.report([ok(task.id, task.lease_token)])
    runs: Counter[str] = Counter()

    def counted(step: str, real: Any) -> Any:
        def run(*args: Any, **kwargs: Any) -> Any:
            runs[step] += 1
            if step == broken:
                raise KeyError("a bug")
            return real(*args, **kwargs)

        return run

    for step, method in _STEP_METHODS.items():
        monkeypatch.setattr(core, method, counted(step, getattr(core, method)))
    monotonic = [0.0]
    jumps = ClockJumpWatch(wall=clocks.wall, monotonic=lambda: monotonic[0])
    maintenance = Maintenance(core, 1.0, 30.0, jumps, lambda: monotonic[0])
    passes = 600  # ten minutes at one pass a second
    with caplog.at_level(logging.ERROR, logger="scheduler_server.server"):
        for _ in range(passes):
            maintenance.tick()
            monotonic[0] += 1.0
            clocks.advance(1.0)
    assert runs["reap"] == runs["prune"] == runs["budget"] == passes
    assert runs["checkpoint"] == passes // 30 - 1  # at 30 s, 60 s, ... 570 s, failing or not
    assert core.stats()["done"] == (3 if broken == "prune" else 0)
    assert {step: n for step, n in maintenance.failures.items() if n} == {broken: runs[broken]}
    tracebacks = [record for record in caplog.records if record.exc_info]
    assert len(tracebacks) == passes // 60  # once a minute, not once a pass
    assert all(broken in record.getMessage() for record in tracebacks)


def test_a_checkpoint_on_a_full_disk_is_tried_every_pass_and_keeps_the_episode_open(
    store: QueueStore, clocks: ManualClocks, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A checkpoint refused for a full disk, with nothing else to write (no lease expired, nothing to prune): it
    waited for its next time like a bug's, so the passes between closed the full-disk episode ("maintenance runs
    again", false) and the next try opened a new one (a WARNING at once): two lines every 30 s, and the first
    checkpoint after the space came back up to 30 s late. It is tried on every pass, as every other write."""
    core = SchedulerCore.from_settings(make_settings(), store, clocks)
    tries = [0]

    def full_disk() -> None:
        tries[0] += 1
        raise StorageUnavailableError("the scheduler database cannot checkpoint now (No space left on device)")

    monkeypatch.setattr(core, "checkpoint", full_disk)
    monotonic = [0.0]
    jumps = ClockJumpWatch(wall=clocks.wall, monotonic=lambda: monotonic[0])
    maintenance = Maintenance(core, 1.0, 30.0, jumps, lambda: monotonic[0])
    with caplog.at_level(logging.INFO, logger="scheduler_server.server"):
        for _ in range(120):
            maintenance.tick()
            monotonic[0] += 1.0
            clocks.advance(1.0)
    assert tries[0] == 120 - 30  # every pass from the first checkpoint's time on
    assert "runs again" not in caplog.text
    warnings = [record for record in caplog.records if record.levelno == logging.WARNING]
    assert 1 <= len(warnings) <= 2  # once a minute


def test_one_prune_pass_clears_every_entry_past_retention_however_many(store: QueueStore, clocks: ManualClocks) -> None:
    """The maintenance thread prunes once a pass (``scheduler.maintenance_interval_s``). A pass that dropped at most
    10 000 entries could not keep up with a scheduler completing more than 10 000 leases a pass (one shard does about
    that many a second; at maintenance_interval_s=10 a tenth of it), and the completion log then grew for good."""
    core = SchedulerCore.from_settings(
        make_settings(scheduler__done_retention_s=100.0, scheduler__batch_limit=1000), store, clocks
    )
    ids = [f"weibo_pc:{n}" for n in range(1, 1001)]
    core.add(ids, TaskKind.WeiboUser)
    rounds = 11  # 11 000 completions, all older than the retention below
    for _ in range(rounds):
        tasks = core.lease("w", 1000)
        assert len(tasks) == 1000
        core.report([ok(task.id, task.lease_token) for task in tasks])
        clocks.advance(3600)  # past the longest period: every task is due again
    assert core.stats()["done"] == rounds * 1000
    assert core.prune_done() == rounds * 1000
    assert core.stats()["done"] == 0
    with store.transaction() as txn:
        assert txn.count("done") == 0


def test_the_new_items_times_reach_the_revisit_policy(store: QueueStore, clocks: ManualClocks) -> None:
    core = SchedulerCore.from_settings(make_settings(scheduler__policy="rate"), store, clocks)
    seen: list[Observation] = []
    policy = core.policy

    class Recording:
        name = policy.name

        def initial_state(self) -> dict[str, Any]:
            return policy.initial_state()

        def next_period(self, state: dict[str, Any], observation: Observation) -> Decision:
            seen.append(observation)
            return policy.next_period(state, observation)

    core.policy = Recording()  # type: ignore[assignment]
    core.add(USERS[:1], TaskKind.WeiboUser)
    task = core.lease("w", 1)[0]
    now_ms = int(clocks.now() * 1000)
    times = (now_ms - 60_000, now_ms - 660_000, now_ms - 1_260_000)
    core.report(
        [ok(task.id, task.lease_token, new_items=3, window_items=3, newest_item_ms=times[0], new_item_times_ms=times)]
    )
    assert seen[0].new_item_times_s == tuple(t / 1000 for t in times)


# --- calls grouped into one transaction (group commit) ------------------------------------------------------


def test_a_rejected_call_in_a_group_changes_nothing_and_the_others_apply(
    core: SchedulerCore, store: QueueStore
) -> None:
    core.add(USERS, TaskKind.WeiboUser)
    tasks = core.lease("w", 2)
    with queued_together(core):
        good = core.report_async([ok(tasks[0].id, tasks[0].lease_token, new_items=2)])
        bad = core.report_async([ok(tasks[1].id, "not-a-token")])
        lease = core.lease_async("w2", 5)
    assert good.result(10) is None
    with pytest.raises(LeaseLostError) as caught:
        bad.result(10)
    assert caught.value.code == "UnknownLease"
    unleased = {"user:weibo_pc:1", "user:weibo_pc:2", "user:weibo_mobile:3"} - {task.id for task in tasks}
    assert {task.id for task in lease.result(10)} == unleased  # the reported task is not due again yet
    assert core.task_info(tasks[0].id)["crawls"] == 1
    assert core.task_info(tasks[1].id)["state"] == "inflight"  # still leased with its real token
    core.report([ok(tasks[1].id, tasks[1].lease_token)])
    counts, problems = check_consistency(store, queues=core.queues, records=core.records)
    assert problems == [] and counts == {"tasks": 3, "pending": 2, "inflight": 1}


def test_a_group_whose_transaction_fails_runs_each_call_alone(core: SchedulerCore, store: QueueStore) -> None:
    core.add(USERS, TaskKind.WeiboUser)
    task = core.lease("w", 1)[0]

    def broken(txn: Any, group: Any) -> Any:
        txn.put("meta", b"half-written", b"x")
        raise RuntimeError("disk on fire")

    with queued_together(core):
        good = core.report_async([ok(task.id, task.lease_token)])
        failing = core._call(broken, durable=False)
    assert good.result(10) is None
    with pytest.raises(RuntimeError, match="disk on fire"):
        failing.result(10)
    with store.transaction() as txn:
        assert txn.get("meta", b"half-written") is None  # rolled back; the good report was applied alone
    assert core.task_info(task.id)["crawls"] == 1
    assert check_consistency(store, queues=core.queues, records=core.records)[1] == []


def test_a_spaced_host_gets_one_task_per_group(store: QueueStore, clocks: ManualClocks) -> None:
    core = SchedulerCore.from_settings(make_settings(scheduler__host_spacing_s=2.0), store, clocks)
    core.add(["weibo_pc:1", "weibo_pc:2"], TaskKind.WeiboUser)
    with queued_together(core):
        first = core.lease_async("w1", 1)
        second = core.lease_async("w2", 1)
    assert len(first.result(10)) == 1
    with pytest.raises(NoWorkError):
        second.result(10)
