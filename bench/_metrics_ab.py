"""The daemon cost of the scheduler's ``/metrics``, measured so that a shared, noisy machine hurts both sides
alike: two scheduler daemons run side by side for the whole measurement, one with metrics off and one with
metrics on, seeded alike. The same client processes then cycle against them in short alternating windows
(ABBA: off on on off off on ...), so any drift of the machine lands on both; a window's server CPU is read from
the active daemon's process CPU clock (nanoseconds, every thread, also the scrape threads that have exited).
The "on" daemon is scraped at each whole second of its own windows, so it pays exactly one scrape per second
of work (15 times Prometheus' default rate). Figures: the median over the pairs of the on/off ratios of
throughput and of server CPU per cycle; and, timed alone, what one scrape costs the daemon.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import statistics
import sys
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench._core_cost import core_cycle_cost
from icecrawler import durable, rpc
from icecrawler.processes import ManagedProcess, ProcessGroup, cpu_seconds, free_port

__all__ = ["CASES", "StartScheduler", "metrics_ab", "schedule", "scrape"]

#: (client processes, tasks per call): 8 clients making batched calls, 1 client making single calls.
CASES = ((8, 100), (1, 1))
#: Pause between windows: the last cycle of a window finishes, and its CPU is counted in its own window.
GAP_S = 0.25
#: Windows run first and not counted (the first calls to each daemon after seeding).
WARM_UP = "01"
#: Scrapes timed alone to state what one costs the daemon.
SCRAPES_ALONE = 100

StartScheduler = Callable[..., tuple[str, list[ManagedProcess]]]


def schedule(pairs: int) -> str:
    """Window order, ``0`` = metrics off, ``1`` = on: ABBA pairs (01 10 01 10 ...), so a steady drift of the
    machine's load adds as much to one side as to the other."""
    return "".join("01" if pair % 2 == 0 else "10" for pair in range(pairs))


def _cpu_clock(pid: int) -> Callable[[], float]:
    """A reader of process ``pid``'s CPU seconds: its POSIX CPU clock (ns resolution) where Linux lends it,
    else /proc's clock ticks."""
    with contextlib.suppress(OSError, AttributeError):
        clock = ctypes.c_int()
        if ctypes.CDLL(None, use_errno=True).clock_getcpuclockid(pid, ctypes.byref(clock)) == 0:
            clock_id = clock.value
            time.clock_gettime_ns(clock_id)
            return lambda: time.clock_gettime_ns(clock_id) / 1e9
    return lambda: cpu_seconds(pid)


# --- one client process ---------------------------------------------------------------------------------------


def run_worker(args: argparse.Namespace) -> int:
    """Cycle against the daemon of each window in turn; write the cycles completed per window to ``args.out``."""
    C = rpc.crawler()
    with rpc.communicator() as comm:
        daemons = [C.SchedulerPrx(comm, args.proxy_off), C.SchedulerPrx(comm, args.proxy_on)]
        for daemon in daemons:
            daemon.ice_ping()  # connected before the first window opens
        reports = [
            C.Report(taskId="", leaseToken="", newItems=1, windowItems=10, fingerprint=0, httpStatus=200, fetches=1)
            for _ in range(args.batch)
        ]
        counts: list[int] = []
        for index, which in enumerate(args.schedule):
            start = args.start_at + index * (args.window + GAP_S)
            time.sleep(max(0.0, start - time.time()))
            scheduler, cycles = daemons[int(which)], 0
            while time.time() < start + args.window:
                try:
                    if args.batch == 1:
                        tasks = [scheduler.getUser(args.name)]
                    else:
                        tasks = scheduler.getUsers(args.name, args.batch)
                except C.NoWork:
                    time.sleep(0.001)
                    continue
                for task, item in zip(tasks, reports, strict=False):
                    item.taskId, item.leaseToken, item.fingerprint = task.id, task.leaseToken, cycles
                if len(tasks) == 1:
                    scheduler.putUser(reports[0])
                else:
                    scheduler.putUsers(reports[: len(tasks)])
                cycles += len(tasks)
            counts.append(cycles)
    durable.write_whole(Path(args.out), json.dumps(counts).encode())
    return 0


# --- the driver -------------------------------------------------------------------------------------------------


def scrape(url: str) -> None:
    """One scrape of ``url``, read to the end."""
    with urllib.request.urlopen(url, timeout=10) as answer:
        answer.read()


def _run_case(
    group: ProcessGroup,
    tmp: Path,
    proxies: tuple[str, str],
    pids: tuple[int, int],
    url: str,
    clients: int,
    batch: int,
    args: argparse.Namespace,
) -> list[tuple[float, float]]:
    """One case's windows: (cycles/s, server CPU us per cycle) of each, in schedule order; ``url``: the "on"
    daemon's /metrics ("": no scrapes)."""
    order = WARM_UP + schedule(args.metrics_pairs)
    window = args.metrics_window_s
    start_at = time.time() + 2.0 + 0.5 * clients  # every client is connected and waiting by then
    outs = [tmp / f"ab-{clients}c-b{batch}-{n}.json" for n in range(clients)]
    workers = [
        group.start(
            f"ab-{clients}c-b{batch}-{n}",
            [
                *(sys.executable, "-m", "bench._metrics_ab", "--worker", "--proxy-off", proxies[0]),
                *("--proxy-on", proxies[1], "--schedule", order, "--window", str(window), "--start-at", str(start_at)),
                *("--batch", str(batch), "--out", str(out), "--name", f"bench-{n}"),
            ],
            cwd=Path(__file__).resolve().parent.parent,
        )
        for n, out in enumerate(outs)
    ]
    clocks = [_cpu_clock(pid) for pid in pids]
    cpu_s: list[float] = []
    on_s, next_scrape = 0.0, args.metrics_scrape_s / 2  # in seconds of the "on" daemon's own windows
    for index, which in enumerate(order):
        start = start_at + index * (window + GAP_S)
        time.sleep(max(0.0, start - time.time()))
        clock = clocks[int(which)]
        before = clock()
        if which == "1" and url:  # one scrape per ``--metrics-scrape-s`` of the "on" daemon's work
            while next_scrape < on_s + window:
                time.sleep(max(0.0, start + next_scrape - on_s - time.time()))
                scrape(url)
                next_scrape += args.metrics_scrape_s
            on_s += window
        time.sleep(max(0.0, start + window + GAP_S - 0.02 - time.time()))
        cpu_s.append(clock() - before)
    for worker in workers:
        worker.popen.wait(timeout=len(order) * (window + GAP_S) + 60)
        if worker.popen.returncode != 0:
            raise RuntimeError(f"bench worker failed:\n{worker.log_tail()}")
    cycles = [sum(counts) for counts in zip(*(json.loads(out.read_text()) for out in outs), strict=True)]
    windows = [(n / window, 1e6 * cpu / n if n else float("nan")) for n, cpu in zip(cycles, cpu_s, strict=True)]
    return windows[len(WARM_UP) :]


def _scrape_cost(url: str, pid: int) -> float:
    """CPU milliseconds one scrape costs the (otherwise idle) daemon."""
    clock = _cpu_clock(pid)
    scrape(url)
    before = clock()
    for _ in range(SCRAPES_ALONE):
        scrape(url)
    return 1000 * (clock() - before) / SCRAPES_ALONE


def _compare(windows: list[tuple[float, float]], pairs: int) -> dict[str, float]:
    """Per-pair on/off comparison of one case's windows (schedule order): medians, and the middle half of the
    pairs' CPU costs (how far to trust the median)."""
    order = schedule(pairs)
    split = [
        (windows[2 * k + order[2 * k : 2 * k + 2].index("0")], windows[2 * k + order[2 * k : 2 * k + 2].index("1")])
        for k in range(pairs)
    ]
    cpu_costs = [100 * (on[1] / off[1] - 1) for off, on in split]
    q1, _, q3 = statistics.quantiles(cpu_costs, n=4) if len(cpu_costs) > 1 else (cpu_costs[0],) * 3
    return {
        "off_cycles_per_s": statistics.median(off[0] for off, _ in split),
        "on_cycles_per_s": statistics.median(on[0] for _, on in split),
        "off_cpu_us": statistics.median(off[1] for off, _ in split),
        "on_cpu_us": statistics.median(on[1] for _, on in split),
        "throughput_pct": statistics.median(100 * (1 - on[0] / off[0]) for off, on in split),
        "cpu_pct": statistics.median(cpu_costs),
        "cpu_pct_q1": q1,
        "cpu_pct_q3": q3,
    }


def _line(clients: int, key: str, c: dict[str, float]) -> str:
    return (
        f"{clients:>7} {key.partition('_')[0]:>8} | {c['off_cycles_per_s']:>12.0f} {c['on_cycles_per_s']:>12.0f} "
        f"{c['throughput_pct']:>6.1f}% | {c['off_cpu_us']:>10.1f} {c['on_cpu_us']:>10.1f} {c['cpu_pct']:>6.1f}% | "
        f"{c['cpu_pct_q1']:>6.1f}% .. {c['cpu_pct_q3']:.1f}%"
    )


def metrics_ab(
    group: ProcessGroup, tmp: Path, args: argparse.Namespace, start: StartScheduler
) -> tuple[dict[str, Any], list[str]]:
    """Figures (flat keys) and table lines of the /metrics cost; ``start``: ``bench.scheduler.start_scheduler``.
    With ``args.metrics_control``, the same cases then run once more against a fresh pair of daemons that both
    have metrics off (an A/A control: what the harness reports when there is no difference, i.e. its noise)."""
    load_before = round(os.getloadavg()[0], 2)
    proxy_off, daemons_off = start(group, tmp / "ab-off", args.tasks, args.server_threads, 1, 0)
    port = free_port()
    proxy_on, daemons_on = start(group, tmp / "ab-on", args.tasks, args.server_threads, 1, port)
    url = f"http://127.0.0.1:{port}/metrics"
    pids = (daemons_off[0].pid, daemons_on[0].pid)
    scrape_ms = _scrape_cost(url, pids[1])
    figures: dict[str, Any] = {
        "metrics_ab_pairs": args.metrics_pairs,
        "metrics_ab_window_s": args.metrics_window_s,
        "metrics_ab_scrape_interval_s": args.metrics_scrape_s,
        "metrics_scrape_daemon_cpu_ms": round(scrape_ms, 2),
        "metrics_scrape_share_at_1s_pct": round(scrape_ms / 10, 3),
        "metrics_scrape_share_at_15s_pct": round(scrape_ms / 150, 4),
    }
    header = (
        f"{'clients':>7} {'calls':>8} | {'off cycles/s':>12} {'on cycles/s':>12} {'cost':>7} | "
        f"{'off CPU us':>10} {'on CPU us':>10} {'cost':>7} | CPU cost of the middle half of the pairs"
    )
    table: dict[str, list[str]] = {}
    runs = ["metrics", "metrics_control"] if args.metrics_control else ["metrics"]
    for prefix in runs:
        if prefix == "metrics_control":  # a fresh pair, both off: neither has done more work than the other
            for daemon in (*daemons_off, *daemons_on):
                daemon.stop()
            proxy_off, daemons_off = start(group, tmp / "aa-a", args.tasks, args.server_threads, 1, 0)
            proxy_on, daemons_on = start(group, tmp / "aa-b", args.tasks, args.server_threads, 1, 0)
            pids, url = (daemons_off[0].pid, daemons_on[0].pid), ""
        for clients, batch in CASES:
            windows = _run_case(group, tmp, (proxy_off, proxy_on), pids, url, clients, batch, args)
            c = _compare(windows, args.metrics_pairs)
            key = f"{'batched' if batch > 1 else 'single'}_{clients}c"
            if prefix == "metrics":
                figures[f"metrics_off_{key}_cycles_per_s"] = round(c["off_cycles_per_s"], 1)
                figures[f"metrics_on_{key}_cycles_per_s"] = round(c["on_cycles_per_s"], 1)
                figures[f"metrics_off_{key}_server_cpu_us_per_cycle"] = round(c["off_cpu_us"], 1)
                figures[f"metrics_on_{key}_server_cpu_us_per_cycle"] = round(c["on_cpu_us"], 1)
            figures[f"{prefix}_cost_{key}_throughput_pct"] = round(c["throughput_pct"], 2)
            figures[f"{prefix}_cost_{key}_server_cpu_pct"] = round(c["cpu_pct"], 2)
            figures[f"{prefix}_cost_{key}_server_cpu_pct_q1"] = round(c["cpu_pct_q1"], 2)
            figures[f"{prefix}_cost_{key}_server_cpu_pct_q3"] = round(c["cpu_pct_q3"], 2)
            table.setdefault(prefix, [header]).append(_line(clients, key, c))
    for daemon in (*daemons_off, *daemons_on):
        daemon.stop()
    core = core_cycle_cost(tmp)
    figures.update(core)
    figures["metrics_ab_load_avg_1m_before"] = load_before
    figures["metrics_ab_load_avg_1m_after"] = round(os.getloadavg()[0], 2)
    lines = [
        f"one scrape costs the daemon {scrape_ms:.2f} ms of CPU: {scrape_ms / 10:.2f}% of a core scraped every "
        f"second, {scrape_ms / 150:.3f}% at Prometheus' default 15 s",
        f"in-process core, CPU per task cycle (median of {core['core_metrics_blocks']} blocks each): "
        f"off {core['core_metrics_off_cpu_us_per_cycle']:.1f} us, on "
        f"{core['core_metrics_on_cpu_us_per_cycle']:.1f} us, cost {core['core_metrics_cost_cpu_pct']:.1f}%",
        f"the observer's per-task work alone (leased + reported, timed on a real batch): "
        f"{core['core_metrics_observer_cpu_us_per_cycle']:.2f} us per cycle, "
        f"{core['core_metrics_observer_share_pct']:.1f}% of the cycle without metrics",
        f"through the daemon: {args.metrics_pairs} ABBA pairs of {args.metrics_window_s:g} s windows per case; "
        "cost = median over the pairs of the on/off ratio",
        *table["metrics"],
    ]
    if "metrics_control" in table:
        lines += ["A/A control: both daemons with metrics off, no scrapes (the harness's own noise)"]
        lines += table["metrics_control"]
    return figures, lines


def main(argv: Sequence[str]) -> int:
    """The worker's entry point (the driver is ``icecrawler bench scheduler --only-metrics``)."""
    parser = argparse.ArgumentParser(prog="python -m bench._metrics_ab")
    parser.add_argument("--worker", action="store_true", required=True)
    parser.add_argument("--proxy-off", required=True)
    parser.add_argument("--proxy-on", required=True)
    parser.add_argument("--schedule", required=True)
    parser.add_argument("--window", type=float, required=True)
    parser.add_argument("--start-at", type=float, required=True)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--out", required=True)
    parser.add_argument("--name", default="bench")
    return run_worker(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
