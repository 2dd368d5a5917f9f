"""bench revisit --traces on the files real collections make: the same file gives the same figures whatever the line
order and in every run, large and long files reach the jobs as their windows only, and the content model's item
texts stay what they were when they were made faster. (Odd lines and bad files: test_revisit_traces.py.)"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import bench.revisit as revisit
from bench.revisit.contenders import ROOT
from bench.revisit.content import ITEM_WORDS, VOCAB, ContentModel
from bench.revisit.real import RealConfig, open_traces
from bench.revisit.replay import window_pages
from bench.revisit.traces import DAY


def _lines(count: int = 8, seed: int = 5) -> list[str]:
    """Traces of two sources, 30 to 65 items over four weeks each, one JSON line per target."""
    rng = np.random.default_rng(seed)
    lines = []
    for k in range(count):
        times = np.sort(1_700_000_000 + rng.uniform(0, 28 * DAY, 30 + 5 * k)).round()
        lines.append(json.dumps({"target": f"t{k}", "source": "forum" if k % 2 else "shop", "times": times.tolist()}))
    return lines


def _file(tmp_path: Path, name: str, lines: list[str]) -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_every_half_runs_its_targets_in_the_same_order_whatever_the_file_order(tmp_path: Path) -> None:
    lines = _lines()
    forward = _file(tmp_path, "forward.jsonl", lines)
    backward = _file(tmp_path, "backward.jsonl", lines[::-1])
    for half in ("all", "report", "dev"):
        a, b = (open_traces(RealConfig(path, half=half)) for path in (forward, backward))
        assert [(t.source, t.target) for t in a.chosen] == [(t.source, t.target) for t in b.chosen]
        assert a.chosen == b.chosen and a.windowing == b.windowing
    # The order is the one build_traces writes, so the committed file's figures stay as recorded.
    everything = open_traces(RealConfig(forward, half="all")).chosen
    assert [(t.source, t.target) for t in everything] == sorted((t.source, t.target) for t in everything)


def test_a_run_of_every_target_prints_the_same_tables_whatever_the_line_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = _lines()
    printed = []
    for name, order in (("a.jsonl", lines), ("b.jsonl", lines[::-1])):
        path = _file(tmp_path, name, order)
        assert revisit.main(["--traces", str(path), "--quick", "--half", "all", "--seeds", "2", "--workers", "1"]) == 0
        out = capsys.readouterr().out
        assert "#### Summary" in out
        printed.append(re.sub(r"run time \d+ s", "", out.replace(name, "FILE")))
    assert printed[0] == printed[1]


def test_the_best_baseline_of_a_tie_is_the_same_in_every_process() -> None:
    """Two seeds with different best baselines: the summary's "best baseline (most seeds)" named either, by the
    string hashes of the process (PYTHONHASHSEED), so two runs of one file wrote different tables into the docs."""
    code = (
        "from bench.revisit.real import _best_name, _labels\n"
        "labels = _labels({}, 0.5)\n"
        "rows = [{lb: {'lag_mean_min': 10.0 + (i + k) % 3} for k, (lb, _) in enumerate(labels)} for i in range(3)]\n"
        "print(_best_name(rows, labels))\n"
        "from bench.revisit.real import most_often\n"
        "print(most_often(['b', 'c', 'a', 'c', 'a'], ['a', 'b', 'c']))\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    said = {
        subprocess.run(
            [sys.executable, "-c", code], env=dict(env, PYTHONHASHSEED=str(seed)), capture_output=True, text=True
        ).stdout
        for seed in range(8)
    }
    assert said == {"shhd (paper, simhash)\na\n"}
