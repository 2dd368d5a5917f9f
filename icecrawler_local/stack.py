"""A whole local crawl as separate OS processes: the sandbox sites, a scheduler (Berkeley DB), a storage server
(embedded SQLite) and any number of ``icecrawler client`` processes, on free loopback ports, sharing one
accelerated clock and one temporary var directory.

``icecrawler demo`` and the end-to-end tests drive the same stack, so what the demo shows is what the tests
check: starting and stopping (through ``ProcessGroup``: SIGTERM, then SIGKILL after a bound, also on
exceptions and Ctrl-C), seeding, adding and killing clients, and comparing what storage holds with the
sandbox's ground truth (``/__sandbox/truth``). It imports ``sandbox``, so it runs from a source checkout only
(``icecrawler.optional``).
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import json
import sqlite3
import time
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import Ice

from icecrawler import rpc
from icecrawler.processes import ManagedProcess, ProcessGroup, free_port, icecrawler_argv, wait_for_port
from sandbox.launch import SandboxProcess, sandbox_process
from sandbox.scenario import Scenario, default_scenario
from sandbox.sources import SITE_OF_SOURCE, source_settings

__all__ = [
    "SITE_PREFIX",
    "ItemKey",
    "Stack",
    "StoredItem",
    "leases_by_task",
    "overlapping_leases",
    "running_stack",
    "stored_index",
    "truth_index",
]

#: sources.<name>.base_url → the sandbox prefix serving that source.
SITE_PREFIX = SITE_OF_SOURCE
#: Sandbox pages print Beijing time without an offset.
_BEIJING = timezone(timedelta(hours=8))
#: How long one scheduler RPC made by the stack may take before it counts as unanswered (ms).
_RPC_TIMEOUT_MS = 10_000

#: One published item's identity: ("weibo", user id, post id) for a post, whichever front end (desktop or
#: mobile) it was seen on: storage keys a post by its owner and id, so the same post crawled from both sites is
#: one row; (source, product, review id) for JD; for ECSHOP, whose pages show no review ids,
#: ("ecshop", product, created-at ms, normalised text).
ItemKey = tuple[Any, ...]


def _time_ms(text: str) -> int:
    moment = datetime.fromisoformat(text.strip())
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=_BEIJING)
    return int(moment.timestamp() * 1000)


def _norm(text: str) -> str:
    return " ".join(text.split())


def truth_key(item: Mapping[str, Any]) -> ItemKey:
    """The identity of one ``/__sandbox/truth`` item, comparable with ``StoredItem.key``."""
    if item["source"] == "ecshop":
        return ("ecshop", str(item["target"]), _time_ms(str(item["created_at"])), _norm(str(item["text"])))
    if str(item["source"]).startswith("weibo"):
        return ("weibo", str(item["target"]), str(item["id"]))
    return (str(item["source"]), str(item["target"]), str(item["id"]))


@dataclass(frozen=True)
class StoredItem:
    """One stored post or review: its identity and when a client fetched it (simulated epoch ms)."""

    key: ItemKey
    fetched_ms: int


def truth_index(
    items: Sequence[Mapping[str, Any]], published_before_wall_ms: int | None = None
) -> dict[tuple[str, ItemKey], Mapping[str, Any]]:
    """Truth items by (source, key), only those published (wall clock) up to ``published_before_wall_ms`` if
    given. A post shown on both Weibo sites appears once per source, with the same key."""
    return {
        (str(item["source"]), truth_key(item)): item
        for item in items
        if published_before_wall_ms is None or int(item["published_wall_ms"]) <= published_before_wall_ms
    }


def stored_index(rows: Sequence[StoredItem]) -> collections.Counter[ItemKey]:
    """How many times each key is stored (more than once would be a duplicate)."""
    return collections.Counter(row.key for row in rows)


def leases_by_task(done: Sequence[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """Completion-log entries (``Stack.done_log``) per task, in lease order."""
    per_task: dict[str, list[Mapping[str, Any]]] = collections.defaultdict(list)
    for entry in done:
        per_task[str(entry["task_id"])].append(entry)
    for leases in per_task.values():
        leases.sort(key=lambda e: (e["leased_wall_ms"], e["ended_wall_ms"]))
    return dict(per_task)


def overlapping_leases(done: Sequence[Mapping[str, Any]]) -> list[tuple[Mapping[str, Any], Mapping[str, Any]]]:
    """Pairs of leases of one task that overlap in time: the audit behind "no task is ever leased twice at
    once". Every report and every expired lease is in the completion log with its interval (leased, ended; wall
    ms, each rounded to the millisecond, hence the 1 ms tolerance)."""
    return [
        (before, after)
        for leases in leases_by_task(done).values()
        for before, after in itertools.pairwise(leases)
        if after["leased_wall_ms"] < before["ended_wall_ms"] - 1
    ]


@dataclass
class Stack:
    """The running processes of one crawl and the ways to look at it."""

    root: Path
    group: ProcessGroup
    sandbox: SandboxProcess
    scheduler: ManagedProcess
    storage: ManagedProcess
    scheduler_port: int
    storage_port: int
    speed: float
    origin: float
    scenario: Scenario
    #: ``--set`` values every client gets (clock, source base URLs, the caller's client settings).
    client_settings: dict[str, str]
    clients: dict[str, ManagedProcess] = field(default_factory=dict)
    #: Each daemon's /metrics port by process name (the stack gives every daemon a free one).
    metrics_ports: dict[str, int] = field(default_factory=dict)
    _comm: Ice.Communicator | None = None

    # --- paths --------------------------------------------------------------------------------------------

    @property
    def client_conf(self) -> Path:
        """Ice properties a client (or seed/status) needs: where the two servers are."""
        return self.root / "client.conf"

    @property
    def sqlite_path(self) -> Path:
        return self.root / "storage" / "store.sqlite3"

    @property
    def scheduler_db(self) -> Path:
        return self.root / "scheduler"

    # --- processes ----------------------------------------------------------------------------------------

    def start_client(self, name: str, settings: Mapping[str, Any] | None = None) -> ManagedProcess:
        """Start one more ``icecrawler client`` (it picks up work at once; no server is told about it)."""
        merged = {
            "metrics.client.port": str(free_port()),
            "metrics.client.port_span": "1",
            **self.client_settings,
            **{k: str(v) for k, v in (settings or {}).items()},
        }
        self.metrics_ports[name] = int(merged["metrics.client.port"])
        argv = icecrawler_argv(
            "client",
            "--worker-id",
            name,
            *(f"--set={k}={v}" for k, v in merged.items()),
            f"--Ice.Config={self.client_conf}",
        )
        process = self.group.start(name, argv)
        self.clients[name] = process
        return process

    def metrics_urls(self) -> dict[str, str]:
        """Each daemon's /metrics URL by process name (port 0: off, not listed)."""
        return {name: f"http://127.0.0.1:{port}/metrics" for name, port in self.metrics_ports.items() if port}

    def kill_client(self, name: str) -> None:
        """``kill -9`` one client: its leases are not given back and must expire."""
        self.clients[name].kill9()

    def icecrawler(self, *args: str, timeout_s: float = 60.0) -> str:
        """Run a short ``icecrawler`` command against this stack's servers; its output, or RuntimeError."""
        name = f"{args[0]}-{len(self.group.processes)}"
        process = self.group.start(name, icecrawler_argv(*args, f"--Ice.Config={self.client_conf}"))
        code = process.popen.wait(timeout=timeout_s)
        output = process.log_path.read_text(errors="replace")
        if code != 0:
            raise RuntimeError(f"icecrawler {' '.join(args)} failed ({code}):\n{output[-3000:]}")
        return output

    def seed(self, ids: Sequence[str], listings: Sequence[str] = ()) -> str:
        """``icecrawler seed`` with these ids and ``--listing`` categories."""
        return self.icecrawler("seed", *ids, *(f"--listing={x}" for x in listings))

    def stop_scheduler(self) -> int | None:
        """SIGTERM the scheduler (clean BDB close), e.g. before reading its database with ``done_log``."""
        self._close_comm()
        return self.scheduler.stop()

    # --- the scheduler ------------------------------------------------------------------------------------------

    def _scheduler_proxy(self) -> Any:
        if self._comm is None:
            self._comm = rpc.communicator()
        text = f"{rpc.SCHEDULER_IDENTITY}:tcp -h 127.0.0.1 -p {self.scheduler_port}"
        return rpc.crawler().SchedulerPrx(self._comm, text).ice_invocationTimeout(_RPC_TIMEOUT_MS)

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

    def stored(self) -> list[StoredItem]:
        """Every post and review in the embedded store (read-only; storage keeps running)."""
        if not self.sqlite_path.exists():
            return []
        conn = sqlite3.connect(f"file:{self.sqlite_path}?mode=ro", uri=True, timeout=10)
        try:
            tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            posts = list(conn.execute("SELECT source, user_id, id, fetched_at FROM weibo")) if "weibo" in tables else []
            reviews = (
                list(conn.execute("SELECT source, product_id, id, content, created_at, fetched_at FROM review"))
                if "review" in tables
                else []
            )
        finally:
            conn.close()
        items = [StoredItem(("weibo", str(user), str(post)), _time_ms(fetched)) for _, user, post, fetched in posts]
        for source, product, review, content, created, fetched in reviews:
            key: ItemKey = (
                ("ecshop", str(product), _time_ms(created), _norm(content))
                if source == "ecshop"
                else (source, str(product), str(review))
            )
            items.append(StoredItem(key, _time_ms(fetched)))
        return items

    def close(self) -> None:
        self._close_comm()


def _write_conf(path: Path, properties: Mapping[str, str]) -> None:
    path.write_text("".join(f"{key}={value}\n" for key, value in properties.items()))


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
) -> Iterator[Stack]:
    """Sandbox, storage and scheduler running as child processes under ``root``; the caller seeds and starts
    clients. Every process (clients included) is stopped when the block ends, however it ends."""
    scenario = scenario if scenario is not None else default_scenario()
    root.mkdir(parents=True, exist_ok=True)
    scenario_file = root / "scenario.json"
    scenario_file.write_text(json.dumps(scenario.to_dict(), ensure_ascii=False, indent=1), encoding="utf-8")
    # One origin for every process: simulated time starts now, in all of them.
    origin = time.time()
    common = {"clock.speed": repr(float(speed)), "clock.origin": repr(origin)}
    with ProcessGroup(root / "logs") as group:
        sandbox_port, scheduler_port, storage_port = free_port(), free_port(), free_port()
        with sandbox_process(
            root / "logs",
            port=sandbox_port,
            group=group,
            scenario=scenario_file,
            speed=speed,
            origin=origin,
            latency_ms=latency_ms,
            max_hang_s=30.0,
            truth_file=root / "truth.jsonl",
        ) as sandbox:
            _write_conf(
                root / "client.conf",
                {
                    "Scheduler.Proxy": f"{rpc.SCHEDULER_IDENTITY}:tcp -h 127.0.0.1 -p {scheduler_port}",
                    "Storage.Proxy": f"{rpc.STORAGE_IDENTITY}:tcp -h 127.0.0.1 -p {storage_port}",
                },
            )
            _write_conf(
                root / "scheduler.conf", {"SchedulerAdapter.Endpoints": f"tcp -h 127.0.0.1 -p {scheduler_port}"}
            )
            _write_conf(root / "storage.conf", {"StorageAdapter.Endpoints": f"tcp -h 127.0.0.1 -p {storage_port}"})
            storage_sets = {
                **common,
                "storage.backend": "embedded",
                "metrics.storage.port": str(free_port()),
                "storage.embedded.path": str(root / "storage" / "store.sqlite3"),
                "storage.spool_dir": str(root / "storage" / "spool"),
                **{k: str(v) for k, v in (storage_settings or {}).items()},
            }
            storage = group.start(
                "storage",
                icecrawler_argv(
                    "storage",
                    *(f"--set={k}={v}" for k, v in storage_sets.items()),
                    f"--Ice.Config={root / 'storage.conf'}",
                ),
            )
            # The scheduler knows every source's host too: its politeness is per host.
            base_urls = source_settings(sandbox.url)
            scheduler_sets = {
                **common,
                **base_urls,
                "scheduler.db_dir": str(root / "scheduler"),
                "metrics.scheduler.port": str(free_port()),
                **{k: str(v) for k, v in (scheduler_settings or {}).items()},
            }
            scheduler = group.start(
                "scheduler",
                icecrawler_argv(
                    "scheduler",
                    *(f"--set={k}={v}" for k, v in scheduler_sets.items()),
                    f"--Ice.Config={root / 'scheduler.conf'}",
                ),
            )
            for process, port in ((storage, storage_port), (scheduler, scheduler_port)):
                try:
                    wait_for_port("127.0.0.1", port, start_timeout_s, alive=process.alive)
                except Exception as exc:
                    raise RuntimeError(f"{process.name} did not start: {exc}\n{process.log_tail()}") from exc
            stack = Stack(
                root,
                group,
                sandbox,
                scheduler,
                storage,
                scheduler_port,
                storage_port,
                speed,
                origin,
                scenario,
                {**common, **base_urls, **{k: str(v) for k, v in (client_settings or {}).items()}},
                metrics_ports={
                    "scheduler": int(scheduler_sets["metrics.scheduler.port"]),
                    "storage": int(storage_sets["metrics.storage.port"]),
                },
            )
            try:
                yield stack
            finally:
                stack.close()
