"""Every operation of Crawler::Storage through real proxies to a real `icecrawler storage` process (embedded)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from typing import Any

import pytest

from icecrawler import rpc
from tests.storage.conftest import BIG_ID, StorageServerRunner, make_post, make_review

pytestmark = pytest.mark.ice

Server = Callable[..., StorageServerRunner]


def test_write_posts_reviews_and_stats_through_a_proxy(storage_server: Server, client_comm: Any) -> None:
    server = storage_server(**{"storage.max_text_chars": "2000"})
    proxy = server.proxy(client_comm)
    posts = [make_post(BIG_ID, user_id=BIG_ID - 1, retweeted_id=BIG_ID - 2), make_post(11, minute=5)]
    ack = proxy.writeWB([rpc.post_to_slice(post) for post in posts])
    assert (ack.stored, ack.spooled) == (2, 0)
    ack = proxy.writeReviews([rpc.review_to_slice(make_review("r1")), rpc.review_to_slice(make_review("r2"))])
    assert (ack.stored, ack.spooled) == (2, 0)
    # idempotent: the same batch again changes nothing
    assert proxy.writeWB([rpc.post_to_slice(post) for post in posts]).stored == 2
    stats = proxy.stats()
    assert (stats.backend, stats.posts, stats.reviews, stats.spoolDepth) == ("embedded", 2, 2, 0)
    assert stats.writesAccepted == 6 and stats.recordsRejected == 0
    assert json.loads(stats.detailJson)["backend_up"] is True
    with sqlite3.connect(server.assignments["storage.embedded.path"]) as conn:
        stored = conn.execute("SELECT id, user_id, text FROM weibo ORDER BY id DESC").fetchall()
    assert stored[0] == (BIG_ID, BIG_ID - 1, posts[0].text)


def test_invalid_records_raise_invalid_records_and_the_rest_is_stored(storage_server: Server, client_comm: Any) -> None:
    server = storage_server(**{"storage.max_text_chars": "100"})
    proxy = server.proxy(client_comm)
    C = rpc.crawler()
    batch = [
        make_post(1, text="ok"),
        make_post(0, text="no id"),  # missing id
        make_post(2, text="x" * 101),  # over storage.max_text_chars
        make_post(3, text="ok", created_at="not-a-date"),  # wrong type of value
        make_post(4, text="ok", likes=-1),
    ]
    with pytest.raises(C.InvalidRecords) as caught:
        proxy.writeWB([rpc.post_to_slice(post) for post in batch])
    error = caught.value
    assert list(error.rejectedIndexes) == [1, 2, 3, 4]
    assert "id=0" in error.reasons[0] and "max_text_chars=100" in error.reasons[1]
    assert "createdAt" in error.reasons[2] and "likes=-1" in error.reasons[3]
    assert error.stored == 1 and error.code == C.ErrorCode.RecordRejected
    with pytest.raises(C.InvalidRecords) as reviews:
        proxy.writeReviews([rpc.review_to_slice(make_review("")), rpc.review_to_slice(make_review("good"))])
    assert list(reviews.value.rejectedIndexes) == [0] and "id is missing" in reviews.value.reasons[0]
    stats = proxy.stats()
    assert (stats.posts, stats.reviews, stats.recordsRejected) == (1, 1, 5)


def test_empty_and_oversized_batches_raise_invalid_argument(storage_server: Server, client_comm: Any) -> None:
    server = storage_server(**{"storage.batch_limit": "10"})
    proxy = server.proxy(client_comm)
    C = rpc.crawler()
    with pytest.raises(C.InvalidArgument) as empty:
        proxy.writeWB([])
    assert empty.value.code == C.ErrorCode.EmptyBatch
    with pytest.raises(C.InvalidArgument) as big:
        proxy.writeReviews([rpc.review_to_slice(make_review(f"r{i}")) for i in range(11)])
    assert big.value.code == C.ErrorCode.BatchTooLarge and "storage.batch_limit=10" in big.value.message
    assert not isinstance(big.value, C.InvalidRecords)
    assert proxy.stats().reviews == 0


def test_a_time_ending_in_a_nul_is_not_iso_8601(storage_server: Server, client_comm: Any) -> None:
    """Python's ``fromisoformat`` reads "...+08:00\\x00" as a time; the record must be refused, not stored with it."""
    server = storage_server()
    proxy = server.proxy(client_comm)
    C = rpc.crawler()
    nul = "2024-05-01T12:00:00+08:00\x00"
    posts = [make_post(1), make_post(2, created_at=nul), make_post(3, fetched_at=nul)]
    with pytest.raises(C.InvalidRecords) as caught:
        proxy.writeWB([rpc.post_to_slice(post) for post in posts])
    assert list(caught.value.rejectedIndexes) == [1, 2] and caught.value.stored == 1
    assert "createdAt" in caught.value.reasons[0] and "fetchedAt" in caught.value.reasons[1]
    reviews = [make_review("a", created_at=nul), make_review("b", fetched_at=nul), make_review("c")]
    with pytest.raises(C.InvalidRecords) as refused:
        proxy.writeReviews([rpc.review_to_slice(review) for review in reviews])
    assert list(refused.value.rejectedIndexes) == [0, 1] and refused.value.stored == 1
    with sqlite3.connect(server.assignments["storage.embedded.path"]) as conn:
        query = "SELECT created_at, fetched_at FROM weibo UNION ALL SELECT created_at, fetched_at FROM review"
        assert not any("\x00" in text for row in conn.execute(query).fetchall() for text in row)
    stats = proxy.stats()
    assert (stats.posts, stats.reviews, stats.recordsRejected) == (1, 1, 4)


def test_a_record_twice_in_one_batch_keeps_the_later(storage_server: Server, client_comm: Any) -> None:
    """Both copies are acknowledged (the batch is idempotent per row key); the row holds the later one."""
    server = storage_server()
    proxy = server.proxy(client_comm)
    twice = [make_post(7, text="first", likes=1), make_post(7, text="second", likes=2)]
    assert proxy.writeWB([rpc.post_to_slice(post) for post in twice]).stored == 2
    reviews = [make_review("r", content="first"), make_review("r", content="second")]
    assert proxy.writeReviews([rpc.review_to_slice(review) for review in reviews]).stored == 2
    with sqlite3.connect(server.assignments["storage.embedded.path"]) as conn:
        assert conn.execute("SELECT text, likes FROM weibo").fetchall() == [("second", 2)]
        assert conn.execute("SELECT content FROM review").fetchall() == [("second",)]
    assert (proxy.stats().posts, proxy.stats().reviews) == (1, 1)


def test_batches_with_rejected_records_are_logged_once_a_minute_and_all_counted(
    storage_server: Server, client_comm: Any
) -> None:
    """A client that sends a bad record in every batch must not flood the log: one line a minute per table, while
    every rejected record is counted and every good one stored."""
    server = storage_server()
    proxy = server.proxy(client_comm)
    C = rpc.crawler()
    for batch in range(30):
        posts = [make_post(100 + batch), make_post(-batch - 1)]
        with pytest.raises(C.InvalidRecords) as caught:
            proxy.writeWB([rpc.post_to_slice(post) for post in posts])
        assert list(caught.value.rejectedIndexes) == [1] and caught.value.stored == 1
    with pytest.raises(C.InvalidRecords):
        proxy.writeReviews([rpc.review_to_slice(make_review(""))])
    stats = proxy.stats()
    assert (stats.posts, stats.recordsRejected) == (30, 31)
    assert server.process is not None
    lines = [line for line in server.process.log_path.read_text().splitlines() if ": rejected " in line]
    assert len(lines) == 2, lines  # the first weibo batch and the first review batch
    assert "weibo: rejected 1 of 2 records" in lines[0] and "review: rejected 1 of 1 records" in lines[1]
