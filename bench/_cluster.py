"""A whole local crawl cluster as OS processes: sandbox sites, scheduler, storage and N crawler clients, plus the
checks the scale-out tests and ``bench/scale.py`` share (every sandbox item stored exactly once, per-process CPU).

Each process can run inside a network namespace (``wrap`` turns an argv into ``ip netns exec NS argv``), so
the same harness drives the loopback benchmark and the network-fault test. Nothing here needs to reach the
processes over the network from the caller's own namespace: ground truth comes from the sandbox's truth file,
stored records straight from the embedded SQLite file, and scheduler state from ``probe`` run where the
scheduler is reachable (``python -m bench._cluster probe``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from icecrawler.errors import ServiceError
from icecrawler.processes import ManagedProcess, ProcessGroup, wait_for_port
from icecrawler.sourcespec import registry
from sandbox.sources import source_settings

__all__ = ["Cluster", "Workload", "cpu_seconds", "read_stored", "read_truth", "verify", "wait_until"]

Wrap = Callable[[list[str]], list[str]]

#: Table a truth item's source lands in: posts (every Weibo source) in one table, reviews in the other.
TABLE_OF = {name: spec.table for name, spec in registry.items()}


def _same(argv: list[str]) -> list[str]:
    return argv


def wait_until(predicate: Callable[[], bool], timeout_s: float, interval_s: float = 0.5) -> bool:
    """Poll ``predicate`` until true or ``timeout_s`` passes; returns its last value. Bounded by design."""
    deadline = time.monotonic() + timeout_s
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval_s)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of one process so far, from /proc (0.0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


@dataclass(frozen=True)
class Workload:
    """What the sandbox publishes: JD products with reviews and mobile-Weibo users with posts, all static
    (everything is backlog, nothing new appears), so "done" is well defined: every item stored once.

    Sizes stay within one visit's page budget (client.max_pages), so one crawl per target suffices.
    """

    jd_products: int = 8
    reviews_per_product: int = 30
    weibo_users: int = 4
    posts_per_user: int = 20
    seed: int = 7

    def scenario(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "products": [
                {
                    "source": "jd",
                    "id": str(100_000_000_001 + i),
                    "backlog": self.reviews_per_product,
                    "schedule": {"kind": "static"},
                }
                for i in range(self.jd_products)
            ],
            "users": [
                {
                    "uid": 1_000_000_001 + i,
                    "sites": ["m"],
                    "backlog": self.posts_per_user,
                    "schedule": {"kind": "static"},
                }
                for i in range(self.weibo_users)
            ],
        }

    def seed_ids(self) -> list[str]:
        return [f"jd:{100_000_000_001 + i}" for i in range(self.jd_products)] + [
            f"weibo_mobile:{1_000_000_001 + i}" for i in range(self.weibo_users)
        ]

    def task_ids(self) -> list[str]:
        return [f"reviews:jd:{100_000_000_001 + i}" for i in range(self.jd_products)] + [
            f"user:weibo_mobile:{1_000_000_001 + i}" for i in range(self.weibo_users)
        ]

    @property
    def items(self) -> int:
        return self.jd_products * self.reviews_per_product + self.weibo_users * self.posts_per_user


def read_truth(path: Path) -> dict[str, set[str]]:
    """Item ids per table from the sandbox's JSONL truth file."""
    truth: dict[str, set[str]] = {"weibo": set(), "review": set()}
    if not path.exists():
        return truth
    for line in path.read_text(encoding="utf-8").splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if record.get("kind") == "item" and record.get("source") in TABLE_OF:
                truth[TABLE_OF[record["source"]]].add(str(record["id"]))
    return truth


def read_stored(db_path: Path) -> dict[str, Counter[str]]:
    """How many stored rows each item id has, per table, read straight from the embedded store's file."""
    from storage_server.export import rows_since
    from storage_server.stores import SqliteStore

    stored: dict[str, Counter[str]] = {"weibo": Counter(), "review": Counter()}
    if not db_path.exists():
        return stored
    store = SqliteStore(str(db_path))
    try:
        for table, counts in stored.items():
            for columns in rows_since(store, table):
                counts[str(columns["id"])] += 1
    finally:
        store.close()
    return stored


def verify(truth: dict[str, set[str]], stored: dict[str, Counter[str]]) -> list[str]:
    """Problems, empty when every truth item is stored exactly once and nothing else is stored."""
    problems = []
    for table, ids in truth.items():
        counts = stored[table]
        missing = ids - set(counts)
        extra = set(counts) - ids
        dupes = {item: n for item, n in counts.items() if n > 1}
        if missing:
            problems.append(f"{table}: {len(missing)} of {len(ids)} items never stored, e.g. {sorted(missing)[:3]}")
        if extra:
            problems.append(f"{table}: {len(extra)} stored ids not in the truth, e.g. {sorted(extra)[:3]}")
        if dupes:
            problems.append(f"{table}: {len(dupes)} items stored more than once, e.g. {list(dupes.items())[:3]}")
    return problems


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(str(value))


@dataclass
class Cluster:
    """Processes of one crawl run under ``work``; every one is stopped by the ``ProcessGroup``."""

    work: Path
    group: ProcessGroup
    workload: Workload = field(default_factory=Workload)
    settings: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        self.truth_path = self.work / "truth.jsonl"
        self.db_path = self.work / "storage.sqlite3"
        self.settings = {
            "scheduler.db_dir": str(self.work / "scheduler"),
            "storage.embedded.path": str(self.db_path),
            "storage.spool_dir": str(self.work / "spool"),
            "client.progress_log_s": 2.0,
            **self.settings,
        }

    # --- files ----------------------------------------------------------------------------------------------

    def config(self, extra: dict[str, Any] | None = None, name: str = "icecrawler.toml") -> Path:
        """The app settings file every process reads (dotted TOML keys)."""
        values = {**self.settings, **(extra or {})}
        path = self.work / name
        path.write_text("".join(f"{key} = {_toml_value(value)}\n" for key, value in sorted(values.items())))
        return path

    def ice_config(self, name: str, props: dict[str, str]) -> Path:
        path = self.work / f"{name}.ice.conf"
        path.write_text("".join(f"{key}={value}\n" for key, value in props.items()))
        return path

    def sandbox_settings(self, host: str, port: int) -> dict[str, str]:
        return source_settings(f"http://{host}:{port}")

    # --- processes --------------------------------------------------------------------------------------------

    def _start(self, name: str, argv: list[str], wrap: Wrap | None) -> ManagedProcess:
        return self.group.start(name, (wrap or _same)(argv), cwd=self.work)

    def wait_listening(
        self, process: ManagedProcess, host: str, port: int, wrap: Wrap | None = None, timeout_s: float = 40.0
    ) -> None:
        """Wait until ``host:port`` accepts connections, seen from where the process runs."""
        if wrap is None:
            try:
                wait_for_port(host, port, timeout_s, alive=process.alive)
            except ServiceError as exc:
                raise ServiceError(f"{process.name}: {exc}\n{process.log_tail()}") from exc
            return
        script = "\n".join(
            [
                "import socket, sys, time",
                f"deadline = time.monotonic() + {timeout_s!r}",
                "while time.monotonic() < deadline:",
                "    try:",
                f"        socket.create_connection(({host!r}, {port}), 0.5).close()",
                "        sys.exit(0)",
                "    except OSError:",
                "        time.sleep(0.1)",
                "sys.exit(1)",
            ]
        )
        ok = subprocess.run(wrap([sys.executable, "-c", script]), timeout=timeout_s + 10).returncode == 0
        if not ok or not process.alive():
            raise ServiceError(f"{process.name} is not listening on {host}:{port}\n{process.log_tail()}")

    def start_sandbox(
        self, host: str, port: int, latency_ms: int = 0, wrap: Wrap | None = None, wait: bool = True
    ) -> ManagedProcess:
        scenario = self.work / "scenario.json"
        scenario.write_text(json.dumps(self.workload.scenario()))
        process = self._start(
            "sandbox",
            [
                sys.executable,
                "-m",
                "sandbox",
                "--scenario",
                str(scenario),
                "--host",
                host,
                "--port",
                str(port),
                "--latency-ms",
                str(latency_ms),
                "--truth-file",
                str(self.truth_path),
            ],
            wrap,
        )
        if wait:
            self.wait_listening(process, host, port, wrap)
        return process

    def start_server(
        self,
        role: str,
        host: str,
        port: int,
        wrap: Wrap | None = None,
        ice: dict[str, str] | None = None,
        wait: bool = True,
    ) -> ManagedProcess:
        """``icecrawler scheduler`` or ``icecrawler storage`` on ``tcp -h host -p port`` (plus ``ice`` props).

        ``wait=False`` returns at once (start several daemons in parallel, then ``wait_listening`` each).
        """
        adapter = {"scheduler": "SchedulerAdapter", "storage": "StorageAdapter"}[role]
        conf = self.ice_config(role, {f"{adapter}.Endpoints": f"tcp -h {host} -p {port}", **(ice or {})})
        # Plain TCP off loopback (the lab's private network namespaces) must be allowed explicitly.
        process = self._start(
            role,
            [
                sys.executable,
                "-m",
                "icecrawler",
                role,
                "--config",
                str(self.config()),
                "--set",
                "security.allow_insecure=true",
                f"--Ice.Config={conf}",
            ],
            wrap,
        )
        if wait:
            self.wait_listening(process, host, port, wrap)
        return process

    def start_client(
        self,
        name: str,
        scheduler: str,
        storage: str,
        sandbox: tuple[str, int],
        wrap: Wrap | None = None,
        settings: dict[str, Any] | None = None,
        ice: dict[str, str] | None = None,
    ) -> ManagedProcess:
        """One ``icecrawler client`` process named ``name`` (its worker id) against the given proxies."""
        conf = self.ice_config(
            name,
            {
                "Scheduler.Proxy": scheduler,
                "Storage.Proxy": storage,
                "Ice.Connection.Client.ConnectTimeout": "2",
                **(ice or {}),
            },
        )
        app = self.config({**self.sandbox_settings(*sandbox), **(settings or {})}, name=f"{name}.toml")
        return self._start(
            name,
            [
                sys.executable,
                "-m",
                "icecrawler",
                "client",
                "--config",
                str(app),
                "--worker-id",
                name,
                f"--Ice.Config={conf}",
            ],
            wrap,
        )

    def seed(self, scheduler: str, wrap: Wrap | None = None) -> None:
        conf = self.ice_config("seed", {"Scheduler.Proxy": scheduler})
        result = subprocess.run(
            (wrap or _same)(
                [sys.executable, "-m", "icecrawler", "seed", *self.workload.seed_ids(), f"--Ice.Config={conf}"]
            ),
            capture_output=True,
            text=True,
            timeout=60,
        )
        if result.returncode != 0:
            raise ServiceError(f"seed failed: {result.stderr}")

    def probe(self, scheduler: str, wrap: Wrap | None = None, extra: Sequence[str] = ()) -> dict[str, Any]:
        """Scheduler stats and every seeded task's info, as seen from where ``wrap`` runs."""
        conf = self.ice_config("probe", {"Scheduler.Proxy": scheduler})
        result = subprocess.run(
            (wrap or _same)(
                [
                    sys.executable,
                    "-m",
                    "bench._cluster",
                    "probe",
                    f"--Ice.Config={conf}",
                    *extra,
                    *self.workload.task_ids(),
                ]
            ),
            capture_output=True,
            text=True,
            timeout=60,
            cwd=Path(__file__).resolve().parent.parent,
        )
        if result.returncode != 0:
            raise ServiceError(f"probe failed: {result.stderr[-2000:]}")
        return dict(json.loads(result.stdout))

    # --- checks -------------------------------------------------------------------------------------------------

    def problems(self) -> list[str]:
        truth = read_truth(self.truth_path)
        if sum(len(ids) for ids in truth.values()) < self.workload.items:
            return [f"truth file has {sum(len(ids) for ids in truth.values())} of {self.workload.items} items"]
        return verify(truth, read_stored(self.db_path))

    def stored_items(self) -> int:
        """Rows in storage (both tables), counted by SQLite: cheap enough to poll several times a second."""
        from storage_server.stores import SqliteStore

        if not self.db_path.exists():
            return 0
        store = SqliteStore(str(self.db_path))
        try:
            return sum(store.count(table) for table in ("weibo", "review"))
        finally:
            store.close()

    def read_truth_count(self) -> int:
        return sum(len(ids) for ids in read_truth(self.truth_path).values())


def _probe_main(argv: Sequence[str]) -> int:
    """``python -m bench._cluster probe --Ice.Config=F TASK...``: print stats + taskInfo as JSON."""
    parser = argparse.ArgumentParser(prog="bench._cluster probe")
    parser.add_argument("tasks", nargs="*")
    ice = [arg for arg in argv if arg.startswith("--Ice")]
    args = parser.parse_args([arg for arg in argv if not arg.startswith("--Ice")])
    from icecrawler import rpc

    with rpc.communicator(ice) as comm:
        scheduler = rpc.scheduler_proxy(comm)
        stats = scheduler.stats()
        tasks = {task: json.loads(scheduler.taskInfo(task)) for task in args.tasks}
    print(
        json.dumps(
            {
                "stats": {
                    "tasks": stats.tasks,
                    "pending": stats.pending,
                    "inflight": stats.inflight,
                    "done": stats.done,
                },
                "tasks": tasks,
            }
        )
    )
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "probe":
        sys.exit(_probe_main(sys.argv[2:]))
    print("usage: python -m bench._cluster probe --Ice.Config=FILE TASK_ID...", file=sys.stderr)
    sys.exit(2)
