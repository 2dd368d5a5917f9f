"""ShardedScheduler's routing, over in-memory stand-ins for the shards' gateways (pure logic; the same over real
Ice and real shard daemons is in tests/scheduler/test_shards_ice.py)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from crawler_client.gateways import CallCutError, ShardedScheduler
from icecrawler.errors import ConfigError, InvalidArgumentError, LeaseLostError, NoWorkError, ServiceError
from icecrawler.models import Report, Task, TaskKind
from icecrawler.shards import ShardMap

#: Two shards: jd's host on shard 0, ecshop's on shard 1.
HOSTS = {"jd": "jd.example:80", "ecshop": "shop.example:80"}


class FakeShard:
    """A shard's gateway: hands out its queued tasks, records what it was sent, refuses what it is told to."""

    def __init__(self, tasks: Sequence[str] = (), no_work: NoWorkError | None = None) -> None:
        self.queue = list(tasks)
        self.no_work = no_work or NoWorkError("nothing due", 500)
        self.reports: list[list[str]] = []
        self.releases: list[list[str]] = []
        self.added: list[list[str]] = []
        self.removed: list[list[str]] = []
        self.held: list[str] = []
        self.refuse: dict[str, Exception] = {}

    def lease(self, worker_id: str, count: int) -> list[Task]:
        if not self.queue:
            raise self.no_work
        taken, self.queue = self.queue[:count], self.queue[count:]
        return [
            Task(
                id=task_id,
                kind=TaskKind.ProductReviews,
                source=task_id.split(":")[1],
                target="1",
                lease_token=f"t-{task_id}",
            )
            for task_id in taken
        ]

    def _check(self, ids: list[str]) -> None:
        for index, task_id in enumerate(ids):
            if task_id in self.refuse:
                error = self.refuse.pop(task_id)
                error.index = index  # type: ignore[attr-defined]
                raise error

    def report(self, reports: Sequence[Report]) -> None:
        self._check([r.task_id for r in reports])
        self.reports.append([r.task_id for r in reports])

    def release(self, leases: Sequence[tuple[str, str]]) -> None:
        self._check([task_id for task_id, _ in leases])
        self.releases.append([task_id for task_id, _ in leases])

    def add_targets(self, ids: Sequence[str], kind: TaskKind) -> int:
        self.added.append(list(ids))
        return len(ids)

    def remove_targets(self, ids: Sequence[str], kind: TaskKind) -> int:
        self._check(list(ids))
        self.removed.append(list(ids))
        return len(ids) - 1

    def hold_host(self, host: str, seconds: float, reason: str) -> float:
        self.held.append(host)
        return seconds


def sharded(*shards: FakeShard) -> ShardedScheduler:
    shard_map = ShardMap(HOSTS, len(shards))
    assert (shard_map.of_source("jd"), shard_map.of_source("ecshop")) == (0, 1)
    return ShardedScheduler(shards, shard_map)


def report(task_id: str) -> Report:
    return Report(task_id=task_id, lease_token=f"t-{task_id}")


def test_leases_come_from_the_shards_in_turn_and_skip_shards_with_nothing_due() -> None:
    jd, shop = FakeShard(["reviews:jd:1", "reviews:jd:2"]), FakeShard(["reviews:ecshop:1"])
    gateway = sharded(jd, shop)
    got = [task.id for _ in range(3) for task in gateway.lease("w", 1)]
    assert got == ["reviews:jd:1", "reviews:ecshop:1", "reviews:jd:2"]
    with pytest.raises(NoWorkError) as caught:
        gateway.lease("w", 1)
    assert (caught.value.next_due_in_ms, caught.value.code) == (500, "QueueEmpty")


def test_no_work_anywhere_reports_the_soonest_due_shard_or_shutting_down() -> None:
    gateway = sharded(FakeShard(no_work=NoWorkError("empty", -1)), FakeShard(no_work=NoWorkError("later", 90)))
    with pytest.raises(NoWorkError) as caught:
        gateway.lease("w", 10)
    assert caught.value.next_due_in_ms == 90
    stopping = NoWorkError("bye", -1, code="ShuttingDown")
    with pytest.raises(NoWorkError) as caught:
        sharded(FakeShard(no_work=stopping), FakeShard(no_work=stopping)).lease("w", 1)
    assert caught.value.code == "ShuttingDown"


def test_reports_and_releases_go_to_the_shard_of_their_task() -> None:
    jd, shop = FakeShard(["reviews:jd:1", "reviews:jd:2"]), FakeShard(["reviews:ecshop:1"])
    gateway = sharded(jd, shop)
    leased = gateway.lease("w", 10) + gateway.lease("w", 10)
    assert {task.id for task in leased} == {"reviews:jd:1", "reviews:jd:2", "reviews:ecshop:1"}
    gateway.report([report("reviews:ecshop:1"), report("reviews:jd:2")])
    gateway.release([("reviews:jd:1", "t-reviews:jd:1")])
    assert (jd.reports, shop.reports) == ([["reviews:jd:2"]], [["reviews:ecshop:1"]])
    assert (jd.releases, shop.releases) == ([["reviews:jd:1"]], [])


def test_a_refusal_names_the_index_in_the_whole_call_and_a_resend_skips_what_other_shards_took() -> None:
    jd, shop = FakeShard(), FakeShard()
    gateway = sharded(jd, shop)
    batch = [report("reviews:ecshop:1"), report("reviews:jd:1"), report("reviews:ecshop:2"), report("reviews:jd:2")]
    shop.refuse["reviews:ecshop:2"] = LeaseLostError("expired", task_id="reviews:ecshop:2")
    with pytest.raises(LeaseLostError) as caught:
        gateway.report(batch)
    assert caught.value.index == 2  # item 1 of shard 1's part [ecshop:1, ecshop:2] is item 2 of the call
    assert jd.reports == [["reviews:jd:1", "reviews:jd:2"]] and shop.reports == []
    del batch[caught.value.index]  # what Sink does: drop the refused report, send the rest again
    gateway.report(batch)
    assert jd.reports == [["reviews:jd:1", "reviews:jd:2"]]  # not sent twice
    assert shop.reports == [["reviews:ecshop:1"]]


def test_a_one_shard_call_passes_its_shards_answer_through() -> None:
    jd = FakeShard()
    gateway = sharded(jd, FakeShard())
    jd.refuse["reviews:jd:2"] = InvalidArgumentError("bad", code="UnknownTask")
    with pytest.raises(InvalidArgumentError) as caught:
        gateway.report([report("reviews:jd:1"), report("reviews:jd:2")])
    assert (caught.value.index, jd.reports) == (1, [])
    gateway.report([report("reviews:jd:1")])  # nothing was taken, so nothing is skipped
    assert jd.reports == [["reviews:jd:1"]]


def test_new_ids_are_split_by_host_and_counted() -> None:
    jd, shop = FakeShard(), FakeShard()
    assert sharded(jd, shop).add_targets(["jd:1", "ecshop:5", "jd:2"], TaskKind.ProductReviews) == 3
    assert (jd.added, shop.added) == ([["jd:1", "jd:2"]], [["ecshop:5"]])


def test_removed_ids_are_split_by_host_counted_and_a_refusal_names_the_whole_call_index() -> None:
    jd, shop = FakeShard(), FakeShard()
    gateway = sharded(jd, shop)
    assert gateway.remove_targets(["jd:1", "ecshop:5", "jd:2", "ecshop:6"], TaskKind.ProductReviews) == 2
    assert (jd.removed, shop.removed) == ([["jd:1", "jd:2"]], [["ecshop:5", "ecshop:6"]])
    shop.refuse["ecshop:7"] = InvalidArgumentError("bad", code="InvalidId")
    with pytest.raises(InvalidArgumentError) as caught:
        gateway.remove_targets(["ecshop:8", "jd:3", "ecshop:7"], TaskKind.ProductReviews)
    assert caught.value.index == 2


def test_a_hold_goes_to_the_shard_of_its_host() -> None:
    jd, shop = FakeShard(), FakeShard()
    assert sharded(jd, shop).hold_host(HOSTS["ecshop"], 60.0, "") == 60.0
    assert (jd.held, shop.held) == ([], [HOSTS["ecshop"]])


def test_the_proxies_must_match_the_shard_count() -> None:
    with pytest.raises(ConfigError, match="2 scheduler proxies for a map of 3 shards"):
        ShardedScheduler([FakeShard(), FakeShard()], ShardMap(HOSTS, 3))


class DownShard(FakeShard):
    def lease(self, worker_id: str, count: int) -> list[Task]:
        raise ServiceError("cannot reach the scheduler (getUsers): ConnectionRefusedException")


def test_a_shard_that_does_not_answer_holds_up_only_its_own_tasks() -> None:
    gateway = sharded(DownShard(), FakeShard(["reviews:ecshop:1"]))
    assert [task.id for task in gateway.lease("w", 5)] == ["reviews:ecshop:1"]
    with pytest.raises(NoWorkError):  # the live shard has nothing due: wait, as with one scheduler
        gateway.lease("w", 5)
    with pytest.raises(ServiceError, match="ConnectionRefused"):  # none answers: back off, as with one scheduler
        sharded(DownShard(), DownShard()).lease("w", 5)


def test_a_shard_that_does_not_answer_a_report_does_not_make_the_others_take_it_twice() -> None:
    jd, shop = FakeShard(), FakeShard()
    gateway = sharded(jd, shop)
    shop.refuse["reviews:ecshop:1"] = ServiceError("cannot reach the scheduler (putUsers): timeout")
    batch = [report("reviews:jd:1"), report("reviews:ecshop:1")]
    with pytest.raises(ServiceError):
        gateway.report(batch)
    gateway.report(batch)  # what Sink does after a ServiceError: keep the batch, send it again later
    assert (jd.reports, shop.reports) == ([["reviews:jd:1"]], [["reviews:ecshop:1"]])


def test_a_report_another_shard_took_is_not_sent_again_however_often_a_shard_does_not_answer() -> None:
    """The memory of what the other shards took was forgotten by the first resend: when the silent shard failed that
    one too, the next resend sent the taken report again, which its shard refused (StaleLease), and the sink counted
    a report that was applied as lost."""
    jd, shop = FakeShard(), FakeShard()
    gateway = sharded(jd, shop)
    batch = [report("reviews:jd:1"), report("reviews:ecshop:1")]
    for _ in range(3):
        shop.refuse["reviews:ecshop:1"] = ServiceError("cannot reach the scheduler (putUsers): timeout")
        with pytest.raises(ServiceError):
            gateway.report(batch)
    gateway.report(batch)
    assert (jd.reports, shop.reports) == ([["reviews:jd:1"]], [["reviews:ecshop:1"]])
    gateway.report([report("reviews:jd:1")])  # once confirmed, the memory is spent: a later call is sent as it is
    assert jd.reports == [["reviews:jd:1"], ["reviews:jd:1"]]


class CutShard(FakeShard):
    """A shard whose getUsers the client's stop cut: sent, its answer abandoned."""

    def __init__(self, tasks: Sequence[str] = ()) -> None:
        super().__init__(tasks)
        self.leases = 0

    def lease(self, worker_id: str, count: int) -> list[Task]:
        self.leases += 1
        raise CallCutError("the scheduler did not answer getUsers before this client's stop deadline", sent=True)


def test_a_lease_call_the_stop_cut_is_not_retried_on_the_next_shard() -> None:
    """The stop's cut is no shard being down: moving on to the next shard sent a fresh getUsers, which could reach it
    after the daemon had opened the give-back's window (the cutoff moved on), leasing tasks nobody crawls."""
    cut, shop = CutShard(), FakeShard(["reviews:ecshop:1"])
    with pytest.raises(CallCutError):
        sharded(cut, shop).lease("w", 5)
    assert (cut.leases, shop.queue) == (1, ["reviews:ecshop:1"])
