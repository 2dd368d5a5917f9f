"""Start a real scheduler daemon (``icecrawler scheduler``) on a free loopback port, and client processes."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import Ice

from icecrawler import rpc
from icecrawler.processes import ManagedProcess, ProcessGroup, free_port, icecrawler_argv, wait_for_port
from scheduler_server.core import check_consistency
from scheduler_server.store import BdbQueueStore

WORKERS = "tests.scheduler.workers"
REPO = Path(__file__).resolve().parents[2]


@dataclass
class SchedulerDaemon:
    """One scheduler process; ``restart`` reuses the same port and database."""

    group: ProcessGroup
    tmp: Path
    settings: dict[str, str]
    port: int = 0
    process: ManagedProcess | None = None
    starts: int = 0

    @property
    def proxy(self) -> str:
        return f"{rpc.SCHEDULER_IDENTITY}:tcp -h 127.0.0.1 -p {self.port}"

    @property
    def db_dir(self) -> Path:
        return self.tmp / "db"

    def start(self) -> None:
        if not self.port:
            self.port = free_port()
        conf = self.tmp / "scheduler.conf"
        conf.write_text(f"SchedulerAdapter.Endpoints=tcp -h 127.0.0.1 -p {self.port}\nIce.ThreadPool.Server.Size=4\n")
        sets = [f"--set=scheduler.db_dir={self.db_dir}"] + [f"--set={k}={v}" for k, v in self.settings.items()]
        self.starts += 1
        argv = icecrawler_argv("scheduler", *sets, f"--Ice.Config={conf}")
        self.process = self.group.start(f"scheduler-{self.starts}", argv, cwd=REPO)
        wait_for_port("127.0.0.1", self.port, 30, alive=self.process.alive)

    def kill9(self) -> None:
        assert self.process is not None
        self.process.kill9()

    def stop(self) -> int | None:
        assert self.process is not None
        return self.process.stop()

    def client(self, name: str, mode: str, *args: str) -> ManagedProcess:
        """A client process running ``tests/scheduler/workers.py MODE``."""
        return self.group.start(name, [sys.executable, "-m", WORKERS, mode, "--proxy", self.proxy, *args], cwd=REPO)


@contextmanager
def scheduler_daemon(tmp: Path, **settings: Any) -> Iterator[SchedulerDaemon]:
    """A running scheduler with ``settings`` (dotted keys given with ``__``); everything stopped on exit."""
    with ProcessGroup(tmp / "logs") as group:
        daemon = SchedulerDaemon(group, tmp, {k.replace("__", "."): str(v) for k, v in settings.items()})
        daemon.start()
        yield daemon


#: A daemon that cycles tasks as fast as clients lease and report them: one-second leases, reaped every 0.1 s,
#: periods of 50 ms (the kill -9 and backup tests, which want the database written all the time).
CHURN_SETTINGS: dict[str, Any] = {
    "scheduler__lease_s": 1,
    "scheduler__maintenance_interval_s": 0.1,
    "scheduler__policy": "fixed",
    "scheduler__min_period_s": 0.05,
    "scheduler__initial_period_s": 0.05,
}

#: A daemon for the Ice-level tests: small batches so limits are easy to reach, long leases, a fixed period.
ICE_TEST_SETTINGS: dict[str, Any] = {
    "scheduler__batch_limit": 20,
    "scheduler__lease_s": 60,
    "scheduler__policy": "fixed",
    "scheduler__initial_period_s": 600,
}


@contextmanager
def scheduler_proxy(daemon: SchedulerDaemon) -> Iterator[Any]:
    with rpc.communicator() as comm:
        yield rpc.crawler().SchedulerPrx(comm, daemon.proxy)


def ice_error(call: Any) -> Ice.Exception:
    """The Ice exception ``call()`` raises (fails the test if it returns)."""
    try:
        call()
    except Ice.Exception as exc:
        return exc
    raise AssertionError("expected an Ice exception")


def audit(db_dir: Path, limit: int = 100_000) -> tuple[dict[str, int], list[str], set[str]]:
    """Open a scheduler's environment while no daemon runs on it (running recovery) and check every invariant:
    (per-state counts, problems, task ids)."""
    store = BdbQueueStore(db_dir)
    try:
        counts, problems = check_consistency(store)
        with store.transaction() as txn:
            ids = {key.decode() for key, _ in txn.scan("tasks", limit=limit)}
    finally:
        store.close()
    return counts, problems, ids
