"""kill -9 of the scheduler at random moments under load from several client processes: after every
restart each seeded id exists exactly once, pending or in flight. Nothing lost, nothing duplicated."""

from __future__ import annotations

import json
import random
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import pytest

from crawler_client.gateways import scheduler_gateway
from icecrawler import rpc
from icecrawler.models import TaskKind
from tests.scheduler.daemon import CHURN_SETTINGS, REPO, WORKERS, audit, scheduler_daemon, scheduler_proxy
from tests.scheduler.test_shards import TWO_HOSTS, shard_settings

pytestmark = [pytest.mark.ice, pytest.mark.bdb, pytest.mark.e2e, pytest.mark.slow]

C = rpc.crawler()
KILLS = 20
SEEDS = 120
CLIENTS = 3


def test_kill_9_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    rng = random.Random(20261129)
    seeded = {f"user:weibo_pc:{n}" for n in range(SEEDS)}
    with scheduler_daemon(
        tmp_path,
        **CHURN_SETTINGS,
    ) as daemon:
        with scheduler_proxy(daemon) as prx:
            assert prx.addUsers([i.split(":", 1)[1] for i in sorted(seeded)], C.TaskKind.WeiboUser) == SEEDS
        clients = [
            daemon.client(f"churn-{n}", "churn", "--name", f"c{n}", "--batch", "7", "--seconds", "300")
            for n in range(CLIENTS)
        ]
        time.sleep(1.0)
        for kill in range(KILLS):
            time.sleep(rng.uniform(0.05, 0.4))
            daemon.kill9()
            counts, problems, ids = audit(daemon.db_dir)
            assert problems == [], f"after kill {kill}: {problems[:5]}"
            assert ids == seeded and counts["tasks"] == SEEDS
            assert counts["pending"] + counts["inflight"] == SEEDS
            daemon.start()
        with scheduler_proxy(daemon) as prx:
            stats = prx.stats()
        assert stats.tasks == SEEDS and stats.pending + stats.inflight == SEEDS
        assert stats.done > SEEDS  # the clients really cycled tasks between the kills
        assert all(client.alive() for client in clients), "a client died instead of riding out the restarts"
        assert daemon.starts == KILLS + 1


def test_kill_9_while_targets_are_removed_and_added_again(tmp_path: Path) -> None:
    """The operator removes targets and adds them back in a loop while clients churn and the scheduler is killed:
    after every restart the database is consistent, no other target is touched, and each reseeded one is there at
    most once, pending or in flight."""
    rng = random.Random(20261205)
    seeded = {f"user:weibo_pc:{n}" for n in range(SEEDS)}
    reseeded = {f"user:weibo_pc:{n}" for n in range(0, SEEDS, 6)}
    with scheduler_daemon(tmp_path, **CHURN_SETTINGS) as daemon:
        with scheduler_proxy(daemon) as prx:
            assert prx.addUsers([i.split(":", 1)[1] for i in sorted(seeded)], C.TaskKind.WeiboUser) == SEEDS
        clients = [
            daemon.client(f"churn-{n}", "churn", "--name", f"c{n}", "--batch", "7", "--seconds", "300")
            for n in range(2)
        ]
        ids = ",".join(i.split(":", 1)[1] for i in sorted(reseeded))
        operator = daemon.client("operator", "reseed", "--ids", ids, "--seconds", "12")
        time.sleep(1.0)
        for kill in range(8):
            time.sleep(rng.uniform(0.05, 0.4))
            daemon.kill9()
            counts, problems, present = audit(daemon.db_dir)
            assert problems == [], f"after kill {kill}: {problems[:5]}"
            assert seeded - reseeded <= present <= seeded, sorted(present ^ seeded)[:5]
            assert counts["pending"] + counts["inflight"] == counts["tasks"] == len(present)
            daemon.start()
        assert operator.popen.wait(timeout=60) == 0
        done = json.loads(operator.log_path.read_text().strip().splitlines()[-1])
        assert done["removed"] > 0 and done["added"] > 0, done
        assert all(client.alive() for client in clients), "a client died instead of riding out the restarts"


def test_kill_9_of_either_shard_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    """The same with the scheduler run as 2 shards, used through the clients' routing gateway: each kill hits a
    random shard, the other keeps serving its hosts, and every id stays on its own shard exactly once."""
    rng = random.Random(20261130)
    seeded = {f"reviews:{source}:{n}" for source in ("jd", "ecshop") for n in range(SEEDS // 2)}
    settings = {
        **TWO_HOSTS,
        "scheduler__shards": 2,
        "scheduler__lease_s": 1,
        "scheduler__policy": "fixed",
        "scheduler__maintenance_interval_s": 0.1,
        "scheduler__min_period_s": 0.05,
        "scheduler__initial_period_s": 0.05,
    }
    with ExitStack() as stack:
        shards = []
        for shard in (0, 1):
            (tmp_path / f"shard{shard}").mkdir()
            shards.append(
                stack.enter_context(scheduler_daemon(tmp_path / f"shard{shard}", scheduler__shard=shard, **settings))
            )
        proxies = ";".join(daemon.proxy for daemon in shards)
        with rpc.communicator(properties={"Scheduler.Proxies": proxies}) as comm:
            gateway = scheduler_gateway(comm, shard_settings(0))
            assert gateway.add_targets(sorted(i.split(":", 1)[1] for i in seeded), TaskKind.ProductReviews) == SEEDS
        hosts = [f"--host={key.split('__')[1]}={value.split('/')[2]}" for key, value in TWO_HOSTS.items()]
        clients = [
            shards[0].group.start(
                f"shard-churn-{n}",
                [
                    sys.executable,
                    "-m",
                    WORKERS,
                    "shard-churn",
                    "--proxy",
                    proxies,
                    "--name",
                    f"c{n}",
                    "--batch",
                    "7",
                    "--seconds",
                    "300",
                    *hosts,
                ],
                cwd=REPO,
            )
            for n in range(CLIENTS)
        ]
        time.sleep(1.0)
        for kill in range(KILLS):
            time.sleep(rng.uniform(0.05, 0.4))
            daemon = rng.choice(shards)
            daemon.kill9()
            counts, problems, ids = audit(daemon.db_dir)
            assert problems == [], f"after kill {kill}: {problems[:5]}"
            assert ids == {i for i in seeded if (":ecshop:" in i) == (daemon is shards[1])}
            assert counts["pending"] + counts["inflight"] == SEEDS // 2
            daemon.start()
        done = 0
        for daemon in shards:
            with scheduler_proxy(daemon) as prx:
                stats = prx.stats()
            assert stats.tasks == SEEDS // 2 and stats.pending + stats.inflight == SEEDS // 2
            done += stats.done
        assert done > SEEDS  # the clients really cycled tasks of both shards between the kills
        assert all(client.alive() for client in clients), "a client died instead of riding out the restarts"
        assert sum(daemon.starts for daemon in shards) == KILLS + 2
