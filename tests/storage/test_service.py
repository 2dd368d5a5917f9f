"""The storage core without Ice: validation outcomes, spooling when the backend is down or slow, ordered replay."""

from __future__ import annotations

import logging
import re
import shutil
import sqlite3
import subprocess
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from icecrawler.errors import InvalidArgumentError, InvalidRecordsError, StorageUnavailableError
from icecrawler_cli.commands.status import render_storage
from storage_server import integrity, schema
from storage_server.service import StorageService, WriteResult
from storage_server.spool import WAL_SIZE_LIMIT, MemorySpool, SpoolQueue, SqliteSpool
from storage_server.stores import MemoryStore
from tests.requirements import skip_or_fail
from tests.storage.conftest import make_post, make_review


class BlockingStore(MemoryStore):
    """A backend that hangs on put until released (a slow HBase)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def put(self, table: str, rows: Sequence[schema.Row]) -> None:
        if not self.release.wait(timeout=30.0):
            raise StorageUnavailableError("never released")
        super().put(table, rows)


def service_on(store: MemoryStore, spool: SpoolQueue | None = None, timeout_s: float = 5.0) -> StorageService:
    return StorageService(
        store, spool or MemorySpool(), max_text_chars=1000, batch_limit=100, write_timeout_s=timeout_s
    )


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore()


@pytest.fixture
def service(store: MemoryStore) -> Iterator[StorageService]:
    service = service_on(store)
    yield service
    service.close()


def test_healthy_backend_stores_directly(service: StorageService, store: MemoryStore) -> None:
    result = service.write_posts([make_post(1), make_post(2)])
    assert (result.stored, result.spooled) == (2, 0)
    assert service.write_reviews([make_review("a")]).stored == 1
    stats = service.stats()
    assert (stats.posts, stats.reviews, stats.spool_depth, stats.records_accepted) == (2, 1, 0, 3)
    assert stats.backend == "memory" and stats.detail["backend_up"] is True


def test_invalid_records_are_named_and_the_rest_is_stored(service: StorageService, store: MemoryStore) -> None:
    batch = [make_post(1), make_post(0), make_post(2, created_at="soon"), make_post(3)]
    with pytest.raises(InvalidRecordsError) as caught:
        service.write_posts(batch)
    assert [index for index, _ in caught.value.rejected] == [1, 2]
    assert "id=0" in caught.value.rejected[0][1] and "createdAt" in caught.value.rejected[1][1]
    assert caught.value.stored == 2
    assert sorted(int(row.columns["id"]) for row in store.scan(schema.WEIBO)) == [1, 3]
    assert service.stats().records_rejected == 2


def test_empty_and_oversized_batches_change_nothing(service: StorageService, store: MemoryStore) -> None:
    with pytest.raises(InvalidArgumentError) as empty:
        service.write_reviews([])
    assert empty.value.code == "EmptyBatch"
    with pytest.raises(InvalidArgumentError) as big:
        service.write_posts([make_post(i) for i in range(1, 102)])
    assert big.value.code == "BatchTooLarge"
    assert store.count(schema.WEIBO) == 0


def test_down_backend_spools_then_replays_in_order(service: StorageService, store: MemoryStore) -> None:
    store.down = True
    first = service.write_posts([make_post(1, likes=1)])
    second = service.write_posts([make_post(1, likes=2), make_post(2)])  # same post, newer counters
    assert (first.spooled, second.spooled) == (1, 2)
    assert service.stats().spool_depth == 3
    assert service.stats().detail["backend_up"] is False
    store.down = False
    assert service.wait_drained(10.0)
    rows = list(store.scan(schema.WEIBO))
    assert len(rows) == 2
    assert next(row for row in rows if row.columns["id"] == 1).columns["likes"] == 2  # replayed oldest first
    assert service.stats().detail["records_replayed"] == 3


def test_writes_queue_behind_a_non_empty_spool(service: StorageService, store: MemoryStore) -> None:
    store.down = True
    service.write_posts([make_post(1, likes=1)])
    store.down = False
    # a write arriving while older records wait must not overtake them: it is spooled too (or lands after replay)
    result = service.write_posts([make_post(1, likes=2)])
    assert result.stored + result.spooled == 1
    assert service.wait_drained(10.0)
    assert next(store.scan(schema.WEIBO)).columns["likes"] == 2


def test_slow_backend_is_bounded_by_write_timeout() -> None:
    store = BlockingStore()
    service = service_on(store, timeout_s=0.2)
    try:
        result = service.write_posts([make_post(1)])
        assert (result.stored, result.spooled) == (0, 1)
        store.release.set()
        assert service.wait_drained(10.0)
        assert store.count(schema.WEIBO) == 1
    finally:
        store.release.set()
        service.close()


def test_no_backend_and_no_spool_means_unavailable_and_nothing_acknowledged(store: MemoryStore) -> None:
    spool = MemorySpool()
    service = service_on(store, spool)
    try:
        store.down = True
        spool.broken = True
        with pytest.raises(StorageUnavailableError):
            service.write_posts([make_post(1)])
        assert service.stats().records_accepted == 0
    finally:
        service.close()


class GatedStore(MemoryStore):
    """A backend whose put fails at once while down, else waits until ``release`` (``entered`` says one waits)."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()

    def put(self, table: str, rows: Sequence[schema.Row]) -> None:
        self._check_up()
        self.entered.set()
        if not self.release.wait(timeout=30.0):
            raise StorageUnavailableError("never released")
        super().put(table, rows)


def lines(caplog: pytest.LogCaptureFixture, words: str) -> list[str]:
    return [record.getMessage() for record in caplog.records if words in record.getMessage()]


def test_a_new_refusal_after_a_recovery_is_logged_at_once_and_counted_afresh(
    store: MemoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    """The refusals' throttle starts afresh once writes are taken again: a second full-disk episode within the
    minute went unlogged, and its line's count included the first episode's batches."""
    spool = MemorySpool()
    service = service_on(store, spool)
    try:
        with caplog.at_level(logging.INFO, logger="storage_server.service"):
            store.down = spool.broken = True
            for _ in range(3):
                with pytest.raises(StorageUnavailableError):
                    service.write_posts([make_post(1)])
            store.down = spool.broken = False
            service.write_posts([make_post(2)])
            store.down = spool.broken = True
            with pytest.raises(StorageUnavailableError):
                service.write_posts([make_post(3)])
        refusing = lines(caplog, "refusing writes")
        assert len(refusing) == 2, caplog.text
        assert "more batches refused" not in refusing[1]
        assert len(lines(caplog, "taking writes again")) == 1
    finally:
        service.close()


def test_a_batch_begun_before_a_refusal_does_not_say_writes_are_taken_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A batch the backend was still writing when another one was refused proves nothing about the refusal: it must
    not log "taking writes again" while the spool still cannot take a batch; the first batch begun after does."""
    store, spool = GatedStore(), MemorySpool()
    service = service_on(store, spool, timeout_s=30.0)
    try:
        with caplog.at_level(logging.INFO, logger="storage_server.service"):
            earlier = threading.Thread(target=service.write_posts, args=([make_post(1)],))
            earlier.start()
            assert store.entered.wait(10.0)
            store.down = spool.broken = True
            with pytest.raises(StorageUnavailableError):
                service.write_posts([make_post(2)])
            store.down = False
            store.release.set()
            earlier.join(timeout=10.0)
            assert not earlier.is_alive() and store.count(schema.WEIBO) == 1
            assert lines(caplog, "taking writes again") == [], caplog.text
            spool.broken = False
            service.write_posts([make_post(3)])
        assert len(lines(caplog, "taking writes again")) == 1
    finally:
        store.release.set()
        service.close()


def test_a_backend_outage_that_spooled_nothing_ends_with_the_next_stored_batch(store: MemoryStore) -> None:
    """The backend failed while the spool could not take the batch either: nothing was spooled, so no replay ever
    drained a spool after it, and the server called its backend down (``backend_up``, the metric, ``stats``) for
    good, though every batch since went straight to it."""
    spool = MemorySpool()
    service = service_on(store, spool)
    try:
        store.down = spool.broken = True
        with pytest.raises(StorageUnavailableError):
            service.write_posts([make_post(1)])
        assert service.backend_up() is False
        store.down = spool.broken = False
        assert service.write_posts([make_post(2)]).stored == 1
        assert service.backend_up() is True
        assert service.stats().detail["last_backend_error"] == ""
    finally:
        service.close()


def test_sqlite_spool_survives_a_restart(tmp_path: Path, store: MemoryStore) -> None:
    store.down = True
    service = service_on(store, SqliteSpool(tmp_path))
    service.write_reviews([make_review("a"), make_review("b")])
    service.close()  # the process goes away with records still spooled
    store.down = False
    reopened = service_on(store, SqliteSpool(tmp_path))
    try:
        assert reopened.wait_drained(10.0)
        assert sorted(str(row.columns["id"]) for row in store.scan(schema.REVIEW)) == ["a", "b"]
    finally:
        reopened.close()


def test_a_drained_spool_gives_its_disk_back(tmp_path: Path, store: MemoryStore) -> None:
    """SQLite keeps a file at its largest size: a spool that held a long outage's records kept that size once
    drained, for good, and each storage backup copied all of it. Once empty, it shrinks back to a few pages."""
    spool_dir = tmp_path / "spool"
    store.down = True
    service = StorageService(store, SqliteSpool(spool_dir), max_text_chars=100_000, batch_limit=100, write_timeout_s=5)
    try:
        text = "评论" * 30_000  # 60 000 characters, about 180 KB as UTF-8
        for batch in range(10):
            service.write_reviews([make_review(f"r{batch}-{n}", content=text) for n in range(10)])
        spool_file = spool_dir / "spool.sqlite3"
        outage_size = spool_file.stat().st_size
        assert outage_size > 10 << 20, outage_size
        store.down = False
        assert service.wait_drained(60.0)
        assert store.count(schema.REVIEW) == 100
        # While the server runs on: the file is back to a few pages, its write-ahead log at most WAL_SIZE_LIMIT.
        assert spool_file.stat().st_size < 1 << 20
        assert sum(path.stat().st_size for path in spool_dir.glob("*-wal")) <= WAL_SIZE_LIMIT
    finally:
        service.close()
    kept = {path.name: path.stat().st_size for path in spool_dir.iterdir()}
    assert sum(kept.values()) < 1 << 20, kept
    backup = tmp_path / "backup"
    integrity.backup_files([spool_file], backup)
    assert (backup / spool_file.name).stat().st_size < 1 << 20


class UninterruptibleStore(MemoryStore):
    """A backend whose ``interrupt`` raises (as HBase's did when a closing thread raced it), and that says whether
    it was closed."""

    def __init__(self) -> None:
        super().__init__()
        self.closed = False

    def interrupt(self) -> None:
        raise AttributeError("'NoneType' object has no attribute 'close'")

    def close(self) -> None:
        self.closed = True
        super().close()


class ClosingSpool(MemorySpool):
    """A spool that says whether it was closed."""

    closed = False

    def close(self) -> None:
        self.closed = True
        super().close()


def test_a_failing_interrupt_does_not_cut_the_stop_short(caplog: pytest.LogCaptureFixture) -> None:
    """Before, an error from the store's ``interrupt`` left ``close`` at once: the replay not joined, the pools
    not shut, the store and the spool not closed, and the storage daemon exited 1."""
    store, spool = UninterruptibleStore(), ClosingSpool()
    service = service_on(store, spool)
    with caplog.at_level(logging.ERROR, logger="storage_server.service"):
        service.close()
    assert store.closed and spool.closed
    assert any("interrupting the calls under way failed" in record.getMessage() for record in caplog.records)


def test_an_unreadable_spool_entry_is_set_aside_and_the_rest_replays(
    tmp_path: Path, store: MemoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    """An entry the replay cannot decode (damaged on disk: SQLite's checks read the pages, not what a blob says, so a
    salvage by --recover can copy one) failed the replay at every try, and since new writes queue behind a non-empty
    spool, nothing reached the backend again. It is set aside in the spool file, kept as it was, with an ERROR; the
    entries after it replay, and writes go straight to the backend again."""
    good = [make_review(f"g{n}") for n in range(2)]
    spool = SqliteSpool(tmp_path)
    damaged = [
        b"\x00\x9f not JSON",
        b'{"table": "review", "rows": [["zz", {}]]}',  # a key that is not hex
        b'{"table": "review", "rows": [["00", {"id": "x"}]]}',  # fields missing
        b'{"table": "users", "rows": []}',
        b'{"table": "review", "rows": [["00", {"id": ["not", "text"], "product_id": "1", "source": "", "user": "", '
        b'"content": "", "score": 5, "created_at": "", "fetched_at": ""}]]}',  # a field of the wrong type
    ]
    spool.append(damaged[0], 3)
    spool.append(schema.encode_rows(schema.REVIEW, [schema.review_row(review) for review in good]), 2)
    for blob in damaged[1:]:
        spool.append(blob, 1)
    service = service_on(store, spool)
    try:
        assert service.wait_drained(30.0)
        assert sorted(str(row.columns["id"]) for row in store.scan(schema.REVIEW)) == ["g0", "g1"]
        assert service.write_reviews([make_review("new")]) == WriteResult(stored=1, spooled=0)
        assert service.stats().detail["records_set_aside"] == 7
    finally:
        service.close()
    errors = [record for record in caplog.records if record.levelno == logging.ERROR]
    assert len(errors) == len(damaged) and all("set aside" in record.getMessage() for record in errors)
    with sqlite3.connect(tmp_path / "spool.sqlite3") as conn:  # kept as they were, for an operator to look at
        assert [bytes(row[0]) for row in conn.execute("SELECT blob FROM unreadable ORDER BY seq")] == damaged
    reopened = SqliteSpool(tmp_path)
    assert reopened.depth() == 0 and reopened.oldest() is None
    reopened.close()


def test_entries_set_aside_are_counted_from_the_spool_file_after_a_restart(
    tmp_path: Path, store: MemoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    """``records_set_aside`` was a counter of the running server: after a restart nothing showed the entries waiting
    in ``unreadable`` for an operator. The start logs one WARNING naming the spool file and how many there are, and
    ``stats()`` (``icecrawler status``) reads the table."""
    spool = SqliteSpool(tmp_path)
    spool.append(b"\x00 not JSON", 3)
    spool.append(b'{"table": "users", "rows": []}', 1)
    service = service_on(store, spool)
    try:
        assert service.wait_drained(30.0)
    finally:
        service.close()
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        service = service_on(store, SqliteSpool(tmp_path))
    try:
        stats = service.stats()
    finally:
        service.close()
    assert stats.detail["records_set_aside"] == 4 and stats.detail["entries_set_aside"] == 2
    warnings = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert str(tmp_path / "spool.sqlite3") in warnings[0] and "2 entries (4 records)" in warnings[0]
    said = "\n".join(render_storage({"reachable": True, **vars(stats), "spool_depth": 0, **stats.detail}))
    assert "2 spool entries (4 records) set aside" in said


def _spool_files_open(directory: Path) -> list[str]:
    """The files of ``directory`` this process holds open (its descriptors in /proc)."""
    held = []
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = fd.readlink()
        except OSError:
            continue
        if target.parent == directory:
            held.append(target.name)
    return held


def test_a_set_aside_table_that_cannot_be_read_leaves_the_count_unknown_not_the_start_failed(
    tmp_path: Path, store: MemoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    """A spool file whose ``unreadable`` table could not be read (re-made by hand without its columns) stopped the
    storage server's start ("cannot count the set-aside entries"), though the spool itself was sound: the count is
    only for the log. The start goes on with a WARNING that the count is unknown, the spool takes and replays
    entries, and ``stats()`` says -1 ("unknown") as it did."""
    SqliteSpool(tmp_path).close()
    conn = sqlite3.connect(tmp_path / "spool.sqlite3")
    conn.execute("CREATE TABLE unreadable (seq INTEGER PRIMARY KEY)")  # no records column: every count fails
    conn.close()
    with caplog.at_level(logging.WARNING):
        spool = SqliteSpool(tmp_path)
    service = service_on(store, spool)
    try:
        spool.append(schema.encode_rows(schema.REVIEW, [schema.review_row(make_review("kept"))]), 1)
        assert service.wait_drained(30.0)
        stats = service.stats()
    finally:
        service.close()
    assert store.count(schema.REVIEW) == 1
    assert stats.detail["entries_set_aside"] == -1 and stats.detail["records_set_aside"] == -1
    warnings = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert len(warnings) == 1 and "unknown" in warnings[0] and "records" in warnings[0], warnings
    assert str(tmp_path / "spool.sqlite3") in warnings[0]


def test_a_spool_that_fails_to_open_leaves_no_file_open(tmp_path: Path) -> None:
    """A spool file its start cannot read (a ``spool`` table without its columns) failed the start with its
    connection left open, held by the error's traceback (a supervisor retrying the start in one process piles them
    up): it is closed on every failure path."""
    conn = sqlite3.connect(tmp_path / "spool.sqlite3")
    conn.execute("CREATE TABLE spool (seq INTEGER PRIMARY KEY)")
    conn.close()
    with pytest.raises(StorageUnavailableError, match="cannot open the spool") as info:
        SqliteSpool(tmp_path)
    assert info.value.__traceback__ is not None  # what held the connection is still there
    assert _spool_files_open(tmp_path) == []


def _set_aside_commands() -> tuple[str, str, str]:
    """docs/STORAGE.md's commands for entries set aside: (inspect and export, put back, give up)."""
    text = (Path(__file__).parents[2] / "docs" / "STORAGE.md").read_text(encoding="utf-8")
    section = text.split("### Entries set aside", 1)[1].split("\n## ", 1)[0]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    block = block.replace("cd /var/lib/icecrawler/storage/spool\n", "")
    export, put_back = block.split("# repair entry-12.json, then, with the storage server stopped:\n")
    give_up = re.search(r'`(sqlite3 spool\.sqlite3 "DELETE FROM unreadable WHERE seq = 13")`', section)
    assert give_up is not None
    return export, put_back, give_up.group(1)


def test_the_documented_statements_repair_and_put_back_an_entry_set_aside(tmp_path: Path, store: MemoryStore) -> None:
    """An operator follows docs/STORAGE.md: lists the entries set aside, writes entry 12 to a file, repairs it, puts
    it back with the server stopped and gives entry 13 up; the next start replays entry 12 and nothing is left."""
    if shutil.which("sqlite3") is None:
        skip_or_fail("the sqlite3 shell is not installed (scripts/bootstrap.sh installs it)")
    export, put_back, give_up = _set_aside_commands()
    spool = SqliteSpool(tmp_path)
    for n in range(11):
        spool.append(schema.encode_rows(schema.REVIEW, [schema.review_row(make_review(f"g{n}"))]), 1)
    repaired = schema.encode_rows(schema.REVIEW, [schema.review_row(make_review(f"r{n}")) for n in range(3)])
    spool.append(b"\x00" + repaired, 3)  # seq 12
    spool.append(b"\x9f garbage", 2)  # seq 13
    service = service_on(store, spool)
    try:
        assert service.wait_drained(30.0)
    finally:
        service.close()
    listed = subprocess.run(["bash", "-ec", export], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert [line.split("|")[:2] for line in listed.stdout.splitlines()[:2]] == [["12", "3"], ["13", "2"]]
    assert (tmp_path / "entry-12.json").read_bytes() == b"\x00" + repaired
    unrepaired = subprocess.run(["bash", "-ec", put_back], cwd=tmp_path, capture_output=True, text=True)
    assert unrepaired.returncode != 0 and "JSON" in unrepaired.stderr  # not JSON yet: nothing moved
    (tmp_path / "entry-12.json").write_bytes(repaired)  # the repair
    subprocess.run(["bash", "-ec", put_back], cwd=tmp_path, check=True)
    subprocess.run(["bash", "-ec", give_up], cwd=tmp_path, check=True)
    service = service_on(store, SqliteSpool(tmp_path))
    try:
        assert service.wait_drained(30.0)
        stats = service.stats()
    finally:
        service.close()
    assert sorted(str(row.columns["id"]) for row in store.scan(schema.REVIEW)) == sorted(
        [f"g{n}" for n in range(11)] + ["r0", "r1", "r2"]
    )
    assert stats.detail["entries_set_aside"] == 0 and stats.detail["records_set_aside"] == 0
    assert stats.detail["records_replayed"] == 3
