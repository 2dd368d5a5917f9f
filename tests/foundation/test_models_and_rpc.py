"""Core types and the Slice boundary: task ids, conversions both ways, error mapping."""

from __future__ import annotations

import dataclasses
import threading

import Ice
import pytest

from bench._echo import echo_module
from icecrawler import convert, rpc
from icecrawler.errors import (
    InvalidArgumentError,
    InvalidRecordsError,
    LeaseLostError,
    NoWorkError,
    StorageUnavailableError,
)
from icecrawler.models import (
    Account,
    Outcome,
    Post,
    Report,
    Review,
    Task,
    TaskKind,
    account_lineage,
    make_task_id,
    split_task_id,
    visitor_account_id,
)


@pytest.mark.parametrize(
    ("kind", "source", "target"),
    [
        (TaskKind.WeiboUser, "weibo_mobile", "1669879400"),
        (TaskKind.ProductReviews, "jd", "100012043978"),
        (TaskKind.Listing, "ecshop", "3"),
    ],
)
def test_task_ids_round_trip(kind: TaskKind, source: str, target: str) -> None:
    assert split_task_id(make_task_id(kind, source, target)) == (kind, source, target)


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "user:weibo_mobile",
        "user:nosuch:1",
        "reviews:weibo_pc:1",
        "user:weibo_pc:a b",
        "x:jd:1",
        "user:weibo_pc:" + "9" * 65,
    ],
)
def test_malformed_task_ids_are_invalid_arguments(bad: str) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        split_task_id(bad)
    assert info.value.code == "InvalidId"


def test_account_repr_hides_cookies() -> None:
    assert "SUB=secret" not in repr(Account("a1", "SUB=secret"))


def test_every_generation_of_a_visitor_session_is_one_lineage() -> None:
    assert visitor_account_id("weibo_web", 12) == "visitor:weibo_web:12"
    assert account_lineage("visitor:weibo_web:12") == account_lineage("visitor:weibo_web:13") == "visitor:weibo_web"
    assert account_lineage("visitor:weibo_mobile:1") != account_lineage("visitor:weibo_web:1")
    assert account_lineage("li:2") == "li:2" and account_lineage("") == ""  # pool accounts are their own


def test_task_and_report_survive_the_slice_round_trip() -> None:
    task = Task(
        id="user:weibo_pc:1",
        kind=TaskKind.WeiboUser,
        source="weibo_pc",
        target="1",
        params={"domain": "100505"},
        lease_token="tok",
        lease_deadline_ms=2**41,
        lease_s=120.0,
        period_s=600.5,
        cursor="4102647604266970",
        attempts=2,
        account=Account("acc", "{}"),
    )
    assert all(
        getattr(task, f.name) != f.default for f in dataclasses.fields(Task) if f.name not in ("params", "account")
    )
    assert rpc.task_from_slice(rpc.task_to_slice(task)) == task
    report = Report(
        task_id=task.id,
        lease_token="tok",
        outcome=Outcome.Banned,
        http_status=418,
        error_class="teapot",
        fingerprint=2**64 - 1,
        new_items=3,
        window_items=45,
        newest_item_ms=1_700_000_000_000,
        cursor="9",
        retry_after_s=30.0,
        fetches=4,
        new_item_times_ms=(1_700_000_000_000, 1_699_999_400_000, 1_699_998_800_000),
        discovered_ids=("101", "sku-7.b"),
        account_cookies="SUB=refreshed; SUBP=p",
    )
    # every field is set off its default, so a field the conversion forgets fails here
    assert all(getattr(report, f.name) != f.default for f in dataclasses.fields(Report))
    assert rpc.report_from_slice(rpc.report_to_slice(report)) == report


def test_a_lease_is_timed_on_this_machines_clock_from_when_it_was_asked_for() -> None:
    """The scheduler's deadline is its own wall clock; a client whose clock runs 10 minutes ahead (or behind)
    times the lease from when it sent the call, and learns at least how far the clocks disagree."""
    scheduler_now = 1_800_000_000.0
    leased = Task(
        "reviews:jd:1", TaskKind.ProductReviews, "jd", "1", lease_deadline_ms=int((scheduler_now + 120) * 1000)
    )
    with_length = dataclasses.replace(leased, lease_s=120.0)
    for skew in (600.0, -600.0, 0.0):
        sent, received = scheduler_now + skew - 0.01, scheduler_now + skew + 0.02
        local = with_length.on_local_clock(sent)
        assert local.lease_deadline_ms == int((sent + 120) * 1000)
        assert local.lease_s == 120.0 and local.lease_token == with_length.lease_token
        assert with_length.clock_ahead_s(sent, received) == pytest.approx(
            skew - 0.01 if skew > 0 else skew + 0.02 if skew < 0 else 0.0
        )
    # a scheduler that does not give the lease's length: its deadline is kept, and nothing is known of the clocks
    assert leased.on_local_clock(scheduler_now + 600) is leased
    assert leased.clock_ahead_s(scheduler_now + 600, scheduler_now + 601) == 0.0


def test_records_survive_the_slice_round_trip() -> None:
    post = Post(
        id=4102647604266970,
        user_id=1163218074,
        user_name="余丰慧",
        text="你好 😀",
        html="<b>你好</b>",
        created_at="2017-05-01T17:27:55+08:00",
        reposts=4,
        pinned=True,
        retweeted_id=2**62,
        pictures=["https://x/1.jpg"],
        permalink="/1163218074/F16SkhU26",
        source="weibo_pc",
    )
    assert rpc.post_from_slice(rpc.post_to_slice(post)) == post
    review = Review(id="21739216866", product_id="100012043978", source="jd", user="j***y", content="好", score=5)
    assert rpc.review_from_slice(rpc.review_to_slice(review)) == review


def test_struct_maps_follow_the_slice_spelling_and_refuse_what_does_not_line_up() -> None:
    assert convert.slice_name("lease_deadline_ms") == "leaseDeadlineMs" and convert.slice_name("id") == "id"
    with pytest.raises(ValueError, match=r"Review has no field \['pictures'\]"):
        convert.StructMap(Review, "Review", to_slice={"pictures": list})

    @dataclasses.dataclass
    class Swapped:  # Account's two fields in the other order
        cookie_blob: str = ""
        id: str = ""

    with pytest.raises(TypeError, match=r"Slice struct Account has fields \['id', 'cookieBlob'\]"):
        convert.StructMap(Swapped, "Account").to(Swapped("{}", "acc"))


@pytest.mark.parametrize(
    ("error", "slice_name"),
    [
        (InvalidArgumentError("bad", code="BatchTooLarge", field="reports", index=2), "InvalidArgument"),
        (InvalidRecordsError([(1, "missing id")], stored=4), "InvalidRecords"),
        (NoWorkError("idle", 1500), "NoWork"),
        (LeaseLostError("stale", task_id="user:weibo_pc:1", index=3), "LeaseLost"),
        (StorageUnavailableError("down"), "StorageUnavailable"),
    ],
)
def test_core_errors_map_to_declared_slice_exceptions_and_back(error: Exception, slice_name: str) -> None:
    mapped = rpc.to_slice_error(error)
    assert type(mapped).__name__ == slice_name
    back = rpc.from_slice_error(mapped)
    assert type(back) is type(error)
    assert str(back) == str(error) or isinstance(error, InvalidRecordsError)
    if isinstance(error, InvalidRecordsError):
        assert isinstance(back, InvalidRecordsError) and back.rejected == error.rejected and back.stored == 4


def test_map_errors_decorator_turns_core_errors_into_slice_exceptions() -> None:
    @rpc.map_errors
    def servant_method() -> None:
        raise NoWorkError("nothing", 10)

    with pytest.raises(rpc.crawler().NoWork) as info:
        servant_method()
    assert info.value.nextDueInMs == 10


def test_ice_threads_keep_their_python_thread_state_between_dispatches() -> None:
    """rpc.communicator's thread hooks: without them every dispatch on an Ice thread ran on a fresh Python thread
    state (created and destroyed per call), so a threading.local set in one dispatch was gone in the next."""
    local = threading.local()
    seen: list[int] = []

    E = echo_module()  # the benchmarks' Echo interface (bench/echo.ice), loaded on top of the contract

    class CountingEcho(E.Echo):  # type: ignore[misc,name-defined]
        def echoTasks(self, workerId: str, max: int, current: object) -> list[object]:
            local.calls = getattr(local, "calls", 0) + 1
            seen.append(local.calls)
            return []

        def echoReports(self, reports: object, current: object) -> None:
            """Unused."""

    with (
        rpc.communicator(
            properties={"Ice.ThreadPool.Server.Size": "1", "Ice.ThreadPool.Server.SizeMax": "1"}
        ) as server,
        rpc.communicator() as client,
    ):
        adapter = server.createObjectAdapterWithEndpoints("CountingEcho", "tcp -h 127.0.0.1 -p 0")
        proxy = adapter.add(CountingEcho(), Ice.stringToIdentity("echo"))
        adapter.activate()
        echo = E.EchoPrx.uncheckedCast(client.stringToProxy(proxy.ice_toString()))
        for _ in range(5):
            assert echo.echoTasks("w", 1) == []
    assert seen == [1, 2, 3, 4, 5]
