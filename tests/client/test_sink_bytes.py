"""The sink splits storage writes by size as well as by count, so that no write is over the storage server's
request limit (``icecrawler.limits``): a larger one would be refused by Ice before the servant sees it, and the
client would resend it forever."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from crawler_client.crawl import CrawlResult
from crawler_client.sink import Sink
from crawler_client.wire_size import record_wire_bytes
from icecrawler.models import Report, Review, Task, TaskKind
from tests.client.test_runtime_sink import MemoryScheduler, MemoryStorage


def _result(name: str, sizes: list[int]) -> CrawlResult:
    task = Task(
        id=f"reviews:jd:{name}", kind=TaskKind.ProductReviews, source="jd", target=name, lease_token=f"tok-{name}"
    )
    reviews = [Review(id=f"{name}-{n}", product_id=name, content="评" * size) for n, size in enumerate(sizes)]
    return CrawlResult(
        task, Report(task_id=task.id, lease_token=task.lease_token, new_items=len(sizes)), reviews=reviews
    )


def _sink(scheduler: MemoryScheduler, storage: MemoryStorage, **limits: Any) -> Sink:
    """A sink on in-memory servers with a frozen clock; ``limits`` are the Sink's write and backoff knobs."""
    knobs: dict[str, Any] = {"write_batch": 100, "backoff_s": 1.0, "max_backoff_s": 8.0, **limits}
    return Sink(
        scheduler,
        storage,
        buffer_records=1000,
        report_batch=10,
        now_ms=lambda: 0,
        monotonic=lambda: 0.0,
        fingerprint=lambda texts: 0,
        **knobs,
    )


def test_writes_are_split_to_fit_the_byte_limit() -> None:
    scheduler, storage = MemoryScheduler(), MemoryStorage()
    sink = _sink(scheduler, storage, write_bytes=10_000)
    results = [_result("a", [1000, 1000, 1000, 10]), _result("b", [2000, 5, 5]), _result("c", [2000])]
    for item in results:
        sink.add(item)
    assert sink.flush() is True
    sent = [record for item in results for record in item.reviews]
    assert storage.reviews == sent  # every record, once, in order
    assert len(storage.writes) > 1 and sum(storage.writes) == len(sent)
    start = 0
    for count in storage.writes:  # each write under the limit (a record over it alone would go by itself)
        assert sum(record_wire_bytes(r) for r in sent[start : start + count]) <= 10_000
        start += count
    assert len(scheduler.reports) == 3


def test_without_a_byte_limit_only_the_count_splits() -> None:
    scheduler, storage = MemoryScheduler(), MemoryStorage()
    sink = _sink(scheduler, storage, write_batch=2)
    sink.add(_result("a", [3000] * 5))
    assert sink.flush() is True
    assert storage.writes == [2, 2, 1]


def test_a_refused_certificate_loses_nothing() -> None:
    """NotAuthorized (a client certificate without the right role) keeps the records buffered, like an outage,
    until the certificate is fixed."""
    from icecrawler.errors import NotAuthorizedError

    class RefusingStorage(MemoryStorage):
        refuse = True

        def write_reviews(self, reviews: Sequence[Review]) -> int:
            if self.refuse:
                raise NotAuthorizedError("writeReviews: this certificate's role may not write")
            return super().write_reviews(reviews)

    scheduler, storage = MemoryScheduler(), RefusingStorage()
    sink = _sink(scheduler, storage, backoff_s=0.0, max_backoff_s=0.0)
    sink.add(_result("a", [10, 10]))
    assert sink.flush() is False
    assert sink.buffered_records() == 2 and scheduler.reports == []
    storage.refuse = False
    assert sink.flush() is True
    assert len(storage.reviews) == 2 and len(scheduler.reports) == 1
