"""One contract suite run against every RecordStore: memory, embedded SQLite and the real HBase."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from icecrawler.errors import StorageUnavailableError
from icecrawler_local.hbase_local import LocalHBase
from storage_server import schema
from storage_server.hbase_store import HBaseStore
from storage_server.service import StorageService
from storage_server.spool import MemorySpool
from storage_server.stores import WAL_SIZE_LIMIT, MemoryStore, RecordStore, SqliteStore
from tests.storage.conftest import BIG_ID, USER, make_post, make_review


class StoreContract:
    """What every backend must do; subclasses provide the ``store`` fixture."""

    def test_every_field_round_trips(self, store: RecordStore) -> None:
        posts = [
            make_post(BIG_ID, user_id=BIG_ID - 1, retweeted_id=BIG_ID - 2, pinned=True, pictures=[]),
            make_post(7, text="中文，emoji 😀🎉，换行\n和制表\t", html="<a href='x'>链接</a>", likes=2**31 - 1),
        ]
        schema_rows = [schema.post_row(post) for post in posts]
        store.put(schema.WEIBO, schema_rows)
        got = sorted((schema.post_from_row(row) for row in store.scan(schema.WEIBO)), key=lambda post: post.id)
        assert got == sorted(posts, key=lambda post: post.id)
        assert got[1].id == (1 << 63) - 7 and got[1].user_id == (1 << 63) - 8
        review = make_review("ecshop-9f86d081884c7d65", product_id="goods_17", content="很好用 ✨", score=0)
        store.put(schema.REVIEW, [schema.review_row(review)])
        assert [schema.review_from_row(row) for row in store.scan(schema.REVIEW)] == [review]

    def test_redelivered_batch_leaves_one_row_per_item(self, store: RecordStore) -> None:
        batch = [schema.post_row(make_post(i, minute=i)) for i in range(1, 21)]
        store.put(schema.WEIBO, batch)
        store.put(schema.WEIBO, batch)
        store.put(schema.WEIBO, [schema.post_row(make_post(3, minute=3, likes=500))])  # fresher counters
        rows = list(store.scan(schema.WEIBO))
        assert len(rows) == 20 == store.count(schema.WEIBO)
        assert sorted(int(row.columns["id"]) for row in rows) == list(range(1, 21))
        assert next(row for row in rows if row.columns["id"] == 3).columns["likes"] == 500

    def test_one_users_posts_scan_newest_first(self, store: RecordStore) -> None:
        mine = [make_post(100 + minute, minute=minute) for minute in (5, 1, 9, 3)]
        others = [make_post(200 + minute, user_id=USER + 1, minute=minute) for minute in (2, 8)]
        store.put(schema.WEIBO, [schema.post_row(post) for post in mine + others])
        scanned = [int(row.columns["id"]) for row in store.scan(schema.WEIBO, schema.owner_prefix(schema.WEIBO, USER))]
        assert scanned == [109, 105, 103, 101]

    def test_one_owners_rows_are_deleted_and_no_one_elses(self, store: RecordStore) -> None:
        store.put(schema.WEIBO, [schema.post_row(make_post(n, user_id=USER + n % 2, minute=n)) for n in range(1, 9)])
        store.put(schema.REVIEW, [schema.review_row(make_review(f"r{n}", product_id=f"p{n}")) for n in (1, 11)])
        assert store.delete_prefix(schema.WEIBO, schema.owner_prefix(schema.WEIBO, USER + 1)) == 4
        assert sorted(int(row.columns["id"]) for row in store.scan(schema.WEIBO)) == [2, 4, 6, 8]
        assert store.delete_prefix(schema.WEIBO, schema.owner_prefix(schema.WEIBO, USER + 1)) == 0
        assert store.delete_prefix(schema.REVIEW, schema.owner_prefix(schema.REVIEW, "p1")) == 1  # not p11
        assert [row.columns["id"] for row in store.scan(schema.REVIEW)] == ["r11"]

    def test_empty_table_counts_zero(self, store: RecordStore) -> None:
        assert store.count(schema.REVIEW) == 0
        assert list(store.scan(schema.REVIEW)) == []


class TestMemoryStore(StoreContract):
    @pytest.fixture
    def store(self) -> MemoryStore:
        return MemoryStore()


class TestSqliteStore(StoreContract):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[SqliteStore]:
        store = SqliteStore(tmp_path / "store.sqlite3")
        yield store
        store.close()

    def test_file_is_queryable_with_plain_sql(self, store: SqliteStore) -> None:
        import sqlite3

        store.put(schema.WEIBO, [schema.post_row(make_post(BIG_ID))])
        with sqlite3.connect(store.path) as conn:
            assert conn.execute("SELECT id, user_name FROM weibo").fetchall() == [(BIG_ID, "微博用户_😀")]

    @pytest.mark.parametrize("size", [1, 17, 1000])
    def test_a_key_twice_in_one_batch_leaves_one_row_with_the_last_copy(self, store: SqliteStore, size: int) -> None:
        posts = [make_post(i, minute=i % 60) for i in range(1, size + 1)]
        again = [make_post(i, minute=i % 60, likes=77) for i in range(1, size + 1, 3)]
        store.put(schema.WEIBO, [schema.post_row(post) for post in posts + again + posts[:2]])
        likes = {int(row.columns["id"]): row.columns["likes"] for row in store.scan(schema.WEIBO)}
        assert store.count(schema.WEIBO) == size == len(likes)
        assert likes == {post.id: 77 if post.id % 3 == 1 and post.id > 2 else post.likes for post in posts}

    def test_a_failing_count_is_storage_unavailable_as_every_other_call(self, store: SqliteStore) -> None:
        """Every call of a store leaves a backend failure as ``StorageUnavailableError`` (HBase's count does); the
        embedded store's count let SQLite's own error out, so ``stats()`` (``icecrawler status``, the server's
        start) failed with it instead of reporting the counts unknown (-1). Here the table is dropped by hand."""
        import sqlite3

        store.put(schema.REVIEW, [schema.review_row(make_review("a"))])
        with sqlite3.connect(store.path) as conn:
            conn.execute("DROP TABLE review")
        with pytest.raises(StorageUnavailableError, match="no such table"):
            store.count(schema.REVIEW)
        service = StorageService(store, MemorySpool(), max_text_chars=1000, batch_limit=10, write_timeout_s=5.0)
        try:
            assert (service.stats().posts, service.stats().reviews) == (-1, -1)
            assert "no such table" in service.count_error
        finally:
            service.close()

    def test_a_long_read_does_not_leave_the_write_ahead_log_large_for_good(self, tmp_path: Path) -> None:
        """Writes made while a reader holds its snapshot (an export, a backup of a large store, a count) all land in
        the write-ahead log, which no checkpoint can reset meanwhile; SQLite then kept the file at that size for as
        long as the store lived. Once the reader is gone, it is cut back to the store's limit (``WAL_SIZE_LIMIT``
        unless told; here 1 MiB, so that the log need only outgrow SQLite's checkpoint threshold to show it)."""
        import sqlite3

        limit = 1 << 20
        store = SqliteStore(tmp_path / "store.sqlite3", wal_size_limit=limit)
        assert SqliteStore(tmp_path / "other.sqlite3").wal_size_limit == WAL_SIZE_LIMIT  # the default is unchanged
        #: SQLite checkpoints (and can then restart the log, cut back) once it holds 1 000 pages (16 KiB each).
        checkpoint_bytes = 1000 * 16384

        def write(prefix: str, batches: int) -> None:
            for batch in range(batches):
                reviews = [make_review(f"{prefix}{batch}-{n}", content="好" * 20_000) for n in range(100)]
                store.put(schema.REVIEW, [schema.review_row(review) for review in reviews])

        def wal_bytes() -> int:
            wal = store.path.with_name(store.path.name + "-wal")
            return wal.stat().st_size if wal.exists() else 0

        try:
            write("a", 2)
            reader = sqlite3.connect(store.path)
            try:
                reader.execute("BEGIN")
                assert reader.execute("SELECT count(*) FROM review").fetchone()[0] == 200
                for batch in range(10):  # 100 reviews are about 6 MB: three or four batches
                    if wal_bytes() > checkpoint_bytes:
                        break
                    write(f"b{batch}-", 1)
                grown = wal_bytes()
                assert grown > checkpoint_bytes > 2 * limit, grown
                reader.execute("COMMIT")
            finally:
                reader.close()
            write("c", 1)  # its commit's checkpoint completes, now that no reader holds the log's start
            store.put(schema.REVIEW, [schema.review_row(make_review("d"))])  # restarts the log, cut back
            assert wal_bytes() <= limit, (grown, wal_bytes())
        finally:
            store.close()


@pytest.mark.hbase
class TestHBaseStore(StoreContract):
    @pytest.fixture
    def store(self, local_hbase: LocalHBase, table_prefix: str) -> Iterator[HBaseStore]:
        store = HBaseStore("127.0.0.1", local_hbase.thrift_port, pool_size=2, timeout_s=30.0, table_prefix=table_prefix)
        yield store
        store.drop_tables()
        store.close()
