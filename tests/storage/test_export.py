"""`icecrawler export`: streams every stored record as JSON lines or CSV, exact ids, --since filter."""

from __future__ import annotations

import csv
import io
import json
import select
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from icecrawler.errors import ConfigError
from icecrawler_cli.cli import main
from storage_server import schema
from storage_server.export import export
from storage_server.stores import MemoryStore, SqliteStore
from tests.helpers import killed_midway
from tests.storage.conftest import BIG_ID, make_post, make_review
from tests.tmpfs import small_tmpfs


def test_cli_exports_jsonl_from_the_embedded_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "store.sqlite3"
    store = SqliteStore(db)
    posts = [make_post(BIG_ID, pinned=True), make_post(5, minute=3, fetched_at="2024-06-01T00:00:00+08:00")]
    store.put(schema.WEIBO, [schema.post_row(post) for post in posts])
    store.close()
    out = tmp_path / "weibo.jsonl"
    assert main(["export", "--table", "weibo", "--set", f"storage.embedded.path={db}", "-o", str(out)]) == 0
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert sorted(record["id"] for record in records) == [5, BIG_ID]  # exact: JSON ints, not floats
    big = next(record for record in records if record["id"] == BIG_ID)
    assert big["pinned"] is True and big["pictures"] == posts[0].pictures and big["text"] == posts[0].text
    assert "2 records, done" in capsys.readouterr().err  # progress goes to stderr
    assert (
        main(
            [
                "export",
                "--table",
                "weibo",
                "--set",
                f"storage.embedded.path={db}",
                "-o",
                str(out),
                "--since",
                "2024-05-15T00:00:00+08:00",
                "--no-progress",
            ]
        )
        == 0
    )
    assert [json.loads(line)["id"] for line in out.read_text(encoding="utf-8").splitlines()] == [5]
    # The task kind's name (what seed and tasks print) names the same table; anything else is refused (exit 2).
    assert (
        main(["export", "--table", "user", "--set", f"storage.embedded.path={db}", "-o", str(out), "--no-progress"])
        == 0
    )
    assert len(out.read_text(encoding="utf-8").splitlines()) == 2
    with pytest.raises(SystemExit) as refused:
        main(["export", "--table", "posts_and_reviews", "--set", f"storage.embedded.path={db}"])
    assert refused.value.code == 2


def test_csv_has_a_header_and_one_row_per_review() -> None:
    store = MemoryStore()
    store.put(schema.REVIEW, [schema.review_row(make_review(f"r{i}", minute=i)) for i in range(3)])
    buffer = io.StringIO()
    assert export(store, schema.REVIEW, buffer, "csv") == 3
    rows = list(csv.reader(io.StringIO(buffer.getvalue())))
    assert rows[0] == [name for name, _ in schema.COLUMNS[schema.REVIEW]]
    assert [row[0] for row in rows[1:]] == ["r2", "r1", "r0"]  # one product, newest first


def test_bad_since_and_format_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="--since"):
        export(MemoryStore(), schema.WEIBO, io.StringIO(), "jsonl", since="last week")
    with pytest.raises(ConfigError, match="--format"):
        export(MemoryStore(), schema.WEIBO, io.StringIO(), "xml")


@pytest.mark.parametrize("make", ["sqlite", "memory"])
def test_owner_exports_one_users_posts_or_one_products_reviews(make: str, tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "store.sqlite3") if make == "sqlite" else MemoryStore()
    store.put(schema.WEIBO, [schema.post_row(make_post(n, user_id=n % 3 + 1)) for n in range(1, 10)])
    store.put(schema.REVIEW, [schema.review_row(make_review(f"r{n}", product_id=f"p{n % 2}")) for n in range(6)])
    buffer = io.StringIO()
    assert export(store, schema.WEIBO, buffer, owner="2") == 3
    assert {json.loads(line)["user_id"] for line in buffer.getvalue().splitlines()} == {2}
    buffer = io.StringIO()
    assert export(store, schema.REVIEW, buffer, owner="p1") == 3
    assert sorted(json.loads(line)["id"] for line in buffer.getvalue().splitlines()) == ["r1", "r3", "r5"]
    assert export(store, schema.REVIEW, io.StringIO(), owner="p") == 0  # a prefix of an id is another owner
    with pytest.raises(ConfigError, match="a weibo owner is a user id"):
        export(store, schema.WEIBO, io.StringIO(), owner="p1")
    store.close()


#: ``icecrawler export ...`` that SIGKILLs itself at its first progress report (after 1000 records were written).
_KILLED_MIDWAY = """
import os, runpy, signal, sys
from icecrawler_cli.commands import export
def die(self, count):
    os.kill(os.getpid(), signal.SIGKILL)
export.Progress.update = die
sys.argv = ["icecrawler", *sys.argv[1:]]
runpy.run_module("icecrawler_cli", run_name="__main__")
"""


def test_an_export_file_is_only_ever_whole(tmp_path: Path) -> None:
    """-o FILE is written as FILE.partial and renamed when complete: an export killed midway, or one that fails,
    leaves the previous export whole where it was; a device such as /dev/null is written directly."""
    db = tmp_path / "store.sqlite3"
    store = SqliteStore(db)
    store.put(schema.WEIBO, [schema.post_row(make_post(n, minute=n % 60)) for n in range(1, 2501)])
    store.close()
    out = tmp_path / "weibo.jsonl"
    args = ["export", "--table", "weibo", "--set", f"storage.embedded.path={db}", "-o", str(out)]
    assert main([*args, "--no-progress"]) == 0
    previous = out.read_text(encoding="utf-8")
    assert len(previous.splitlines()) == 2500 and not (tmp_path / "weibo.jsonl.partial").exists()

    store = SqliteStore(db)
    store.put(schema.WEIBO, [schema.post_row(make_post(n, minute=n % 60)) for n in range(2501, 3001)])
    store.close()
    killed_midway(_KILLED_MIDWAY, *args)
    assert out.read_text(encoding="utf-8") == previous  # not the 1000-odd lines the killed run had written
    assert (tmp_path / "weibo.jsonl.partial").stat().st_size > 0

    assert main([*args, "--since", "last week"]) != 0  # a one-line error, raised inside the export
    assert out.read_text(encoding="utf-8") == previous and not (tmp_path / "weibo.jsonl.partial").exists()

    assert main([*args, "--no-progress"]) == 0
    assert len(out.read_text(encoding="utf-8").splitlines()) == 3000
    assert not (tmp_path / "weibo.jsonl.partial").exists()
    assert main([*args[:-1], "/dev/null", "--no-progress"]) == 0


def test_an_export_onto_a_full_disk_names_where_it_could_not_write_and_keeps_the_previous_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A write that fails (no space) has no file name in it: the one-line error must name the output, and the
    previous export stays whole, without a ``.partial`` beside it."""
    db = tmp_path / "store.sqlite3"
    store = SqliteStore(db)
    store.put(schema.REVIEW, [schema.review_row(make_review(f"r{n}", minute=n % 60)) for n in range(12000)])
    store.close()
    with small_tmpfs(tmp_path / "fs", 1) as fs:
        out = fs / "review.jsonl"
        out.write_text("the previous export\n", encoding="utf-8")
        args = ["export", "--table", "review", "--set", f"storage.embedded.path={db}", "--no-progress"]
        assert main([*args, "-o", str(out)]) == 2
        error = capsys.readouterr().err.strip().splitlines()
        assert len(error) == 1 and str(out) in error[0] and "No space left on device" in error[0], error
        assert out.read_text(encoding="utf-8") == "the previous export\n"
        assert sorted(path.name for path in fs.iterdir()) == ["review.jsonl"]


#: ``icecrawler export ...`` that stops at its first progress report (1000 records written to FILE.partial): it says
#: so on stderr and waits for a line on stdin before it goes on.
_PAUSED_MIDWAY = """
import runpy, sys
from icecrawler_cli.commands import export
def pause(self, count):
    if count == 1000:
        print("paused", file=sys.stderr, flush=True)
        sys.stdin.readline()
export.Progress.update = pause
sys.argv = ["icecrawler", *sys.argv[1:]]
runpy.run_module("icecrawler_cli", run_name="__main__")
"""


def test_a_second_export_to_the_file_an_export_is_writing_is_refused_and_the_first_ends_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two exports to one -o FILE at once (a nightly job that overran into the next): the second truncated the
    first's FILE.partial and renamed it into place, and the first then wrote the rest into FILE after it. The second
    is now refused in one line (exit 2), FILE keeps the previous export, and the first ends with a whole one."""
    db = tmp_path / "store.sqlite3"
    store = SqliteStore(db)
    store.put(schema.WEIBO, [schema.post_row(make_post(n, minute=n % 60)) for n in range(1, 2501)])
    store.close()
    out = tmp_path / "weibo.jsonl"
    out.write_text("last night's\n", encoding="utf-8")
    args = ["export", "--table", "weibo", "--set", f"storage.embedded.path={db}", "-o", str(out)]
    with subprocess.Popen(
        [sys.executable, "-c", _PAUSED_MIDWAY, *args], stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as first:
        try:
            assert first.stderr is not None and first.stdin is not None
            assert select.select([first.stderr], [], [], 120)[0], "the first export never reached 1000 records"
            assert first.stderr.readline() == "paused\n"
            assert main([*args, "--no-progress"]) == 2
            assert "being written by another run" in capsys.readouterr().err
            assert out.read_text(encoding="utf-8") == "last night's\n"
            first.stdin.write("\n")
            first.stdin.close()
            assert first.wait(timeout=120) == 0, first.stderr.read()
        finally:
            if first.poll() is None:
                first.kill()
    lines = out.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 2500 and all(json.loads(line)["id"] for line in lines)
    assert not (tmp_path / "weibo.jsonl.partial").exists()


def test_a_row_written_by_hand_whose_pictures_are_not_json_is_skipped_with_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The embedded store is one SQLite file that anyone can edit (docs/STORAGE.md): a row whose ``pictures`` is not
    a JSON list of URLs ended a JSON-lines export with a JSONDecodeError traceback, and no file. It is skipped with a
    warning naming its key, as HBase rows without a readable record are, and every other row is exported."""
    db = tmp_path / "store.sqlite3"
    store = SqliteStore(db)
    rows = [schema.post_row(make_post(n, minute=n)) for n in (1, 2, 3)]
    store.put(schema.WEIBO, rows)
    store.close()
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE weibo SET pictures = 'a.jpg b.jpg' WHERE id = 2")
        conn.execute("UPDATE weibo SET pictures = '{\"a\": 1}' WHERE id = 3")
    out = tmp_path / "weibo.jsonl"
    assert main(["export", "--table", "weibo", "--set", f"storage.embedded.path={db}", "-o", str(out)]) == 0
    assert [json.loads(line)["id"] for line in out.read_text(encoding="utf-8").splitlines()] == [1]
    err = capsys.readouterr().err  # the command's log
    assert rows[1].key.hex() in err and rows[2].key.hex() in err and "2 unreadable row(s) skipped" in err
    buffer = io.StringIO()  # CSV keeps ``pictures`` as its text: nothing to skip
    assert export(SqliteStore(db), schema.WEIBO, buffer, "csv") == 3
