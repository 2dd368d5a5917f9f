"""Storage writes and the storage server's request limit (``icecrawler.limits``), through a real storage server.

A write over that limit is refused by Ice before the servant sees it: the connection is closed, which the client
cannot tell from an outage, so it kept the records and sent the same write again, forever, while everything it
crawled after waited behind it. So no write may go over it: a record that is over the limit by itself is dropped
alone before sending (logged, counted), and the size estimate that cuts writes never counts a text smaller than
it is on the wire.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from crawler_client.crawl import CrawlResult
from crawler_client.daemon import ClientDaemon, DaemonConfig
from crawler_client.gateways import CallCutoff, IceStorage
from crawler_client.sink import Sink
from crawler_client.wire_size import record_wire_bytes
from icecrawler import limits, rpc
from icecrawler.clock import Clock
from icecrawler.models import Outcome, Report, Review, Task, TaskKind
from icecrawler.settings import Settings
from tests.client.test_runtime_sink import MemoryScheduler
from tests.storage.conftest import StorageServerRunner, make_review

pytestmark = [pytest.mark.ice]


def _result(name: str, reviews: list[Review]) -> CrawlResult:
    task = Task(
        id=f"reviews:jd:{name}", kind=TaskKind.ProductReviews, source="jd", target=name, lease_token=f"tok-{name}"
    )
    return CrawlResult(
        task, Report(task_id=task.id, lease_token=task.lease_token, new_items=len(reviews)), reviews=reviews
    )


def _settings(batch_limit: int) -> Settings:
    settings = Settings()
    settings.set("storage.batch_limit", batch_limit)
    return settings


def _limit_bytes(batch_limit: int) -> int:
    """The storage server's request limit."""
    return limits.storage_message_kib(_settings(batch_limit)) * 1024


def _daemon_sink(scheduler: MemoryScheduler, storage: IceStorage, batch_limit: int) -> Sink:
    """The sink a client daemon builds from its settings, for a storage server with ``batch_limit``."""
    daemon = ClientDaemon(
        scheduler,
        storage,
        DaemonConfig.from_settings(_settings(batch_limit)),
        lambda cancel: None,  # type: ignore[arg-type,return-value]
        clock=Clock(),
        fingerprint=lambda texts: 1,
        worker_id="test",
    )
    return daemon.sink


def _server(tmp_path: Path, batch_limit: int) -> StorageServerRunner:
    server = StorageServerRunner(tmp_path / "storage", {"storage.batch_limit": str(batch_limit)})
    server.start()
    return server


def test_a_record_over_the_request_limit_is_dropped_alone(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A review of 100 001 characters (over ``storage.max_text_chars`` too) cannot reach a server that takes
    requests of 84 KiB: it is dropped before sending, and its neighbours are stored and the task reported."""
    server = _server(tmp_path, batch_limit=10)
    try:
        with rpc.communicator() as comm:
            scheduler = MemoryScheduler()
            sink = _daemon_sink(scheduler, IceStorage(server.proxy(comm), CallCutoff()), batch_limit=10)
            huge = make_review("huge", content="x" * 100_001)
            assert record_wire_bytes(huge) > _limit_bytes(batch_limit=10)
            sink.add(_result("a", [make_review("r1"), huge, make_review("r2")]))
            assert sink.flush() is True
            stats = server.proxy(comm).stats()
    finally:
        server.stop()
    assert stats.reviews == 2 and stats.recordsRejected == 0  # the huge one never reached the server
    assert [report.outcome for report in scheduler.reports] == [Outcome.Ok]
    assert sink.stats.snapshot()["records_rejected"] == 1 and sink.stats.snapshot()["items_stored"] == 2
    assert "request limit" in caplog.text and "huge" in caplog.text


def test_four_byte_characters_do_not_push_a_write_over_the_limit(tmp_path: Path) -> None:
    """Emoji take 4 bytes each in UTF-8: a write cut by an estimate of 3 was a third over the budget, beyond the
    server's slack, and was refused (and resent) for good."""
    server = _server(tmp_path, batch_limit=200)
    try:
        with rpc.communicator() as comm:
            scheduler = MemoryScheduler()
            sink = _daemon_sink(scheduler, IceStorage(server.proxy(comm), CallCutoff()), batch_limit=200)
            reviews = [make_review(f"e{n}", content="😀" * 3000) for n in range(60)]
            sink.add(_result("a", reviews))
            done = sink.flush()
            stats = server.proxy(comm).stats()
    finally:
        server.stop()
    assert done is True
    assert stats.reviews == 60 and sink.stats.snapshot()["items_stored"] == 60
    assert [report.outcome for report in scheduler.reports] == [Outcome.Ok]
