"""Where the scheduler daemon's CPU goes with metrics on, by sampling it (py-spy, the ``bench`` extra): the share
of the samples that hold the GIL (Python work; waits and native I/O are left out) and are in metrics code itself
(the observer, the latency timer, the histograms, the scrape), not in what that code wraps. One daemon, one run:
unlike an on/off comparison of throughput, this share does not move with the machine's load from run to run.
"""

from __future__ import annotations

import argparse
import collections
import linecache
import os
import re
import shutil
import signal
import sys
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bench._metrics_ab import CASES, StartScheduler, scrape
from icecrawler.processes import ProcessGroup, free_port

__all__ = ["metrics_code_share", "metrics_profile"]

#: Frames whose own time is metrics work.
METRICS_CODE = ("scheduler_server/metrics.py", "icecrawler/metrics.py", "prometheus_client/")
#: Frames metrics code wraps (a sample below one of these, under a metrics frame, is that work's, not the metrics').
WRAPPED = ("scheduler_server/", "Ice/", "icecrawler/rpc.py")
#: Samples left out: start-up imports and the seeding of the tasks (not the measured work).
SETUP = ("<module>", "addUsers")
#: Samples per second.
RATE = 400
#: Seconds each case is sampled for.
PROFILE_S = 10.0
ROOT = Path(__file__).resolve().parent.parent


def _calls_the_observer(frame: str) -> bool:
    """Whether a sample's innermost frame is a line of the core that calls its observer (a C callable such as
    ``synced`` runs no Python frame of its own, so its time shows on the calling line)."""
    found = re.search(r"\((scheduler_server/core\.py):(\d+)\)$", frame)
    if not found:
        return False
    return "observer" in linecache.getline(str(ROOT / found[1]), int(found[2]))


def metrics_code_share(lines: Iterable[str]) -> tuple[int, int, collections.Counter[str]]:
    """From py-spy's raw output (``frame;frame;... count``, outermost first): samples (less ``SETUP``'s),
    samples in metrics code, and those by function."""
    total, own = 0, collections.Counter[str]()
    for line in lines:
        stack, _, count = line.rstrip().rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        if any(part in frame for frame in frames for part in SETUP):
            continue
        total += int(count)
        inner = [n for n, frame in enumerate(frames) if any(part in frame for part in METRICS_CODE)]
        if not inner:
            if _calls_the_observer(frames[-1]):  # the core's own line that calls a C callable of the observer
                own[re.sub(r" \(.*\)$", "", frames[-1]) + " (observer call)"] += int(count)
            continue
        below = frames[inner[-1] + 1 :]
        if any(part in frame for frame in below for part in WRAPPED if not any(m in frame for m in METRICS_CODE)):
            continue
        own[re.sub(r" \(.*\)$", "", frames[inner[-1]])] += int(count)
    return total, sum(own.values()), own


def _scrape_until(stop: threading.Event, url: str, interval_s: float) -> None:
    while not stop.wait(interval_s):
        scrape(url)


def metrics_profile(
    group: ProcessGroup, tmp: Path, args: argparse.Namespace, start: StartScheduler, measure: Any
) -> tuple[dict[str, Any], list[str]]:
    """Profile a metrics-on daemon through each case (scraped every ``--metrics-scrape-s``); figures and lines.
    ``measure``: ``bench.scheduler.measure``."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).exists():
        raise SystemExit("--metrics-profile needs py-spy: pip install -e '.[bench]'")
    figures: dict[str, Any] = {"metrics_profile_rate_hz": RATE}
    lines = ["clients    calls | samples (GIL held) | in metrics code | share | top functions"]
    for clients, batch in CASES:
        out = tmp / f"profile-{clients}c-{batch}.txt"
        wrap = [spy, "record", "--gil", "-r", str(RATE), "-f", "raw", "-o", str(out), "--"]
        port = free_port()
        proxy, daemons = start(group, tmp / f"profile-{clients}c", args.tasks, args.server_threads, 1, port, wrap)
        # The daemon is py-spy's child: its pid is the one whose CPU counts, and the one to stop.
        child = int(Path(f"/proc/{daemons[0].pid}/task/{daemons[0].pid}/children").read_text().split()[0])
        stop = threading.Event()
        scraper = threading.Thread(
            target=_scrape_until, args=(stop, f"http://127.0.0.1:{port}/metrics", args.metrics_scrape_s), daemon=True
        )
        scraper.start()
        measure(group, proxy, [child], "scheduler", clients, batch, PROFILE_S, tmp)
        stop.set()
        os.kill(child, signal.SIGTERM)
        daemons[0].popen.wait(timeout=60)
        total, own, by_function = metrics_code_share(out.read_text().splitlines())
        key = f"{'batched' if batch > 1 else 'single'}_{clients}c"
        share = 100 * own / total if total else float("nan")
        figures[f"metrics_profile_{key}_samples"] = total
        figures[f"metrics_profile_{key}_metrics_code_pct"] = round(share, 2)
        top = ", ".join(f"{name} {n}" for name, n in by_function.most_common(4))
        lines.append(f"{clients:>7} {key.partition('_')[0]:>8} | {total:>18} | {own:>15} | {share:>4.1f}% | {top}")
    return figures, lines
