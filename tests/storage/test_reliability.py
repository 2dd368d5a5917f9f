"""The storage server's files under abuse: one server per spool and store (no stale lock after kill -9), damaged,
emptied or vanished SQLite files refused at start (or salvaged with --recover), a full disk (a declared error to
the caller, the server keeps running and takes writes again once there is space, nothing acknowledged is lost),
and one bad record in a batch rejected alone."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from icecrawler import rpc
from icecrawler.errors import InvalidRecordsError, ServiceError
from storage_server import schema
from storage_server.integrity import check_sqlite_file, check_store_file, journal_of, mark_created
from storage_server.service import StorageService
from storage_server.spool import MemorySpool
from storage_server.stores import MemoryStore, SqliteStore
from tests.helpers import killed_midway, refused_as_half_rebuilt, refused_start, salvage_killed_at, wait_for
from tests.storage.conftest import StorageServerRunner, make_post, make_review
from tests.tmpfs import fill, small_tmpfs

ROWS = 3000
REPO = Path(__file__).resolve().parents[2]


def filled_store(path: Path, rows: int = ROWS) -> None:
    """An embedded store with ``rows`` reviews, closed, with its marker (as a server leaves it)."""
    store = SqliteStore(path)
    store.put(schema.REVIEW, [schema.review_row(make_review(f"r{n}", minute=n % 60)) for n in range(rows)])
    store.close()
    mark_created(path)


def corrupt_middle_page(path: Path) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page = int(conn.execute("PRAGMA page_size").fetchone()[0])
    data = bytearray(path.read_bytes())
    middle = (len(data) // page // 2) * page
    data[middle : middle + page] = b"\x5a" * page
    path.write_bytes(bytes(data))


def start_storage(tmp: Path, store: Path, spool: Path, *extra: str) -> str:
    """``icecrawler storage`` on these files, which must refuse to start: its one error line (``refused_start``)."""
    return refused_start(
        "storage", tmp, "--set", f"storage.embedded.path={store}", "--set", f"storage.spool_dir={spool}", *extra
    )


# --- one store, one server ------------------------------------------------------------------------------------------


@pytest.mark.ice
def test_a_second_storage_server_on_the_same_files_refuses_and_a_killed_ones_lock_is_not_stale(
    storage_server: Callable[..., StorageServerRunner], client_comm: Any, tmp_path: Path
) -> None:
    server = storage_server()
    store, spool = server.assignments["storage.embedded.path"], server.assignments["storage.spool_dir"]
    refused = start_storage(tmp_path, Path(store), Path(spool))
    assert f"is in use by storage server pid {server.process.pid if server.process else 0}" in refused
    other_spool = start_storage(tmp_path, Path(store), tmp_path / "other-spool")  # same store, own spool
    assert "in use by storage server" in other_spool
    proxy = server.proxy(client_comm)
    assert proxy.writeReviews([rpc.review_to_slice(make_review("a"))]).stored == 1  # the first one is unharmed
    server.kill9()
    server.start()  # the kernel dropped the dead server's lock
    assert proxy.stats().reviews == 1


# --- damaged, emptied, vanished ---------------------------------------------------------------------------------


def test_a_store_with_a_corrupt_page_refuses_and_recover_salvages_it_aside(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    filled_store(path)
    corrupt_middle_page(path)
    with pytest.raises(ServiceError) as refused:
        check_store_file(path, recover=False)
    text = str(refused.value)
    assert "is damaged" in text and "--recover" in text and "\n" not in text
    check_store_file(path, recover=True)
    aside = list(tmp_path.glob("store.sqlite3.damaged-????????T??????"))
    assert len(aside) == 1, "the damaged file is kept, never deleted"
    salvaged = SqliteStore(path)
    try:
        assert 0 < salvaged.count(schema.REVIEW) < ROWS
        assert sum(1 for _ in salvaged.scan(schema.REVIEW)) == salvaged.count(schema.REVIEW)  # a sound file again
    finally:
        salvaged.close()
    check_store_file(path, recover=False)


@pytest.mark.parametrize("point", ["moving", "copying"])
def test_a_recover_killed_midway_is_refused_until_the_next_recover_finishes_it(tmp_path: Path, point: str) -> None:
    """kill -9 while --recover moves a damaged store aside, or while it copies the rows into the new file: the next
    start refuses in one line, and the next --recover finishes the job with every row a whole salvage keeps.
    Before, a stop while copying left a new file with part of the rows, which passed the checks and was served."""
    path = tmp_path / "store.sqlite3"
    filled_store(path)
    corrupt_middle_page(path)
    reference = tmp_path / "reference" / "store.sqlite3"
    reference.parent.mkdir()
    reference.write_bytes(path.read_bytes())
    check_store_file(reference, recover=True)  # the same salvage, never stopped
    script = salvage_killed_at(
        point,
        "storage_server.integrity",
        "_salvage_table",
        "integrity.check_store_file(pathlib.Path(sys.argv[1]), True)",
    )
    killed_midway(script, str(path), str(REPO))
    refused_as_half_rebuilt(lambda: check_store_file(path, recover=False))
    check_store_file(path, recover=True)
    check_store_file(path, recover=False)  # finished: it passes from now on
    counts = []
    for store_path in (path, reference):
        store = SqliteStore(store_path)
        try:
            counts.append(store.count(schema.REVIEW))
        finally:
            store.close()
    assert 0 < counts[0] == counts[1] < ROWS
    assert len(list(tmp_path.glob("store.sqlite3.damaged-????????T??????"))) == 1
    assert not journal_of(path).exists()


@pytest.mark.parametrize("how", ["emptied", "deleted"])
def test_a_store_that_held_records_and_is_gone_refuses_and_recover_begins_anew(tmp_path: Path, how: str) -> None:
    path = tmp_path / "store.sqlite3"
    filled_store(path)
    if how == "emptied":
        path.write_bytes(b"")
    else:
        path.unlink()
    with pytest.raises(ServiceError, match=r"is (empty \(0 bytes\)|missing), but it was created there"):
        check_store_file(path, recover=False)
    check_store_file(path, recover=True)
    check_store_file(path, recover=False)  # a new store may now be created there


def test_a_new_store_and_an_intact_one_pass(tmp_path: Path) -> None:
    check_store_file(tmp_path / "new.sqlite3", recover=False)
    filled_store(tmp_path / "ok.sqlite3", 50)
    check_store_file(tmp_path / "ok.sqlite3", recover=False)


def test_a_deleted_spool_refuses(tmp_path: Path) -> None:
    spool = tmp_path / "spool.sqlite3"
    with sqlite3.connect(spool) as conn:
        conn.execute("CREATE TABLE spool (seq INTEGER PRIMARY KEY AUTOINCREMENT, records INTEGER, blob BLOB)")
    mark_created(spool)
    spool.unlink()
    with pytest.raises(ServiceError, match=r"the spool .* is missing, but it was created there"):
        check_store_file(spool, recover=False, what="the spool")


def test_a_corrupt_spool_refuses(tmp_path: Path) -> None:
    spool = tmp_path / "spool.sqlite3"
    with sqlite3.connect(spool) as conn:
        conn.execute("CREATE TABLE spool (seq INTEGER PRIMARY KEY AUTOINCREMENT, records INTEGER, blob BLOB)")
        conn.executemany("INSERT INTO spool (records, blob) VALUES (1, ?)", [(b"x" * 3000,) for _ in range(400)])
    corrupt_middle_page(spool)
    with pytest.raises(ServiceError, match=r"the spool .* is damaged"):
        check_sqlite_file(spool, "the spool", recover=False)


@pytest.mark.ice
def test_the_server_refuses_a_corrupt_store_in_one_line_and_starts_with_recover(tmp_path: Path) -> None:
    store, spool = tmp_path / "store.sqlite3", tmp_path / "spool"
    filled_store(store)
    corrupt_middle_page(store)
    refused = start_storage(tmp_path, store, spool)
    assert "is damaged" in refused and "--recover" in refused
    runner = StorageServerRunner(
        tmp_path / "recovered",
        {"storage.embedded.path": str(store), "storage.spool_dir": str(spool), "storage.recover": "true"},
    )
    runner.start()
    try:
        with rpc.communicator() as comm:
            assert 0 < runner.proxy(comm).stats().reviews < ROWS
    finally:
        runner.stop()
    assert "--recover" in runner.process.log_tail(50) if runner.process else False


# --- a full disk ----------------------------------------------------------------------------------------------------


class BigReviewWriter:
    """Writes batches of 100 reviews of 1.2 KB each (a small tmpfs fills in a few dozen) and counts what the server
    acknowledged, stored or spooled: after any outage, that many must be there."""

    def __init__(self, proxy: Any) -> None:
        self.proxy = proxy
        self.acknowledged = 0

    def write(self, batch: int) -> Any:
        reviews = [rpc.review_to_slice(make_review(f"b{batch}-{n}", content="好" * 400)) for n in range(100)]
        ack = self.proxy.writeReviews(reviews)
        self.acknowledged += ack.stored + ack.spooled
        return ack


@pytest.mark.ice
def test_a_full_disk_is_a_declared_error_the_server_survives_and_takes_writes_again(tmp_path: Path) -> None:
    C = rpc.crawler()
    with small_tmpfs(tmp_path / "fs", 16) as fs:
        runner = StorageServerRunner(
            tmp_path / "server",
            {"storage.embedded.path": str(fs / "store.sqlite3"), "storage.spool_dir": str(fs / "spool")},
        )
        runner.start()
        try:
            with rpc.communicator() as comm:
                proxy = runner.proxy(comm)
                writer = BigReviewWriter(proxy)
                write = writer.write
                write(0)
                filler = fill(fs)
                refusal = None
                for batch in range(1, 200):
                    try:
                        write(batch)
                    except C.StorageUnavailable as exc:
                        refusal = exc
                        break
                assert refusal is not None, "the disk never filled up"
                assert "full" in refusal.message or "space" in refusal.message
                assert runner.process is not None and runner.process.alive()
                for batch in range(200, 205):  # refused as long as the disk is full: said once, not per batch
                    with pytest.raises(C.StorageUnavailable):
                        write(batch)
                tail = runner.process.log_tail
                refusing = [line for line in tail(300).splitlines() if "refusing writes" in line]
                assert len(refusing) == 1 and "disk is full" in refusing[0], tail()
                filler.unlink()
                write(1000)  # space is back
                assert "taking writes again" in tail(300)
                runner.kill9()
                runner.start()
                stats = proxy.stats()
                assert stats.reviews + stats.spoolDepth == writer.acknowledged  # nothing acknowledged was lost
        finally:
            runner.stop()
        log = runner.process.log_tail(300) if runner.process else ""
        assert "Traceback" not in log


@pytest.mark.ice
def test_a_spool_on_a_full_disk_drains_once_there_is_room_again(tmp_path: Path) -> None:
    """The spool on a file system of its own fills while it holds records the store has not taken. Once the store
    takes them again, the replay cannot delete the entries it moved (a delete writes SQLite's WAL too): it says
    so and keeps trying, and drains the spool once there is room, every acknowledged record stored once."""
    with small_tmpfs(tmp_path / "store", 8) as store_fs, small_tmpfs(tmp_path / "spool", 8) as spool_fs:
        runner = StorageServerRunner(
            tmp_path / "server",
            {"storage.embedded.path": str(store_fs / "store.sqlite3"), "storage.spool_dir": str(spool_fs / "spool")},
        )
        runner.start()
        assert runner.process is not None
        log = runner.process.log_tail
        try:
            with rpc.communicator() as comm:
                proxy = runner.proxy(comm)
                writer = BigReviewWriter(proxy)
                write = writer.write
                assert write(0).stored == 100
                store_filler = fill(store_fs)
                assert all(write(batch).spooled == 100 for batch in range(1, 6))  # the store is full: spooled
                spool_filler = fill(spool_fs)
                store_filler.unlink()  # the store takes writes again; the spool is full
                wait_for(
                    lambda: "cannot remove a replayed entry" in log(400) or "Traceback" in log(400),
                    lambda: f"the replay never reached the full spool:\n{log()}",
                )
                assert runner.process.alive()
                spool_filler.unlink()
                wait_for(
                    lambda: proxy.stats().spoolDepth == 0,
                    lambda: f"the spool never drained ({proxy.stats().spoolDepth} records left):\n{log()}",
                )
                assert proxy.stats().reviews == writer.acknowledged == 600  # each acknowledged record, once
                assert write(6).stored == 100  # straight to the store again
        finally:
            runner.stop()
        assert "Traceback" not in log(400)
        assert log(400).count("spool replay held up") == 1  # said once, not at every retry


@pytest.mark.ice
@pytest.mark.parametrize("recover", [False, True])
def test_a_store_on_a_full_disk_at_start_is_refused_as_a_full_disk_not_as_damage(tmp_path: Path, recover: bool) -> None:
    """SQLite cannot open a file in WAL mode without room for its shared-memory file, and calls that a "disk I/O
    error": the refusal must say the disk is full (not that the store is damaged, whose cure, --recover, needs room
    for a second copy), move nothing aside, and the server must start on the same files once there is space."""
    with small_tmpfs(tmp_path / "fs", 16) as fs:
        store, spool = fs / "store.sqlite3", fs / "spool"
        filled_store(store)
        filler = fill(fs)
        refused = start_storage(tmp_path, store, spool, *(["--recover"] if recover else []))
        assert "is full" in refused and "Free some space" in refused and "is damaged" not in refused, refused
        assert not list(fs.glob("store.sqlite3.damaged-*"))  # nothing moved aside
        filler.unlink()
        runner = StorageServerRunner(
            tmp_path / "server", {"storage.embedded.path": str(store), "storage.spool_dir": str(spool)}
        )
        runner.start()
        try:
            with rpc.communicator() as comm:
                assert runner.proxy(comm).stats().reviews == ROWS
        finally:
            runner.stop()


# --- one bad record ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "change", [{"text": "好 \ud800 好"}, {"user_name": "\udfff"}, {"pictures": ["https://x/\ud800"]}]
)
def test_a_post_with_a_lone_surrogate_is_rejected_alone_with_the_same_reason_on_both_paths(
    change: dict[str, Any],
) -> None:
    service = StorageService(MemoryStore(), MemorySpool(), max_text_chars=1000, batch_limit=100, write_timeout_s=5)
    try:
        posts = [make_post(n + 1) for n in range(5)]
        posts[3] = make_post(4, **change)
        with pytest.raises(InvalidRecordsError) as rejected:
            service.write_posts(posts)
        assert [index for index, _ in rejected.value.rejected] == [3] and rejected.value.stored == 4
        assert "lone surrogate" in rejected.value.rejected[0][1]
        assert schema.checked_post_row(posts[3], 1000) == schema.validate_post(posts[3], 1000)
        assert service.store.count(schema.WEIBO) == 4
    finally:
        service.close()


def test_a_review_with_a_lone_surrogate_is_rejected_alone() -> None:
    service = StorageService(MemoryStore(), MemorySpool(), max_text_chars=1000, batch_limit=100, write_timeout_s=5)
    try:
        reviews = [make_review(f"r{n}", content="好评" if n != 1 else "好\ud800评") for n in range(3)]
        with pytest.raises(InvalidRecordsError) as rejected:
            service.write_reviews(reviews)
        assert [index for index, _ in rejected.value.rejected] == [1]
        assert service.store.count(schema.REVIEW) == 2
    finally:
        service.close()
