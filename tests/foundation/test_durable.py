"""The journal of a job of several steps (``icecrawler.durable``): replaced whole, read back, gone when done."""

from __future__ import annotations

from pathlib import Path

import pytest

from icecrawler.durable import read_journal, remove_journal, write_journal


def test_a_journal_is_replaced_whole_read_back_and_removed(tmp_path: Path) -> None:
    journal = tmp_path / "job.journal"
    assert read_journal(journal) is None  # never started
    write_journal(journal, {"aside": "db.damaged-1", "stage": "moving"})
    write_journal(journal, {"aside": "db.damaged-1", "stage": "copying"})
    assert read_journal(journal) == {"aside": "db.damaged-1", "stage": "copying"}
    assert sorted(path.name for path in tmp_path.iterdir()) == ["job.journal"]  # no temporary file left
    (tmp_path / "job.journal.tmp").write_text("{half")  # a write stopped before its rename: never read
    assert read_journal(journal) == {"aside": "db.damaged-1", "stage": "copying"}
    remove_journal(journal)
    assert read_journal(journal) is None and not list(tmp_path.iterdir())


@pytest.mark.parametrize("text", ["{half", "[1, 2]"])
def test_a_journal_that_is_not_a_json_object_is_an_error_not_a_finished_job(tmp_path: Path, text: str) -> None:
    journal = tmp_path / "job.journal"
    journal.write_text(text)
    with pytest.raises(ValueError):
        read_journal(journal)
