"""The operator's hold on a host (``SchedulerCore.hold_host``, ``holdHost``, ``icecrawler hold``), over both stores:
none of the host's tasks is leased until the hold ends or is lifted, other hosts go on, the hold outlives a
restart, a lift also ends a ban's block early, a later ban only lengthens it, and bad arguments change nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from icecrawler.errors import InvalidArgumentError, NoWorkError
from icecrawler.models import Outcome, Report, TaskKind
from scheduler_server.core import SchedulerCore
from scheduler_server.store import QueueStore
from tests.scheduler.conftest import ManualClocks, make_settings

HOSTS = {"sources__jd__base_url": "https://club.jd.com", "sources__weibo_pc__base_url": "https://weibo.com"}


def two_host_core(store: QueueStore, clocks: ManualClocks) -> SchedulerCore:
    core = SchedulerCore.from_settings(make_settings(**HOSTS), store, clocks)
    core.add(["jd:1"], TaskKind.ProductReviews)
    core.add(["weibo_pc:1"], TaskKind.WeiboUser)
    return core


def leased(core: SchedulerCore) -> list[str]:
    """Lease what is due and give it back: the task ids (none: [])."""
    try:
        tasks = core.lease("w", 10)
    except NoWorkError:
        return []
    core.release([(task.id, task.lease_token) for task in tasks])
    return sorted(task.id for task in tasks)


def test_a_held_host_gets_no_lease_until_the_hold_ends(store: QueueStore, clocks: ManualClocks) -> None:
    core = two_host_core(store, clocks)
    assert core.hold_host("club.jd.com", 3600, "site maintenance") == 3600
    assert leased(core) == ["user:weibo_pc:1"]
    block = core.stats()["detail"]["hosts"]["club.jd.com"]["block"]
    assert block == {"held_for_s": 3600.0, "reason": "held by the operator: site maintenance"}
    assert (core.gauges()["held_hosts"], core.gauges()["blocked_hosts"]) == (1, 0)  # metrics tell it from a ban
    clocks.advance(3600)
    assert leased(core) == ["reviews:jd:1", "user:weibo_pc:1"]


def test_a_hold_outlives_a_restart_and_a_lift_does_too(store: QueueStore, clocks: ManualClocks) -> None:
    core = two_host_core(store, clocks)
    core.hold_host("club.jd.com", 3600, "")
    again = SchedulerCore.from_settings(make_settings(**HOSTS), store, clocks)
    assert leased(again) == ["user:weibo_pc:1"]
    assert again.hold_host("club.jd.com", 0, "") == 0
    assert leased(again) == ["reviews:jd:1", "user:weibo_pc:1"]
    third = SchedulerCore.from_settings(make_settings(**HOSTS), store, clocks)
    assert leased(third) == ["reviews:jd:1", "user:weibo_pc:1"]


def test_a_lift_ends_a_bans_block_and_a_ban_never_shortens_a_hold(store: QueueStore, clocks: ManualClocks) -> None:
    core = two_host_core(store, clocks)

    def ban(retry_after_s: float) -> None:
        """A jd crawl that was under way when the host was held reports a ban."""
        core.report([Report(jd.id, jd.lease_token, outcome=Outcome.Banned, retry_after_s=retry_after_s)])

    def held_for() -> float:
        return float(core.stats()["detail"]["hosts"]["club.jd.com"]["block"]["held_for_s"])

    jd = next(t for t in core.lease("w", 2) if t.id == "reviews:jd:1")
    ban(3000)
    assert "reviews:jd:1" not in leased(core)
    assert (core.gauges()["held_hosts"], core.gauges()["blocked_hosts"]) == (0, 1)
    core.hold_host("club.jd.com", 0, "")
    assert "reviews:jd:1" in leased(core) and held_for() == 0
    jd = next(t for t in core.lease("w", 2) if t.id == "reviews:jd:1")
    core.hold_host("club.jd.com", 60, "short")
    ban(3000)  # longer than the hold: the ban wins
    assert held_for() == 3000
    clocks.advance(3000)
    jd = next(t for t in core.lease("w", 2) if t.id == "reviews:jd:1")
    core.hold_host("club.jd.com", 3600, "long")
    ban(10)  # shorter than the hold: the hold stays
    assert held_for() == 3600


def test_bad_holds_change_nothing(store: QueueStore, clocks: ManualClocks) -> None:
    core = two_host_core(store, clocks)
    for host, seconds, reason, field in (
        ("nowhere.example", 60, "", "host"),
        ("club.jd.com", -1, "", "seconds"),
        ("club.jd.com", float("nan"), "", "seconds"),
        ("club.jd.com", 400 * 86400, "", "seconds"),
        ("club.jd.com", 60, "x" * 300, "reason"),
    ):
        with pytest.raises(InvalidArgumentError) as caught:
            core.hold_host(host, seconds, reason)
        assert caught.value.field == field
    assert leased(core) == ["reviews:jd:1", "user:weibo_pc:1"]


def test_a_shard_refuses_a_host_of_another_shard(store: QueueStore, clocks: ManualClocks) -> None:
    settings = make_settings(**HOSTS, scheduler__shards=2, scheduler__shard=0)
    core = SchedulerCore.from_settings(settings, store, clocks)
    from icecrawler.shards import shard_of_host

    other = next(host for host in ("club.jd.com", "weibo.com") if shard_of_host(host, 2) == 1)
    with pytest.raises(InvalidArgumentError) as caught:
        core.hold_host(other, 60, "")
    assert caught.value.code == "WrongShard"


def test_a_sites_wait_past_the_longest_period_holds_the_host_that_long_and_keeps_the_batch(
    store: QueueStore, clocks: ManualClocks
) -> None:
    """A site may ask for any wait (``Retry-After: 9999999``, JD's ``wait``): the report is the site's word, not a
    bad argument. Refusing it refused the whole batch (the client sent the others again without it): that report was
    lost and the host not held at all; the host is held for the longest period instead. A wait that is not a finite
    number of seconds is still refused, naming the field, and changes nothing."""
    core = two_host_core(store, clocks)
    tasks = {task.id: task for task in core.lease("w", 2)}
    jd, weibo = tasks["reviews:jd:1"], tasks["user:weibo_pc:1"]
    for bad in (float("inf"), float("nan"), -1.0):
        # Named as what it is not ("inf is outside [0, inf]" said nothing).
        with pytest.raises(InvalidArgumentError, match=r"retryAfterS=.* is not a finite number >= 0$"):
            core.report([Report(jd.id, jd.lease_token, outcome=Outcome.RateLimited, retry_after_s=bad)])
    assert core.stats()["detail"]["hosts"]["club.jd.com"]["block"]["held_for_s"] == 0
    core.report(
        [
            Report(jd.id, jd.lease_token, outcome=Outcome.RateLimited, retry_after_s=9_999_999.0),
            Report(weibo.id, weibo.lease_token, outcome=Outcome.Ok),
        ]
    )
    block = core.stats()["detail"]["hosts"]["club.jd.com"]["block"]
    assert block["held_for_s"] == pytest.approx(3600.0, abs=1.0)  # scheduler.max_period_s of make_settings
    assert core.task_info("user:weibo_pc:1")["state"] != "leased"


@pytest.mark.bdb
@pytest.mark.slow
def test_a_hold_outlives_a_restart_behind_a_million_open_gaps(tmp_path: Path, clocks: ManualClocks) -> None:
    """The start-up read of the ``meta`` table stopped at its first million entries, and the page-cap gap marks
    (one per task with an open gap: a first crawl of every product with more reviews than ``client.max_pages``
    opens one) sort before the host holds, the layout and the calibration: a restart behind that many dropped the
    operator's holds and the bans' blocks without a word. It now reads the whole table, chunk by chunk."""
    from scheduler_server.startup import GAP_KEY, GAP_VALUE
    from scheduler_server.store import BdbQueueStore

    store = BdbQueueStore(tmp_path / "db", durable=False)
    try:
        core = two_host_core(store, clocks)
        core.hold_host("club.jd.com", 3600, "site maintenance")
        gaps = 1_000_000
        for start in range(0, gaps, 20_000):
            with store.transaction() as txn:
                for n in range(start, start + 20_000):
                    txn.put("meta", GAP_KEY + f"reviews:jd:{n + 10}".encode(), GAP_VALUE)
        again = SchedulerCore.from_settings(make_settings(**HOSTS), store, clocks)
        assert leased(again) == ["user:weibo_pc:1"]
        assert again.stats()["detail"]["hosts"]["club.jd.com"]["block"]["held_for_s"] == 3600.0
        assert len(again.open_gaps) == gaps
    finally:
        store.close()
