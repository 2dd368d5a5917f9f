"""``icecrawler demo``: a whole crawl on one machine, end to end, in about a minute.

It starts the sandbox sites, a scheduler, a storage server on the embedded store and N clients as separate
processes (``icecrawler_local.stack``), seeds Weibo users on all three Weibo front ends (weibo.com's JSON API
through a visitor session the scheduler mints, m.weibo.cn, the legacy desktop feed), ECSHOP and JD products and
an ECSHOP listing, and lets them crawl on an accelerated clock while printing progress. At the cut-off it stops counting
new publications and drains: it waits (bounded) until everything published before the cut-off is stored.
Then it prints a table per source, draws every task's period over time next to its true update interval
(the SHHD paper's period figure) and stops every process it started, on Ctrl-C too.

Exit code 0 only if, for every source, every item published before the cut-off is stored exactly once.

With ``--traces FILE`` the world is made from real publication traces instead (``sandbox.tracescenario``, the
options of ``icecrawler sandbox --traces``): one Weibo user or product per trace, its items at the trace's times.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from icecrawler import durable
from icecrawler.datalock import DataLock, LockHeld, LocksUnsupported
from icecrawler.errors import ServiceError
from icecrawler.processes import interrupts_once
from icecrawler.sourcespec import registry
from icecrawler_local.oracle import StoredItem, stored_index, truth_index
from icecrawler_local.stack import SITE_PREFIX, DaemonExited, Stack, running_stack
from sandbox.cli import add_trace_options, trace_options_scenario, traces_line
from sandbox.scenario import Scenario, default_scenario, load_scenario
from sandbox.schedules import Schedule, trace_times
from sandbox.world import WEIBO_SOURCES

__all__ = [
    "Demo",
    "DemoResult",
    "SourceSummary",
    "bad_numbers",
    "judge",
    "mean_interval_s",
    "seed_ids",
    "summarize",
    "var_dir_lock",
]

#: Scheduler settings of the demo crawl. The first period is the paper's one minute; the longest period is
#: capped at 20 simulated minutes so that the drain after the cut-off is bounded (about one longest period).
DEMO_SCHEDULER = {
    "scheduler.initial_period_s": 60,
    "scheduler.min_period_s": 60,
    "scheduler.max_period_s": 1200,
    "scheduler.lease_s": 30,
    "scheduler.maintenance_interval_s": 0.5,
}
#: Client settings: small batches so that two clients share the work; enough pages for the first crawl of a
#: long backlog (the incremental stop ends later crawls after one page).
DEMO_CLIENT = {
    "client.workers": 2,
    "client.batch": 2,
    "client.max_pages": 30,
    "client.idle_sleep_s": 0.3,
    "client.progress_log_s": 10,
    "client.shutdown_grace_s": 5,
    "client.timeout_s": 5,
    "sources.ecshop.username": "sandbox",
    "sources.ecshop.password": "sandbox",
}
SOURCES = tuple(SITE_PREFIX)


def mean_interval_s(schedule: Schedule) -> float | None:
    """The true mean time between two new items of a schedule (simulated seconds); None: nothing new."""
    if schedule.kind == "periodic":
        return schedule.interval_s
    if schedule.kind == "poisson":
        return 3600.0 / schedule.per_hour
    if schedule.kind == "bursty":
        return schedule.interval_s / schedule.burst_size
    if schedule.kind == "trace":
        future = trace_times(schedule, 0).future
        return (future[-1] - future[0]) / (len(future) - 1) / 1000 if len(future) > 1 else None
    return None


def seed_ids(scenario: Scenario) -> tuple[list[str], list[str], dict[str, float | None]]:
    """(ids to seed, listing categories to seed, true mean interval per task id) for a scenario."""
    ids: list[str] = []
    truth: dict[str, float | None] = {}
    for user in scenario.users:
        for site in user.sites:
            source = WEIBO_SOURCES[site]
            ids.append(f"{source}:{user.uid}")
            truth[f"user:{source}:{user.uid}"] = mean_interval_s(user.schedule)
    for product in scenario.products:
        if product.appear_after_s <= 0:
            ids.append(f"{product.source}:{product.id}")
            truth[f"reviews:{product.source}:{product.id}"] = mean_interval_s(product.schedule)
    listings = [f"ecshop:{c.id}" for c in scenario.categories]
    for category in scenario.categories:
        truth[f"listing:ecshop:{category.id}"] = mean_interval_s(category.arrivals)
    return ids, listings, truth


def bad_numbers(args: argparse.Namespace) -> str:
    """What is wrong with the demo's numeric options, or "": a time or speed must be finite and above 0 (``nan``
    passes a ``<= 0`` check), the drain finite and 0 (no drain: the table at the cut-off) or more, and one client at
    least must crawl."""
    timed = {"--duration": args.duration, "--speed": args.speed, "--every": args.every}
    for flag, value in timed.items():
        if not (math.isfinite(value) and value > 0):
            return f"{flag} {value}: give a finite number above 0"
    drain = args.drain_timeout
    if drain is not None and not (math.isfinite(drain) and drain >= 0):
        return f"--drain-timeout {drain}: give a finite number of 0 or more"
    return f"--clients {args.clients}: give 1 or more" if args.clients < 1 else ""


def var_dir_lock(var_dir: Path) -> DataLock:
    """The lock one demo holds on its --var-dir while it runs (a hidden file beside the folder, which is emptied and
    removed): a second demo on that folder would empty it under the first one."""
    var = var_dir.resolve()
    return DataLock(var.parent / f".{var.name}.lock", "demo")


def unwritable_output(path: Path) -> str:
    """What keeps ``--output-dir`` from taking the plot and summary.json, or "": checked (and the folder made)
    before anything starts, not found after the whole crawl and drain."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"--output-dir {path}: {exc.strerror or exc}"
    return "" if os.access(path, os.W_OK | os.X_OK) else f"--output-dir {path}: not writable"


@dataclass
class SourceSummary:
    source: str
    published: int = 0
    stored: int = 0
    duplicates: int = 0
    #: Stored items published after the cut-off (not counted, shown for information).
    after_cutoff: int = 0
    lags_s: list[float] = field(default_factory=list)
    fetches: int = 0
    #: Stored items the sandbox never published: a parser whose ids are not the sandbox's (the judge cannot match them).
    unmatched: int = 0

    @property
    def mean_lag_s(self) -> float | None:
        return sum(self.lags_s) / len(self.lags_s) if self.lags_s else None

    @property
    def complete(self) -> bool:
        return self.stored == self.published and self.duplicates == 0


@dataclass
class DemoResult:
    sources: dict[str, SourceSummary]

    @property
    def ok(self) -> bool:
        return all(summary.complete for summary in self.sources.values())


def write_summary(path: Path, result: DemoResult) -> None:
    """The per-source figures as JSON, written whole: a demo killed while writing leaves the last run's file."""
    summary = {
        source: {
            "published": s.published,
            "stored": s.stored,
            "duplicates": s.duplicates,
            "after_cutoff": s.after_cutoff,
            "mean_lag_s": s.mean_lag_s,
            "fetches": s.fetches,
        }
        for source, s in result.sources.items()
    }
    durable.write_whole(path, json.dumps(summary, indent=1).encode())


def summarize(stack: Stack, cutoff_wall_ms: int, with_fetches: bool = True) -> DemoResult:
    """Published (up to the cut-off) vs stored, per source, from the sandbox's truth and the embedded store."""
    stored_rows = stack.stored()  # before the truth: every item stored by then was published by then, so an item
    # stored between the two reads while clients still crawl is not taken for one the sandbox never published
    result = judge(stack.truth()["items"], stored_rows, cutoff_wall_ms)
    if with_fetches:
        for source, prefix in SITE_PREFIX.items():
            result.sources.setdefault(source, SourceSummary(source)).fetches = len(stack.requests(site=prefix))
    return result


def judge(items: Sequence[Mapping[str, Any]], stored_rows: Sequence[StoredItem], cutoff_wall_ms: int) -> DemoResult:
    """Published (up to the cut-off) vs stored, per source, from truth items and stored rows (pure).
    Capture lag = fetch time - publication time (simulated), over items published during the run."""
    published = truth_index(items, cutoff_wall_ms)
    everything = truth_index(items)
    counts = stored_index(stored_rows)
    fetched = {row.key: row.fetched_ms for row in stored_rows}
    result = DemoResult({source: SourceSummary(source) for source in SOURCES})
    for (source, key), item in published.items():
        summary = result.sources.setdefault(source, SourceSummary(source))
        summary.published += 1
        if key in counts:
            summary.stored += 1
            if not item.get("backlog"):
                summary.lags_s.append(max(0.0, (fetched[key] - int(item["published_ms"])) / 1000))
    published_keys = {key for _, key in published}
    source_of = {key: source for source, key in everything}
    for key, count in counts.items():
        source = source_of.get(key, "weibo_pc" if key[0] == "weibo" else str(key[0]))
        summary = result.sources.setdefault(source, SourceSummary(source))
        summary.duplicates += count - 1
        if key not in source_of:
            summary.unmatched += 1
        elif key not in published_keys:
            summary.after_cutoff += 1
    return result


def render_table(result: DemoResult, speed: float) -> str:
    header = (
        f"{'source':<13} {'published':>9} {'stored':>7} {'dupes':>5} {'late':>5} {'mean lag':>12} {'fetches':>7}  ok"
    )
    lines = [header, "-" * len(header)]
    for summary in result.sources.values():
        if not (summary.published or summary.stored or summary.fetches):
            continue  # a source the scenario gives nothing to (a newly added one, until it lists its products)
        lag = summary.mean_lag_s
        lag_text = f"{lag / 60:.1f} sim-min" if lag is not None else "-"
        lines.append(
            f"{summary.source:<13} {summary.published:>9} {summary.stored:>7} {summary.duplicates:>5} "
            f"{summary.after_cutoff:>5} {lag_text:>12} {summary.fetches:>7}  "
            f"{'yes' if summary.complete else 'NO'}"
        )
    lines.append(
        f"(published = items the sandbox published up to the cut-off, backlog included; a Weibo "
        f"post counts as stored for every Weibo source once stored: storage keys posts by user and id; late = "
        f"stored items published after it; lag = fetch - publish for items published during the run, in "
        f"simulated minutes at speed {speed:g})"
    )
    lines.extend(unmatched_note(summary) for summary in result.sources.values() if summary.unmatched)
    return "\n".join(lines)


def unmatched_note(summary: SourceSummary) -> str:
    """Why stored items of a source match nothing published, by how the judge knows that source's items
    (``icecrawler_local.oracle.item_key``): by id, or by time and text where its pages show no ids."""
    spec = registry.get(summary.source)
    if spec is not None and not spec.shows_item_ids:
        how = (
            "by product, time and text (its pages show no review ids): the parser must read the created-at time "
            "and the text as the sandbox's page shows them"
        )
    else:
        how = (
            "by its id: the parser's id must be the one the sandbox's page shows, the review_id of "
            "sandbox/content.py's SimReview as decimal text for a review"
        )
    return (
        f"{summary.source}: {summary.unmatched} stored items match no item the sandbox published. The judge "
        f'(icecrawler_local/oracle.py, item_key) knows an item {how} (CONTRIBUTING.md, "Adding a source", step 1)'
    )


class PeriodTracker:
    """Collects every task's period history from the scheduler (``taskInfo``) for the figure."""

    def __init__(self, truth: dict[str, float | None], initial_period_s: float) -> None:
        self.truth = dict(truth)
        self.initial_period_s = initial_period_s
        self.points: dict[str, dict[int, float]] = {}
        self.current: dict[str, float] = {}

    def add_task(self, task_id: str, mean_interval: float | None) -> None:
        self.truth.setdefault(task_id, mean_interval)

    def poll(self, stack: Stack) -> None:
        for task_id in list(self.truth):
            with contextlib.suppress(Exception):  # a task not added yet (discovered later) or a busy scheduler
                info = stack.task_info(task_id)
                points = self.points.setdefault(task_id, {})
                points.setdefault(int(info["created_ms"]), self.initial_period_s)
                for entry in info.get("history", []):
                    points[int(entry["time_ms"])] = float(entry["period_s"])
                self.current[task_id] = float(info["period_s"])

    def plot(self, path: Path, origin_s: float) -> Path:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        tasks = sorted(self.points)
        cols = 3
        rows = max(1, (len(tasks) + cols - 1) // cols)
        fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 2.8 * rows), squeeze=False)
        for ax in axes.flat[len(tasks) :]:
            ax.axis("off")
        for ax, task_id in zip(axes.flat, tasks, strict=False):
            points = sorted(self.points[task_id].items())
            xs = [(t / 1000 - origin_s) / 60 for t, _ in points]
            ys = [p / 60 for _, p in points]
            ax.step(xs, ys, where="post", marker="o", markersize=3, label="period")
            true = self.truth.get(task_id)
            if true is not None:
                ax.axhline(true / 60, color="tab:red", linestyle="--", label="true mean interval")
            ax.set_title(task_id, fontsize=9)
            ax.set_xlabel("simulated minutes", fontsize=8)
            ax.set_ylabel("period (min)", fontsize=8)
            ax.tick_params(labelsize=7)
            ax.legend(fontsize=7, loc="upper left")
        fig.suptitle("Re-crawl period of each task over time vs its true update interval")
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        durable.write_whole_with(path, lambda out: fig.savefig(out, format="png", dpi=90))
        plt.close(fig)
        return path


def progress_line(stack: Stack, started: float, tracker: PeriodTracker, phase: str) -> str:
    stats = stack.scheduler_stats()
    per_source: dict[str, int] = {"weibo": 0, "ecshop": 0, "jd": 0}
    for row in stack.stored():
        per_source[str(row.key[0])] = per_source.get(str(row.key[0]), 0) + 1
    periods = sorted(tracker.current.values())
    period_text = (
        (
            f"periods {periods[0] / 60:.0f}/{periods[len(periods) // 2] / 60:.0f}/{periods[-1] / 60:.0f} "
            f"min (min/median/max)"
        )
        if periods
        else "periods -"
    )
    elapsed = time.monotonic() - started
    stored = " ".join(f"{source}={count}" for source, count in per_source.items())
    discovered = sum(int(v) for v in stats.get("listings", {}).values())
    return (
        f"[{phase} {elapsed:5.0f}s = {elapsed * stack.speed / 60:5.0f} sim-min] stored {sum(per_source.values())} "
        f"({stored}); tasks {stats['tasks']}, in flight {stats['inflight']}, pending {stats['pending']}; "
        f"{discovered} discovered; {period_text}"
    )


class Demo:
    """The demo application; ``icecrawler demo`` (``icecrawler_cli.commands.demo``) declares its options and runs it."""

    summary = "run a whole local crawl (sandbox sites, scheduler, storage, clients) and report on it"
    description = (
        "Start the sandbox sites, a scheduler, a storage server on the embedded store and --clients crawler "
        "clients as separate processes on free loopback ports, seed Weibo users (desktop and mobile), ECSHOP and "
        "JD products and an ECSHOP listing, and crawl for --duration seconds on a clock running --speed times "
        "faster than real time, printing progress. Then stop counting publications, drain until everything "
        "published before the cut-off is stored (at most --drain-timeout seconds), print a table per source "
        "(published vs stored, mean capture lag, fetches) and save a plot of every task's period over time next to "
        "its true update interval. Every started process is stopped at the end and on Ctrl-C. Exit code 0 only "
        "if stored == published for every source. That world is the built-in one, unless --scenario FILE gives "
        "another or --traces FILE makes one of real publication traces (a Weibo user or a product per trace, "
        "its items at the trace's times; docs/SANDBOX.md)."
    )

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--duration", type=float, default=60.0, help="seconds of crawling before the cut-off (default 60)"
        )
        parser.add_argument(
            "--speed",
            type=float,
            default=60.0,
            help="simulated seconds per real second (default 60: one minute per second)",
        )
        parser.add_argument("--clients", type=int, default=2, help="crawler client processes (default 2)")
        parser.add_argument(
            "--output-dir", default="demo-output", help="where the plot and summary.json go (default demo-output)"
        )
        parser.add_argument(
            "--var-dir",
            default="var/demo",
            help="the run's databases and logs; emptied first, so one demo at a time uses it (default var/demo)",
        )
        parser.add_argument(
            "--keep", action="store_true", help="keep --var-dir after the run (default: removed when the run succeeds)"
        )
        parser.add_argument("--every", type=float, default=5.0, help="seconds between progress lines (default 5)")
        parser.add_argument(
            "--drain-timeout",
            type=float,
            default=None,
            help="longest drain after the cut-off in seconds (default: two longest periods of wall time plus 30)",
        )
        parser.add_argument("--scenario", default="", help="sandbox scenario file (default: the built-in demo world)")
        parser.add_argument("--no-plot", action="store_true", help="skip the period plot")
        add_trace_options(parser)

    def run(self, args: argparse.Namespace) -> int:
        problem = bad_numbers(args) or unwritable_output(Path(args.output_dir))
        if problem:
            print(f"icecrawler demo: error: {problem}", file=sys.stderr)
            return 2
        scenario = trace_options_scenario(args, args.scenario) or (
            load_scenario(args.scenario) if args.scenario else default_scenario()
        )
        line = traces_line(scenario, args.traces, args.scenario, args.speed)
        if line:  # from --traces or the scenario file's [traces] table
            print(line, flush=True)
        var_dir, output_dir = Path(args.var_dir), Path(args.output_dir)
        lock = var_dir_lock(var_dir)
        try:
            lock.acquire()
        except LockHeld:
            holder = lock.path.read_text(errors="replace").strip()
            print(
                f"icecrawler demo: error: --var-dir {var_dir} is in use by {holder or 'another demo'}: wait for it "
                "to end, or give this one another --var-dir",
                file=sys.stderr,
            )
            return 2
        except LocksUnsupported:
            pass  # a file system without locks (NFS): nothing can keep two demos apart there
        except ServiceError as exc:  # the folder's parent takes no file (read-only, not ours): the demo runs as before
            print(f"icecrawler demo: warning: {exc}; a second demo on --var-dir {var_dir} would not be refused")
        try:
            return self._run_locked(args, scenario, var_dir, output_dir)
        finally:
            lock.release()  # nothing to do when not held

    def _run_locked(self, args: argparse.Namespace, scenario: Scenario, var_dir: Path, output_dir: Path) -> int:
        """``run`` once this demo holds its --var-dir: empty it, crawl, and remove it after a success."""
        shutil.rmtree(var_dir, ignore_errors=True)
        drain_timeout = (
            args.drain_timeout
            if args.drain_timeout is not None
            else 2 * float(DEMO_SCHEDULER["scheduler.max_period_s"]) / args.speed + 30
        )
        try:
            with interrupts_once():
                code = self._crawl(args, scenario, var_dir, output_dir, drain_timeout)
        except KeyboardInterrupt:
            print("\ninterrupted: every process the demo started has been stopped", flush=True)
            return 130
        except DaemonExited as exc:
            print(f"icecrawler demo: error: {exc}", file=sys.stderr, flush=True)
            print(f"every other process stopped; logs and databases kept in {var_dir}", flush=True)
            return 1
        if code == 0 and not args.keep:
            shutil.rmtree(var_dir, ignore_errors=True)
        elif var_dir.exists():
            print(f"logs and databases kept in {var_dir}")
        return code

    def _crawl(
        self, args: argparse.Namespace, scenario: Scenario, var_dir: Path, output_dir: Path, drain_timeout: float
    ) -> int:
        ids, listings, truth = seed_ids(scenario)
        tracker = PeriodTracker(truth, float(DEMO_SCHEDULER["scheduler.initial_period_s"]))
        print(
            f"starting the sandbox, a scheduler, a storage server (embedded SQLite) and {args.clients} client(s) "
            f"in {var_dir} (clock x{args.speed:g})",
            flush=True,
        )
        with (
            running_stack(
                var_dir, scenario, speed=args.speed, scheduler_settings=DEMO_SCHEDULER, client_settings=DEMO_CLIENT
            ) as stack,
            stack.failing_on_exit(),
        ):
            for name, process in (
                ("sandbox", stack.sandbox.process),
                ("storage", stack.storage),
                ("scheduler", stack.scheduler),
            ):
                print(f"  {name}: pid {process.pid}", flush=True)
            print(stack.seed(ids, listings).strip(), flush=True)
            for index in range(args.clients):
                client = stack.start_client(f"demo-client-{index + 1}")
                print(f"  client {client.name}: pid {client.pid}", flush=True)
            print("Prometheus metrics (docs/DEPLOY.md):", flush=True)
            for name, url in stack.metrics_urls().items():
                print(f"  {name} metrics at {url}", flush=True)
            started = time.monotonic()
            cutoff = started + args.duration
            while time.monotonic() < cutoff:
                time.sleep(max(0.0, min(args.every, cutoff - time.monotonic())))
                stack.check_running()
                self._discover(stack, tracker)
                tracker.poll(stack)
                print(progress_line(stack, started, tracker, "crawl"), flush=True)
            cutoff_wall_ms = int(time.time() * 1000)
            print(
                f"cut-off: publications after now are not counted; draining (at most {drain_timeout:.0f}s)", flush=True
            )
            drain_end = time.monotonic() + drain_timeout
            result = summarize(stack, cutoff_wall_ms, with_fetches=False)
            while not result.ok and time.monotonic() < drain_end:
                time.sleep(min(args.every, max(0.0, drain_end - time.monotonic())))
                stack.check_running()
                tracker.poll(stack)
                print(progress_line(stack, started, tracker, "drain"), flush=True)
                result = summarize(stack, cutoff_wall_ms, with_fetches=False)
            stack.check_running()
            result = summarize(stack, cutoff_wall_ms)
            self._discover(stack, tracker)
            tracker.poll(stack)
            origin = stack.origin
        print("every process stopped")
        print(render_table(result, args.speed))
        output_dir.mkdir(parents=True, exist_ok=True)
        write_summary(output_dir / "summary.json", result)
        if not args.no_plot:
            path = tracker.plot(output_dir / "periods.png", origin)
            print(f"period plot: {path.resolve()}")
        print(
            "OK: stored == published for every source"
            if result.ok
            else "FAILED: some published items were not stored (or were stored twice)"
        )
        return 0 if result.ok else 1

    @staticmethod
    def _discover(stack: Stack, tracker: PeriodTracker) -> None:
        """Products the listing discovered become tasks too: follow them in the period figure."""
        categories = {c.id: c for c in stack.scenario.categories}
        with contextlib.suppress(Exception):
            for product in stack.truth()["products"]:
                category = categories.get(int(product["category"]))
                known = {p.id: p for p in stack.scenario.products}
                schedule = (
                    known[product["product"]].schedule
                    if product["product"] in known
                    else (category.arrival_reviews if category else None)
                )
                tracker.add_task(
                    f"reviews:{product['source']}:{product['product']}", mean_interval_s(schedule) if schedule else None
                )
