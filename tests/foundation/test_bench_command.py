"""``icecrawler bench``: ``list``, one benchmark, ``all`` (what ``make bench`` runs), and each one's figures file."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

from icecrawler_cli.cli import main
from icecrawler_cli.commands import bench as bench_command


@pytest.fixture
def fake_benchmarks(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, list[str]]]:
    """Two benchmarks that only record their calls: "alpha" succeeds, "beta" exits 3."""
    calls: list[tuple[str, list[str]]] = []
    real = importlib.import_module

    def benchmark(short: str) -> SimpleNamespace:
        def run(argv: list[str]) -> int:
            calls.append((short, argv))
            return 0 if short == "alpha" else 3

        return SimpleNamespace(main=run)

    def fake(name: str, package: str | None = None) -> ModuleType | SimpleNamespace:
        short = name.removeprefix("bench.")
        return benchmark(short) if short in ("alpha", "beta") else real(name, package)

    monkeypatch.setattr(bench_command, "available", lambda: ["alpha", "beta"])
    monkeypatch.setattr(bench_command.importlib, "import_module", fake)
    return calls


def test_all_runs_every_benchmark_with_its_defaults_and_fails_if_one_fails(
    fake_benchmarks: list[tuple[str, list[str]]],
) -> None:
    assert main(["bench", "all"]) == 3
    assert fake_benchmarks == [("alpha", []), ("beta", [])]


def test_one_benchmark_gets_its_own_options(fake_benchmarks: list[tuple[str, list[str]]]) -> None:
    assert main(["bench", "alpha", "--seconds", "1"]) == 0
    assert fake_benchmarks == [("alpha", ["--seconds", "1"])]


def test_all_takes_no_options_and_unknown_names_are_refused(
    fake_benchmarks: list[tuple[str, list[str]]], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", "all", "--quick"]) == 2
    assert main(["bench", "gamma"]) == 2
    assert fake_benchmarks == []
    # On stderr, as every other error of the command line is (a pipe of the output took them for a result).
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [
        "icecrawler bench: error: all takes no options (each benchmark runs with its defaults)",
        "icecrawler bench: error: unknown benchmark 'gamma'; available: alpha, beta",
    ]


def test_list_names_the_real_benchmarks(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "list"]) == 0
    listed = capsys.readouterr().out.split()
    assert {"scheduler", "storage", "client", "fingerprint", "scale", "revisit", "policy", "soak"} <= set(listed)
    assert not [name for name in listed if name.startswith("_")]


def test_every_benchmark_writes_its_figures_whole_sorted_and_in_utf_8(tmp_path: Path) -> None:
    from bench import write_figures

    figures = tmp_path / "figures.json"
    figures.write_text('{"old": 1}\n')
    assert write_figures(figures, {"z_items_per_s": 2.5, "a_page": "西湖 goods.php"}) == figures
    assert figures.read_text(encoding="utf-8") == '{\n "a_page": "西湖 goods.php",\n "z_items_per_s": 2.5\n}\n'
    assert [path.name for path in tmp_path.iterdir()] == ["figures.json"]  # no .partial left
    assert json.loads(figures.read_text(encoding="utf-8")) == {"z_items_per_s": 2.5, "a_page": "西湖 goods.php"}
