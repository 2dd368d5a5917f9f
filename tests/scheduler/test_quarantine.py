"""A task record whose bytes do not decode (damage Berkeley DB itself did not detect) is moved, bytes unchanged, into
the ``quarantine`` table, in the transaction that takes it out of ``tasks`` and of its queue; every other task is
served on (``scheduler_server.quarantine``). Both stores; the damage is written through the store's own API, then
the scheduler starts again on it, as it would on a damaged database."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from icecrawler import rpc
from icecrawler.errors import LeaseLostError, ServiceError
from icecrawler.models import Report, TaskKind
from icecrawler_cli.commands.status import merged, render_text
from scheduler_server.audit import check_consistency
from scheduler_server.codec import TaskRecord
from scheduler_server.core import SchedulerCore
from scheduler_server.integrity import open_checked, salvage
from scheduler_server.listing import list_tasks
from scheduler_server.metrics import SchedulerMetrics
from scheduler_server.quarantine import UndecodableRecord, decode_record
from scheduler_server.startup import GAP_KEY, GAP_VALUE
from scheduler_server.store import BdbQueueStore, QueueStore
from tests.scheduler.conftest import ManualClocks, make_settings
from tests.scheduler.daemon import scheduler_daemon, scheduler_proxy

DAMAGED = "user:weibo_pc:2"
#: How a value goes bad: cut short (a torn write), or overwritten by bytes that are no pickle at all.
DAMAGES = ["truncated", "garbage"]


def damage(store: QueueStore, task_id: str, how: str) -> bytes:
    """Overwrite the task's stored record through the store's own transaction API; returns the bytes written."""
    with store.transaction() as txn:
        raw = txn.get("tasks", task_id.encode())
        assert raw is not None
        bad = raw[: len(raw) // 2] if how == "truncated" else b"\x00\x13 not a pickle \xff" * 3
        txn.put("tasks", task_id.encode(), bad)
    return bad


def seeded(store: QueueStore, clocks: ManualClocks, **settings: object) -> SchedulerCore:
    core = SchedulerCore.from_settings(make_settings(**settings), store, clocks)
    core.add(["weibo_pc:1", "weibo_pc:2", "weibo_pc:3"], TaskKind.WeiboUser)
    return core


def restarted(store: QueueStore, clocks: ManualClocks, **settings: object) -> SchedulerCore:
    """A new core on the same database: nothing cached, everything read from the tables."""
    return SchedulerCore.from_settings(make_settings(**settings), store, clocks)


def quarantined(store: QueueStore) -> dict[str, bytes]:
    with store.transaction() as txn:
        return {key.decode(): value for key, value in txn.scan("quarantine")}


def assert_quarantined(core: SchedulerCore, store: QueueStore, bad: bytes) -> None:
    """The record is in the quarantine table byte for byte, in no other, and the database is consistent."""
    assert quarantined(store) == {DAMAGED: bad}
    with store.transaction() as txn:
        assert txn.get("tasks", DAMAGED.encode()) is None
    counts, problems = check_consistency(store, queues=core.queues, records=core.records)
    assert problems == []
    assert counts["tasks"] == core.counts["tasks"] == 2
    assert core.counts["pending"] + core.counts["inflight"] == 2
    assert core.stats()["detail"]["quarantined"] == 1
    assert core.gauges()["quarantined"] == 1


@pytest.mark.parametrize("how", DAMAGES)
def test_a_lease_quarantines_a_record_that_does_not_decode_and_leases_the_others(
    store: QueueStore, clocks: ManualClocks, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    bad = damage(store, DAMAGED, how)
    seeded_core = restarted(store, clocks)
    with caplog.at_level(logging.ERROR, logger="scheduler_server"):
        tasks = seeded_core.lease("w", 10)
    assert sorted(task.id for task in tasks) == ["user:weibo_pc:1", "user:weibo_pc:3"]
    assert_quarantined(seeded_core, store, bad)
    errors = [record for record in caplog.records if record.levelno == logging.ERROR]
    assert len(errors) == 1 and DAMAGED in errors[0].getMessage() and "quarantine" in errors[0].getMessage()


@pytest.fixture
def store(store: QueueStore, clocks: ManualClocks) -> QueueStore:
    """The conftest store with three tasks seeded through a core."""
    seeded(store, clocks)
    return store


RATE = {
    "scheduler__policy": "rate",
    "scheduler__max_period_s": 86400.0,
    "scheduler__fetch_budget_per_s": 0.01,
}


def test_the_budget_rebalance_at_start_quarantines_instead_of_failing(store: QueueStore, clocks: ManualClocks) -> None:
    bad = damage(store, DAMAGED, "truncated")
    core = restarted(store, clocks, **RATE)
    assert core.rebalance_budget() is not None  # what the daemon runs before it serves
    assert_quarantined(core, store, bad)
    assert len(core.lease("w", 10)) == 2


def test_an_expired_lease_of_a_damaged_record_is_quarantined_by_the_reaper_and_its_report_told_removed(
    store: QueueStore, clocks: ManualClocks
) -> None:
    leases = {task.id: task for task in restarted(store, clocks).lease("w", 10)}
    bad = damage(store, DAMAGED, "garbage")
    core = restarted(store, clocks)
    clocks.advance(31)  # past scheduler.lease_s
    assert core.reap() == 2  # the two others; the damaged one is quarantined, not expired
    assert_quarantined(core, store, bad)
    assert core.counts["inflight"] == 0 and core.counts["pending"] == 2
    late = leases[DAMAGED]
    with pytest.raises(LeaseLostError) as caught:
        core.report([Report(task_id=late.id, lease_token=late.lease_token)])
    assert caught.value.code == "TaskRemoved" and "quarantine" in str(caught.value)


def test_a_report_of_a_damaged_leased_record_quarantines_it_for_good(store: QueueStore, clocks: ManualClocks) -> None:
    """The report is refused (LeaseLost), but the quarantine commits: a call whose every part was refused rolled its
    transaction back, and every report would have met the damage again."""
    leases = {task.id: task for task in restarted(store, clocks).lease("w", 10)}
    bad = damage(store, DAMAGED, "truncated")
    core = restarted(store, clocks)
    late = leases[DAMAGED]
    with pytest.raises(LeaseLostError) as caught:
        core.report([Report(task_id=late.id, lease_token=late.lease_token)])
    assert caught.value.code == "TaskRemoved"
    assert_quarantined(core, store, bad)
    assert core.counts["inflight"] == 2
    other = leases["user:weibo_pc:1"]
    core.report([Report(task_id=other.id, lease_token=other.lease_token)])


def test_status_task_info_and_the_task_list_skip_a_damaged_record(store: QueueStore, clocks: ManualClocks) -> None:
    listing = SchedulerCore.from_settings(make_settings(), store, clocks)
    listing.add(["ecshop:9"], TaskKind.Listing)
    damaged_listing = "listing:ecshop:9"
    with store.transaction() as txn:
        bad_listing = b"\x80\x05"
        txn.put("tasks", damaged_listing.encode(), bad_listing)
    bad = damage(store, DAMAGED, "garbage")
    core = restarted(store, clocks)
    stats = core.stats()
    assert stats["detail"]["listings"] == {} and stats["detail"]["quarantined"] == 1
    assert [row["id"] for row in list_tasks(core, "user:", "", 10)] == ["user:weibo_pc:1", "user:weibo_pc:3"]
    with pytest.MonkeyPatch.context() as patch:  # said without decoding them again (a damaged length: gigabytes)
        patch.setattr("scheduler_server.codec.pickle.loads", lambda data: pytest.fail("decoded again"))
        info = core.task_info(DAMAGED)
    assert info["state"] == "quarantined" and info["quarantined_bytes"] == len(bad)
    assert "quarantine" in info["error"] and "does not decode" in info["error"]
    assert quarantined(store) == {DAMAGED: bad, damaged_listing: bad_listing}
    assert check_consistency(store, queues=core.queues)[1] == []


def test_seed_brings_a_quarantined_target_back_with_a_fresh_state(store: QueueStore, clocks: ManualClocks) -> None:
    damage(store, DAMAGED, "garbage")
    core = restarted(store, clocks)
    assert len(core.lease("w", 10)) == 2
    assert core.add(["weibo_pc:2"], TaskKind.WeiboUser) == 1  # `icecrawler seed 2`
    info = core.task_info(DAMAGED)
    assert info["state"] == "pending" and info["crawls"] == 0 and info["attempts"] == 0
    assert quarantined(store) == {}
    assert core.stats()["detail"]["quarantined"] == 0 and core.counts["tasks"] == 3
    assert check_consistency(store, queues=core.queues)[1] == []
    assert [task.id for task in core.lease("w", 10)] == [DAMAGED]


def test_remove_of_a_damaged_record_quarantines_it(store: QueueStore, clocks: ManualClocks) -> None:
    bad = damage(store, DAMAGED, "truncated")
    core = restarted(store, clocks)
    assert core.remove(["weibo_pc:2"], TaskKind.WeiboUser) == 0
    assert_quarantined(core, store, bad)


def test_the_consistency_check_names_a_damaged_record_instead_of_failing(store: QueueStore) -> None:
    damage(store, DAMAGED, "garbage")
    counts, problems = check_consistency(store)
    assert counts["tasks"] == 2
    assert any(DAMAGED in problem and "does not decode" in problem for problem in problems)


def test_the_quarantine_survives_a_restart(tmp_path: Path, clocks: ManualClocks) -> None:
    store = BdbQueueStore(tmp_path / "db")
    seeded(store, clocks)
    bad = damage(store, DAMAGED, "truncated")
    restarted(store, clocks).lease("w", 10)
    store.close()
    again = open_checked(tmp_path / "db")
    try:
        core = restarted(again, clocks)
        assert core.stats()["detail"]["quarantined"] == 1 and quarantined(again) == {DAMAGED: bad}
    finally:
        again.close()


def test_status_says_how_many_records_are_quarantined() -> None:
    section = {
        "tasks": 3,
        "pending": 3,
        "inflight": 0,
        "done": 0,
        "due_soon": 0,
        "leases_per_min": 0.0,
        "reports_per_min": 0.0,
        "policy": "fixed",
        "quarantined": 0,
    }
    assert "quarantine" not in render_text({"scheduler": section, "storage": {"reachable": False}})
    both = merged([{**section, "quarantined": 1}, {**section, "quarantined": 2}])
    assert "3 task record(s) quarantined" in render_text({"scheduler": both, "storage": {"reachable": False}})


def test_the_quarantined_tasks_gauge_counts_them(store: QueueStore, clocks: ManualClocks) -> None:
    damage(store, DAMAGED, "truncated")
    core = restarted(store, clocks)
    registry = CollectorRegistry()
    SchedulerMetrics(core).register(registry)
    assert "icecrawler_scheduler_quarantined_tasks 0.0" in generate_latest(registry).decode()
    core.lease("w", 10)
    assert "icecrawler_scheduler_quarantined_tasks 1.0" in generate_latest(registry).decode()


@pytest.mark.ice
@pytest.mark.bdb
def test_the_daemon_starts_with_a_fetch_budget_on_a_damaged_record_and_leases_the_others(tmp_path: Path) -> None:
    """The daemon rebalances the budget before it serves: on a record that did not decode, its start failed."""
    budget = {"scheduler__policy": "rate", "scheduler__max_period_s": 86400, "scheduler__fetch_budget_per_s": 0.01}
    with scheduler_daemon(tmp_path, **budget) as daemon, scheduler_proxy(daemon) as prx:
        prx.addUsers(["weibo_pc:1", "weibo_pc:2", "weibo_pc:3"], rpc.crawler().TaskKind.WeiboUser)
        assert daemon.stop() == 0
        store = BdbQueueStore(daemon.db_dir)
        try:
            damage(store, DAMAGED, "truncated")
        finally:
            store.close()
        daemon.start()
        assert sorted(task.id for task in prx.getUsers("w", 10)) == ["user:weibo_pc:1", "user:weibo_pc:3"]
        assert daemon.process is not None
        log_tail = daemon.process.log_tail()
        assert f"task {DAMAGED}: its stored record does not decode" in log_tail


@pytest.mark.bdb
def test_recover_quarantines_a_record_it_cannot_queue(tmp_path: Path, clocks: ManualClocks) -> None:
    """``--recover`` rebuilds the queues from the task records: one that does not decode was dropped, bytes and all."""
    store = BdbQueueStore(tmp_path / "db")
    seeded(store, clocks)
    bad = damage(store, DAMAGED, "garbage")
    store.close()
    salvage(tmp_path / "db", durable=False)
    again = open_checked(tmp_path / "db")
    try:
        assert quarantined(again) == {DAMAGED: bad}
        assert check_consistency(again) == ({"tasks": 2, "pending": 2, "inflight": 0}, [])
        assert restarted(again, clocks).stats()["detail"]["quarantined"] == 1
    finally:
        again.close()


@pytest.mark.bdb
def test_a_database_written_before_the_quarantine_table_existed_opens_and_gets_one(
    tmp_path: Path, clocks: ManualClocks, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The start-up check refuses a database that lost a table file; one too old to have ``quarantine.db`` is not
    one that lost it."""
    with monkeypatch.context() as old_version:
        old_version.setattr("scheduler_server.store.TABLES", ("tasks", "pending", "inflight", "done", "meta"))
        open_checked(tmp_path / "db").close()  # writes the marker: a database is here
    assert not (tmp_path / "db" / "quarantine.db").exists()
    store = open_checked(tmp_path / "db")
    try:
        assert (tmp_path / "db" / "quarantine.db").exists()
        seeded(store, clocks)
        damage(store, DAMAGED, "truncated")
        assert len(restarted(store, clocks).lease("w", 10)) == 2 and list(quarantined(store)) == [DAMAGED]
    finally:
        store.close()


@pytest.mark.bdb
def test_recover_drops_the_open_gap_of_a_record_it_quarantines(tmp_path: Path, clocks: ManualClocks) -> None:
    """``--recover`` moves a record aside as a running core does: its open page-cap gap goes with it, or the restarted
    core counted the quarantined task in ``open_gaps`` for good."""
    store = BdbQueueStore(tmp_path / "db")
    seeded(store, clocks)
    with store.transaction() as txn:
        txn.put("meta", GAP_KEY + DAMAGED.encode(), GAP_VALUE)
    damage(store, DAMAGED, "garbage")
    store.close()
    salvage(tmp_path / "db", durable=False)
    again = open_checked(tmp_path / "db")
    try:
        with again.transaction() as txn:
            assert txn.get("meta", GAP_KEY + DAMAGED.encode()) is None
        core = restarted(again, clocks)
        assert core.open_gaps == set() and core.stats()["detail"]["quarantined"] == 1
    finally:
        again.close()


@pytest.mark.bdb
def test_a_lost_quarantine_file_is_refused_once_it_held_records(tmp_path: Path, clocks: ManualClocks) -> None:
    """Deleting ``quarantine.db`` lost the quarantined bytes and their count without a word: the start-up check
    exempts the file only for a database that never quarantined a record."""
    store = open_checked(tmp_path / "db")
    seeded(store, clocks)
    damage(store, DAMAGED, "truncated")
    restarted(store, clocks).lease("w", 10)
    store.close()
    (tmp_path / "db" / "quarantine.db").unlink()
    with pytest.raises(ServiceError, match=r"quarantine\.db is missing"):
        open_checked(tmp_path / "db")
    assert not (tmp_path / "db" / "quarantine.db").exists()  # the refusal created no empty one
    again = open_checked(tmp_path / "db", recover=True)  # what the refusal offers: the rest is kept
    try:
        core = restarted(again, clocks)
        assert core.counts["tasks"] == 2 and core.stats()["detail"]["quarantined"] == 0
    finally:
        again.close()
    open_checked(tmp_path / "db").close()  # and it starts again as it is


@pytest.mark.bdb
def test_a_quarantine_file_that_never_held_a_record_may_be_missing(tmp_path: Path, clocks: ManualClocks) -> None:
    store = open_checked(tmp_path / "db")
    seeded(store, clocks)
    store.close()
    (tmp_path / "db" / "quarantine.db").unlink()
    open_checked(tmp_path / "db").close()


def test_remove_of_a_quarantined_task_drops_its_bytes_and_clears_the_count(
    store: QueueStore, clocks: ManualClocks, caplog: pytest.LogCaptureFixture
) -> None:
    """Before, ``icecrawler remove`` of a quarantined id did nothing (0 removed): the bytes and the gauge stayed."""
    damage(store, DAMAGED, "garbage")
    core = restarted(store, clocks)
    assert len(core.lease("w", 10)) == 2 and core.gauges()["quarantined"] == 1
    with caplog.at_level(logging.WARNING, logger="scheduler_server"):
        assert core.remove(["weibo_pc:2"], TaskKind.WeiboUser) == 1
    assert quarantined(store) == {}
    assert core.gauges()["quarantined"] == 0 and core.stats()["detail"]["quarantined"] == 0
    assert any(
        record.levelno == logging.WARNING and DAMAGED in record.getMessage() and "dropped" in record.getMessage()
        for record in caplog.records
    )
    assert core.counts["tasks"] == 2 and check_consistency(store, queues=core.queues)[1] == []
    assert core.remove(["weibo_pc:2"], TaskKind.WeiboUser) == 0
    assert restarted(store, clocks).stats()["detail"]["quarantined"] == 0


def test_a_task_both_live_and_quarantined_keeps_the_live_record_at_start(
    store: QueueStore, clocks: ManualClocks, caplog: pytest.LogCaptureFixture
) -> None:
    """The previous release ignores the quarantine table, so a seed under it adds the target again while its old bytes
    stay quarantined: the gauge then read 1 for good. The live record wins; the quarantined bytes go."""
    live = "user:weibo_pc:1"
    with store.transaction() as txn:
        txn.put("quarantine", live.encode(), b"\x80\x05old bytes")
    problems = check_consistency(store)[1]
    assert any(live in problem and "quarantine" in problem for problem in problems)
    with caplog.at_level(logging.WARNING, logger="scheduler_server"):
        core = restarted(store, clocks)
    assert quarantined(store) == {}
    assert core.stats()["detail"]["quarantined"] == 0 and core.gauges()["quarantined"] == 0
    assert core.task_info(live)["state"] == "pending" and core.counts["tasks"] == 3
    assert any(record.levelno == logging.WARNING and live in record.getMessage() for record in caplog.records)
    assert check_consistency(store, queues=core.queues)[1] == []


@pytest.mark.parametrize("error", [MemoryError, RecursionError])
def test_an_error_that_is_not_damage_is_no_reason_to_quarantine(
    monkeypatch: pytest.MonkeyPatch, error: type[BaseException]
) -> None:
    """A record that failed to decode for want of memory (or stack) is healthy: it must not be moved aside."""
    record = TaskRecord(id=DAMAGED, kind="user", source="weibo_pc", target="2")

    def failing(data: bytes) -> object:
        raise error()

    monkeypatch.setattr("scheduler_server.codec.pickle.loads", failing)
    with pytest.raises(error):
        decode_record(DAMAGED.encode(), record.to_bytes())


@pytest.mark.parametrize("how", DAMAGES)
def test_damaged_bytes_still_count_as_undecodable(how: str) -> None:
    raw = TaskRecord(id=DAMAGED, kind="user", source="weibo_pc", target="2").to_bytes()
    bad = raw[: len(raw) // 2] if how == "truncated" else b"\x00\x13 not a pickle \xff" * 3
    with pytest.raises(UndecodableRecord):
        decode_record(DAMAGED.encode(), bad)


def test_a_damaged_length_that_asks_for_too_much_memory_is_damage() -> None:
    """``pickle`` allocates a counted argument before reading it: a damaged 8-byte length raises MemoryError. The
    bytes do not parse as pickle opcodes, so that MemoryError is damage, not a short memory."""
    bad = b"\x80\x05\x8e" + (1 << 60).to_bytes(8, "little") + b"short"
    with pytest.raises(UndecodableRecord, match="MemoryError"):
        decode_record(DAMAGED.encode(), bad)


def test_a_damaged_memo_index_that_asks_for_too_much_memory_is_damage(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stray LONG_BINPUT (a damaged byte that reads as one) makes ``pickle`` grow its memo to the index it names,
    gigabytes, before anything fails: a MemoryError where memory is bounded. The bytes still parse as opcodes, so
    the record counted as healthy and every call that read it failed again. The codec's pickles memoize with MEMOIZE
    only, so an explicit PUT is damage. (``pickle.loads`` stands in for the allocation, which would take the memory.)"""
    raw = TaskRecord(id=DAMAGED, kind="user", source="weibo_pc", target="2").to_bytes()
    first_memo = raw.index(b"\x94") + 1
    bad = raw[:first_memo] + b"r" + (0x7FFFFFF0).to_bytes(4, "little") + raw[first_memo:]

    def short_of_memory(data: bytes) -> object:
        raise MemoryError()

    monkeypatch.setattr("scheduler_server.codec.pickle.loads", short_of_memory)
    with pytest.raises(UndecodableRecord, match="MemoryError"):
        decode_record(DAMAGED.encode(), bad)
    with pytest.raises(MemoryError):  # the same record undamaged: a short memory, not damage
        decode_record(DAMAGED.encode(), raw)
