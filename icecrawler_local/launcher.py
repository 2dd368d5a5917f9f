"""The one local-cluster launcher: sandbox sites, scheduler, storage (embedded SQLite) and crawler clients as OS
processes under one work directory, each stopped by a ``ProcessGroup`` (SIGTERM, then SIGKILL after a bound).

Everything that starts a local crawl goes through ``Cluster``: ``icecrawler demo`` and the end-to-end tests (via
``icecrawler_local.stack.running_stack``, which adds a shared accelerated clock and free loopback ports), the
scale-out tests and the benchmarks. Each process can run inside a network namespace (``wrap`` turns an argv
into e.g. ``ip netns exec NS argv``), so one launcher drives both the loopback benchmark and the network-fault
test. Nothing here needs to reach the processes over the network from the caller's own namespace: ground truth
comes from the sandbox's truth file, stored records straight from the embedded SQLite file (both judged by
``icecrawler_local.oracle``), and scheduler state from ``probe`` run where the scheduler is reachable
(``python -m icecrawler_local.launcher probe``). It imports ``sandbox``, so it runs from a source checkout only.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from icecrawler.errors import ServiceError
from icecrawler.processes import ManagedProcess, ProcessGroup, icecrawler_argv, wait_for_port
from icecrawler_local import oracle
from sandbox.launch import sandbox_argv
from sandbox.sources import source_settings

__all__ = ["Cluster", "Workload", "Wrap"]

#: Turns an argv into one that runs it elsewhere (a network namespace); None runs it here.
Wrap = Callable[[list[str]], list[str]]
_LOOPBACK = "127."


def _same(argv: list[str]) -> list[str]:
    return argv


@dataclass(frozen=True)
class Workload:
    """A static sandbox world: JD products with reviews and mobile-Weibo users with posts (everything is
    backlog, nothing new appears), so "done" is well defined: every item stored once.

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


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(str(value))


@dataclass
class Cluster:
    """Processes of one crawl under ``work``; every one is stopped by ``group``.

    ``scenario`` is the sandbox world (a ``Scenario.to_dict()``); without it, ``workload``'s. ``settings`` go
    to every process (a dotted-key TOML file each); per-process settings are added on top.
    """

    work: Path
    group: ProcessGroup
    workload: Workload = field(default_factory=Workload)
    settings: dict[str, Any] = field(default_factory=dict)
    scenario: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        self.work = self.work.resolve()  # processes run in it: paths in their settings must not be relative
        self.work.mkdir(parents=True, exist_ok=True)
        self.truth_path = self.work / "truth.jsonl"
        self.db_path = self.work / "storage" / "store.sqlite3"
        self.settings = {
            "scheduler.db_dir": str(self.work / "scheduler"),
            "storage.embedded.path": str(self.db_path),
            "storage.spool_dir": str(self.work / "storage" / "spool"),
            **self.settings,
        }

    # --- files ----------------------------------------------------------------------------------------------

    def config(self, extra: Mapping[str, Any] | None = None, name: str = "icecrawler.toml") -> Path:
        """The app settings file a process reads (dotted TOML keys): the common settings plus ``extra``."""
        values = {**self.settings, **(extra or {})}
        path = self.work / name
        path.write_text("".join(f"{key} = {_toml_value(value)}\n" for key, value in sorted(values.items())))
        return path

    def ice_config(self, name: str, props: Mapping[str, str]) -> Path:
        path = self.work / f"{name}.ice.conf"
        path.write_text("".join(f"{key}={value}\n" for key, value in props.items()))
        return path

    def sandbox_settings(self, host: str, port: int) -> dict[str, str]:
        """Every source's base URL on the sandbox at ``host:port``."""
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
                # How it ended and where its log is come first: a one-line error (the CLI's) keeps the start.
                why = (
                    process.ended_line(f"before listening on {host}:{port}")
                    if not process.alive()
                    else f"{exc}; its log: {process.log_path.resolve()}"
                )
                raise ServiceError(f"{process.name} did not start: {why}\n{process.log_tail()}") from exc
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
        self,
        host: str,
        port: int,
        latency_ms: int = 0,
        wrap: Wrap | None = None,
        wait: bool = True,
        *,
        speed: float | None = None,
        origin: float | None = None,
        max_hang_s: float | None = None,
        timeout_s: float = 40.0,
    ) -> ManagedProcess:
        """``python -m sandbox`` serving the scenario on ``host:port``, writing its truth file."""
        scenario = self.work / "scenario.json"
        world = self.scenario if self.scenario is not None else self.workload.scenario()
        scenario.write_text(json.dumps(world, ensure_ascii=False, indent=1), encoding="utf-8")
        argv = [
            *sandbox_argv(
                port,
                scenario=scenario,
                speed=speed,
                origin=origin,
                latency_ms=latency_ms,
                truth_file=self.truth_path,
                max_hang_s=max_hang_s,
            ),
            "--host",
            host,
        ]
        process = self._start("sandbox", argv, wrap)
        if wait:
            self.wait_listening(process, host, port, wrap, timeout_s)
        return process

    def start_server(
        self,
        role: str,
        host: str,
        port: int,
        wrap: Wrap | None = None,
        ice: Mapping[str, str] | None = None,
        wait: bool = True,
        settings: Mapping[str, Any] | None = None,
        timeout_s: float = 40.0,
        protocol: str = "tcp",
    ) -> ManagedProcess:
        """``icecrawler scheduler`` or ``icecrawler storage`` on ``PROTOCOL -h host -p port`` (plus ``ice`` props,
        e.g. ``tls.ssl_properties`` for ``protocol="ssl"``, and ``settings`` for this process).

        ``wait=False`` returns at once (start several daemons in parallel, then ``wait_listening`` each).
        """
        adapter = {"scheduler": "SchedulerAdapter", "storage": "StorageAdapter"}[role]
        conf = self.ice_config(role, {f"{adapter}.Endpoints": f"{protocol} -h {host} -p {port}", **(ice or {})})
        app = self.config(settings, name=f"{role}.toml")
        # Plain TCP off loopback (the lab's private network namespaces) must be allowed explicitly.
        insecure = [] if host.startswith(_LOOPBACK) else ["--set", "security.allow_insecure=true"]
        process = self._start(
            role, icecrawler_argv(role, "--config", str(app), *insecure, f"--Ice.Config={conf}"), wrap
        )
        if wait:
            self.wait_listening(process, host, port, wrap, timeout_s)
        return process

    def start_client(
        self,
        name: str,
        scheduler: str,
        storage: str,
        sandbox: tuple[str, int],
        wrap: Wrap | None = None,
        settings: Mapping[str, Any] | None = None,
        ice: Mapping[str, str] | None = None,
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
            name, icecrawler_argv("client", "--config", str(app), "--worker-id", name, f"--Ice.Config={conf}"), wrap
        )

    def command(
        self, args: Sequence[str], ice: Mapping[str, str], wrap: Wrap | None = None, timeout_s: float = 60.0
    ) -> str:
        """Run a short ``icecrawler`` command (``seed``, ``status``...) with these Ice properties; its output
        (stdout and stderr), or ServiceError with the output's tail."""
        conf = self.ice_config(str(args[0]), ice)
        result = subprocess.run(
            (wrap or _same)(icecrawler_argv(*args, f"--Ice.Config={conf}")),
            cwd=self.work,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout_s,
        )
        if result.returncode != 0:
            raise ServiceError(f"icecrawler {' '.join(args)} failed ({result.returncode}):\n{result.stdout[-3000:]}")
        return result.stdout

    def seed(
        self, scheduler: str, wrap: Wrap | None = None, ids: Sequence[str] | None = None, listings: Sequence[str] = ()
    ) -> str:
        """``icecrawler seed`` with ``ids`` (the workload's by default) and ``--listing`` categories."""
        ids = self.workload.seed_ids() if ids is None else ids
        return self.command(["seed", *ids, *(f"--listing={x}" for x in listings)], {"Scheduler.Proxy": scheduler}, wrap)

    def probe(self, scheduler: str, wrap: Wrap | None = None, extra: Sequence[str] = ()) -> dict[str, Any]:
        """Scheduler stats and every seeded task's info, as seen from where ``wrap`` runs."""
        conf = self.ice_config("probe", {"Scheduler.Proxy": scheduler})
        result = subprocess.run(
            (wrap or _same)(
                [
                    sys.executable,
                    "-m",
                    "icecrawler_local.launcher",
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
        """What the oracle finds wrong (empty: the workload's every item stored exactly once, nothing else)."""
        truth = oracle.read_truth_file(self.truth_path)
        if self.scenario is None and len(truth) < self.workload.items:
            return [f"truth file has {len(truth)} of {self.workload.items} items"]
        return oracle.problems(truth, oracle.read_stored(self.db_path))

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
        return len(oracle.read_truth_file(self.truth_path))


def _probe_main(argv: Sequence[str]) -> int:
    """``python -m icecrawler_local.launcher probe --Ice.Config=F TASK...``: print stats + taskInfo as JSON."""
    parser = argparse.ArgumentParser(prog="icecrawler_local.launcher probe")
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
    print("usage: python -m icecrawler_local.launcher probe --Ice.Config=FILE TASK_ID...", file=sys.stderr)
    sys.exit(2)
