"""A scheduler run as two shard daemons (real Ice, real Berkeley DB), used the way clients use it: through the
routing gateway (``Scheduler.Proxies``), ``icecrawler seed`` and ``icecrawler status``."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from crawler_client.gateways import ShardedScheduler, scheduler_gateway
from icecrawler import rpc
from icecrawler.errors import NoWorkError
from icecrawler.models import Outcome, Report, TaskKind
from icecrawler.processes import icecrawler_argv
from tests.scheduler.daemon import REPO, SchedulerDaemon, ice_error, scheduler_daemon, scheduler_proxy
from tests.scheduler.test_shards import TWO_HOSTS, shard_settings

pytestmark = [pytest.mark.ice, pytest.mark.bdb]

SETTINGS = {
    **TWO_HOSTS,
    "scheduler__shards": 2,
    "scheduler__policy": "fixed",
    "scheduler__min_period_s": 60,
    "scheduler__initial_period_s": 60,
    "log__level": "WARNING",
}


@contextmanager
def two_shards(tmp: Path) -> Iterator[list[SchedulerDaemon]]:
    with ExitStack() as stack:
        for shard in (0, 1):
            (tmp / f"shard{shard}").mkdir()
        yield [
            stack.enter_context(scheduler_daemon(tmp / f"shard{shard}", scheduler__shard=shard, **SETTINGS))
            for shard in (0, 1)
        ]


def client_properties(shards: list[SchedulerDaemon]) -> dict[str, str]:
    return {"Scheduler.Proxies": ";".join(daemon.proxy for daemon in shards)}


def test_clients_seed_lease_report_and_remove_across_shards_each_task_on_its_hosts_shard(tmp_path: Path) -> None:
    ids = [f"jd:{n}" for n in range(30)] + [f"ecshop:{n}" for n in range(20)]
    with two_shards(tmp_path) as shards, rpc.communicator(properties=client_properties(shards)) as comm:
        gateway = scheduler_gateway(comm, shard_settings(0))
        assert isinstance(gateway, ShardedScheduler)
        assert gateway.add_targets(ids, TaskKind.ProductReviews) == 50
        assert gateway.add_targets(ids[:5], TaskKind.ProductReviews) == 0  # known ids, on their own shard
        leased: list[str] = []
        for _ in range(20):  # bounded: 50 tasks in batches of 8 take 7 leases per shard at most
            try:
                tasks = gateway.lease("w", 8)
            except NoWorkError:
                break
            leased += [task.id for task in tasks]
            gateway.report(
                [
                    Report(task_id=task.id, lease_token=task.lease_token, outcome=Outcome.Ok, new_items=1, fetches=1)
                    for task in tasks
                ]
            )
        assert sorted(leased) == sorted(f"reviews:{text}" for text in ids)  # every task once, none twice
        for daemon, source, count in ((shards[0], "jd", 30), (shards[1], "ecshop", 20)):
            with scheduler_proxy(daemon) as proxy:
                stats = proxy.stats()
                assert (stats.tasks, stats.pending, stats.inflight, stats.done) == (count, count, 0, count)
                assert json.loads(stats.detailJson)["shard"] == int(source == "ecshop")
        assert gateway.remove_targets(["jd:0", "ecshop:0", "jd:1", "ecshop:99"], TaskKind.ProductReviews) == 3
        assert [tasks_on(daemon) for daemon in shards] == [28, 19]


def tasks_on(daemon: SchedulerDaemon) -> int:
    with scheduler_proxy(daemon) as proxy:
        return int(proxy.stats().tasks)


def test_a_shard_refuses_another_shards_ids_with_wrong_shard(tmp_path: Path) -> None:
    with two_shards(tmp_path) as shards, scheduler_proxy(shards[0]) as proxy:
        C = rpc.crawler()
        error = ice_error(lambda: proxy.addUsers(["jd:1", "ecshop:1"], C.TaskKind.ProductReviews))
        assert isinstance(error, C.InvalidArgument)
        assert (error.code, error.index) == (C.ErrorCode.WrongShard, 1)
        assert proxy.stats().tasks == 0
        proxy.addUsers(["jd:1"], C.TaskKind.ProductReviews)
        error = ice_error(lambda: proxy.removeUsers(["jd:1", "ecshop:1"], C.TaskKind.ProductReviews))
        assert isinstance(error, C.InvalidArgument) and (error.code, error.index) == (C.ErrorCode.WrongShard, 1)
        assert proxy.stats().tasks == 1


def test_seed_and_status_route_and_add_up_over_the_shards(tmp_path: Path) -> None:
    with two_shards(tmp_path) as shards:
        conf = tmp_path / "client.conf"
        conf.write_text("".join(f"{key}={value}\n" for key, value in client_properties(shards).items()))
        sets = [f"--set={key.replace('__', '.')}={value}" for key, value in TWO_HOSTS.items()]
        seeded = subprocess.run(
            [*icecrawler_argv("seed"), *sets, "jd:1", "jd:2", "ecshop:3", f"--Ice.Config={conf}"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert seeded.returncode == 0, seeded.stderr
        assert "reviews: 3 new of 3" in seeded.stdout
        status = subprocess.run(
            [*icecrawler_argv("status"), *sets, "--json", f"--Ice.Config={conf}"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert status.returncode == 0, status.stderr
        section = json.loads(status.stdout)["scheduler"]
        assert (section["tasks"], section["pending"], section["shards"]) == (3, 3, 2)
        assert [shard["tasks"] for shard in section["by_shard"]] == [2, 1]
        assert "revisit" not in section and [shard["revisit"] for shard in section["by_shard"]] == [{}, {}]
        text = subprocess.run(
            [*icecrawler_argv("status"), *sets, f"--Ice.Config={conf}"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert text.returncode == 0, text.stderr
        assert "scheduler: 3 tasks" in text.stdout and "2 shards: #0 2 tasks, #1 1 tasks" in text.stdout
        task = subprocess.run(
            [*icecrawler_argv("status"), *sets, "--task", "reviews:ecshop:3", "--json", f"--Ice.Config={conf}"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert task.returncode == 0, task.stderr
        assert json.loads(task.stdout)["id"] == "reviews:ecshop:3"
        shards[1].stop()
        down = subprocess.run(
            [*icecrawler_argv("status"), *sets, f"--Ice.Config={conf}"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert down.returncode != 0
        assert "cannot reach the scheduler shard 1" in down.stderr


def test_a_shard_database_will_not_start_as_another_shard(tmp_path: Path) -> None:
    with scheduler_daemon(tmp_path, scheduler__shard=0, **SETTINGS) as daemon:
        daemon.stop()
    sets = [f"--set={key.replace('__', '.')}={value}" for key, value in SETTINGS.items()]
    wrong = subprocess.run(
        [
            *icecrawler_argv("scheduler"),
            f"--set=scheduler.db_dir={daemon.db_dir}",
            "--set=scheduler.shard=1",
            *sets,
            "--Ice.Default.Host=127.0.0.1",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert wrong.returncode != 0
    assert "this scheduler database is shard 0 of 2" in wrong.stderr
    assert "icecrawler reshard" in wrong.stderr  # the way to another shard count
