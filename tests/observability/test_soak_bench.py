"""``icecrawler bench soak``: how it judges growth (pure), and one short real run that reads every daemon."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

import pytest

from bench import soak
from bench.soak import CACHE_MEASURES, DATA_MEASURES, MEASURES, ROLES, Sample, crawl, summarize
from icecrawler_local.stack import Stack
from shhd.fingerprint import TOKEN_CACHE_TEXTS
from tests.helpers import interrupt_when_ready


def _sample(elapsed_s: float, reports: float, leak: float) -> Sample:
    """Every measure steady at 10, except the clients' open files, which grow by ``leak``."""
    values = {(role, key): 10.0 for role in ROLES for key, _, _ in MEASURES}
    values |= {("data", key): 10.0 for key, _, _ in DATA_MEASURES}
    values |= {("data", key): 10.0 for key, _, _, _ in CACHE_MEASURES}
    values["clients", "open_fds"] = 10.0 + leak
    return Sample(elapsed_s, elapsed_s * 600 / 86_400, reports, values)


def test_growth_is_counted_from_the_reading_after_the_warmup() -> None:
    # 1 sim-day = 144 s at speed 600. The warm-up (a quarter of 576 s) ends at the 144 s reading; after it the
    # clients gain 3 open files over 3 sim-days and 3000 reports. Before it they gained 50 (logging in, caches).
    samples = [_sample(0, 0, 0), _sample(144, 1000, 50), _sample(288, 2000, 51), _sample(432, 3000, 52)]
    samples.append(_sample(576, 4000, 53))
    rows, head = summarize(samples, warmup_share=0.25)
    assert head["warmup_sim_days"] == 1.0 and head["sim_days"] == 4.0 and head["reports_after_warmup"] == 3000
    assert head["clients_open_fds_after_warmup"] == 60 and head["clients_open_fds_end"] == 63
    assert head["clients_open_fds_change_per_sim_day"] == pytest.approx(1.0)
    assert head["clients_open_fds_change_per_1000_reports"] == pytest.approx(1.0)
    assert head["scheduler_rss_mib_change_per_sim_day"] == 0 and head["scheduler_log_files_max"] == 10
    assert len(rows) == len(ROLES) * len(MEASURES) + len(DATA_MEASURES) + len(CACHE_MEASURES)
    assert head["clients_open_fds_change_per_sim_day_second_half"] == pytest.approx(1.0)  # 432 s to 576 s: +1
    assert ["clients: open files", "60.0", "63.0", "63.0", "+1.00", "+1.00", "+1.000"] in rows


@pytest.mark.e2e
@pytest.mark.ice
@pytest.mark.bdb
@pytest.mark.slow
def test_a_short_soak_reads_every_daemon_and_its_data(tmp_path: Path) -> None:
    args = argparse.Namespace(duration=12.0, every=4.0, speed=600.0, clients=2)
    samples = crawl(tmp_path, args)
    assert len(samples) == 3 and samples[-1].elapsed_s >= 12.0
    assert 0 < samples[0].reports <= samples[-1].reports, "the scheduler applied no crawl report"
    for sample in samples:
        for role in ROLES:
            assert sample.values[role, "open_fds"] > 0 and sample.values[role, "threads"] >= 1
            assert sample.values[role, "rss_mib"] > 10
        assert sample.values["data", "scheduler_log_files"] >= 1
        assert sample.values["data", "scheduler_db_mib"] > 0 and sample.values["data", "storage_data_mib"] > 0
    # Each client fingerprinted its crawls (its /metrics shows the caches filling), within their capacity.
    for key, _, _, _ in CACHE_MEASURES:
        assert 0 < samples[0].values["data", key] <= samples[-1].values["data", key], key
    assert samples[-1].values["data", "clients_cached_fingerprint_texts"] <= 2 * TOKEN_CACHE_TEXTS


@pytest.mark.e2e
@pytest.mark.ice
@pytest.mark.bdb
@pytest.mark.slow
def test_a_daemon_that_dies_ends_the_soak_with_its_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A soak that went on without one of its daemons would report a steady crawl that was not."""
    real_read = soak.read

    def read_then_kill(stack: Stack, started: float) -> Sample:
        sample = real_read(stack, started)
        stack.kill_client("client-1")
        return sample

    monkeypatch.setattr(soak, "read", read_then_kill)
    with pytest.raises(RuntimeError, match=r"client-1 died during the soak\n--- client-1:\n\S"):
        crawl(tmp_path, argparse.Namespace(duration=30.0, every=3.0, speed=600.0, clients=2))


@pytest.mark.e2e
@pytest.mark.ice
@pytest.mark.bdb
@pytest.mark.slow
def test_sigterm_stops_every_process_the_benchmark_started() -> None:
    """SIGTERM's default would end the benchmark without its ``finally`` blocks, and the daemons it started, each in
    a session of its own, would crawl on (``timeout`` and service managers send SIGTERM)."""
    argv = [sys.executable, "-m", "icecrawler_cli", "bench", "soak", "--duration", "120", "--every", "2", "--no-write"]
    run = interrupt_when_ready(argv, "[soak", signal.SIGTERM)  # "[soak": every daemon is up and crawling
    assert len(run.children) == 5, run.output  # sandbox, storage, scheduler, two clients
    assert run.left == [], run.output[-3000:]
    assert run.returncode == 130, run.output[-3000:]
    assert "interrupted: every process the benchmark started has been stopped" in run.output
