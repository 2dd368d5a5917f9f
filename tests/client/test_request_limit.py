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
from crawler_client.wire_size import record_exact_bytes, record_wire_bytes
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


@pytest.mark.parametrize("content", ["x" * 100_001, "é" * 50_000], ids=["ascii", "two-byte"])
def test_a_record_over_the_request_limit_is_dropped_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, content: str
) -> None:
    """A review of 100 001 characters (over ``storage.max_text_chars`` too), or of 100 000 bytes of "é", cannot
    reach a server that takes requests of 84 KiB: it is dropped before sending, and its neighbours are stored and the
    task reported. The ERROR says its exact size, the limit and the setting the limit comes from."""
    server = _server(tmp_path, batch_limit=10)
    try:
        with rpc.communicator() as comm:
            scheduler = MemoryScheduler()
            sink = _daemon_sink(scheduler, IceStorage(server.proxy(comm), CallCutoff()), batch_limit=10)
            huge = make_review("huge", content=content)
            assert record_exact_bytes(huge) > _limit_bytes(batch_limit=10)
            sink.add(_result("a", [make_review("r1"), huge, make_review("r2")]))
            assert sink.flush() is True
            stats = server.proxy(comm).stats()
    finally:
        server.stop()
    assert stats.reviews == 2 and stats.recordsRejected == 0  # the huge one never reached the server
    assert [report.outcome for report in scheduler.reports] == [Outcome.Ok]
    assert sink.stats.snapshot()["records_rejected"] == 1 and sink.stats.snapshot()["items_stored"] == 2
    size = 64 + sum(
        len(text.encode()) + (1 if len(text.encode()) < 255 else 5)
        for text in vars(huge).values()
        if isinstance(text, str)
    )
    assert (
        f"review huge dropped, it cannot be sent: it takes {size} bytes on the wire, over the storage request limit "
        f"of {sink.record_bytes} bytes, derived from this client's storage.batch_limit = 10" in caplog.text
    )


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


def test_a_record_the_estimate_overcounts_is_sent_not_dropped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The estimate counts a whole text at 4 bytes a character once it holds one non-ASCII character: 25 000 ASCII
    characters and an "é" are ~100 KB to it, 25 002 bytes on the wire. Dropped on the estimate, a record the server
    takes was lost, its task reported Ok (its cursor past it) and the log said it was over the limit. The drop is
    decided on the exact size."""
    server = _server(tmp_path, batch_limit=10)
    try:
        with rpc.communicator() as comm:
            scheduler = MemoryScheduler()
            sink = _daemon_sink(scheduler, IceStorage(server.proxy(comm), CallCutoff()), batch_limit=10)
            mostly_ascii = make_review("mixed", content="x" * 25_000 + "é")
            assert record_wire_bytes(mostly_ascii) > sink.record_bytes  # the estimate alone would drop it
            sink.add(_result("a", [make_review("r1"), mostly_ascii]))
            assert sink.flush() is True
            stats = server.proxy(comm).stats()
    finally:
        server.stop()
    assert stats.reviews == 2
    assert sink.stats.snapshot()["records_rejected"] == 0 and sink.stats.snapshot()["items_stored"] == 2
    assert [report.outcome for report in scheduler.reports] == [Outcome.Ok]
    assert "dropped" not in caplog.text


def test_a_record_of_exactly_the_limit_is_stored_and_one_byte_more_is_dropped(tmp_path: Path) -> None:
    """The exact size is what the server's limit is measured against: a record of exactly ``record_bytes`` (two-byte
    characters, so the estimate is twice that) reaches the server and is stored, one a byte larger is dropped."""
    server = _server(tmp_path, batch_limit=10)
    try:
        with rpc.communicator() as comm:
            scheduler = MemoryScheduler()
            sink = _daemon_sink(scheduler, IceStorage(server.proxy(comm), CallCutoff()), batch_limit=10)
            empty = record_exact_bytes(make_review("edge", content=""))
            content_bytes = sink.record_bytes - empty + 1 - 5  # the empty content's size byte becomes 5 bytes
            edge = make_review("edge", content="é" * (content_bytes // 2) + "x" * (content_bytes % 2))
            over = make_review("over", content=edge.content + "x")
            assert record_exact_bytes(edge) == sink.record_bytes < record_wire_bytes(edge)
            sink.add(_result("a", [edge, over]))
            assert sink.flush() is True
            stats = server.proxy(comm).stats()
    finally:
        server.stop()
    assert stats.reviews == 1 and stats.recordsRejected == 0
    assert sink.stats.snapshot()["items_stored"] == 1 and sink.stats.snapshot()["records_rejected"] == 1
