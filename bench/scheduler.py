"""Scheduler throughput: task cycles (lease + report) per second through real Ice proxies, from 1 and 8 client
processes, single calls (getUser/putUser) and batched calls (getUsers/putUsers of 100), against the real
scheduler daemon with durable commits: one daemon, and a scheduler run as 2 shard daemons (``icecrawler.shards``;
its tasks then sit on 2 hosts, one per shard, and each client takes its leases from the shards in turn, as the
clients' ShardedScheduler gateway does). The baseline, measured in the same run: an Echo server (same Ice
settings, same message shapes, no work behind it), i.e. what Ice and Python marshalling alone cost.
Also p50/p99 latency of getUser(s) as the clients saw it. First, what /metrics costs (``bench._metrics_ab``:
metrics off beside on, in ABBA windows; ``--metrics-control``: an A/A run; ``--metrics-profile``: py-spy's share
of a metrics-on daemon's work in metrics code).

    icecrawler bench scheduler [--seconds 4] [--clients 1,8] [--shards 1,2] [--tasks 20000]
                               [--json docs/bench/scheduler.json]
    icecrawler bench scheduler --only-metrics [--metrics-control] [--metrics-profile]
    icecrawler bench scheduler --metrics-pairs 0      # the matrix alone; the JSON's metrics figures stay
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import write_figures
from bench._echo import echo_module
from bench._metrics_ab import metrics_ab
from bench._metrics_profile import metrics_profile
from crawler_client.gateways import IceScheduler, ShardedScheduler
from icecrawler import durable, rpc
from icecrawler.models import TaskKind
from icecrawler.processes import ManagedProcess, ProcessGroup, cpu_seconds, free_port, icecrawler_argv, wait_for_port
from icecrawler.shards import ShardMap, shard_of_host
from scheduler_server.server import SCHEDULER_PROPERTIES

BATCH = 100
MODES = {"single": 1, "batched": BATCH}
TARGETS = ("scheduler", "echo")
DEFAULT_JSON = Path(__file__).resolve().parent.parent / "docs" / "bench" / "scheduler.json"
#: Latency samples kept per client process.
SAMPLES = 20_000
#: The sources (and their task kind) whose tasks the bench seeds, one per shard (a sharded run puts each on its
#: own host).
BENCH_SOURCES = {
    "jd": TaskKind.ProductReviews,
    "ecshop": TaskKind.ProductReviews,
    "weibo_pc": TaskKind.WeiboUser,
    "weibo_mobile": TaskKind.WeiboUser,
}


# --- the echo baseline server ------------------------------------------------------------------------------


def serve_echo(port: int, threads: int) -> int:
    """An Echo servant with prebuilt tasks shaped like the scheduler's (same id, token and field sizes)."""
    C = rpc.crawler()
    E = echo_module()
    tasks = [
        C.Task(
            id=f"reviews:jd:{100000 + n}",
            kind=C.TaskKind.ProductReviews,
            source="jd",
            target=str(100000 + n),
            leaseToken=f"{n:016x}",
            leaseDeadlineMs=int(time.time() * 1000),
            periodS=0.001,
            account=C.Account(),
        )
        for n in range(1000)
    ]

    class EchoServant(E.Echo):  # type: ignore[misc,name-defined]
        def echoTasks(self, workerId: str, max: int, current: Any) -> list[Any]:
            return tasks[:max]

        def echoReports(self, reports: Sequence[Any], current: Any) -> None:
            """Dropped."""

    with rpc.communicator(
        properties={"Ice.ThreadPool.Server.Size": str(threads), "Ice.ThreadPool.Server.SizeMax": str(threads)}
    ) as comm:
        rpc.serve(comm, "EchoAdapter", {"echo": EchoServant()}, f"tcp -h 127.0.0.1 -p {port}")
    return 0


# --- one client process ---------------------------------------------------------------------------------------


def run_worker(args: argparse.Namespace) -> int:
    """Cycle until the shared window closes; write cycles and getUser(s) latencies to ``args.out``."""
    C = rpc.crawler()
    with rpc.communicator() as comm:
        if args.target == "echo":
            echo = echo_module().EchoPrx(comm, args.proxy)

            def lease(n: int) -> list[Any]:
                return echo.echoTasks(args.name, n)  # type: ignore[no-any-return]

            def report(reports: list[Any]) -> None:
                echo.echoReports(reports)
        else:
            # One proxy per shard: each cycle leases from the next shard and reports back to it.
            shards = [C.SchedulerPrx(comm, text) for text in args.proxy.split(";")]
            turn = [int(args.name.rpartition("-")[2] or 0)]

            def lease(n: int) -> list[Any]:
                turn[0] += 1
                scheduler = shards[turn[0] % len(shards)]
                return [scheduler.getUser(args.name)] if n == 1 else scheduler.getUsers(args.name, n)

            def report(reports: list[Any]) -> None:
                scheduler = shards[turn[0] % len(shards)]
                if len(reports) == 1:
                    scheduler.putUser(reports[0])
                else:
                    scheduler.putUsers(reports)

        lease(1) if args.target == "echo" else None  # connect before the window opens
        # The clients share the 2 cores with the server, so they stay lean: one Report object per batch slot,
        # built once; each cycle only sets the fields that change (id, token, a new fingerprint).
        reports = [
            C.Report(taskId="", leaseToken="", newItems=1, windowItems=10, fingerprint=0, httpStatus=200, fetches=1)
            for _ in range(args.batch)
        ]
        time.sleep(max(0.0, args.start_at - time.time()))
        end = args.start_at + args.seconds
        cycles, latencies, late = 0, [], time.time() - args.start_at
        while time.time() < end:
            started = time.perf_counter()
            try:
                tasks = lease(args.batch)
            except C.NoWork:
                time.sleep(0.001)
                continue
            latencies.append(time.perf_counter() - started)
            for task, item in zip(tasks, reports, strict=False):
                item.taskId = task.id
                item.leaseToken = task.leaseToken
                item.fingerprint = cycles
            report(reports[: len(tasks)])
            cycles += len(tasks)
    if len(latencies) > SAMPLES:
        latencies = random.Random(0).sample(latencies, SAMPLES)
    durable.write_whole(
        Path(args.out), json.dumps({"cycles": cycles, "latencies_s": latencies, "late_s": late}).encode()
    )
    return 0


# --- the driver -------------------------------------------------------------------------------------------------


def measure(
    group: ProcessGroup,
    proxy: str,
    server_pids: list[int],
    target: str,
    clients: int,
    batch: int,
    seconds: float,
    tmp: Path,
) -> dict[str, float]:
    start_at = time.time() + 2.0 + 0.5 * clients  # every client is connected and waiting by then
    outs = [tmp / f"{target}-{len(server_pids)}-{clients}-{batch}-{n}.json" for n in range(clients)]
    workers = [
        group.start(
            f"{target}-{clients}c-b{batch}-{n}",
            [
                sys.executable,
                "-m",
                "bench.scheduler",
                "--worker",
                "--target",
                target,
                "--proxy",
                proxy,
                "--batch",
                str(batch),
                "--seconds",
                str(seconds),
                "--start-at",
                str(start_at),
                "--out",
                str(out),
                "--name",
                f"bench-{n}",
            ],
            cwd=Path(__file__).resolve().parent.parent,
        )
        for n, out in enumerate(outs)
    ]
    # The server's CPU over the measuring window only (not while clients start and connect).
    time.sleep(max(0.0, start_at - time.time()))
    cpu_before = sum(map(cpu_seconds, server_pids))
    time.sleep(max(0.0, start_at + seconds - time.time()))
    server_cpu_s = sum(map(cpu_seconds, server_pids)) - cpu_before
    for worker in workers:
        worker.popen.wait(timeout=seconds + 60)
        if worker.popen.returncode != 0:
            raise RuntimeError(f"bench worker failed:\n{worker.log_tail()}")
    results = [json.loads(out.read_text()) for out in outs]
    cycles = sum(r["cycles"] for r in results)
    latencies = sorted(x for r in results for x in r["latencies_s"])
    return {
        "cycles_per_s": cycles / seconds,
        "server_cpu_us": 1e6 * server_cpu_s / cycles if cycles else float("nan"),
        "p50_ms": 1000 * statistics.median(latencies) if latencies else float("nan"),
        "p99_ms": 1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))] if latencies else float("nan"),
        "late_s": max(r["late_s"] for r in results),
    }


def shard_hosts(shards: int) -> dict[str, str]:
    """A loopback host for each of the first ``shards`` bench sources, chosen so that source k lands on shard k
    (one daemon: every source on 127.0.0.1, as in the default settings)."""
    if not 1 <= shards <= len(BENCH_SOURCES):
        raise SystemExit(f"--shards: 1 to {len(BENCH_SOURCES)} shards (one bench source each), got {shards}")
    candidates = [f"127.0.0.{n}:8800" for n in range(1, 255)]
    return {
        source: next(host for host in candidates if shard_of_host(host, shards) == shard)
        for shard, source in enumerate(list(BENCH_SOURCES)[:shards])
    }


def start_scheduler(
    group: ProcessGroup,
    tmp: Path,
    tasks: int,
    threads: int,
    shards: int,
    metrics_port: int = 0,
    wrap: Sequence[str] = (),
) -> tuple[str, list[ManagedProcess]]:
    """Start the scheduler as ``shards`` daemons and seed ``tasks`` (spread over one source per shard, through
    the clients' routing gateway): the ``;``-separated shard proxies and the daemons. ``metrics_port``: shard K
    serves /metrics at that port + K (0: metrics off). ``wrap``: a command each daemon runs under (a profiler)."""
    tmp.mkdir(parents=True, exist_ok=True)
    hosts = shard_hosts(shards)
    settings = {
        "scheduler.durable_commits": "true",
        "scheduler.policy": "fixed",
        "scheduler.min_period_s": "0.001",
        "scheduler.initial_period_s": "0.001",
        "scheduler.max_period_s": "1",
        "scheduler.lease_s": "60",
        "log.level": "WARNING",
        "scheduler.shards": str(shards),
        "metrics.scheduler.port": str(metrics_port),
        **{f"sources.{source}.base_url": f"http://{host}/{source}" for source, host in hosts.items()},
    }
    proxies, daemons = [], []
    for shard in range(shards):
        port = free_port()
        conf = tmp / f"scheduler-{shards}-{shard}.conf"
        conf.write_text(
            f"SchedulerAdapter.Endpoints=tcp -h 127.0.0.1 -p {port}\n"
            f"Ice.ThreadPool.Server.Size={threads}\nIce.ThreadPool.Server.SizeMax={threads}\n"
        )
        sets = {**settings, "scheduler.shard": str(shard), "scheduler.db_dir": str(tmp / f"db-{shards}-{shard}")}
        daemons.append(
            group.start(
                f"scheduler-{shards}-{shard}",
                [
                    *wrap,
                    *icecrawler_argv("scheduler", *(f"--set={k}={v}" for k, v in sets.items()), f"--Ice.Config={conf}"),
                ],
            )
        )
        proxies.append(f"{rpc.SCHEDULER_IDENTITY}:tcp -h 127.0.0.1 -p {port}")
    for daemon, proxy in zip(daemons, proxies, strict=True):
        wait_for_port("127.0.0.1", int(proxy.rpartition(" ")[2]), 60, alive=daemon.alive)
    with rpc.communicator() as comm:
        gateway = ShardedScheduler(
            [IceScheduler(rpc.crawler().SchedulerPrx(comm, proxy)) for proxy in proxies], ShardMap(hosts, shards)
        )
        for shard, source in enumerate(hosts):
            ids = [f"{source}:{n}" for n in range(shard, tasks, shards)]
            for first in range(0, len(ids), 1000):
                gateway.add_targets(ids[first : first + 1000], BENCH_SOURCES[source])
    return ";".join(proxies), daemons


def start_echo(group: ProcessGroup, threads: int) -> tuple[str, int]:
    echo_port = free_port()
    echo = group.start(
        "echo",
        [
            sys.executable,
            "-m",
            "bench.scheduler",
            "--serve-echo",
            "--port",
            str(echo_port),
            "--server-threads",
            str(threads),
        ],
        cwd=Path(__file__).resolve().parent.parent,
    )
    wait_for_port("127.0.0.1", echo_port, 60, alive=echo.alive)
    return f"echo:tcp -h 127.0.0.1 -p {echo_port}", echo.pid


METRICS_PREFIXES = ("metrics_", "core_metrics_")


def _metrics_figures_of(path: Path) -> dict[str, Any]:
    """The metrics cost figures of an earlier run, kept when this run measures only the matrix."""
    if not path.exists():
        return {}
    return {key: value for key, value in json.loads(path.read_text()).items() if key.startswith(METRICS_PREFIXES)}


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="icecrawler bench scheduler", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=4.0, help="measuring window per run")
    parser.add_argument("--clients", default="1,8", help="client process counts, comma-separated")
    parser.add_argument(
        "--shards", default="1,2", help="scheduler shard counts, comma-separated (1 to 4; 1 = the plain daemon)"
    )
    parser.add_argument("--tasks", type=int, default=20_000, help="tasks seeded (all due again after 1 ms)")
    parser.add_argument("--json", default=str(DEFAULT_JSON), help="where to write the headline figures")
    parser.add_argument(
        "--server-threads",
        type=int,
        default=int(SCHEDULER_PROPERTIES["Ice.ThreadPool.Server.Size"]),
        help="dispatch threads of the scheduler and of the echo server (default: the daemon's)",
    )
    parser.add_argument(
        "--metrics-pairs",
        type=int,
        default=10,
        help="off/on window pairs of the metrics cost runs (0: skip them and keep the --json's metrics figures)",
    )
    parser.add_argument("--metrics-window-s", type=float, default=1.0, help="length of one metrics cost window")
    parser.add_argument(
        "--metrics-scrape-s", type=float, default=1.0, help="seconds of the metrics-on daemon's work per scrape"
    )
    parser.add_argument(
        "--metrics-profile",
        action="store_true",
        help="also sample a metrics-on daemon with py-spy (the bench extra) and report the share in metrics code",
    )
    parser.add_argument(
        "--metrics-control",
        action="store_true",
        help="also run the metrics cases against two daemons with metrics off (an A/A control: the noise floor)",
    )
    parser.add_argument(
        "--only-metrics",
        action="store_true",
        help="run only the metrics cost runs; their figures are merged into the existing --json",
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--serve-echo", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--target", choices=TARGETS, help=argparse.SUPPRESS)
    parser.add_argument("--proxy", help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--start-at", type=float, default=0.0, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--name", default="bench", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return run_worker(args)
    if args.serve_echo:
        return serve_echo(args.port, args.server_threads)

    client_counts = [int(c) for c in args.clients.split(",")]
    shard_counts = [int(n) for n in args.shards.split(",")]
    figures: dict[str, Any] = {
        "durable_commits": True,
        "batch_size": BATCH,
        "seconds_per_run": args.seconds,
        "tasks_seeded": args.tasks,
        "server_threads": args.server_threads,
        "load_avg_1m_before": round(os.getloadavg()[0], 2),
    }
    rows = []
    ab_lines: list[str] = []
    with tempfile.TemporaryDirectory(prefix="bench-scheduler-") as name, ProcessGroup(Path(name) / "logs") as group:
        tmp = Path(name)
        ab_figures: dict[str, Any] = {}
        if args.metrics_pairs > 0:
            ab_figures, ab_lines = metrics_ab(group, tmp, args, start_scheduler)
        if args.metrics_profile:
            profile_figures, profile_lines = metrics_profile(group, tmp, args, start_scheduler, measure)
            ab_figures.update(profile_figures)
            ab_lines += [
                f"\nprofile of a metrics-on daemon (py-spy, {profile_figures['metrics_profile_rate_hz']} samples/s, "
                f"scraped every {args.metrics_scrape_s:g} s): share of its Python work in metrics code",
                *profile_lines,
            ]
        figures.update(ab_figures)
        if args.only_metrics:
            shard_counts = []
            old = Path(args.json)
            kept = json.loads(old.read_text()) if old.exists() else {}
            kept = {key: value for key, value in kept.items() if not key.startswith(METRICS_PREFIXES)}
            figures = {**kept, **ab_figures}  # the other figures stay; every metrics figure is this run's
        echo_proxy, echo_pid = start_echo(group, args.server_threads) if shard_counts else ("", 0)
        for shards in shard_counts:
            # The daemons as deployed: /metrics on (nobody scrapes it here; see metrics_ab for the cost).
            proxy, daemons = start_scheduler(group, tmp, args.tasks, args.server_threads, shards, free_port())
            targets = {"scheduler": (proxy, [daemon.pid for daemon in daemons]), "echo": (echo_proxy, [echo_pid])}
            suffix = "" if shards == 1 else f"_{shards}shards"
            for clients in client_counts:
                for mode, batch in MODES.items():
                    result = {
                        target: measure(group, *targets[target], target, clients, batch, args.seconds, tmp)
                        for target in TARGETS
                    }
                    for target, prefix in (("scheduler", ""), ("echo", "echo_")):
                        key = f"{prefix}{mode}_{clients}c{suffix}"
                        figures[f"{key}_cycles_per_s"] = round(result[target]["cycles_per_s"], 1)
                        figures[f"{key}_get_p50_ms"] = round(result[target]["p50_ms"], 3)
                        figures[f"{key}_get_p99_ms"] = round(result[target]["p99_ms"], 3)
                        figures[f"{key}_server_cpu_us_per_cycle"] = round(result[target]["server_cpu_us"], 1)
                    rows.append((shards, clients, mode, result["scheduler"], result["echo"]))
            for mode in MODES:
                figures[f"{mode}{suffix}_cycles_per_s"] = max(
                    figures[f"{mode}_{c}c{suffix}_cycles_per_s"] for c in client_counts
                )
            for daemon in daemons:  # idle daemons would still wake up and take CPU from the next runs
                daemon.stop()
    if not args.only_metrics:
        figures["load_avg_1m_after"] = round(os.getloadavg()[0], 2)
        print_matrix(args, figures, rows)
    if ab_lines:
        print(
            "\n/metrics cost: one daemon with metrics off beside one with them on, "
            f"scraped every {args.metrics_scrape_s:g} s of its work"
            if args.metrics_pairs > 0
            else "\n/metrics cost"
        )
        print("\n".join(ab_lines))
    if args.metrics_pairs <= 0 and not args.only_metrics:
        kept = _metrics_figures_of(Path(args.json))  # not measured by this run: the last measured ones stay
        figures.update(kept)
        if kept:
            print(f"kept the {len(kept)} metrics figures already in {args.json} (--metrics-pairs 0 measures none)")
    write_figures(Path(args.json), figures)
    return 0


def print_matrix(args: argparse.Namespace, figures: dict[str, Any], rows: list[Any]) -> None:
    """The main table: scheduler vs echo for every shard count, client count and call mode."""
    print(
        f"scheduler task cycles (lease + report), durable commits, {args.seconds:.0f} s per run, "
        f"batch {BATCH}, {args.server_threads} dispatch threads; "
        f"load average {figures['load_avg_1m_before']} -> {figures['load_avg_1m_after']}"
    )
    print(
        f"{'shards':>6} {'clients':>7} {'calls':>8} | {'scheduler/s':>11} {'p50 ms':>8} {'p99 ms':>8} | "
        f"{'echo/s':>9} {'p50 ms':>8} {'p99 ms':>8} | {'sched/echo':>10} | {'server CPU us/cycle':>19}"
    )
    for shards, clients, mode, sched, echo in rows:
        ratio = sched["cycles_per_s"] / echo["cycles_per_s"] if echo["cycles_per_s"] else float("nan")
        print(
            f"{shards:>6} {clients:>7} {mode:>8} | {sched['cycles_per_s']:>11.0f} {sched['p50_ms']:>8.2f} "
            f"{sched['p99_ms']:>8.2f} | {echo['cycles_per_s']:>9.0f} {echo['p50_ms']:>8.2f} "
            f"{echo['p99_ms']:>8.2f} | {ratio:>10.2f} | {sched['server_cpu_us']:>19.1f}"
        )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
