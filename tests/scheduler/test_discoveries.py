"""A listing report's discoveries (``Report.discovered_ids``): checked with the report, added as ProductReviews
tasks of the listing's source in the report's own transaction, counted as the report's new items; a bad one
refuses the whole report and adds nothing. Pure checks, the core over both stores, and a real scheduler daemon
over Ice with Berkeley DB (a kill -9 after the reply keeps the report and its discoveries together)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from icecrawler import rpc
from icecrawler.errors import InvalidArgumentError
from icecrawler.models import MAX_DISCOVERED_IDS, Outcome, Report, TaskKind
from scheduler_server.checks import check_discovered, check_reports
from scheduler_server.config import SchedulerConfig
from scheduler_server.core import SchedulerCore, check_consistency
from scheduler_server.discoveries import product_task_ids
from scheduler_server.store import TABLES, QueueStore
from tests.scheduler.conftest import make_settings
from tests.scheduler.daemon import ICE_TEST_SETTINGS, SchedulerDaemon, ice_error, scheduler_daemon, scheduler_proxy

LISTING = "listing:ecshop:3"
CONFIG = SchedulerConfig.from_settings(make_settings())


def listing_report(token: str, ids: tuple[str, ...], **fields: Any) -> Report:
    return Report(task_id=LISTING, lease_token=token, discovered_ids=ids, **fields)


def tables(store: QueueStore) -> dict[str, list[tuple[bytes, bytes]]]:
    """Every table's content: what a refused report must leave exactly as it was."""
    with store.transaction() as txn:
        return {table: txn.scan(table, limit=10**6) for table in TABLES}


# --- the pure part -------------------------------------------------------------------------------------------


def test_product_task_ids_are_reviews_tasks_of_the_listing_source() -> None:
    assert product_task_ids("ecshop", ["7", "x.1"]) == [
        ("reviews:ecshop:7", "ecshop", "7"),
        ("reviews:ecshop:x.1", "ecshop", "x.1"),
    ]


@pytest.mark.parametrize(
    ("report", "field", "message"),
    [
        (Report("user:weibo_pc:1", "t", discovered_ids=("5",)), "reports[0].discoveredIds", "only with a Listing"),
        (Report("reviews:jd:1", "t", discovered_ids=("5",)), "reports[0].discoveredIds", "not a ProductReviews"),
        (
            listing_report("t", ("1",) * (MAX_DISCOVERED_IDS + 1)),
            "reports[0].discoveredIds",
            f"at most {MAX_DISCOVERED_IDS}",
        ),
        (listing_report("t", ("1", "ecshop:2")), "reports[0].discoveredIds[1]", "bare, without the <source>: prefix"),
        (listing_report("t", ("1", "2", "no spaces")), "reports[0].discoveredIds[2]", "1-64 chars of [0-9A-Za-z_.-]"),
        (listing_report("t", ("x" * 65,)), "reports[0].discoveredIds[0]", "1-64 chars"),
        (listing_report("t", ("",)), "reports[0].discoveredIds[0]", "1-64 chars"),
        (listing_report("t", ("7\n",)), "reports[0].discoveredIds[0]", "1-64 chars"),
        (listing_report("t", (7,)), "reports[0].discoveredIds[0]", "must be a string"),  # type: ignore[arg-type]
    ],
)
def test_bad_discoveries_are_invalid_arguments_naming_the_field(report: Report, field: str, message: str) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        check_reports([report], CONFIG)
    assert caught.value.field == field and caught.value.index == 0
    assert message in str(caught.value)


def test_good_discoveries_pass_and_none_is_nothing_to_check() -> None:
    check_discovered(listing_report("t", tuple(str(n) for n in range(MAX_DISCOVERED_IDS))), "reports[0]", 0)
    check_discovered(Report("user:weibo_pc:1", "t"), "reports[0]", 0)
    check_reports([listing_report("t", ("1", "1", "a-b_c.d"))], CONFIG)  # a repeat is harmless


# --- the core, over the memory store and Berkeley DB ------------------------------------------------------------


def test_a_listing_report_adds_its_products_and_counts_only_the_new_ones(core: SchedulerCore) -> None:
    core.add(["ecshop:3"], TaskKind.Listing)
    core.add(["ecshop:102"], TaskKind.ProductReviews)  # known before the listing finds it
    task = core.lease("w", 1)[0]
    core.report([listing_report(task.lease_token, ("101", "102", "103", "101"), new_items=99)])
    stats = core.stats()
    assert stats["tasks"] == 4 and stats["pending"] == 4
    assert stats["detail"]["listings"] == {LISTING: 2}  # 101 and 103: what the scheduler found new, not 99
    info = core.task_info(LISTING)
    assert info["history"][0]["new_items"] == 2
    products = core.lease("w", 10)
    assert {(t.id, t.kind) for t in products} >= {
        ("reviews:ecshop:101", TaskKind.ProductReviews),
        ("reviews:ecshop:103", TaskKind.ProductReviews),
    }
    assert check_consistency(core.store)[1] == []


def test_a_listing_report_without_discoveries_counts_none_whatever_the_client_says(core: SchedulerCore) -> None:
    core.add(["ecshop:3"], TaskKind.Listing)
    task = core.lease("w", 1)[0]
    core.report([listing_report(task.lease_token, (), new_items=7)])
    assert core.stats()["detail"]["listings"] == {LISTING: 0}


def test_a_failed_listing_crawl_still_adds_what_it_found_before_failing(core: SchedulerCore) -> None:
    core.add(["ecshop:3"], TaskKind.Listing)
    task = core.lease("w", 1)[0]
    core.report([listing_report(task.lease_token, ("8", "9"), outcome=Outcome.Timeout)])
    assert core.stats()["tasks"] == 3
    assert core.task_info(LISTING)["attempts"] == 1


def test_a_batch_with_one_bad_discovery_is_refused_whole_and_adds_nothing(
    core: SchedulerCore, store: QueueStore
) -> None:
    core.add(["ecshop:3", "ecshop:4"], TaskKind.Listing)
    first, second = core.lease("w", 2)
    before = tables(store)
    good = Report(first.id, first.lease_token, discovered_ids=("11", "12"))
    bad = Report(second.id, second.lease_token, discovered_ids=("13", "bad id"))
    with pytest.raises(InvalidArgumentError) as caught:
        core.report([good, bad])
    assert (caught.value.index, caught.value.field) == (1, "reports[1].discoveredIds[1]")
    assert tables(store) == before
    assert core.stats()["tasks"] == 2 and core.stats()["inflight"] == 2


def test_a_report_that_fails_in_its_transaction_keeps_none_of_its_discoveries(
    core: SchedulerCore, store: QueueStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The discoveries are written in the report's own transaction: when the report fails after they were
    written (here: in the step that follows them), they are rolled back with it, and the report can be sent again."""
    core.add(["ecshop:3"], TaskKind.Listing)
    task = core.lease("w", 1)[0]
    before = tables(store)

    def broken(*args: object) -> object:
        raise RuntimeError("disk on fire")

    with monkeypatch.context() as patch:
        patch.setattr(core, "_apply_report", broken)
        with pytest.raises(RuntimeError):
            core.report([listing_report(task.lease_token, ("21", "22"))])
    assert tables(store) == before
    assert core.stats()["tasks"] == 1 and core.queues.due == {} and check_consistency(store)[1] == []
    core.report([listing_report(task.lease_token, ("21", "22"))])  # the lease is still held: the retry succeeds
    assert core.stats()["tasks"] == 3 and core.stats()["detail"]["listings"] == {LISTING: 2}


# --- a real scheduler daemon over Ice, with Berkeley DB -----------------------------------------------------------


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SchedulerDaemon]:
    with scheduler_daemon(tmp_path_factory.mktemp("discoveries"), **ICE_TEST_SETTINGS) as running:
        yield running


def _info(prx: Any, task_id: str) -> dict[str, Any]:
    return json.loads(prx.taskInfo(task_id))  # type: ignore[no-any-return]


@pytest.mark.ice
@pytest.mark.bdb
def test_discoveries_over_ice_are_durable_with_their_report_and_bad_ones_change_nothing(
    daemon: SchedulerDaemon, tmp_path: Path
) -> None:
    C = rpc.crawler()
    with scheduler_proxy(daemon) as prx:
        assert prx.addUsers(["ecshop:31", "ecshop:32"], C.TaskKind.Listing) == 2
        leased = {task.id: task for task in prx.getUsers("w", 20)}
        one, two = leased["listing:ecshop:31"], leased["listing:ecshop:32"]
        stats = prx.stats()
        # A batch with one bad id anywhere is refused whole, naming the report and the id; nothing is added.
        bad = C.Report(taskId=two.id, leaseToken=two.leaseToken, discoveredIds=["41", "ecshop:42"])
        good = C.Report(taskId=one.id, leaseToken=one.leaseToken, discoveredIds=["41", "43"])
        error = ice_error(lambda: prx.putUsers([good, bad]))
        assert isinstance(error, C.InvalidArgument)
        assert (error.index, error.field, error.code) == (1, "reports[1].discoveredIds[1]", C.ErrorCode.InvalidId)
        assert "bare" in error.message
        assert (prx.stats().tasks, prx.stats().inflight) == (stats.tasks, stats.inflight)
        # Too many ids in one report: refused, with the limit in the message.
        many = C.Report(taskId=one.id, leaseToken=one.leaseToken, discoveredIds=["1"] * (MAX_DISCOVERED_IDS + 1))
        error = ice_error(lambda: prx.putUser(many))
        assert isinstance(error, C.InvalidArgument) and str(MAX_DISCOVERED_IDS) in error.message
        # Both good now: one batch, the second listing finding one product the first found too.
        prx.putUsers([good, C.Report(taskId=two.id, leaseToken=two.leaseToken, discoveredIds=["43", "44"])])
    daemon.kill9()  # acknowledged means durable: the reports and their discoveries come back together
    daemon.start()
    with scheduler_proxy(daemon) as prx:
        assert prx.stats().tasks == stats.tasks + 3
        for product in ("41", "43", "44"):
            assert _info(prx, f"reviews:ecshop:{product}")["state"] == "pending"
        assert _info(prx, "listing:ecshop:31")["discovered"] == 2
        assert _info(prx, "listing:ecshop:32")["discovered"] == 1
        assert _info(prx, "listing:ecshop:31")["state"] == "pending"
