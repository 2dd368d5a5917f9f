"""``icecrawler bench soak``: what a long crawl does to each daemon's resources.

A crawler runs for months, so a leak of one socket or a few kilobytes per crawl matters even when no test of a
few minutes can see it. This runs the demo's world (every source, the ECSHOP login, the listing that discovers
products; ``icecrawler_local.stack``) with a scheduler, a storage server and ``--clients`` clients on a clock
``--speed`` times faster than real time, and every ``--every`` seconds reads each daemon's open files, threads and
resident memory from ``/proc``, the scheduler's Berkeley DB files (tables and log files) and the storage server's
data directory, the entries in the clients' fingerprint memory caches (their ``cache_entries`` metric: bounded
caches that fill as the crawl meets new texts and words), and the crawl reports applied so far (the scheduler's
``reports`` counter).

The baseline is the same run after its warm-up (``--warmup-share`` of it: the tasks are seeded, the listing has
found its products, every session is logged in and the caches are warm). Each figure is shown at the end of the
warm-up, at the end, at its largest, and as its change per simulated day and per 1000 crawl reports after the
warm-up. A resource that leaks per crawl grows in the last two columns however long the run; a cache that fills
(Berkeley DB's, SQLite's) grows at first and then stops. The stored data grows with the items, as it must.

Writes docs/bench/soak.json (flat keys with units).
"""

from __future__ import annotations

import argparse
import re
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from bench import ROOT, write_figures
from bench.revisit.publish import table
from icecrawler_local.demo import DEMO_CLIENT, DEMO_SCHEDULER, seed_ids
from icecrawler_local.stack import Stack, running_stack
from sandbox.scenario import default_scenario

ROLES = ("scheduler", "storage", "clients")
OUT = ROOT / "docs" / "bench" / "soak.json"
DAY_S = 86_400.0
MIB = 1 << 20
#: What is read from each daemon, with the unit its keys carry.
MEASURES = (("open_fds", "open files", ""), ("threads", "threads", ""), ("rss_mib", "resident memory", "MiB"))
#: What is read from the data directories.
DATA_MEASURES = (
    ("scheduler_db_mib", "scheduler database (tables + log)", "MiB"),
    ("scheduler_log_files", "scheduler Berkeley DB log files", ""),
    ("storage_data_mib", "storage data (store + spool)", "MiB"),
)
#: The clients' bounded memory caches (their /metrics, summed over clients): (key, cache, name, unit). A client's
#: memory may grow while these fill; once they are full it should not.
CACHE_MEASURES = (
    ("clients_cached_fingerprint_texts", "fingerprint_texts", "clients: fingerprint texts cached", ""),
    ("clients_cached_feature_words", "feature_words", "clients: feature words cached", ""),
    ("clients_cached_token_hashes", "token_hashes", "clients: token hashes cached", ""),
    ("clients_cached_word_log_probs", "word_log_probs", "clients: word log-probabilities cached", ""),
)


@dataclass(frozen=True)
class Sample:
    """One reading of the whole crawl."""

    elapsed_s: float
    sim_days: float
    reports: float
    #: (role, measure) -> value; a role with several processes (the clients) is their sum.
    values: dict[tuple[str, str], float]


def process_usage(pid: int) -> dict[str, float]:
    """Open files, threads and resident memory of one live process, from /proc."""
    status = Path(f"/proc/{pid}/status").read_text()
    threads = re.search(r"^Threads:\s+(\d+)", status, re.MULTILINE)
    rss_kib = re.search(r"^VmRSS:\s+(\d+)", status, re.MULTILINE)
    return {
        "open_fds": float(sum(1 for _ in Path(f"/proc/{pid}/fd").iterdir())),
        "threads": float(threads.group(1)) if threads else 0.0,
        "rss_mib": float(rss_kib.group(1)) / 1024 if rss_kib else 0.0,
    }


def data_usage(path: Path) -> tuple[float, int]:
    """(MiB under ``path``, Berkeley DB log files directly in it)."""
    size = 0
    for file in path.rglob("*"):
        try:
            size += file.stat().st_size if file.is_file() else 0
        except OSError:
            pass  # removed while we walked (a log file Berkeley DB no longer needs)
    return size / MIB, len(list(path.glob("log.*")))


def scrape(url: str, family_name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """One metric family of one daemon's /metrics: each sample's labels -> its value (a counter's ``_total``
    sample only)."""
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    return {
        tuple(sorted(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        if family.name == family_name
        for sample in family.samples
        if family.type != "counter" or sample.name.endswith("_total")
    }


def reports_applied(stack: Stack) -> float:
    """Crawl reports the scheduler has applied since it started (its ``reports`` counter, every source)."""
    return sum(scrape(stack.metrics_urls()["scheduler"], "icecrawler_scheduler_reports").values())


def client_caches(stack: Stack) -> dict[str, float]:
    """Entries in each fingerprint memory cache, summed over the clients (``icecrawler_client_cache_entries``)."""
    urls = stack.metrics_urls()
    entries: dict[str, float] = {}
    for name in stack.clients:
        for labels, value in scrape(urls[name], "icecrawler_client_cache_entries").items():
            cache = dict(labels)["cache"]
            entries[cache] = entries.get(cache, 0.0) + value
    return entries


def read(stack: Stack, started: float) -> Sample:
    elapsed = time.monotonic() - started
    values: dict[tuple[str, str], float] = {}
    roles = [("scheduler", stack.scheduler), ("storage", stack.storage)]
    roles += [("clients", process) for process in stack.clients.values()]
    for role, process in roles:
        for measure, value in process_usage(process.pid).items():
            values[role, measure] = values.get((role, measure), 0.0) + value
    db_mib, logs = data_usage(stack.scheduler_db)
    values["data", "scheduler_db_mib"] = db_mib
    values["data", "scheduler_log_files"] = float(logs)
    values["data", "storage_data_mib"] = data_usage(stack.sqlite_path.parent)[0]
    caches = client_caches(stack)
    for key, cache, _, _ in CACHE_MEASURES:
        values["data", key] = caches.get(cache, 0.0)
    return Sample(elapsed, elapsed * stack.speed / DAY_S, reports_applied(stack), values)


def crawl(work: Path, args: argparse.Namespace) -> list[Sample]:
    scenario = default_scenario()
    ids, listings, _ = seed_ids(scenario)
    samples: list[Sample] = []
    with running_stack(
        work, scenario, speed=args.speed, scheduler_settings=DEMO_SCHEDULER, client_settings=DEMO_CLIENT
    ) as stack:
        stack.seed(ids, listings)
        for number in range(1, args.clients + 1):
            stack.start_client(f"client-{number}")
        stack.wait_metrics()  # the first reading scrapes every daemon
        started = time.monotonic()
        while True:
            time.sleep(args.every)
            processes = {"scheduler": stack.scheduler, "storage": stack.storage, **stack.clients}
            dead = {name: process for name, process in processes.items() if not process.alive()}
            if dead:  # the work directory goes with the run, so its logs are shown here
                tails = "\n".join(f"--- {name}:\n{process.log_tail(20)}" for name, process in dead.items())
                raise RuntimeError(f"{', '.join(dead)} died during the soak\n{tails}")
            sample = read(stack, started)
            samples.append(sample)
            usage = {
                role: f"{sample.values[role, 'open_fds']:.0f} files {sample.values[role, 'rss_mib']:.1f} MiB"
                for role in ROLES
            }
            print(
                f"[soak {sample.elapsed_s:5.0f}s = {sample.sim_days:5.2f} sim-days] {sample.reports:7.0f} reports; "
                f"{usage}; scheduler log files {sample.values['data', 'scheduler_log_files']:.0f}",
                flush=True,
            )
            if sample.elapsed_s >= args.duration:
                return samples


def summarize(samples: list[Sample], warmup_share: float) -> tuple[list[list[str]], dict[str, float]]:
    """The table's rows and the JSON's keys: each measure after the warm-up, at the end, at its largest, and its
    change per simulated day and per 1000 reports after the warm-up, and per simulated day over the second half of
    that stretch. A cache that fills slows down (its second-half rate is well below the whole rate); a leak does not.
    """
    end = samples[-1]
    warm = next(s for s in samples if s.elapsed_s >= warmup_share * end.elapsed_s)
    middle = next((s for s in samples[:-1] if s.elapsed_s >= (warm.elapsed_s + end.elapsed_s) / 2), warm)
    days = max(end.sim_days - warm.sim_days, 1e-9)
    late_days = max(end.sim_days - middle.sim_days, 1e-9)
    thousands = max(end.reports - warm.reports, 1.0) / 1000
    head: dict[str, float] = {
        "sim_days": round(end.sim_days, 2),
        "warmup_sim_days": round(warm.sim_days, 2),
        "reports_after_warmup": end.reports - warm.reports,
    }
    rows = []
    measures = [(role, key, name, unit) for role in ROLES for key, name, unit in MEASURES]
    measures += [("data", key, name, unit) for key, name, unit in DATA_MEASURES]
    measures += [("data", key, name, unit) for key, _, name, unit in CACHE_MEASURES]
    for role, key, name, unit in measures:
        at_warm, at_end = warm.values[role, key], end.values[role, key]
        largest = max(s.values[role, key] for s in samples if s.elapsed_s >= warm.elapsed_s)
        per_day, per_k = (at_end - at_warm) / days, (at_end - at_warm) / thousands
        late_per_day = (at_end - middle.values[role, key]) / late_days
        label = name if role == "data" else f"{role}: {name}"
        rows.append([label + (f" ({unit})" if unit else ""), *(f"{v:.1f}" for v in (at_warm, at_end, largest))])
        rows[-1] += [f"{per_day:+.2f}", f"{late_per_day:+.2f}", f"{per_k:+.3f}"]
        prefix = key if role == "data" else f"{role}_{key}"
        head[f"{prefix}_after_warmup"] = round(at_warm, 2)
        head[f"{prefix}_end"] = round(at_end, 2)
        head[f"{prefix}_max"] = round(largest, 2)
        head[f"{prefix}_change_per_sim_day"] = round(per_day, 3)
        head[f"{prefix}_change_per_sim_day_second_half"] = round(late_per_day, 3)
        head[f"{prefix}_change_per_1000_reports"] = round(per_k, 4)
    return rows, head


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="icecrawler bench soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=600.0, help="seconds of crawling (default 600)")
    parser.add_argument(
        "--speed", type=float, default=600.0, help="simulated seconds per real second (default 600: 600 s = 4.2 days)"
    )
    parser.add_argument("--clients", type=int, default=2, help="crawler client processes (default 2)")
    parser.add_argument("--every", type=float, default=10.0, help="seconds between readings (default 10)")
    parser.add_argument(
        "--warmup-share", type=float, default=0.25, help="share of the run before the baseline (default 0.25)"
    )
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    if args.duration < 2 * args.every or args.speed <= 0 or args.clients < 1 or not 0 < args.warmup_share < 1:
        parser.error("need --duration >= 2 x --every, --speed > 0, --clients >= 1 and 0 < --warmup-share < 1")
    with tempfile.TemporaryDirectory(prefix="icecrawler-soak-") as work:
        try:
            samples = crawl(Path(work), args)
        except RuntimeError as exc:
            print(f"icecrawler bench soak: {exc}")
            return 1
    rows, head = summarize(samples, args.warmup_share)
    print(
        f"\n{head['sim_days']:.1f} simulated days in {samples[-1].elapsed_s:.0f} s ({args.clients} clients, speed "
        f"{args.speed:g}); baseline: the reading after the warm-up ({head['warmup_sim_days']:.1f} sim-days), then "
        f"{head['reports_after_warmup']:.0f} crawl reports"
    )
    header = ["measure", "after warm-up", "end", "largest", "per sim-day", "per sim-day, 2nd half", "per 1000 reports"]
    print(table(header, rows))
    if not args.no_write:
        write_figures(OUT, head)
    return 0
