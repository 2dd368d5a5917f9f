"""``icecrawler purge``: one owner's records deleted from the embedded store (counted first without --yes), never
while the spool holds records the backend has not taken, and clear errors for a bad owner or a missing store. The
deletion itself is in the store contract (tests/storage/test_stores.py: memory, SQLite and the real HBase)."""

from __future__ import annotations

from pathlib import Path

import pytest

from icecrawler_cli.cli import main
from storage_server import schema
from storage_server.spool import SqliteSpool
from storage_server.stores import SqliteStore
from tests.storage.conftest import USER, make_post, make_review
from tests.tmpfs import fill, small_tmpfs


def purge(tmp_path: Path, *args: str) -> list[str]:
    return [
        "purge",
        *args,
        "--set",
        f"storage.embedded.path={tmp_path / 'store.sqlite3'}",
        "--set",
        f"storage.spool_dir={tmp_path / 'spool'}",
    ]


def stored_in(tmp_path: Path) -> Path:
    """An embedded store in ``tmp_path`` with six posts of two users and one review."""
    store = SqliteStore(tmp_path / "store.sqlite3")
    store.put(schema.WEIBO, [schema.post_row(make_post(n, user_id=USER + n % 2, minute=n)) for n in range(1, 7)])
    store.put(schema.REVIEW, [schema.review_row(make_review("r1", product_id=str(USER + 1)))])
    store.close()
    return tmp_path / "store.sqlite3"


@pytest.fixture
def stored(tmp_path: Path) -> Path:
    return stored_in(tmp_path)


def users(path: Path) -> list[int]:
    store = SqliteStore(path)
    try:
        return sorted(int(row.columns["user_id"]) for row in store.scan(schema.WEIBO))
    finally:
        store.close()


def test_counts_first_then_deletes_one_owners_records(
    stored: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    owner = str(USER + 1)
    assert main(purge(tmp_path, "--table", "weibo", "--owner", owner)) == 0
    assert f"3 weibo record(s) of {owner} would be deleted" in capsys.readouterr().out
    assert users(stored) == [USER] * 3 + [USER + 1] * 3
    assert main(purge(tmp_path, "--table", "weibo", "--owner", owner, "--yes")) == 0
    assert f"deleted 3 weibo record(s) of {owner}" in capsys.readouterr().out
    assert users(stored) == [USER] * 3
    store = SqliteStore(stored)
    assert store.count(schema.REVIEW) == 1  # the other table's owner of the same id is someone else
    store.close()


def test_refuses_while_the_spool_holds_records(
    stored: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spool = SqliteSpool(tmp_path / "spool")
    spool.append(b"a batch the backend has not taken", 4)
    spool.close()
    assert main(purge(tmp_path, "--table", "weibo", "--owner", str(USER), "--yes")) == 2
    assert "holds 4 record(s) the backend has not taken yet" in capsys.readouterr().err
    assert len(users(stored)) == 6


def test_bad_owner_and_missing_store_are_clear_errors(
    stored: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(purge(tmp_path, "--table", "weibo", "--owner", "not-a-uid", "--yes")) == 2
    assert "a weibo owner is a user id" in capsys.readouterr().err
    stored.unlink()
    assert main(purge(tmp_path, "--table", "review", "--owner", "p1", "--yes")) == 2
    assert "nothing to purge" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["purge", "export"])
def test_a_store_on_a_full_disk_is_said_to_be_on_a_full_disk(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """SQLite cannot open a store in WAL mode without room for its shared-memory file, and calls that a "disk I/O
    error", which reads like failing hardware: the one-line error must say the disk is full, and nothing changes."""
    with small_tmpfs(tmp_path / "fs", 8) as fs:
        filled = stored_in(fs)
        filler = fill(fs)
        args = ["--table", "weibo", "--owner", str(USER)]
        argv = purge(fs, *args, "--yes") if command == "purge" else ["export", *args, *purge(fs)[1:], "-o", "-"]
        assert main(argv) == 2
        error = capsys.readouterr().err.strip().splitlines()
        assert len(error) == 1 and f"the file system of {fs} is full" in error[0], error
        filler.unlink()
        assert len(users(filled)) == 6  # nothing was deleted
