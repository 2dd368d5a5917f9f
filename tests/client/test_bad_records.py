"""One bad record inside a page costs only itself, through the real servers: a JD page whose reviews include a
lone surrogate (``"\\ud800"`` in the JSON, which ``json.loads`` lets through), an over-long text and an over-long
id is parsed by the real source, crawled by ``crawl_task`` and handed to the sink, which writes to a real
storage server and reports to a real scheduler. Every other review is stored, each bad one is dropped alone,
logged and counted, and the task is reported Ok (the bad records could never be stored)."""

from __future__ import annotations

import collections
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest

from crawler_client.crawl import crawl_task
from crawler_client.gateways import IceScheduler, IceStorage
from crawler_client.sink import Sink
from crawler_client.sources.base import FetchedPage, PageRequest
from crawler_client.sources.jd import JdSource
from icecrawler import rpc
from icecrawler.models import Outcome, TaskKind
from icecrawler.wire import INT32_MAX, INT32_MIN
from sandbox import samples
from shhd.fingerprint import fingerprint_texts
from storage_server import schema
from storage_server.stores import SqliteStore
from tests.scheduler.daemon import scheduler_daemon
from tests.storage.conftest import StorageServerRunner

pytestmark = [pytest.mark.ice, pytest.mark.bdb]

SKU = "100012043978"
MAX_TEXT = 200


def bad_page() -> bytes:
    """Ten reviews, one page; #2 holds a lone surrogate, #5 a text over the server's limit, #7 a 200-char id."""
    body = samples.jd_comments(int(SKU), comments=10, max_page=1, jsonp=False)
    doc = json.loads(body)
    rows = doc["comments"]
    rows[2]["content"] = "好评 \ud800 好评"
    rows[5]["content"] = "长" * (MAX_TEXT + 1)
    rows[7]["id"] = None
    rows[7]["guid"] = "g" * 200
    return json.dumps(doc).encode()  # ensure_ascii: the surrogate travels as the escape a site would send


class OnePage:
    requests_made = 0

    def fetch(self, request: PageRequest) -> FetchedPage:
        self.requests_made += 1
        return FetchedPage(url=request.url, status=200, headers={}, body=bad_page())


def quick_sink(
    scheduler: Any,
    storage: Any,
    *,
    buffer_records: int = 100,
    write_batch: int = 100,
    monotonic: Callable[[], float] = time.monotonic,
) -> Sink:
    """A sink that retries fast, for a test's one crawl result."""
    return Sink(
        scheduler,
        storage,
        buffer_records=buffer_records,
        report_batch=10,
        write_batch=write_batch,
        backoff_s=0.1,
        max_backoff_s=1.0,
        now_ms=lambda: int(time.time() * 1000),
        monotonic=monotonic,
        fingerprint=fingerprint_texts,
    )


def test_bad_records_inside_a_page_are_dropped_alone_and_the_rest_stored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    storage = StorageServerRunner(tmp_path / "storage", {"storage.max_text_chars": str(MAX_TEXT)})
    storage.start()
    (tmp_path / "scheduler").mkdir()
    try:
        with scheduler_daemon(tmp_path / "scheduler") as daemon, rpc.communicator() as comm:
            scheduler = IceScheduler(rpc.crawler().SchedulerPrx(comm, daemon.proxy))
            store = IceStorage(storage.proxy(comm))
            assert scheduler.add_targets([f"jd:{SKU}"], TaskKind.ProductReviews) == 1
            task = scheduler.lease("w", 1)[0]
            result = crawl_task(
                task, JdSource(), OnePage(), base_url="http://jd", max_pages=5, now_ms=lambda: int(time.time() * 1000)
            )
            assert len(result.reviews) == 10  # the parser keeps them all: storing is where they fail
            sink = quick_sink(scheduler, store)
            sink.add(result)
            assert sink.flush() is True
            stats = storage.proxy(comm).stats()
            info = json.loads(rpc.crawler().SchedulerPrx(comm, daemon.proxy).taskInfo(task.id))
    finally:
        storage.stop()
    assert stats.reviews == 7
    assert stats.recordsRejected == 2  # the over-long text and the over-long id, by index
    assert sink.stats.snapshot()["records_rejected"] == 3 and sink.stats.snapshot()["items_stored"] == 7
    assert info["last_outcome"] == "Ok" and info["cursor"]  # reported Ok: nothing storable was left behind
    assert "lone surrogate" in caplog.text
    assert "over storage.max_text_chars" in caplog.text and "id longer than 128" in caplog.text


def test_a_lone_surrogate_in_the_window_is_fingerprinted_not_a_crash() -> None:
    assert fingerprint_texts(["好评 \ud800 好评"]) != 0
    assert fingerprint_texts(["质量很好"]) == fingerprint_texts(["质量很好"])


@pytest.mark.parametrize(
    ("kind", "change", "sent", "stored"),
    [
        ("posts", {"likes": 3_000_000_000}, INT32_MAX, True),
        ("posts", {"reposts": -(1 << 31) - 1}, INT32_MIN, False),
        ("reviews", {"score": 1 << 31}, INT32_MAX, False),
    ],
    ids=["likes", "reposts", "score"],
)
def test_a_count_outside_a_32_bit_int_is_clamped_and_the_record_sent(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, kind: str, change: dict[str, Any], sent: int, stored: bool
) -> None:
    """Reposts, comments, likes and a review's score are Slice ``int``s (32-bit): a count past 2^31 - 1 (a parser
    reading "30亿" likes) cannot be marshalled, so the write failed on the client and the task was reported as failed
    ("records-not-stored") at every crawl of it. Dropping the record lost its text for a count; the count is
    clamped to the 32-bit range instead, with a WARNING naming the record and field, and the record sent: the
    storage server stores it, or rejects it by index where the clamped value is still invalid (a negative count, a
    score over 5).
    The task's other records are stored and it is reported Ok either way."""
    from tests.client.test_runtime_sink import MemoryScheduler, result
    from tests.storage.conftest import make_post, make_review

    storage = StorageServerRunner(tmp_path / "storage", {})
    storage.start()
    try:
        with rpc.communicator() as comm:
            scheduler = MemoryScheduler()
            crawled = result("u1")
            if kind == "posts":
                crawled.posts = [make_post(1), make_post(2, **change), make_post(3, minute=3)]
            else:
                crawled.reviews = [make_review("a"), make_review("b", **change), make_review("c", minute=3)]
            sink = quick_sink(scheduler, IceStorage(storage.proxy(comm)))
            with caplog.at_level(logging.WARNING):
                sink.add(crawled)
                assert sink.flush() is True
            stats = storage.proxy(comm).stats()
    finally:
        storage.stop()
    assert [report.outcome for report in scheduler.reports] == [Outcome.Ok]
    assert (stats.posts if kind == "posts" else stats.reviews) == (3 if stored else 2)
    assert stats.recordsRejected == (0 if stored else 1)  # the storage server's call, on the clamped value
    assert sink.stats.snapshot()["records_rejected"] == (0 if stored else 1)
    ((field, value),) = change.items()
    key = "2" if kind == "posts" else "b"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "32-bit" in r.getMessage()]
    assert len(warnings) == 1 and f"{kind[:-1]} {key}:" in warnings[0]
    assert f"{field}={value} clamped to {sent}" in warnings[0]
    if stored:
        store = SqliteStore(tmp_path / "storage" / "store.sqlite3")
        try:
            likes = {row.columns["id"]: row.columns["likes"] for row in store.scan(schema.WEIBO)}
        finally:
            store.close()
        assert likes[2] == INT32_MAX


def test_many_clamped_counts_log_a_line_per_source_and_field_and_count_every_record(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A parser that reads every post's likes as "30亿" clamps each one: one WARNING per record was 1000 lines for
    1000 posts of one crawl. The line is held to one per source and field a minute (``LogThrottle``, on the sink's
    clock), the next one saying how many went unlogged, and the client counter ``records_clamped{source}`` counts
    every record (one with two counts clamped counts once). Every post is still stored, clamped."""
    from crawler_client import observer
    from tests.client.test_runtime_sink import MemoryScheduler, result
    from tests.storage.conftest import make_post

    class Clamps(observer.NullObserver):
        def __init__(self) -> None:
            self.sources: collections.Counter[str] = collections.Counter()

        def records_clamped(self, source: str) -> None:
            self.sources[source] += 1

    clock = [1000.0]
    clamps = Clamps()
    storage = StorageServerRunner(tmp_path / "storage", {})
    storage.start()
    observer.install(clamps)
    try:
        with rpc.communicator() as comm:
            scheduler = MemoryScheduler()
            first, second = result("u1"), result("u2")
            first.posts = [
                make_post(i, likes=3_000_000_000, **({"reposts": 1 << 40} if i < 5 else {})) for i in range(1, 1001)
            ]
            second.posts = [make_post(2001, likes=4_000_000_000)]
            sink = quick_sink(
                scheduler,
                IceStorage(storage.proxy(comm)),
                buffer_records=5000,
                write_batch=500,
                monotonic=lambda: clock[0],
            )
            with caplog.at_level(logging.WARNING):
                sink.add(first)
                clock[0] += 61  # a minute later the line comes again, with what it left out
                sink.add(second)
                assert sink.flush() is True
            stats = storage.proxy(comm).stats()
    finally:
        observer.install(observer.NullObserver())
        storage.stop()
    assert stats.posts == 1001 and stats.recordsRejected == 0
    assert [report.outcome for report in scheduler.reports] == [Outcome.Ok, Outcome.Ok]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "32-bit" in r.getMessage()]
    assert len(warnings) == 3, warnings
    likes, reposts, again = warnings
    assert "post 1:" in likes and f"likes=3000000000 clamped to {INT32_MAX}" in likes and "more" not in likes
    assert "post 1:" in reposts and f"reposts={1 << 40} clamped to {INT32_MAX}" in reposts
    assert "post 2001:" in again and "(999 more posts with likes clamped in the last 61 s)" in again
    assert clamps.sources == {"weibo_mobile": 1001}


def test_a_record_dropped_for_another_problem_is_not_counted_as_sent_clamped() -> None:
    """A post whose likes are clamped but whose text cannot be sent (a lone surrogate) is dropped: it counted in
    ``records_clamped`` ("sent with clamped counts") and was logged as sent as well as dropped."""
    from crawler_client import observer
    from tests.client.test_runtime_sink import MemoryScheduler, result
    from tests.storage.conftest import make_post

    class Clamps(observer.NullObserver):
        def __init__(self) -> None:
            self.count = 0

        def records_clamped(self, source: str) -> None:
            self.count += 1

    clamps = Clamps()
    observer.install(clamps)
    try:
        sink = quick_sink(MemoryScheduler(), cast(Any, None))  # the storage is never reached: nothing is flushed
        crawled = result("u1")
        crawled.posts = [make_post(1, likes=3_000_000_000, text="好 \ud800"), make_post(2, likes=3_000_000_000)]
        sink.add(crawled)
    finally:
        observer.install(observer.NullObserver())
    assert [post.id for post in crawled.posts] == [2]
    assert sink.stats.snapshot()["records_rejected"] == 1
    assert clamps.count == 1
