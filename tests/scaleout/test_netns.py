"""Network faults with real network separation: every role runs in its own Linux network namespace ("machine"),
the machines are joined by veth pairs on a bridge, and a test pulls one machine's cable mid-crawl
(``ip link set ... down`` on the bridge side).

Why: a crawler that only survives clean process exits is not done. Packets that silently vanish are what a
real cut looks like (no RST, no FIN), so the clients see timeouts, not refusals. The three cases:

* a client is cut off for good: its leases expire and return to pending, the other client crawls those
  tasks, and every sandbox item is stored exactly once;
* storage is unreachable for a while: the client buffers records (bounded), reports nothing it has not
  stored, and after the heal every item is stored exactly once with no task crawled twice;
* the scheduler is unreachable for a while: the client keeps its crawled-but-unreported results and reports
  them when it is back (before the leases expire): no lease expires, no task is crawled twice.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from icecrawler.processes import ManagedProcess, ProcessGroup, poll_until
from icecrawler_local.launcher import Cluster, Workload
from tests.requirements import skip_or_fail
from tests.scaleout.netlab import NetLab

pytestmark = [pytest.mark.ice, pytest.mark.e2e, pytest.mark.slow]

SANDBOX_PORT, SCHEDULER_PORT, STORAGE_PORT = 8800, 10000, 10001
#: Short Ice timeouts on the clients so an outage is noticed in seconds (the default invocation timeout is 30 s).
CLIENT_ICE = {"Ice.Default.InvocationTimeout": "2000", "Ice.Connection.Client.ConnectTimeout": "2"}


@pytest.fixture
def lab() -> Iterator[NetLab]:
    reason = NetLab.available()
    if reason is not None:
        skip_or_fail(f"NETWORK NAMESPACES UNAVAILABLE, network-fault tests not run: {reason}")
    with NetLab() as lab:
        yield lab


class Deployment:
    """Sandbox, scheduler and storage each on its own machine; each client on its own.

    Everything starts at once (clients retry until the servers listen): on a loaded 2-core machine Python
    start-up dominates, and starting in sequence would double the test's run time.
    """

    def __init__(
        self,
        lab: NetLab,
        work: Path,
        group: ProcessGroup,
        workload: Workload,
        scheduler_settings: dict[str, Any],
        latency_ms: int,
        clients: dict[str, dict[str, Any]],
    ) -> None:
        self.lab = lab
        self.site, self.sched, self.store = lab.add("site"), lab.add("sched"), lab.add("store")
        self.cluster = Cluster(work, group, workload, settings={"client.progress_log_s": 2.0, **scheduler_settings})
        servers = [
            (
                self.cluster.start_sandbox(
                    self.site.address, SANDBOX_PORT, latency_ms, wrap=self.site.argv, wait=False
                ),
                self.site,
                SANDBOX_PORT,
            ),
            (
                self.cluster.start_server(
                    "scheduler", self.sched.address, SCHEDULER_PORT, wrap=self.sched.argv, wait=False
                ),
                self.sched,
                SCHEDULER_PORT,
            ),
            (
                self.cluster.start_server(
                    "storage", self.store.address, STORAGE_PORT, wrap=self.store.argv, wait=False
                ),
                self.store,
                STORAGE_PORT,
            ),
        ]
        self.scheduler_proxy = f"scheduler:tcp -h {self.sched.address} -p {SCHEDULER_PORT}"
        self.storage_proxy = f"storage:tcp -h {self.store.address} -p {STORAGE_PORT}"
        self.clients = {name: self._client(name, settings) for name, settings in clients.items()}
        for process, host, port in servers:
            self.cluster.wait_listening(process, host.address, port, wrap=host.argv, timeout_s=60)
        self.cluster.seed(self.scheduler_proxy, wrap=self.sched.argv)

    def _client(self, name: str, settings: dict[str, Any]) -> ManagedProcess:
        host = self.lab.add(name)
        return self.cluster.start_client(
            name,
            self.scheduler_proxy,
            self.storage_proxy,
            (self.site.address, SANDBOX_PORT),
            wrap=host.argv,
            settings=settings,
            ice=CLIENT_ICE,
        )

    def probe(self) -> dict[str, Any]:
        return self.cluster.probe(self.scheduler_proxy, wrap=self.sched.argv)

    def finished(self) -> bool:
        return not self.cluster.problems()


def _log(process: ManagedProcess) -> str:
    return process.log_path.read_text(errors="replace")


def test_client_cut_off_mid_crawl_its_leases_return_nothing_lost(lab: NetLab, tmp_path: Path) -> None:
    workload = Workload(jd_products=24, reviews_per_product=30, weibo_users=8, posts_per_user=20)
    with ProcessGroup(tmp_path / "logs") as group:
        settings = {"client.workers": 2, "client.batch": 2}
        dep = Deployment(
            lab,
            tmp_path / "work",
            group,
            workload,
            {"scheduler.lease_s": 8.0},
            latency_ms=400,
            clients={"c1": settings, "c2": settings},
        )
        c1, c2 = dep.clients["c1"], dep.clients["c2"]

        # Mid-crawl: items are being stored and c1 holds leases. Then pull c1's cable.
        held: list[str] = []

        def c1_holds_leases() -> bool:
            tasks = dep.probe()["tasks"]
            held[:] = [tid for tid, task in tasks.items() if task["state"] == "inflight" and task["worker"] == "c1"]
            return bool(held) and dep.cluster.stored_items() > 0

        assert poll_until(c1_holds_leases, 60, 0.2), "c1 never held a lease mid-crawl"
        lab.cut("c1")
        # What c1 holds at the moment of the cut: it may have reported a task between the probe above and the
        # cut, but nothing it sends after the cut arrives, so a probe now names exactly the stranded leases.
        held[:] = [
            tid for tid, task in dep.probe()["tasks"].items() if task["state"] == "inflight" and task["worker"] == "c1"
        ]
        assert held, "c1 finished all its tasks just before the cut; nothing was stranded"

        assert poll_until(dep.finished, 80, 1.0), dep.cluster.problems()
        info = dep.probe()
        assert info["stats"]["inflight"] == 0
        for task_id in held:
            task = info["tasks"][task_id]
            # The lease c1 held came back (expired → pending) and c2 crawled the task.
            assert task["state"] == "pending" and task["worker"] == "c2" and task["crawls"] >= 1, task
        assert all(task["crawls"] >= 1 for task in info["tasks"].values())
        assert c2.alive(), _log(c2)
        assert not dep.cluster.problems()
        # The cut-off machine is gone for good: no clean shutdown to wait for (it would retry for its grace time).
        # Plugging the cable back in afterwards lets its kernel reset the dead connections, so the servers stop
        # at once instead of waiting Ice's close timeout (10 s) for a peer that vanished without a FIN.
        c1.kill9()
        lab.heal("c1")


def _progress_max(process: ManagedProcess, field: str) -> int:
    """The largest value the client's progress lines reported for ``field`` (e.g. buffered_records)."""
    values = [int(m.group(1)) for m in re.finditer(rf"\b{field}=(\d+)", _log(process))]
    return max(values, default=0)


@contextlib.contextmanager
def _outage(
    lab: NetLab, tmp_path: Path, victim: str, lease_s: float, settings: dict[str, Any], noticed: str
) -> Iterator[tuple[Deployment, ManagedProcess]]:
    """A one-client crawl during which ``victim``'s cable is pulled mid-crawl, until the client logs ``noticed``
    (and a few seconds more), then plugged back in. Yields the deployment and the client for the checks."""
    workload = Workload(jd_products=16, reviews_per_product=30, weibo_users=6, posts_per_user=20)
    with ProcessGroup(tmp_path / "logs") as group:
        dep = Deployment(
            lab,
            tmp_path / "work",
            group,
            workload,
            {"scheduler.lease_s": lease_s},
            latency_ms=300,
            clients={"c1": settings},
        )
        c1 = dep.clients["c1"]
        assert poll_until(lambda: dep.cluster.stored_items() > 0, 60, 0.5), _log(c1)
        lab.cut(victim)
        # The client notices through its short invocation timeout.
        assert poll_until(lambda: noticed in _log(c1), 40, 0.5), _log(c1)
        time.sleep(5)
        lab.heal(victim)
        assert poll_until(dep.finished, 80, 1.0), dep.cluster.problems()
        yield dep, c1


def test_storage_unreachable_records_buffered_then_stored_once(lab: NetLab, tmp_path: Path) -> None:
    # A small buffer, so the outage fills it and the client must stop leasing.
    settings = {"client.workers": 2, "client.batch": 2, "client.buffer_records": 60, "client.max_backoff_s": 2.0}
    with _outage(lab, tmp_path, "store", 90.0, settings, "storage unavailable") as (dep, c1):
        info = dep.probe()
        assert info["stats"]["inflight"] == 0
        # Leases outlived the outage: every task was reported once, only after its records were stored.
        assert all(task["crawls"] == 1 for task in info["tasks"].values()), info["tasks"]
        log = _log(c1)
        assert "record(s) buffered" in log
        assert "results_expired" not in log and "not stored" not in log, log
        assert c1.alive()
        # Bounded: past client.buffer_records (60) it stops leasing, so at most the tasks it already holds
        # (workers + one batch) add to the buffer.
        most = _progress_max(c1, "buffered_records")
        bound = 60 + (2 + 2) * dep.cluster.workload.reviews_per_product
        assert 0 < most <= bound, f"{most} records buffered > {bound}: the client leased on past its buffer bound"


def test_scheduler_unreachable_results_kept_and_reported_later(lab: NetLab, tmp_path: Path) -> None:
    # lease_s 30: kept reports must arrive within it; leases granted in getUsers replies that the cut swallowed
    # (the scheduler leased, the client never heard) come back after it.
    settings = {"client.workers": 2, "client.batch": 2, "client.max_backoff_s": 2.0}
    with _outage(lab, tmp_path, "sched", 30.0, settings, "report(s) kept") as (dep, c1):
        assert poll_until(lambda: dep.probe()["stats"]["inflight"] == 0, 40, 1.0)
        info = dep.probe()
        assert all(task["crawls"] >= 1 for task in info["tasks"].values()), info["tasks"]
        log = _log(c1)
        # Every kept result reached the scheduler under its lease: none expired while kept, no records dropped.
        # (A "LeaseLost ... dropped" line is fine: a putUsers that timed out during the cut was delivered after
        # the heal, so the resend of that report is refused as a duplicate.)
        assert "results_expired" not in log and "not stored" not in log, log
        assert _progress_max(c1, "pending_results") > 0
        assert c1.alive()
