"""``icecrawler bench scale``: end-to-end items/s with 1, 2, 4, 8 crawler client processes.

One run per client count, each on a fresh cluster (``icecrawler_local.launcher``): the sandbox adds ``--latency-ms``
(default 50 ms) to every request, the real scheduler and storage servers run as their own processes, and N
``icecrawler client`` processes (``client.workers`` fetch threads each) crawl a static workload (JD products
with reviews, mobile-Weibo users with posts; 22 400 items by default, so even 8 clients run ~10 s and the
start and the tail of a run stay a small share of it). The clock starts when the tasks are seeded through an
already connected proxy (every client is already up and idle) and stops when every sandbox item is in storage;
items/s = items / that time. The baseline is the 1-client run of the same invocation, so
speedup(N) = items/s(N) / items/s(1), target ≥ 0.9 × N up to 4 clients.

Where the curve bends and why: for every run the CPU seconds of each process (``/proc/<pid>/stat``,
user + system) over the measured window give each role's CPU use (100 % = one core), and ``/proc/stat`` gives
the whole machine's (other tenants included). The first N below 0.9 × N is explained by whichever is saturated:
the sandbox (one Python process, so ~100 % is its ceiling), the scheduler, storage, or the machine's cores
(clients' own parse + fingerprint CPU).

Writes docs/bench/scale.json (flat keys with units).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import ROOT, write_figures
from crawler_client.gateways import IceScheduler, per_kind
from icecrawler import rpc
from icecrawler.processes import ManagedProcess, ProcessGroup, cpu_seconds, free_port, poll_until
from icecrawler.sourcespec import group_by_kind
from icecrawler_local.launcher import Cluster, Workload

OUT = ROOT / "docs" / "bench" / "scale.json"
TARGET = 0.9
#: Seconds between checks of the stored-item count: the end of a run is known to within this.
POLL_S = 0.05
#: Ids per addUsers call (under the scheduler's default batch limit).
SEED_BATCH = 500


class Seeder:
    """Adds the workload's ids through an already connected proxy, so the measured window holds the crawl
    itself and not the start-up of an ``icecrawler seed`` process (~0.5 s of Python imports, a large share of
    a 4-client run)."""

    def __init__(self, proxy: Any, ids: list[str]) -> None:
        self.proxy = proxy
        self.groups = group_by_kind(ids, None)

    def connect(self) -> None:
        self.proxy.ice_ping()

    def seed(self) -> None:
        per_kind(IceScheduler(self.proxy).add_targets, self.groups, SEED_BATCH)


def _machine_busy() -> tuple[float, float]:
    """(busy, total) jiffies of all CPUs from /proc/stat (busy excludes idle and iowait)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    total = sum(fields[:8])
    return total - idle, total


def _started(process: ManagedProcess) -> bool:
    try:
        return " started: " in process.log_path.read_text(errors="replace")
    except OSError:
        return False


def run_once(
    clients: int, workload: Workload, latency_ms: int, workers: int, work: Path, timeout_s: float
) -> dict[str, Any]:
    """One cluster with ``clients`` client processes; returns its measurements."""
    with ProcessGroup(work / "logs") as group:
        cluster = Cluster(work, group, workload, settings={"client.progress_log_s": 30.0})
        sandbox_port, scheduler_port, storage_port = free_port(), free_port(), free_port()
        sandbox = cluster.start_sandbox("127.0.0.1", sandbox_port, latency_ms, wait=False)
        scheduler = cluster.start_server("scheduler", "127.0.0.1", scheduler_port, wait=False)
        storage = cluster.start_server("storage", "127.0.0.1", storage_port, wait=False)
        scheduler_proxy = f"scheduler:tcp -h 127.0.0.1 -p {scheduler_port}"
        storage_proxy = f"storage:tcp -h 127.0.0.1 -p {storage_port}"
        settings = {"client.workers": workers, "client.batch": workers, "client.idle_sleep_s": 0.1}
        procs = [
            cluster.start_client(
                f"c{i + 1}", scheduler_proxy, storage_proxy, ("127.0.0.1", sandbox_port), settings=settings
            )
            for i in range(clients)
        ]
        for process, port in ((sandbox, sandbox_port), (scheduler, scheduler_port), (storage, storage_port)):
            cluster.wait_listening(process, "127.0.0.1", port, timeout_s=120)
        if not poll_until(lambda: all(_started(p) for p in procs), 180, 0.2):
            raise RuntimeError("clients did not start: " + "; ".join(p.log_tail(3) for p in procs))
        if not poll_until(lambda: cluster.read_truth_count() >= workload.items, 60, 0.2):
            raise RuntimeError("the sandbox did not publish the workload")

        roles = {"sandbox": [sandbox], "scheduler": [scheduler], "storage": [storage], "clients": procs}
        cpu0 = {role: sum(cpu_seconds(p.pid) for p in ps) for role, ps in roles.items()}
        busy0, total0 = _machine_busy()
        with rpc.communicator(properties={"Scheduler.Proxy": scheduler_proxy}) as comm:
            seeder = Seeder(rpc.scheduler_proxy(comm), workload.seed_ids())
            seeder.connect()
            start = time.monotonic()
            seeder.seed()
        done = poll_until(lambda: cluster.stored_items() >= workload.items, timeout_s, POLL_S)
        wall = time.monotonic() - start
        cpu1 = {role: sum(cpu_seconds(p.pid) for p in ps) for role, ps in roles.items()}
        busy1, total1 = _machine_busy()
        problems = cluster.problems()
        if not done or problems:
            raise RuntimeError(f"{clients} client(s): crawl incomplete after {wall:.0f}s: {problems}")
        stored = cluster.stored_items()
    cores = os.cpu_count() or 1
    return {
        "clients": clients,
        "items": stored,
        "wall_s": wall,
        "items_per_s": stored / wall,
        "cpu_pct": {role: 100 * (cpu1[role] - cpu0[role]) / wall for role in roles},
        "cpu_ms_per_item": {role: 1000 * (cpu1[role] - cpu0[role]) / stored for role in roles},
        "machine_busy_pct": 100 * (busy1 - busy0) / max(total1 - total0, 1),
        "cores": cores,
    }


def ceilings(row: dict[str, Any]) -> dict[str, float]:
    """items/s at which each role would saturate, from its CPU cost per item (independent of other tenants'
    load, which only stretches the wall time): one core for each single-process server (the GIL), all cores
    for the whole cluster."""
    per_item = row["cpu_ms_per_item"]
    out = {role: 1000 / per_item[role] for role in ("sandbox", "scheduler", "storage") if per_item[role] > 0}
    total = sum(per_item.values())
    if total > 0:
        out["machine"] = row["cores"] * 1000 / total
    return out


def _bend(rows: list[dict[str, Any]]) -> str:
    """Where the speedup first drops below TARGET × N, and what was saturated there."""
    base = rows[0]["items_per_s"]
    for row in rows[1:]:
        speedup = row["items_per_s"] / base
        if speedup >= TARGET * row["clients"]:
            continue
        cpu = row["cpu_pct"]
        cores = row["cores"]
        machine = row["machine_busy_pct"]
        reasons = []
        if cpu["sandbox"] >= 80:
            reasons.append(
                f"the site: the sandbox process used {cpu['sandbox']:.0f}% of a core (one Python "
                f"process, so ~100% is its ceiling)"
            )
        if cpu["scheduler"] >= 80:
            reasons.append(f"the scheduler used {cpu['scheduler']:.0f}% of a core")
        if cpu["storage"] >= 80:
            reasons.append(f"storage used {cpu['storage']:.0f}% of a core")
        if machine >= 85:
            ours = sum(cpu.values())
            reasons.append(
                f"the machine: all {cores} cores were {machine:.0f}% busy, {ours:.0f}% of one core by "
                f"this cluster (clients {cpu['clients']:.0f}%, sandbox {cpu['sandbox']:.0f}%, "
                f"scheduler {cpu['scheduler']:.0f}%, storage {cpu['storage']:.0f}%), the rest by "
                f"other processes; on {cores} idle cores this cluster's own CPU "
                f"({sum(row['cpu_ms_per_item'].values()):.2f} ms/item) would cap it at "
                f"{ceilings(row).get('machine', 0):.0f} items/s"
            )
        if not reasons:
            reasons.append(
                "no single process was saturated; latency-bound (the clients' fetch threads waited on "
                f"{rows[0].get('latency_ms', 50)} ms pages) or start/finish effects of a short run"
            )
        return (
            f"bends at {row['clients']} clients: speedup {speedup:.2f} < {TARGET} × {row['clients']} = "
            f"{TARGET * row['clients']:.1f}; " + "; ".join(reasons)
        )
    return f"no bend: speedup ≥ {TARGET} × N at every measured N (up to {rows[-1]['clients']})"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="icecrawler bench scale", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--clients",
        default="1,2,4,8",
        help="client process counts, comma-separated (first = baseline; default 1,2,4,8)",
    )
    parser.add_argument("--latency-ms", type=int, default=50, help="sandbox delay per request (default 50)")
    parser.add_argument("--workers", type=int, default=4, help="fetch threads per client (default 4)")
    parser.add_argument("--products", type=int, default=640, help="JD products (30 reviews each; default 640)")
    parser.add_argument("--users", type=int, default=160, help="mobile-Weibo users (20 posts each; default 160)")
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="runs per client count, keep the fastest (other tenants' load only slows a run down)",
    )
    parser.add_argument("--timeout-s", type=float, default=300.0, help="give up on one run after this long")
    parser.add_argument("--no-write", action="store_true", help="do not write docs/bench/scale.json")
    args = parser.parse_args(argv)
    counts = [int(x) for x in args.clients.split(",") if x.strip()]
    workload = Workload(jd_products=args.products, reviews_per_product=30, weibo_users=args.users, posts_per_user=20)
    load_at_start = os.getloadavg()[0]
    print(
        f"scale: {workload.items} items ({args.products} JD products x 30 reviews, {args.users} users x 20 posts), "
        f"sandbox latency {args.latency_ms} ms, {args.workers} fetch threads per client, {os.cpu_count()} cores, "
        f"load average at start {load_at_start:.1f}"
    )
    rows = []
    base_dir = Path(tempfile.mkdtemp(prefix="icecrawler-scale-"))
    try:
        for clients in counts:
            runs = []
            for attempt in range(max(args.repeat, 1)):
                run = run_once(
                    clients, workload, args.latency_ms, args.workers, base_dir / f"n{clients}-{attempt}", args.timeout_s
                )
                print(
                    f"  {clients} client(s): {run['items_per_s']:.0f} items/s ({run['wall_s']:.1f} s, machine "
                    f"{run['machine_busy_pct']:.0f}% busy)",
                    flush=True,
                )
                runs.append(run)
            row = max(runs, key=lambda r: float(r["items_per_s"]))
            row["latency_ms"] = args.latency_ms
            rows.append(row)
    finally:
        shutil.rmtree(base_dir, ignore_errors=True)

    base = rows[0]["items_per_s"]
    print()
    print(
        f"{'clients':>7} {'items/s':>8} {'speedup':>8} {'target':>7} {'eff.':>5} {'sandbox%':>8} {'sched%':>7} "
        f"{'storage%':>8} {'clients%':>8} {'machine%':>8}"
    )
    for row in rows:
        n = row["clients"]
        speedup = row["items_per_s"] / base
        cpu = row["cpu_pct"]
        print(
            f"{n:>7} {row['items_per_s']:>8.0f} {speedup:>8.2f} {TARGET * n:>7.1f} {speedup / n:>5.2f} "
            f"{cpu['sandbox']:>8.0f} {cpu['scheduler']:>7.0f} {cpu['storage']:>8.0f} {cpu['clients']:>8.0f} "
            f"{row['machine_busy_pct']:>8.0f}"
        )
    print("(CPU columns: % of one core over the measured window; machine%: all cores, other tenants included)")
    last = rows[-1]
    limits = ceilings(last)
    print()
    print(f"CPU per item at {last['clients']} clients and the throughput where each would saturate:")
    for role, ms in last["cpu_ms_per_item"].items():
        limit = limits.get(role)
        note = f"{limit:>8.0f} items/s (one core)" if limit else ""
        print(f"  {role:<10} {ms:6.3f} ms/item  {note}")
    if "machine" in limits:
        print(
            f"  {'all roles':<10} {sum(last['cpu_ms_per_item'].values()):6.3f} ms/item  "
            f"{limits['machine']:>8.0f} items/s ({last['cores']} idle cores)"
        )
    verdict = _bend(rows)
    print(verdict)

    summary: dict[str, Any] = {
        "items": workload.items,
        "latency_ms": args.latency_ms,
        "workers_per_client": args.workers,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "repeat": args.repeat,
        "load_average_at_start": round(load_at_start, 1),
        "bend": verdict,
    }
    for row in rows:
        n = row["clients"]
        suffix = f"{n}_client" if n == 1 else f"{n}_clients"
        summary[f"items_per_s_{suffix}"] = round(row["items_per_s"], 1)
        summary[f"wall_s_{suffix}"] = round(row["wall_s"], 2)
        summary[f"speedup_{suffix}"] = round(row["items_per_s"] / base, 3)
        summary[f"machine_busy_pct_{suffix}"] = round(row["machine_busy_pct"], 1)
        for role, pct in row["cpu_pct"].items():
            summary[f"cpu_{role}_pct_{suffix}"] = round(pct, 1)
            summary[f"cpu_{role}_ms_per_item_{suffix}"] = round(row["cpu_ms_per_item"][role], 4)
    for role, limit in ceilings(rows[-1]).items():
        summary[f"ceiling_{role}_items_per_s"] = round(limit, 0)
    if not args.no_write:
        write_figures(OUT, summary)
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
