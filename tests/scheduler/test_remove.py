"""Removing targets (``SchedulerCore.remove``, ``removeUsers``) without Ice, over both stores: a pending or in-flight
task leaves the tables and the queues, a lease on it ends (its report and release get LeaseLost ``TaskRemoved``),
its page-cap gap goes, bad arguments change nothing, and the removal lasts across a restart."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from icecrawler.errors import InvalidArgumentError, LeaseLostError, NoWorkError
from icecrawler.models import Report, TaskKind
from scheduler_server.core import SchedulerCore, check_consistency
from scheduler_server.store import BdbQueueStore, QueueStore
from tests.scheduler.conftest import ManualClocks, make_settings, queued_together
from tests.scheduler.test_gaps import GAP, crawl

USERS = ["weibo_pc:1", "weibo_pc:2", "weibo_mobile:3"]


def counts(core: SchedulerCore) -> tuple[int, int, int]:
    stats = core.stats()
    return stats["tasks"], stats["pending"], stats["inflight"]


def done_entries(store: QueueStore) -> list[dict[str, Any]]:
    with store.transaction() as txn:
        return [json.loads(value) for _, value in txn.scan("done", b"", limit=1000)]


def test_pending_tasks_are_removed_and_unknown_ids_ignored(core: SchedulerCore, store: QueueStore) -> None:
    core.add(USERS, TaskKind.WeiboUser)
    assert core.remove(["weibo_pc:1", "weibo_pc:9", "weibo_pc:1"], TaskKind.WeiboUser) == 1
    assert core.remove(["weibo_pc:1"], TaskKind.WeiboUser) == 0
    core.add(["ecshop:5"], TaskKind.ProductReviews)
    assert core.remove(["ecshop:5"], TaskKind.Listing) == 0  # another kind: another task
    assert core.remove(["ecshop:5"], TaskKind.ProductReviews) == 1
    assert counts(core) == (2, 2, 0)
    assert {task.id for task in core.lease("w", 5)} == {"user:weibo_pc:2", "user:weibo_mobile:3"}
    with pytest.raises(InvalidArgumentError, match="unknown task"):
        core.task_info("user:weibo_pc:1")
    assert check_consistency(store) == ({"tasks": 2, "pending": 0, "inflight": 2}, [])


def test_a_lease_on_a_removed_task_ends_and_its_report_is_refused(
    core: SchedulerCore, store: QueueStore, clocks: ManualClocks
) -> None:
    core.add(USERS, TaskKind.WeiboUser)
    leased = {task.id: task for task in core.lease("w", 3)}
    removed, kept = leased["user:weibo_pc:1"], leased["user:weibo_pc:2"]
    assert core.remove(["weibo_pc:1"], TaskKind.WeiboUser) == 1
    assert counts(core) == (2, 0, 2) and core.stats()["done"] == len(done_entries(store)) == 1
    with pytest.raises(LeaseLostError) as caught:
        core.report([Report(task_id=kept.id, lease_token=kept.lease_token), Report(removed.id, removed.lease_token)])
    assert (caught.value.code, caught.value.index, caught.value.task_id) == ("TaskRemoved", 1, removed.id)
    with pytest.raises(LeaseLostError, match="the task was removed"):
        core.release([(removed.id, removed.lease_token)])
    core.report([Report(task_id=kept.id, lease_token=kept.lease_token)])  # the rest of the batch, sent again
    assert counts(core) == (2, 1, 1)
    entry = next(e for e in done_entries(store) if e["outcome"] == "Removed")
    assert entry["worker"] == "w" and entry["leased_wall_ms"] <= entry["ended_wall_ms"] < entry["deadline_wall_ms"]
    clocks.advance(3600)  # the removed lease's deadline passes: nothing comes back to pending
    core.reap()
    assert counts(core) == (2, 2, 0) and check_consistency(store)[1] == []


def test_a_removed_task_added_again_starts_afresh(core: SchedulerCore, clocks: ManualClocks) -> None:
    core.add(["jd:1"], TaskKind.ProductReviews)
    first = core.lease("w", 1)[0]
    core.report([Report(task_id=first.id, lease_token=first.lease_token, new_items=5, cursor="r5")])
    clocks.advance(3600)
    old = core.lease("w", 1)[0]
    core.remove(["jd:1"], TaskKind.ProductReviews)
    assert core.add(["jd:1"], TaskKind.ProductReviews) == 1
    new = core.lease("w", 1)[0]
    assert (new.cursor, new.attempts) == ("", 0) and core.task_info(new.id)["crawls"] == 0
    with pytest.raises(LeaseLostError) as caught:
        core.report([Report(task_id=old.id, lease_token=old.lease_token)])
    assert caught.value.code == "TaskRemoved"
    core.report([Report(task_id=new.id, lease_token=new.lease_token, new_items=1)])
    assert core.task_info(new.id)["crawls"] == 1


def test_a_removed_in_flight_task_frees_its_host(store: QueueStore, clocks: ManualClocks) -> None:
    core = SchedulerCore.from_settings(make_settings(scheduler__host_spacing_s=5.0), store, clocks)
    core.add(["weibo_pc:1", "weibo_pc:2"], TaskKind.WeiboUser)
    core.lease("w", 1)
    with pytest.raises(NoWorkError):
        core.lease("w", 1)  # one task per spaced host at a time
    core.remove(["weibo_pc:1"], TaskKind.WeiboUser)
    clocks.advance(5)
    assert [task.id for task in core.lease("w", 1)] == ["user:weibo_pc:2"]


def test_bad_arguments_remove_nothing(core: SchedulerCore) -> None:
    core.add(USERS, TaskKind.WeiboUser)
    for ids, code in ((["weibo_pc:1", "no-colon"], "InvalidId"), ([], "EmptyBatch"), (["x:1"] * 51, "BatchTooLarge")):
        with pytest.raises(InvalidArgumentError) as caught:
            core.remove(ids, TaskKind.WeiboUser)
        assert caught.value.code == code
    assert counts(core) == (3, 3, 0)


def test_a_removed_task_takes_its_open_gap_with_it(core: SchedulerCore, clocks: ManualClocks) -> None:
    core.add(["jd:1"], TaskKind.ProductReviews)
    crawl(core, clocks, GAP)
    assert core.stats()["detail"]["open_gaps"] == 1
    core.remove(["jd:1"], TaskKind.ProductReviews)
    assert core.stats()["detail"]["open_gaps"] == 0


@pytest.mark.bdb
def test_a_removal_lasts_across_a_restart(tmp_path: Path) -> None:
    clocks = ManualClocks()
    core = SchedulerCore.from_settings(make_settings(), BdbQueueStore(tmp_path / "db"), clocks)
    core.add(["jd:1", "jd:2", "jd:3"], TaskKind.ProductReviews)
    crawl(core, clocks, GAP)  # one of them holds an open gap
    gapped = next(t for t in ("reviews:jd:1", "reviews:jd:2", "reviews:jd:3") if core.task_info(t)["cursor"] == GAP)
    clocks.advance(3600)
    leased = core.lease("w", 3)
    core.remove([gapped.split(":", 1)[1], "jd:3" if gapped != "reviews:jd:3" else "jd:2"], TaskKind.ProductReviews)
    core.close()
    store = BdbQueueStore(tmp_path / "db")
    again = SchedulerCore.from_settings(make_settings(), store, clocks)
    try:
        assert counts(again) == (1, 0, 1) and again.stats()["detail"]["open_gaps"] == 0
        assert check_consistency(store) == ({"tasks": 1, "pending": 0, "inflight": 1}, [])
        late = next(task for task in leased if task.id == gapped)
        with pytest.raises(LeaseLostError) as lost:  # the removed lease is remembered across the restart
            again.report([Report(task_id=late.id, lease_token=late.lease_token)])
        assert lost.value.code == "TaskRemoved"
        clocks.advance(again.config.done_retention_s + 1)
        assert again.prune_done() >= 1  # the tombstone goes with the completion log's entries
    finally:
        again.close()
    third = SchedulerCore.from_settings(make_settings(), BdbQueueStore(tmp_path / "db"), clocks)
    try:
        with pytest.raises(InvalidArgumentError) as unknown:  # past the log's retention: an unknown task
            third.report([Report(task_id=late.id, lease_token=late.lease_token)])
        assert unknown.value.code == "UnknownTask"
    finally:
        third.close()


def test_a_removal_grouped_with_a_lease_or_a_report_leaves_no_stale_record(
    core: SchedulerCore, store: QueueStore
) -> None:
    """The cache must not keep a removed task's record: a lease or report in the same group keeps its record after
    the commit, and a later report of that lease would read the stale copy, write the task back and, with the
    task added again meanwhile, leave it in the pending queue twice. (weibo_pc:1 is queued_together's own.)"""
    churned = ["weibo_pc:2", "weibo_mobile:3"]
    core.add(["weibo_pc:1", *churned], TaskKind.WeiboUser)
    first = core.lease("w", 3)
    reported = next(task for task in first if task.id == "user:weibo_pc:2")
    core.release([(task.id, task.lease_token) for task in first if task is not reported])
    with queued_together(core):
        report = core.report_async([Report(reported.id, reported.lease_token)])
        leasing = core.lease_async("w", 5)
        removing = core.remove_async(churned, TaskKind.WeiboUser)
    assert report.result(10) is None and removing.result(10) == 2
    leased = [task for task in leasing.result(10) if task.id == "user:weibo_mobile:3"]
    assert leased, "the lease in the removal's group took the other churned task"
    assert check_consistency(store, queues=core.queues, records=core.records)[1] == []
    with queued_together(core):
        adding = core.add_async(churned, TaskKind.WeiboUser)
        late = core.report_async([Report(task.id, task.lease_token) for task in leased])
    assert adding.result(10) == 2
    with pytest.raises(LeaseLostError) as caught:
        late.result(10)
    assert caught.value.code == "TaskRemoved"
    counts, problems = check_consistency(store, queues=core.queues, records=core.records)
    assert problems == [] and counts["tasks"] == 3


def test_a_late_report_of_an_ended_lease_on_a_removed_task_is_told_task_removed(
    core: SchedulerCore, clocks: ManualClocks
) -> None:
    core.add(["weibo_pc:1"], TaskKind.WeiboUser)
    task = core.lease("w", 1)[0]
    clocks.advance(31)  # the lease expires: the task is pending again when it is removed
    core.reap()
    core.remove(["weibo_pc:1"], TaskKind.WeiboUser)
    with pytest.raises(LeaseLostError) as caught:
        core.report([Report(task.id, task.lease_token)])
    assert caught.value.code == "TaskRemoved"


def test_a_report_grouped_after_the_removal_of_its_task_is_told_task_removed(core: SchedulerCore) -> None:
    core.add(["weibo_pc:2"], TaskKind.WeiboUser)
    task = core.lease("w", 1)[0]
    with queued_together(core):
        removing = core.remove_async(["weibo_pc:2"], TaskKind.WeiboUser)
        late = core.report_async([Report(task.id, task.lease_token)])
    assert removing.result(10) == 1
    with pytest.raises(LeaseLostError) as caught:
        late.result(10)
    assert caught.value.code == "TaskRemoved"
