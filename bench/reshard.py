"""``icecrawler bench reshard``: how long ``scheduler_server.reshard`` takes to copy a scheduler database into 2 and
4 shards, against the scheduler's own hot backup of the same database (``BdbQueueStore.backup``: a checkpoint, then
Berkeley DB's copy of the files), measured in the same run. Writes docs/bench/reshard.json.

The database is built first, untimed: ``--tasks`` product-review targets on two hosts, each leased and reported
once (so each has a completion-log entry and a crawled record), through a real scheduler core on durable Berkeley
DB."""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from bench import table_head, write_figures
from icecrawler.models import Report, TaskKind
from icecrawler.settings import Settings
from icecrawler.shards import source_hosts
from scheduler_server.core import SchedulerCore
from scheduler_server.reshard import reshard
from scheduler_server.store import TABLES, BdbQueueStore

#: Two hosts, so that the tasks split over the shards (with one host every task would land on one shard).
HOSTS = {"sources.jd.base_url": "http://127.0.0.1:8800/jd", "sources.ecshop.base_url": "http://127.0.0.3:8800/ecshop"}
_BATCH = 1000


def build(path: Path, tasks: int) -> int:
    """A durable scheduler database of ``tasks`` crawled targets; returns its entry count (every table)."""
    settings = Settings().copy_with(
        **{key.replace(".", "__"): value for key, value in HOSTS.items()},
        scheduler__policy="fixed",
        scheduler__batch_limit=_BATCH,
    )
    store = BdbQueueStore(path)
    try:
        core = SchedulerCore.from_settings(settings, store)
        for start in range(0, tasks, _BATCH):
            ids = [f"{'jd' if n % 2 else 'ecshop'}:{n}" for n in range(start, min(tasks, start + _BATCH))]
            core.add(ids, TaskKind.ProductReviews)
            leased = core.lease("bench", len(ids))
            core.report([Report(task.id, task.lease_token, new_items=3, fetches=1) for task in leased])
        with store.transaction() as txn:
            return sum(txn.count(table) for table in TABLES)
    finally:
        store.close()


def timed_backup(source: Path, target: Path) -> float:
    store = BdbQueueStore(source)
    try:
        started = time.perf_counter()
        store.backup(target)
        return time.perf_counter() - started
    finally:
        store.close()


def timed_reshard(source: Path, targets: list[Path]) -> float:
    hosts = source_hosts(Settings().copy_with(**{key.replace(".", "__"): value for key, value in HOSTS.items()}))
    old = BdbQueueStore(source)
    new = [BdbQueueStore(target) for target in targets]
    try:
        started = time.perf_counter()
        reshard([old], new, hosts)
        for store in new:  # closing flushes what the copy wrote: part of its cost
            store.close()
        return time.perf_counter() - started
    finally:
        for store in (old, *new):
            store.close()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="icecrawler bench reshard", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=100_000, help="crawled targets in the database (default 100000)")
    parser.add_argument("--rounds", type=int, default=3, help="timed runs of each; the best counts (default 3)")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    if args.tasks < 1 or args.rounds < 1:
        parser.error("--tasks and --rounds: must be at least 1")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="icecrawler-bench-reshard-") as tmp:
        base = Path(tmp)
        print(f"bench reshard: building a database of {args.tasks} crawled targets (untimed)", flush=True)
        entries = build(base / "db", args.tasks)
        best: dict[str, float] = {}
        for round_no in range(args.rounds):
            runs = {
                "backup": lambda out: timed_backup(base / "db", out / "backup"),
                "reshard to 2 shards": lambda out: timed_reshard(base / "db", [out / f"s{k}" for k in range(2)]),
                "reshard to 4 shards": lambda out: timed_reshard(base / "db", [out / f"s{k}" for k in range(4)]),
            }
            for name, run in runs.items():
                out = base / f"round{round_no}-{name.replace(' ', '-')}"
                out.mkdir()
                best[name] = min(best.get(name, float("inf")), run(out))
            print(f"  round {round_no + 1} of {args.rounds} done", flush=True)
    seconds = time.monotonic() - started
    lines = table_head(
        "icecrawler bench reshard " + " ".join(argv),
        f"{args.tasks} crawled targets ({entries} entries in all tables), durable Berkeley DB, best of {args.rounds}; "
        f"run time {seconds:.0f} s. Baseline: the scheduler's hot backup of the same database.",
        ["operation", "seconds", "entries per s", "× backup"],
    )
    for name, value in best.items():
        lines.append(f"| {name} | {value:.2f} | {entries / value:,.0f} | {value / best['backup']:.2f} |")
    print("\n".join(lines))
    if not args.no_write:
        figures = {
            "tasks_count": args.tasks,
            "entries_count": entries,
            "backup_s": round(best["backup"], 3),
            "reshard_2_shards_s": round(best["reshard to 2 shards"], 3),
            "reshard_4_shards_s": round(best["reshard to 4 shards"], 3),
            "reshard_2_shards_entries_per_s": round(entries / best["reshard to 2 shards"]),
            "reshard_2_shards_over_backup_ratio": round(best["reshard to 2 shards"] / best["backup"], 2),
        }
        write_figures("reshard", figures)
    return 0
