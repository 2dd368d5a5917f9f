"""One contract suite for every QueueStore (huey's StorageTests mixin): ordering, range scans, rollback."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pytest

from scheduler_server.codec import TaskRecord, decode_time_key, done_value, history_append, history_entries, time_key
from scheduler_server.store import BdbQueueStore, MemoryQueueStore, QueueStore


class StoreContract:
    def make(self, tmp_path: Path) -> QueueStore:
        raise NotImplementedError

    def test_put_get_delete(self, tmp_path: Path) -> None:
        store = self.make(tmp_path)
        with store.transaction() as txn:
            txn.put("tasks", b"a", b"1")
            assert txn.get("tasks", b"a") == b"1"
            assert txn.get("pending", b"a") is None
        with store.transaction() as txn:
            assert txn.delete("tasks", b"a") is True
            assert txn.delete("tasks", b"a") is False
            assert txn.get("tasks", b"a") is None
        store.close()

    def test_scan_is_in_time_order_and_bounded(self, tmp_path: Path) -> None:
        store = self.make(tmp_path)
        times = [5_000, 17, 2**40, 300, 17]
        with store.transaction() as txn:
            for number, ms in enumerate(times):
                txn.put("pending", time_key(ms, f"user:weibo_pc:{number}"), b"")
        with store.transaction() as txn:
            everything = [decode_time_key(key) for key, _ in txn.scan("pending")]
            due = [decode_time_key(key) for key, _ in txn.scan("pending", stop=time_key(301))]
            two = txn.scan("pending", start=time_key(18), limit=2)
            assert txn.count("pending") == 5
        assert [ms for ms, _ in everything] == sorted(times)
        assert due == [(17, "user:weibo_pc:1"), (17, "user:weibo_pc:4"), (300, "user:weibo_pc:3")]
        assert [decode_time_key(key)[0] for key, _ in two] == [300, 5_000]
        store.close()

    def test_exception_rolls_back_every_change(self, tmp_path: Path) -> None:
        store = self.make(tmp_path)
        with store.transaction() as txn:
            txn.put("tasks", b"keep", b"old")
            txn.put("tasks", b"gone", b"x")
        with pytest.raises(RuntimeError), store.transaction() as txn:
            txn.put("tasks", b"keep", b"new")
            txn.delete("tasks", b"gone")
            txn.put("inflight", b"new", b"y")
            raise RuntimeError("crash in the middle")
        with store.transaction() as txn:
            assert txn.get("tasks", b"keep") == b"old"
            assert txn.get("tasks", b"gone") == b"x"
            assert txn.scan("inflight") == []
        store.close()


class TestMemoryStore(StoreContract):
    def make(self, tmp_path: Path) -> QueueStore:
        return MemoryQueueStore()


@pytest.mark.bdb
class TestBdbStore(StoreContract):
    def make(self, tmp_path: Path) -> QueueStore:
        return BdbQueueStore(tmp_path / "env")

    def test_committed_data_survives_reopen(self, tmp_path: Path) -> None:
        store = BdbQueueStore(tmp_path / "env")
        with store.transaction() as txn:
            txn.put("tasks", b"t", b"v")
        store.close()
        again = BdbQueueStore(tmp_path / "env")
        with again.transaction() as txn:
            assert txn.get("tasks", b"t") == b"v"
        again.close()


HISTORY = history_append(b"", 1, 2.0, 3, 4, keep=20)


def test_record_round_trips() -> None:
    record = TaskRecord(id="user:weibo_pc:1", kind="user", source="weibo_pc", target="1", history=HISTORY)
    assert TaskRecord.from_bytes(record.to_bytes()) == record


def test_a_value_that_is_not_a_record_tuple_is_refused() -> None:
    with pytest.raises(ValueError, match="pickled tuple, not a dict"):
        TaskRecord.from_bytes(pickle.dumps({"id": "user:weibo_pc:1"}))


def test_record_tuples_tolerate_appended_fields() -> None:
    """Records are stored as tuples in field order: a shorter one (written before the last fields existed)
    reads back with their defaults, a longer one (from a newer version) without the fields it does not know."""
    record = TaskRecord(
        id="user:weibo_pc:1", kind="user", source="weibo_pc", target="1", discovered=0, created_ms=0, history=HISTORY
    )
    values = pickle.loads(record.to_bytes())
    assert isinstance(values, tuple) and values[0] == "user:weibo_pc:1"
    assert TaskRecord.from_bytes(pickle.dumps(values[:-2])) == record
    assert TaskRecord.from_bytes(pickle.dumps((*values, "from the future"))) == record


def test_history_keeps_the_newest_entries_in_order() -> None:
    history = b""
    for n in range(25):
        history = history_append(history, 1_800_000_000_000 + n, 60.0 * n, n - 1, n, keep=20)
    entries = history_entries(history)
    assert len(entries) == 20 and entries[0] == (1_800_000_000_005, 300.0, 4, 5)
    assert entries[-1] == (1_800_000_000_024, 1440.0, 23, 24)


@pytest.mark.parametrize("worker", ["bench-1", 'wörker "quoted" \\ \n', ""])
@pytest.mark.parametrize(("new", "period_s", "fetches"), [(1, 0.001, 1), (0, 3600.0, 0), (2**40, 60, 1.5)])
def test_done_value_is_the_json_of_the_entry(worker: str, new: int, period_s: float, fetches: float) -> None:
    entry: dict[str, Any] = {
        "outcome": "Ok",
        "new": new,
        "period_s": period_s,
        "worker": worker,
        "fetches": fetches,
        "leased_wall_ms": 1_800_000_000_000,
        "deadline_wall_ms": 1_800_000_030_000,
        "ended_wall_ms": -1,
    }
    assert done_value(*entry.values()) == json.dumps(entry).encode()


def test_time_keys_sort_numerically() -> None:
    keys = [time_key(ms, "x") for ms in (256, 1, 2**33, 255)]
    assert [decode_time_key(key)[0] for key in sorted(keys)] == [1, 255, 256, 2**33]


def test_bdb_log_files_do_not_pile_up_over_a_long_crawl(tmp_path: Path) -> None:
    """Every commit appends to Berkeley DB's log, so a scheduler that runs for months writes far more log than it
    holds data. After each checkpoint (the maintenance thread takes one every tick) the environment removes the
    log files recovery no longer needs (DB_LOG_AUTO_REMOVE): the directory holds the tables and a file or two of
    log, however long the crawl has run."""
    store = BdbQueueStore(tmp_path, durable=False)
    record = bytes(range(256)) * 32  # 8 KiB a commit; with the record it replaces, ten log files of 10 MB in all
    most_logs = 0
    try:
        for cycle in range(6_000):
            with store.transaction() as txn:
                txn.put("tasks", b"task-%d" % (cycle % 50), record)
            if cycle % 250 == 249:
                store.checkpoint()
                most_logs = max(most_logs, len(list(tmp_path.glob("log.*"))))
        with store.transaction() as txn:
            assert txn.count("tasks") == 50
    finally:
        store.close()
    logs = sorted(tmp_path.glob("log.*"))
    assert int(logs[-1].name.split(".")[1]) >= 4, "the churn did not fill several log files"
    assert most_logs <= 2 and len(logs) <= 2, [log.name for log in logs]


@pytest.mark.bdb
def test_tables_and_logs_others_can_read_are_named_once_at_open(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A database created before its files were made 0600 keeps 0640 tables, and ``meta`` now holds the sites'
    refreshes of the logins: opening it says which files, and the chmod, in one WARNING (the mode is left alone:
    a group that reads them may be the operator's choice). A private one says nothing."""
    store = BdbQueueStore(tmp_path)
    with store.transaction() as txn:
        txn.put("meta", b"x", b"y")
    store.close()
    with caplog.at_level("WARNING", logger="scheduler_server.store"):
        BdbQueueStore(tmp_path).close()
    assert caplog.records == []
    for file in (tmp_path / "meta.db", tmp_path / "tasks.db"):
        file.chmod(0o640)
    with caplog.at_level("WARNING", logger="scheduler_server.store"):
        BdbQueueStore(tmp_path).close()
    said = [record.getMessage() for record in caplog.records]
    assert len(said) == 1, said
    assert "meta.db, tasks.db readable by other users" in said[0]
    assert f"chmod 600 {tmp_path / 'meta.db'} {tmp_path / 'tasks.db'}" in said[0]
    assert (tmp_path / "meta.db").stat().st_mode & 0o777 == 0o640
