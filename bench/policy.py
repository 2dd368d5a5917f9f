"""``icecrawler bench policy``: what each revisit policy costs the scheduler per report, against ``fixed`` in the
same run. ``icecrawler bench scheduler`` runs the ``fixed`` policy (its tasks must come due again within
milliseconds), so its figures leave out the work the default policy does on every report; this benchmark puts a
number on that work. Writes docs/bench/policy.json.

Each policy gets its own in-process scheduler core over a durable Berkeley DB environment, the same tasks and the
same targets behind them, on a manual clock: when no task is due the clock jumps ahead, and each leased task's
report carries what its target published since the task's last fetch (Poisson arrivals at a log-normal rate with
a daily profile, up to the report's cap of item times; a changed fingerprint when anything is new). Only the
report calls are timed (the revisit policy runs there; leasing is the same for every policy), as CPU time of this
thread, in rounds of one block per policy in a rotating order; the figure is the median over the rounds, and a
policy's cost "× fixed" is the median of its per-round ratios to the ``fixed`` block of the same round."""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from bench import table_head, write_figures
from icecrawler.clock import Clock
from icecrawler.errors import NoWorkError
from icecrawler.models import MAX_ITEM_TIMES, Outcome, Report, Task, TaskKind
from icecrawler.settings import Settings
from scheduler_server.core import SchedulerCore
from scheduler_server.store import BdbQueueStore
from shhd.policies import POLICY_NAMES

__all__ = ["main"]

DAY_S = 86400.0
START_S = 1_800_000_000.0
#: The targets' item rates: log-normal around MEDIAN_ITEMS_PER_DAY, spread by RATE_SIGMA (as in the revisit
#: benchmark's synthetic mixture, a few quiet targets and a few busy ones).
MEDIAN_ITEMS_PER_DAY = 6.0
RATE_SIGMA = 1.2
#: Relative size of the daily swing of every target's rate.
DAILY_AMPLITUDE = 0.5


class _Target:
    """A target's publication times, drawn lazily: Poisson at ``rate`` × (1 + a cos(ω t + phase)), by thinning."""

    def __init__(self, rng: np.random.Generator, rate_per_s: float, start_s: float) -> None:
        self.rng = rng
        self.rate = rate_per_s
        self.phase = float(rng.uniform(0, 2 * math.pi))
        self.drawn_to = start_s
        self.pending: list[float] = []

    def published(self, since_s: float, until_s: float) -> list[float]:
        """Item times in (since_s, until_s], oldest first."""
        peak = self.rate * (1 + DAILY_AMPLITUDE)
        t = self.drawn_to
        while t < until_s:
            t += float(self.rng.exponential(1 / peak))
            accept = (1 + DAILY_AMPLITUDE * math.cos(2 * math.pi * t / DAY_S + self.phase)) / (1 + DAILY_AMPLITUDE)
            if self.rng.random() < accept:
                self.pending.append(t)
        self.drawn_to = t
        out = [x for x in self.pending if since_s < x <= until_s]
        self.pending = [x for x in self.pending if x > until_s]
        return out


class _Crawl:
    """One policy's scheduler core and the targets behind its tasks."""

    def __init__(self, policy: str, folder: Path, tasks: int, batch: int, seed: int) -> None:
        self.wall_s = START_S
        clock = Clock(speed=1.0, origin=START_S, wall=lambda: self.wall_s)
        settings = Settings().copy_with(
            scheduler__policy=policy,
            scheduler__batch_limit=batch,
            scheduler__lease_s=3600.0,
            scheduler__host_spacing_s=0.0,
        )
        self.core = SchedulerCore.from_settings(settings, BdbQueueStore(folder, durable=True), clock)
        self.batch = batch
        rng = np.random.default_rng(seed)
        rates = MEDIAN_ITEMS_PER_DAY / DAY_S * np.exp(RATE_SIGMA * rng.standard_normal(tasks))
        for first in range(0, tasks, batch):
            self.core.add([f"jd:{n}" for n in range(first, min(tasks, first + batch))], TaskKind.ProductReviews)
        # Every policy sees the same targets: each draws from its own generator, seeded by (seed, product number).
        self.targets = [_Target(np.random.default_rng([seed, n]), float(rates[n]), START_S) for n in range(tasks)]
        self.last_fetch = [START_S] * tasks
        self.fingerprint = [1] * tasks

    def close(self) -> None:
        self.core.close()

    def _lease(self) -> list[Task]:
        """The next due tasks; the clock jumps ahead a minute at a time while none are (bounded: 30 simulated
        days, far more than the longest period)."""
        for _ in range(int(30 * DAY_S / 60)):
            try:
                return self.core.lease("bench", self.batch)
            except NoWorkError:
                self.wall_s += 60.0
        raise RuntimeError("no task came due in 30 simulated days")

    def _report(self, task: Task) -> Report:
        now = self.wall_s
        n = int(task.id.rsplit(":", 1)[1])  # the product number of "reviews:jd:<n>"
        times = self.targets[n].published(self.last_fetch[n], now)
        self.last_fetch[n] = now
        if times:
            self.fingerprint[n] += 1
        newest_first = [int(t * 1000) for t in reversed(times)][:MAX_ITEM_TIMES]
        return Report(
            task_id=task.id,
            lease_token=task.lease_token,
            outcome=Outcome.Ok,
            http_status=200,
            fingerprint=self.fingerprint[n],
            new_items=len(times),
            window_items=min(len(times), 20),
            newest_item_ms=newest_first[0] if newest_first else 0,
            fetches=1,
            new_item_times_ms=tuple(newest_first),
        )

    def block(self, reports: int) -> float:
        """CPU seconds of this thread per task in report calls, over about ``reports`` reports."""
        cpu = 0.0
        done = 0
        while done < reports:
            leased = self._lease()
            batch = [self._report(task) for task in leased]
            start = time.thread_time()
            self.core.report(batch)
            cpu += time.thread_time() - start
            done += len(batch)
        return cpu / done


def measure(
    policies: Sequence[str], folder: Path, tasks: int, batch: int, warmup: int, rounds: int, block: int, seed: int
) -> dict[str, dict[str, float]]:
    """Per policy: median µs per report over the rounds, and the median of its per-round ratios to ``fixed``."""
    crawls = {name: _Crawl(name, folder / name, tasks, batch, seed) for name in policies}
    try:
        for crawl in crawls.values():
            if warmup > 0:
                crawl.block(warmup)  # every task's first reports: past the first period and the prior
        per_round: dict[str, list[float]] = {name: [] for name in policies}
        for r in range(rounds):
            order = list(policies[r % len(policies) :]) + list(policies[: r % len(policies)])
            for name in order:
                per_round[name].append(crawls[name].block(block))
    finally:
        for crawl in crawls.values():
            crawl.close()
    out: dict[str, dict[str, float]] = {}
    for name in policies:
        ratios = [a / b for a, b in zip(per_round[name], per_round["fixed"], strict=True)]
        out[name] = {"us": 1e6 * statistics.median(per_round[name]), "x_fixed": statistics.median(ratios)}
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="icecrawler bench policy", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=2000, help="tasks (targets) per policy (default 2000)")
    parser.add_argument("--batch", type=int, default=100, help="tasks leased and reported per call (default 100)")
    parser.add_argument("--warmup", type=int, default=10000, help="untimed reports per policy first (default 10000)")
    parser.add_argument("--rounds", type=int, default=9, help="rounds of one block per policy (default 9)")
    parser.add_argument("--block", type=int, default=2000, help="reports per block (default 2000)")
    parser.add_argument("--seed", type=int, default=1, help="targets' seed (default 1)")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    for name in ("tasks", "batch", "rounds", "block"):
        if getattr(args, name) < 1:
            parser.error(f"--{name}: must be at least 1")
    if args.warmup < 0:
        parser.error("--warmup: must be at least 0")
    policies = ["fixed", *(name for name in POLICY_NAMES if name != "fixed")]
    started = time.monotonic()
    print(
        f"bench policy: {len(policies)} policies, {args.tasks} tasks each, {args.warmup} untimed reports, then "
        f"{args.rounds} rounds of {args.block} reports per policy",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="icecrawler-bench-policy-") as tmp:
        result = measure(policies, Path(tmp), args.tasks, args.batch, args.warmup, args.rounds, args.block, args.seed)
    seconds = time.monotonic() - started
    lines = table_head(
        "icecrawler bench policy " + " ".join(argv),
        f"{args.tasks} tasks per policy, batches of {args.batch}, {args.rounds} rounds of {args.block} reports; run "
        f"time {seconds:.0f} s. CPU of the report calls only (durable Berkeley DB); baseline: `fixed`, same rounds.",
        ["policy", "report CPU µs per task", "× fixed (median of rounds)", "policy's own share µs (− fixed)"],
    )
    fixed_us = result["fixed"]["us"]
    for name in policies:
        row = result[name]
        lines.append(f"| {name} | {row['us']:.1f} | {row['x_fixed']:.2f} | {row['us'] - fixed_us:+.1f} |")
    print("\n".join(lines))
    if not args.no_write:
        figures: dict[str, float] = {"tasks_count": args.tasks, "batch_count": args.batch, "rounds_count": args.rounds}
        for name in policies:
            figures[f"{name}_report_cpu_us_per_task"] = round(result[name]["us"], 2)
            figures[f"{name}_over_fixed_ratio"] = round(result[name]["x_fixed"], 3)
        write_figures("policy", figures)
    return 0
