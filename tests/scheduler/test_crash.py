"""kill -9 of the scheduler at random moments under load from several client processes: after every
restart each seeded id exists exactly once, pending or in flight. Nothing lost, nothing duplicated."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from icecrawler import rpc
from scheduler_server.core import check_consistency
from scheduler_server.store import BdbQueueStore
from tests.scheduler.daemon import scheduler_daemon, scheduler_proxy

pytestmark = [pytest.mark.ice, pytest.mark.bdb, pytest.mark.e2e, pytest.mark.slow]

C = rpc.crawler()
KILLS = 20
SEEDS = 120
CLIENTS = 3


def audit(db_dir: Path) -> tuple[dict[str, int], list[str], set[str]]:
    """Open the environment (running recovery) while the scheduler is dead and check every invariant."""
    store = BdbQueueStore(db_dir)
    try:
        counts, problems = check_consistency(store)
        with store.transaction() as txn:
            ids = {key.decode() for key, _ in txn.scan("tasks", limit=10 * SEEDS)}
    finally:
        store.close()
    return counts, problems, ids


def test_kill_9_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    rng = random.Random(20261129)
    seeded = {f"user:weibo_pc:{n}" for n in range(SEEDS)}
    with scheduler_daemon(tmp_path, fast_start=True, scheduler__lease_s=1, scheduler__maintenance_interval_s=0.1,
                          scheduler__policy="fixed", scheduler__min_period_s=0.05,
                          scheduler__initial_period_s=0.05) as daemon:
        with scheduler_proxy(daemon) as prx:
            assert prx.addUsers([i.split(":", 1)[1] for i in sorted(seeded)], C.TaskKind.WeiboUser) == SEEDS
        clients = [daemon.client(f"churn-{n}", "churn", "--name", f"c{n}", "--batch", "7", "--seconds", "300")
                   for n in range(CLIENTS)]
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
