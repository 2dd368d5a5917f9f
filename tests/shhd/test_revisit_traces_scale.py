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
from bench.revisit.real import REPORT_BASE, RealConfig, open_traces, sample_targets, window_items
from bench.revisit.replay import load_traces, window_pages
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
    """One side here, the other (the lines reversed) in another process with other string hashes (PYTHONHASHSEED):
    an order that followed a set's, or the file's, would print other tables."""
    lines = _lines()
    argv = ["--quick", "--half", "all", "--seeds", "2", "--workers", "1"]
    here = _file(tmp_path, "a.jsonl", lines)
    assert revisit.main(["--traces", str(here), *argv]) == 0
    printed = [capsys.readouterr().out.replace(here.name, "FILE")]
    there = _file(tmp_path, "b.jsonl", lines[::-1])
    # bench.revisit.main on the command line's arguments.
    main = "import sys, bench.revisit as r; sys.exit(r.main(sys.argv[1:]))"
    seed = str(int(os.environ.get("PYTHONHASHSEED", "0").replace("random", "0")) + 1)
    done = subprocess.run(
        [sys.executable, "-c", main, "--traces", str(there), *argv],
        env=dict(os.environ, PYTHONPATH=str(ROOT), PYTHONHASHSEED=seed),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    printed.append(done.stdout.replace(there.name, "FILE"))
    assert "#### Summary" in printed[0]
    there_out, here_out = (re.sub(r"run time \d+ s", "", out) for out in printed[::-1])
    assert there_out == here_out


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


def _year_file(tmp_path: Path) -> Path:
    """Six feeds of a year each, one item every six hours or so."""
    rng = np.random.default_rng(9)
    lines = []
    for k in range(6):
        times = np.sort(1_600_000_000 + rng.uniform(0, 365 * DAY, 1400 + 10 * k)).round()
        lines.append(json.dumps({"target": f"y{k}", "source": "feed", "times": times.tolist()}))
    return _file(tmp_path, "year.jsonl", lines)


def test_the_jobs_get_each_trace_cut_to_its_window_and_replay_the_same_items(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run pickles its targets' times into every job: a year of a 200 MB file had each job unpickle half of it
    (1.8 GB across a 2-worker --quick run) to replay four weeks."""
    path = _year_file(tmp_path)
    opened = open_traces(RealConfig(path, half="all", window_days=28.0))
    assert all(t.times[-1] - t.times[0] <= 28 * DAY for t in opened.chosen)
    assert sum(len(t.times) for t in opened.chosen) < 8550 // 10  # of the 8 550 in the file
    # ... and the jobs replay exactly what they replayed from the whole traces.
    whole = sorted(load_traces(path), key=lambda t: (t.source, t.target))
    pages = zip(window_pages(opened.chosen, opened.windowing), window_pages(whole, opened.windowing), strict=True)
    for cut, full in pages:
        assert np.array_equal(cut.arrivals, full.arrivals) and cut.rate == full.rate
    # Most of the file left out of the windows is said, with the way to a longer window.
    warnings = capsys.readouterr().err.splitlines()
    assert len(warnings) == 1 and warnings[0].startswith(f"warning: {path}: the 28-day window keeps ")
    assert "of the file's 8550 items (each trace's last 28 days; given): the run replays those only" in warnings[0]
    assert "--window-days sets a longer window" in warnings[0]
    open_traces(RealConfig(path, half="all", window_days=300.0))
    assert capsys.readouterr().err == ""


def test_item_texts_are_the_words_numpy_choice_draws() -> None:
    """``_text`` draws its words from a table built once instead of ``rng.choice(VOCAB, n, p=p)`` on every call (over
    half of a text's time): the texts, and so every simhash figure, must stay the ones choice gave."""
    model = ContentModel(1000)
    _, p = model._vocab, model._p
    for page in range(40):
        for index in range(60):
            rng = np.random.default_rng([model.seed, page, 0, index])
            n = int(rng.integers(ITEM_WORDS[0], ITEM_WORDS[1] + 1))
            parts = [model._vocab[k] for k in rng.choice(VOCAB, n, p=p)]
            for cut in range(5, len(parts), 6):
                parts[cut] += "，"
            assert model.item_text(page, index) == "".join(parts) + "。"


def test_a_target_that_holds_most_of_the_items_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A thousand items in a minute on one target of eight: every mean lag is then mostly how soon one fetch came
    after that minute, and the tables gave no hint of it."""
    lines = _lines()
    burst = json.loads(lines[0])
    burst["times"] = sorted(burst["times"] + [1_701_000_000 + k * 0.06 for k in range(1000)])
    path = _file(tmp_path, "burst.jsonl", [json.dumps(burst), *lines[1:]])
    opened = open_traces(RealConfig(path, half="all"))
    assert window_items(opened.cfg, opened.chosen, opened.windowing) == 1000 + sum(30 + 5 * k for k in range(8))
    said = capsys.readouterr().err
    assert (
        f"warning: {path}: target 't0' of shop holds 1030 of the 1380 items in the windows of the all half (75%)"
        in (said)
    )
    assert "every mean lag is mostly its items' lag" in said
    assert revisit.main(["--traces", str(path), "--phases", "1", "--workers", "1", "--half", "all"]) == 0
    assert "target 't0' of shop holds 1030 of the 1380 items" in capsys.readouterr().err
    # An ordinary file says nothing.
    plain = open_traces(RealConfig(_file(tmp_path, "plain.jsonl", lines), half="all"))
    window_items(plain.cfg, plain.chosen, plain.windowing)
    assert capsys.readouterr().err == ""


def test_the_header_counts_the_half_and_says_how_many_each_seed_resamples(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--quick`` resamples 60 targets a seed: on a file of 5 000 the header said "report half: 60 targets (...)",
    the first seed's draw, as if the half held 60."""
    path = _file(tmp_path, "twelve.jsonl", _lines(12))
    argv = ["--traces", str(path), "--quick", "--seeds", "2", "--workers", "1"]
    assert revisit.main([*argv, "--targets", "4"]) == 0
    out = capsys.readouterr().out
    assert (
        "; report half: 6 targets (forum 3, shop 3); 2 report seeds (1000..1001), each a bootstrap resample of 4 "
        in (out)
    )
    assert re.search(r"resample of 4 of them \(seed 1000: 4 targets \((forum \d, shop \d|forum 4|shop 4)\)\); ", out)
    assert revisit.main(argv) == 0  # every target of the half: as before
    out = capsys.readouterr().out
    assert "; report half: 6 targets (forum 3, shop 3); 2 report seeds (1000..1001), each a bootstrap resample of " in (
        out
    )


def test_the_per_source_table_says_which_sources_fewer_seeds_drew(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A small resample of a file of several sources leaves some sources out of some seeds: their rows were the mean
    over the seeds that drew them (a ratio of one seed, without a ± that says so), and a source no seed drew was
    left out of the table without a word."""
    rng = np.random.default_rng(3)
    lines = []
    for source in ("a", "b", "c", "d"):
        for k in range(4):
            times = np.sort(1_700_000_000 + rng.uniform(0, 28 * DAY, 40)).round()
            lines.append(json.dumps({"target": f"{source}{k}", "source": source, "times": times.tolist()}))
    path = _file(tmp_path, "four.jsonl", lines)
    seeds, targets = 3, 2
    opened = open_traces(RealConfig(path, half="all"))
    drawn = {s: 0 for s in "abcd"}
    for k in range(seeds):
        for source in {t.source for t in sample_targets(opened.chosen, REPORT_BASE + k, targets, bootstrap=True)}:
            drawn[source] += 1
    assert 0 in drawn.values() and any(0 < n < seeds for n in drawn.values())  # the case this test is about
    argv = ["--traces", str(path), "--quick", "--half", "all", "--workers", "1"]
    assert revisit.main([*argv, "--seeds", str(seeds), "--targets", str(targets)]) == 0
    out = capsys.readouterr().out
    fewer = ", ".join(f"{s} by {n}" for s, n in drawn.items() if 0 < n < seeds)
    never = ", ".join(s for s, n in drawn.items() if n == 0)
    assert (
        f"Sources drawn by fewer than the run's {seeds} seeds (each row is the mean over the seeds that drew its "
        f"source): {fewer}; drawn by none, so not in the table: {never}." in out
    )
    # Without --targets a seed resamples as many targets as the half holds, with replacement, so it may still miss a
    # source; these two seeds draw every source (checked here), so there is no note.
    full = [{t.source for t in sample_targets(opened.chosen, REPORT_BASE + k, None, bootstrap=True)} for k in range(2)]
    assert full == [set("abcd")] * 2
    assert revisit.main([*argv, "--seeds", "2"]) == 0
    assert "Sources drawn by fewer" not in capsys.readouterr().out
