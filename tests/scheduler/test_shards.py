"""Scheduler shards: one shard holds only its hosts' tasks, a database keeps its layout, and configurations that
would split a budget over shards are refused. Core-level (real Berkeley DB where the database matters); the
same over real Ice, with the clients' routing gateway, is in test_shards_ice.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from icecrawler.errors import ConfigError, InvalidArgumentError
from icecrawler.models import Report, TaskKind
from icecrawler.settings import Settings
from icecrawler.shards import ShardMap, shard_of_host, source_hosts
from scheduler_server.core import SchedulerCore
from scheduler_server.store import BdbQueueStore, MemoryQueueStore
from tests.scheduler.conftest import ManualClocks, make_settings

#: With 2 shards, jd's host hashes to shard 0 and ecshop's to shard 1 (asserted below).
TWO_HOSTS = {
    "sources__jd__base_url": "http://127.0.0.1:8800/jd",
    "sources__ecshop__base_url": "http://127.0.0.3:8800/ecshop",
}


def shard_settings(shard: int, shards: int = 2, **overrides: object) -> Settings:
    return make_settings(scheduler__shards=shards, scheduler__shard=shard, **TWO_HOSTS, **overrides)


def test_the_two_test_hosts_land_on_different_shards() -> None:
    assert shard_of_host("127.0.0.1:8800", 2) == 0
    assert shard_of_host("127.0.0.3:8800", 2) == 1
    shard_map = ShardMap(source_hosts(shard_settings(0)), 2)
    assert shard_map.of_task("reviews:jd:1") == 0 and shard_map.of_target("ecshop:7") == 1
    assert shard_map.of_task("not-a-task-id") == 0  # its owner rejects it as InvalidId


def test_a_shard_adds_only_its_own_hosts_ids(clocks: ManualClocks) -> None:
    core = SchedulerCore.from_settings(shard_settings(0), MemoryQueueStore(), clocks)
    assert core.add(["jd:1", "jd:2"], TaskKind.ProductReviews) == 2
    with pytest.raises(InvalidArgumentError) as caught:
        core.add(["jd:3", "ecshop:9"], TaskKind.ProductReviews)
    assert (caught.value.code, caught.value.index) == ("WrongShard", 1)
    assert "shard 1 of 2" in str(caught.value)
    assert core.stats()["tasks"] == 2  # the refused batch added nothing, jd:3 included
    assert (core.stats()["detail"]["shard"], core.stats()["detail"]["shards"]) == (0, 2)


def test_an_unsharded_scheduler_takes_every_host(clocks: ManualClocks) -> None:
    core = SchedulerCore.from_settings(make_settings(**TWO_HOSTS), MemoryQueueStore(), clocks)
    assert core.add(["jd:1", "ecshop:1"], TaskKind.ProductReviews) == 2


@pytest.mark.bdb
def test_a_database_refuses_to_open_as_another_shard_or_shard_count(tmp_path: Path, clocks: ManualClocks) -> None:
    store = BdbQueueStore(tmp_path / "db")
    SchedulerCore.from_settings(shard_settings(1), store, clocks).add(["ecshop:1"], TaskKind.ProductReviews)
    store.close()
    for wrong in (shard_settings(0), shard_settings(1, shards=3), make_settings(**TWO_HOSTS)):
        store = BdbQueueStore(tmp_path / "db")
        with pytest.raises(ConfigError, match="shard 1 of 2"):
            SchedulerCore.from_settings(wrong, store, clocks)
        store.close()
    store = BdbQueueStore(tmp_path / "db")  # the right layout still opens, with its task
    assert SchedulerCore.from_settings(shard_settings(1), store, clocks).stats()["tasks"] == 1
    store.close()


def test_an_account_serving_hosts_of_two_shards_is_refused(tmp_path: Path, clocks: ManualClocks) -> None:
    """An account's request budget is counted by one process; spread over two shards it would be spent twice."""
    (tmp_path / "pool.toml").write_text('[[account]]\nid = "a1"\ncookies = "SUB=x"\nsources = ["jd", "ecshop"]\n')
    with pytest.raises(ConfigError, match="a1 serves sources on different scheduler shards"):
        SchedulerCore.from_settings(
            shard_settings(0, scheduler__accounts_dir=str(tmp_path)), MemoryQueueStore(), clocks
        )
    one_host = tmp_path / "one"
    one_host.mkdir()
    (one_host / "pool.toml").write_text('[[account]]\nid = "a2"\ncookies = "SUB=x"\nsources = ["jd"]\n')
    SchedulerCore.from_settings(shard_settings(0, scheduler__accounts_dir=str(one_host)), MemoryQueueStore(), clocks)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"scheduler__shard": 2}, "0 <= scheduler.shard < scheduler.shards"),
        ({"scheduler__shard": -1}, "0 <= scheduler.shard < scheduler.shards"),
        ({"scheduler__fetch_budget_per_s": 5.0, "scheduler__policy": "rate"}, "cannot be used with scheduler.shards"),
    ],
)
def test_bad_shard_settings_are_config_errors(overrides: dict[str, object], message: str, clocks: ManualClocks) -> None:
    settings = make_settings(**{"scheduler__shards": 2, "scheduler__shard": 0, **TWO_HOSTS, **overrides})
    with pytest.raises(ConfigError, match=message):
        SchedulerCore.from_settings(settings, MemoryQueueStore(), clocks)


def test_a_listing_report_adds_its_products_on_its_own_shard(clocks: ManualClocks) -> None:
    """A listing's products belong to its source, hence to its host and its shard: the shard that leased the
    listing adds them (there is no other shard to ask)."""
    core = SchedulerCore.from_settings(shard_settings(1), MemoryQueueStore(), clocks)
    core.add(["ecshop:5"], TaskKind.Listing)
    task = core.lease("w", 1)[0]
    core.report([Report(task.id, task.lease_token, discovered_ids=("71", "72"))])
    assert core.stats()["tasks"] == 3
    assert {t.id for t in core.lease("w", 5)} == {"reviews:ecshop:71", "reviews:ecshop:72"}
