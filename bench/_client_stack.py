"""A whole local crawl for the client's end-to-end test and benchmark: the sandbox sites (in this process),
a real storage server and a real scheduler (``icecrawler storage`` / ``icecrawler scheduler`` child processes
on free loopback ports), seeding, and ``icecrawler client`` processes. Everything stops on exit (SIGTERM,
then SIGKILL after a bound), even on errors.
"""

from __future__ import annotations

import json
import sqlite3
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from icecrawler import rpc
from icecrawler.processes import ManagedProcess, ProcessGroup, free_port, icecrawler_argv, wait_for_port
from sandbox.scenario import Scenario
from sandbox.server import SandboxServer

__all__ = ["ClientStack", "client_stack"]

#: sources.<name>.base_url → the sandbox prefix serving it.
SITE_PREFIX = {"weibo_pc": "pc", "weibo_mobile": "m", "ecshop": "ecshop", "jd": "jd"}


@dataclass
class ClientStack:
    tmp: Path
    group: ProcessGroup
    sandbox: SandboxServer
    scheduler_port: int
    storage_port: int
    settings: dict[str, str]
    clients: list[ManagedProcess] = field(default_factory=list)
    servers: dict[str, ManagedProcess] = field(default_factory=dict)
    server_argv: dict[str, list[str]] = field(default_factory=dict)

    @property
    def client_conf(self) -> Path:
        return self.tmp / "client.conf"

    @property
    def sqlite_path(self) -> Path:
        return self.tmp / "storage" / "store.sqlite3"

    def sets(self, extra: Mapping[str, Any] | None = None) -> list[str]:
        merged = {**self.settings, **{k: str(v) for k, v in (extra or {}).items()}}
        return [f"--set={key}={value}" for key, value in merged.items()]

    def seed(self, ids: Sequence[str], listings: Sequence[str] = ()) -> str:
        """Run ``icecrawler seed`` to completion; returns its output."""
        argv = icecrawler_argv("seed", *ids, *(f"--listing={x}" for x in listings), f"--Ice.Config={self.client_conf}")
        process = self.group.start(f"seed-{len(self.group.processes)}", argv)
        code = process.popen.wait(timeout=60)
        if code != 0:
            raise RuntimeError(f"seed failed ({code}):\n{process.log_tail()}")
        return process.log_tail()

    def start_client(self, name: str, settings: Mapping[str, Any] | None = None) -> ManagedProcess:
        process = self.group.start(name, icecrawler_argv("client", "--worker-id", name, *self.sets(settings),
                                                         f"--Ice.Config={self.client_conf}"))
        self.clients.append(process)
        return process

    def stop_server(self, name: str) -> None:
        """SIGTERM the "storage" or "scheduler" server (bounded)."""
        self.servers[name].stop()

    def start_server(self, name: str) -> None:
        """(Re)start a server on its port, with the same data directory."""
        port = self.storage_port if name == "storage" else self.scheduler_port
        process = self.group.start(f"{name}-{sum(p.name.startswith(name) for p in self.group.processes)}",
                                   self.server_argv[name])
        self.servers[name] = process
        wait_for_port("127.0.0.1", port, 60, alive=process.alive)

    def misbehave(self, body: Mapping[str, Any]) -> None:
        request = urllib.request.Request(f"{self.sandbox.url}/__sandbox/misbehave", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(request, timeout=10) as response:
            response.read()

    def truth(self) -> dict[str, Any]:
        return self.sandbox.truth()

    def stored(self) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        """(posts as (source, user_id, id), reviews as (source, product_id, id, user, content, created_at))."""
        if not self.sqlite_path.exists():
            return [], []
        conn = sqlite3.connect(f"file:{self.sqlite_path}?mode=ro", uri=True, timeout=10)
        try:
            tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            posts = list(conn.execute("SELECT source, user_id, id FROM weibo")) if "weibo" in tables else []
            reviews = (list(conn.execute("SELECT source, product_id, id, user, content, created_at FROM review"))
                       if "review" in tables else [])
        finally:
            conn.close()
        return posts, reviews

    def stored_count(self) -> int:
        """Posts + reviews in storage (cheap enough to poll)."""
        if not self.sqlite_path.exists():
            return 0
        conn = sqlite3.connect(f"file:{self.sqlite_path}?mode=ro", uri=True, timeout=10)
        try:
            tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            return sum(int(conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0])
                       for table in ("weibo", "review") if table in tables)
        finally:
            conn.close()

    def scheduler_stats(self) -> Any:
        with rpc.communicator() as comm:
            proxy = rpc.crawler().SchedulerPrx(comm, f"{rpc.SCHEDULER_IDENTITY}:tcp -h 127.0.0.1 -p "
                                                     f"{self.scheduler_port}")
            return proxy.stats()


@contextmanager
def client_stack(tmp: Path, scenario: Scenario, *, speed: float = 1.0, latency_ms: int = 0,
                 scheduler_settings: Mapping[str, Any] | None = None,
                 client_settings: Mapping[str, Any] | None = None) -> Iterator[ClientStack]:
    """Sandbox + storage + scheduler running; clients are started by the caller (``start_client``)."""
    tmp.mkdir(parents=True, exist_ok=True)
    origin = time.time()
    sandbox = SandboxServer(scenario, speed=speed, origin=origin, latency_ms=latency_ms, max_hang_s=30.0)
    sandbox.start()
    try:
        with ProcessGroup(tmp / "logs") as group:
            scheduler_port, storage_port = free_port(), free_port()
            (tmp / "client.conf").write_text(
                f"Scheduler.Proxy={rpc.SCHEDULER_IDENTITY}:tcp -h 127.0.0.1 -p {scheduler_port}\n"
                f"Storage.Proxy={rpc.STORAGE_IDENTITY}:tcp -h 127.0.0.1 -p {storage_port}\n")
            (tmp / "scheduler.conf").write_text(f"SchedulerAdapter.Endpoints=tcp -h 127.0.0.1 -p {scheduler_port}\n"
                                                "Ice.ThreadPool.Server.Size=4\n")
            (tmp / "storage.conf").write_text(f"StorageAdapter.Endpoints=tcp -h 127.0.0.1 -p {storage_port}\n")
            common = {"clock.speed": str(speed), "clock.origin": repr(origin)}
            base_urls = {f"sources.{name}.base_url": sandbox.base_url(prefix) for name, prefix in SITE_PREFIX.items()}
            stack = ClientStack(tmp, group, sandbox, scheduler_port, storage_port,
                                {**common, **base_urls, **{k: str(v) for k, v in (client_settings or {}).items()}})
            storage_sets = {**common, "storage.embedded.path": str(stack.sqlite_path),
                            "storage.spool_dir": str(tmp / "storage" / "spool")}
            stack.server_argv["storage"] = icecrawler_argv(
                "storage", *(f"--set={k}={v}" for k, v in storage_sets.items()),
                f"--Ice.Config={tmp / 'storage.conf'}")
            scheduler_sets = {**common, "scheduler.db_dir": str(tmp / "scheduler"),
                              **{k: str(v) for k, v in (scheduler_settings or {}).items()}}
            stack.server_argv["scheduler"] = icecrawler_argv(
                "scheduler", *(f"--set={k}={v}" for k, v in scheduler_sets.items()),
                f"--Ice.Config={tmp / 'scheduler.conf'}")
            stack.start_server("storage")
            stack.start_server("scheduler")
            yield stack
    finally:
        sandbox.stop()
