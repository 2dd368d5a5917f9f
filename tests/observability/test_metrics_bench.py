"""The pure logic of the /metrics cost benchmark (``bench scheduler --only-metrics``): the ABBA window order, the
per-pair comparison, the reading of a py-spy profile (what counts as metrics code, what is left out), and which
figures a run of the matrix alone keeps."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from bench._metrics_ab import _compare, schedule
from bench._metrics_profile import metrics_code_share
from bench.scheduler import _metrics_figures_of
from scheduler_server.core import SchedulerCore


def _observer_line() -> int:
    """The line of the core that hands the fsync time to its observer."""
    lines = Path(inspect.getfile(SchedulerCore)).read_text().splitlines()
    return next(n for n, line in enumerate(lines, 1) if "self.observer.synced(" in line)


def test_windows_alternate_in_abba_pairs() -> None:
    assert schedule(4) == "01100110"
    assert schedule(1) == "01"


def test_each_pair_compares_its_on_window_with_its_off_window() -> None:
    # (cycles/s, CPU us per cycle) per window, in the order 01 10 01: "on" is 10 % dearer in every pair, while the
    # machine's level moves by a factor of two between pairs.
    windows = [(100.0, 10.0), (90.0, 11.0), (45.0, 22.0), (50.0, 20.0), (100.0, 10.0), (90.0, 11.0)]
    result = _compare(windows, 3)
    assert result["cpu_pct"] == pytest.approx(10.0)
    assert result["throughput_pct"] == pytest.approx(10.0)
    assert result["off_cpu_us"] == 10.0 and result["on_cpu_us"] == 11.0


def test_a_matrix_only_run_keeps_the_metrics_figures_of_the_last_metrics_run(tmp_path: Path) -> None:
    earlier = tmp_path / "scheduler.json"
    earlier.write_text(
        '{"batched_cycles_per_s": 9000.0, "metrics_cost_single_1c_server_cpu_pct": 5.99,'
        ' "core_metrics_blocks": 24, "echo_batched_1c_cycles_per_s": 44600.0}'
    )
    assert _metrics_figures_of(earlier) == {"metrics_cost_single_1c_server_cpu_pct": 5.99, "core_metrics_blocks": 24}
    assert _metrics_figures_of(tmp_path / "never-written.json") == {}


def test_the_profile_counts_metrics_code_but_not_what_it_wraps_nor_start_up() -> None:
    raw = [
        # metrics code itself: counted
        "run (scheduler_server/server.py:10);SchedulerMetrics.leased (scheduler_server/metrics.py:120) 5",
        # the core's own line that calls the observer (a C callable): counted
        f"run (scheduler_server/server.py:10);SchedulerCore._sync (scheduler_server/core.py:{_observer_line()}) 2",
        # the work a metrics wrapper wraps (the latency timer around the core's result): not counted
        "dispatch (Ice/Dispatch.py:60);TimedResult.result (scheduler_server/metrics.py:300);"
        "Converted.result (icecrawler/rpc.py:500);GroupRunner._run (scheduler_server/groups.py:250) 7",
        # other work: not counted, but in the total
        "run (scheduler_server/server.py:10);BdbQueueStore.sync (scheduler_server/store.py:90) 10",
        # start-up imports and seeding: left out of the total
        "<module> (prometheus_client/__init__.py:1) 50",
        "addUsers (scheduler_server/server.py:110);SchedulerMetrics.group (scheduler_server/metrics.py:190) 3",
        # not a sample line
        "garbage",
        "",
    ]
    total, own, by_function = metrics_code_share(raw)
    assert total == 5 + 2 + 7 + 10
    assert own == 7
    assert by_function["SchedulerMetrics.leased"] == 5
    assert by_function["SchedulerCore._sync (observer call)"] == 2
