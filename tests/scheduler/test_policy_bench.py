"""``icecrawler bench policy``: each revisit policy's CPU per report through a real in-process scheduler core over
Berkeley DB, against ``fixed``. The figures are not checked (no timing in tests); what is: every policy runs on
the same targets, the reports carry what the targets published, and the output and the JSON have their shape."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest

import bench
import bench.policy as policy_bench
from icecrawler.models import Task, TaskKind
from shhd.policies import POLICY_NAMES

pytestmark = [pytest.mark.bdb]

SMALL = ["--tasks", "150", "--warmup", "300", "--rounds", "2", "--block", "150", "--batch", "50"]


def test_a_target_publishes_the_same_items_however_often_it_is_asked() -> None:
    """Policies fetch at different times; the items behind a task must not depend on when they are asked for."""
    often = policy_bench._Target(np.random.default_rng([1, 7]), 20 / 86400, 0.0)
    seldom = policy_bench._Target(np.random.default_rng([1, 7]), 20 / 86400, 0.0)
    edges = [float(x) for x in np.linspace(0, 5 * 86400, 41)]
    asked_often = [t for a, b in itertools.pairwise(edges) for t in often.published(a, b)]
    asked_seldom = seldom.published(0, 2 * 86400) + seldom.published(2 * 86400, 5 * 86400)
    assert asked_often == asked_seldom
    assert 50 < len(asked_often) < 150  # about 20 a day for 5 days
    assert asked_often == sorted(asked_often)


def test_a_report_carries_what_the_target_published_since_its_last_fetch(tmp_path: Path) -> None:
    crawl = policy_bench._Crawl("rate", tmp_path / "db", tasks=3, batch=3, seed=2)
    try:
        crawl.wall_s += 2 * 86400
        task = Task(id="reviews:jd:1", kind=TaskKind.ProductReviews, source="jd", target="1", lease_token="t")
        report = crawl._report(task)
        assert report.new_items == len(report.new_item_times_ms) > 0
        assert list(report.new_item_times_ms) == sorted(report.new_item_times_ms, reverse=True)
        assert report.newest_item_ms == report.new_item_times_ms[0] <= crawl.wall_s * 1000
        assert report.fingerprint == 2  # changed, because something is new
        again = crawl._report(task)  # no time has passed: nothing new, the same fingerprint
        assert (again.new_items, again.new_item_times_ms, again.fingerprint) == (0, (), 2)
    finally:
        crawl.close()


def test_the_benchmark_prints_every_policy_against_fixed_and_writes_flat_figures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "docs" / "bench").mkdir(parents=True)
    monkeypatch.setattr(bench, "ROOT", tmp_path)
    assert policy_bench.main(SMALL) == 0
    out = capsys.readouterr().out
    rows = {line.split(" | ")[0].strip("| "): line for line in out.splitlines() if line.startswith("| ")}
    assert set(POLICY_NAMES) <= set(rows)
    assert "| fixed |" in rows["fixed"] and "| 1.00 |" in rows["fixed"]
    figures = json.loads((tmp_path / "docs" / "bench" / "policy.json").read_text(encoding="utf-8"))
    for name in POLICY_NAMES:
        assert figures[f"{name}_report_cpu_us_per_task"] > 0
        assert figures[f"{name}_over_fixed_ratio"] > 0
    assert figures["fixed_over_fixed_ratio"] == 1.0
    assert all(isinstance(v, int | float) for v in figures.values())


def test_no_write_prints_only_and_counts_below_one_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(bench, "ROOT", tmp_path)
    assert policy_bench.main([*SMALL, "--no-write"]) == 0
    assert "| rate |" in capsys.readouterr().out
    assert not (tmp_path / "docs").exists()
    # No warm-up at all is allowed (every timed report then includes the tasks' first ones).
    assert policy_bench.main(["--tasks", "20", "--warmup", "0", "--rounds", "1", "--block", "20", "--no-write"]) == 0
    assert "| rate |" in capsys.readouterr().out
    for flag, value, message in (("--rounds", "0", "at least 1"), ("--warmup", "-1", "at least 0")):
        with pytest.raises(SystemExit) as exit_:
            policy_bench.main([flag, value])
        assert exit_.value.code == 2
        assert f"{flag}: must be {message}" in capsys.readouterr().err
