"""A whole local crawl on loopback, sharing one accelerated clock: the sandbox sites, a scheduler (Berkeley DB),
a storage server (embedded SQLite) and any number of ``icecrawler client`` processes, started by the one
launcher (``icecrawler_local.launcher.Cluster``) on free ports under one var directory, and judged by the one oracle
(``icecrawler_local.oracle``).

``icecrawler demo`` and the end-to-end tests drive the same stack, so what the demo shows is what the tests
check: starting and stopping (SIGTERM, then SIGKILL after a bound, also on exceptions and Ctrl-C), seeding,
adding and killing clients, and comparing what storage holds with the sandbox's ground truth
(``/__sandbox/truth``). It imports ``sandbox``, so it runs from a source checkout only (``icecrawler.optional``).
"""

from __future__ import annotations

import contextlib
import json
import time
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import Ice

from icecrawler import rpc
from icecrawler.errors import ServiceError
from icecrawler.processes import ManagedProcess, ProcessGroup, free_port, poll_until
from icecrawler_local import oracle
from icecrawler_local.launcher import Cluster, Wrap
from sandbox.launch import SandboxProcess
from sandbox.scenario import Scenario, default_scenario
from sandbox.sources import SITE_OF_SOURCE

__all__ = ["SITE_PREFIX", "DaemonExited", "Stack", "running_stack"]

#: sources.<name>.base_url → the sandbox prefix serving that source.
SITE_PREFIX = SITE_OF_SOURCE
#: How long one scheduler RPC made by the stack may take before it counts as unanswered (ms).
_RPC_TIMEOUT_MS = 10_000
_HOST = "127.0.0.1"


class DaemonExited(ServiceError):
    """A process of the stack ended while it was needed (a crash, ``kill -9``, the OOM killer): nothing it was to do
    gets done, so the demo ends then, naming it, rather than crawling and draining on to its bound."""


@dataclass
class Stack:
    """The running processes of one crawl and the ways to look at it."""

    root: Path
    group: ProcessGroup
    cluster: Cluster
    sandbox: SandboxProcess
    scheduler: ManagedProcess
    storage: ManagedProcess
    scheduler_port: int
    storage_port: int
    speed: float
    origin: float
    scenario: Scenario
    #: Settings every client gets on top of the cluster's (the caller's client settings).
    client_settings: dict[str, str]
    clients: dict[str, ManagedProcess] = field(default_factory=dict)
    #: Each daemon's /metrics port by process name (the stack gives every daemon a free one).
    metrics_ports: dict[str, int] = field(default_factory=dict)
    _comm: Ice.Communicator | None = None

    # --- paths --------------------------------------------------------------------------------------------

    @property
    def proxies(self) -> dict[str, str]:
        """Ice properties a client (or seed/status) needs: where the two servers are."""
        return {"Scheduler.Proxy": self.scheduler_proxy, "Storage.Proxy": self.storage_proxy}

    @property
    def scheduler_proxy(self) -> str:
        return f"{rpc.SCHEDULER_IDENTITY}:tcp -h {_HOST} -p {self.scheduler_port}"

    @property
    def storage_proxy(self) -> str:
        return f"{rpc.STORAGE_IDENTITY}:tcp -h {_HOST} -p {self.storage_port}"

    @property
    def sqlite_path(self) -> Path:
        return self.cluster.db_path

    @property
    def scheduler_db(self) -> Path:
        return Path(self.cluster.settings["scheduler.db_dir"])

    # --- processes ----------------------------------------------------------------------------------------

    def start_client(
        self,
        name: str,
        settings: Mapping[str, Any] | None = None,
        wrap: Wrap | None = None,
        ice: Mapping[str, str] | None = None,
    ) -> ManagedProcess:
        """Start one more ``icecrawler client`` (it picks up work at once; no server is told about it); ``wrap``
        changes its command line and ``ice`` adds Ice properties (``Cluster.start_client``)."""
        merged = {
            "metrics.client.port": str(free_port()),
            "metrics.client.port_span": "1",
            **self.client_settings,
            **{k: str(v) for k, v in (settings or {}).items()},
        }
        self.metrics_ports[name] = int(merged["metrics.client.port"])
        process = self.cluster.start_client(
            name,
            self.scheduler_proxy,
            self.storage_proxy,
            (_HOST, self.sandbox.port),
            wrap=wrap,
            settings=merged,
            ice=ice,
        )
        self.clients[name] = process
        return process

    def metrics_urls(self) -> dict[str, str]:
        """Each daemon's /metrics URL by process name (port 0: off, not listed)."""
        return {name: f"http://{_HOST}:{port}/metrics" for name, port in self.metrics_ports.items() if port}

    def wait_metrics(self, timeout_s: float = 40.0) -> None:
        """Wait until every daemon's /metrics port accepts connections: nothing else waits for a client's (it has
        no Ice port), so a scrape right after ``start_client`` on a loaded machine can be refused."""
        processes = {"scheduler": self.scheduler, "storage": self.storage, **self.clients}
        for name, port in self.metrics_ports.items():
            if port and name in processes:
                self.cluster.wait_listening(processes[name], _HOST, port, timeout_s=timeout_s)

    def ended(self) -> list[ManagedProcess]:
        """The processes of the stack that are no longer running."""
        return [process for process in self.group.processes if not process.alive()]

    def check_running(self) -> None:
        """Raise ``DaemonExited`` naming each process that has ended, with its log's path and last lines (the demo:
        each one is needed until the end)."""
        gone = self.ended()
        if gone:
            raise DaemonExited(
                "\n".join(
                    p.ended_line("while the demo ran")
                    + "".join(f"\n    {line}" for line in p.log_tail(10).splitlines())
                    for p in gone
                )
            )

    @contextlib.contextmanager
    def failing_on_exit(self) -> Iterator[None]:
        """An error while talking to the processes (a refused connection) is, when one of them has just ended,
        reported as that ending (``DaemonExited``): it is the cause, and the error alone names neither process nor
        log. A process may take a moment to be seen as ended after its sockets close: a short bounded wait."""
        try:
            yield
        except DaemonExited:
            raise
        except Exception:
            if poll_until(lambda: bool(self.ended()), 2.0, 0.1):
                self.check_running()
            raise

    def kill_client(self, name: str) -> None:
        """``kill -9`` one client: its leases are not given back and must expire."""
        self.clients[name].kill9()

    def icecrawler(self, *args: str, timeout_s: float = 60.0) -> str:
        """Run a short ``icecrawler`` command against this stack's servers; its output, or ServiceError."""
        return self.cluster.command(args, self.proxies, timeout_s=timeout_s)

    def seed(self, ids: Sequence[str], listings: Sequence[str] = ()) -> str:
        """``icecrawler seed`` with these ids and ``--listing`` categories."""
        return self.cluster.seed(self.scheduler_proxy, ids=ids, listings=listings)

    def stop_scheduler(self) -> int | None:
        """SIGTERM the scheduler (clean BDB close), e.g. before reading its database with ``done_log``."""
        self._close_comm()
        return self.scheduler.stop()

    # --- the scheduler ------------------------------------------------------------------------------------------

    def _scheduler_proxy(self) -> Any:
        if self._comm is None:
            self._comm = rpc.communicator()
        return rpc.crawler().SchedulerPrx(self._comm, self.scheduler_proxy).ice_invocationTimeout(_RPC_TIMEOUT_MS)

    def _close_comm(self) -> None:
        if self._comm is not None:
            self._comm.destroy()
            self._comm = None

    def scheduler_stats(self) -> dict[str, Any]:
        """The scheduler's stats with the detail JSON merged in (what ``icecrawler status --json`` shows)."""
        stats = self._scheduler_proxy().stats()
        return {
            "tasks": stats.tasks,
            "pending": stats.pending,
            "inflight": stats.inflight,
            "done": stats.done,
            **json.loads(stats.detailJson or "{}"),
        }

    def task_info(self, task_id: str) -> dict[str, Any]:
        """One task's metadata and period history (``icecrawler status --task``)."""
        return dict(json.loads(self._scheduler_proxy().taskInfo(task_id)))

    def done_log(self) -> list[dict[str, Any]]:
        """The scheduler's completion log (the ``done`` table), read from its Berkeley DB environment. Call it
        after ``stop_scheduler``: one environment is opened by one process at a time."""
        from scheduler_server.codec import decode_time_key
        from scheduler_server.store import BdbQueueStore

        store = BdbQueueStore(self.scheduler_db, durable=False)
        try:
            with store.transaction() as txn:
                rows = txn.scan("done", limit=10_000_000)
        finally:
            store.close()
        entries = []
        for key, value in rows:
            time_ms, name = decode_time_key(key)
            task_id, _, token = name.rpartition("#")
            entries.append({"time_ms": time_ms, "task_id": task_id, "token": token, **json.loads(value)})
        return entries

    # --- the sandbox -----------------------------------------------------------------------------------------------

    def truth(self, **params: Any) -> dict[str, Any]:
        """``/__sandbox/truth`` (items and product appearances published so far)."""
        query = urllib.parse.urlencode(params)
        return dict(self.sandbox.control(f"truth?{query}" if query else "truth", timeout_s=30))

    def requests(self, site: str = "", since: int = 0) -> list[dict[str, Any]]:
        """The sandbox's request log (every site request with its arrival time), optionally for one site."""
        rows: list[dict[str, Any]] = []
        for _ in range(1000):  # bounded paging through the log
            page = self.sandbox.control(f"requests?site={site}&since={since}&limit=10000", timeout_s=30)
            rows += page["requests"]
            if not page["requests"] or since >= page["next"]:
                break
            since = page["requests"][-1]["seq"]
        return rows

    def misbehave(self, body: Mapping[str, Any]) -> None:
        self.sandbox.control("misbehave", dict(body))

    # --- storage ------------------------------------------------------------------------------------------------------

    def stored(self) -> list[oracle.StoredItem]:
        """Every post and review in the embedded store (read-only; storage keeps running)."""
        return oracle.read_stored(self.sqlite_path)

    def close(self) -> None:
        self._close_comm()


@contextlib.contextmanager
def running_stack(
    root: Path,
    scenario: Scenario | None = None,
    *,
    speed: float = 60.0,
    scheduler_settings: Mapping[str, Any] | None = None,
    client_settings: Mapping[str, Any] | None = None,
    storage_settings: Mapping[str, Any] | None = None,
    latency_ms: int = 0,
    start_timeout_s: float = 60.0,
    scheduler_wrap: Wrap | None = None,
) -> Iterator[Stack]:
    """Sandbox, storage and scheduler running as child processes under ``root``; the caller seeds and starts
    clients. Every process (clients included) is stopped when the block ends, however it ends. ``scheduler_wrap``
    changes the scheduler's command line (``Cluster.start_server``: e.g. to run it under a faked wall clock)."""
    scenario = scenario if scenario is not None else default_scenario()
    # One origin for every process: simulated time starts now, in all of them.
    origin = time.time()
    common = {"clock.speed": repr(float(speed)), "clock.origin": repr(origin)}
    with ProcessGroup(root / "logs") as group:
        cluster = Cluster(root, group, settings=common, scenario=scenario.to_dict())
        sandbox_port, scheduler_port, storage_port = free_port(), free_port(), free_port()
        sandbox = SandboxProcess(
            cluster.start_sandbox(
                _HOST, sandbox_port, latency_ms, speed=speed, origin=origin, max_hang_s=30.0, timeout_s=start_timeout_s
            ),
            sandbox_port,
        )
        storage_sets = {
            "metrics.storage.port": str(free_port()),
            **{k: str(v) for k, v in (storage_settings or {}).items()},
        }
        storage = cluster.start_server("storage", _HOST, storage_port, settings=storage_sets, wait=False)
        # The scheduler knows every source's host too: its politeness is per host.
        scheduler_sets = {
            **cluster.sandbox_settings(_HOST, sandbox_port),
            "metrics.scheduler.port": str(free_port()),
            **{k: str(v) for k, v in (scheduler_settings or {}).items()},
        }
        scheduler = cluster.start_server(
            "scheduler", _HOST, scheduler_port, wrap=scheduler_wrap, settings=scheduler_sets, wait=False
        )
        for process, port in ((storage, storage_port), (scheduler, scheduler_port)):
            cluster.wait_listening(process, _HOST, port, timeout_s=start_timeout_s)
        stack = Stack(
            root,
            group,
            cluster,
            sandbox,
            scheduler,
            storage,
            scheduler_port,
            storage_port,
            speed,
            origin,
            scenario,
            {k: str(v) for k, v in (client_settings or {}).items()},
            metrics_ports={
                "scheduler": int(scheduler_sets["metrics.scheduler.port"]),
                "storage": int(storage_sets["metrics.storage.port"]),
            },
        )
        try:
            yield stack
        finally:
            stack.close()
