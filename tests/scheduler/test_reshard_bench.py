"""``icecrawler bench reshard``: the figures are not checked (no timing in tests); what is: the database it builds
holds what it says, and the output has its rows and baseline."""

from __future__ import annotations

from pathlib import Path

import pytest

import bench.reshard as reshard_bench

pytestmark = [pytest.mark.bdb]


def test_the_database_holds_each_target_crawled_once(tmp_path: Path) -> None:
    # 300 records, 300 pending keys, 300 completion-log entries, and the layout
    assert reshard_bench.build(tmp_path / "db", 300) == 901


def test_the_table_compares_each_reshard_with_the_backup(capsys: pytest.CaptureFixture[str]) -> None:
    assert reshard_bench.main(["--tasks", "300", "--rounds", "1", "--no-write"]) == 0
    out = capsys.readouterr().out
    for row in ("| backup |", "| reshard to 2 shards |", "| reshard to 4 shards |"):
        assert row in out
    assert "901 entries in all tables" in out and "Baseline: the scheduler's hot backup" in out
