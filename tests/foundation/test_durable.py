"""``icecrawler.durable``: the journal of a job of several steps (replaced whole, read back, gone when done), the
names of damaged copies, and files written whole with the mode asked for."""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

import pytest

from icecrawler import durable
from icecrawler.datalock import DataLock, LockHeld
from icecrawler.durable import aside_path, read_journal, remove_journal, write_journal
from icecrawler.errors import ServiceError


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


def test_a_damaged_copy_never_takes_the_name_of_another(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two salvages within one second: the second copy gets ``-2``, and a WAL file left by a copy counts too."""
    monkeypatch.setattr(durable.time, "strftime", lambda _format, _when: "20261206T083000")
    store = tmp_path / "store.sqlite3"
    first = aside_path(store)
    assert first.name == "store.sqlite3.damaged-20261206T083000"
    first.with_name(first.name + "-wal").write_text("")  # only the WAL file of the first copy is there
    second = aside_path(store)
    assert second.name == "store.sqlite3.damaged-20261206T083000-2"
    second.mkdir()
    assert aside_path(store).name == "store.sqlite3.damaged-20261206T083000-3"


def test_a_whole_file_replaces_the_old_one_with_the_mode_asked_for(tmp_path: Path) -> None:
    secret = tmp_path / "node-key.pem"
    secret.write_bytes(b"old")
    secret.chmod(0o644)
    durable.write_whole(secret, b"new", mode=0o600)
    assert secret.read_bytes() == b"new" and secret.stat().st_mode & 0o777 == 0o600
    durable.write_whole(tmp_path / "node-ssl.conf", b"plain")  # no mode asked: the usual one, less the umask
    assert (tmp_path / "node-ssl.conf").stat().st_mode & 0o777 == 0o666 & ~_umask()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["node-key.pem", "node-ssl.conf"]


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def test_a_second_writer_of_the_same_file_is_refused_not_mixed_into_the_first(tmp_path: Path) -> None:
    """Two runs writing one file at once (a nightly export that overran into the next, two ``targets --every``)
    shared ``<file>.partial``: the second truncated the first's copy and renamed it into place, and the first then
    wrote the rest of its data into that file. The second is refused while the first writes; the file ends whole."""
    path = tmp_path / "posts.jsonl"
    path.write_text("last night's\n")
    with durable.replaced_whole(path) as first:
        first.write("A" * 10_000)
        first.flush()
        with pytest.raises(ServiceError, match="another"), durable.replaced_whole(path) as second:
            second.write("B\n")
        with pytest.raises(ServiceError, match="another"):
            durable.write_whole(path, b"C\n")
        assert path.read_text() == "last night's\n"
        first.write("\n")
    assert path.read_text() == "A" * 10_000 + "\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["posts.jsonl"]
    durable.write_whole(path, b"next\n")  # once the first is done, the next run writes as ever
    assert path.read_bytes() == b"next\n"


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_file_system_without_locks_is_said_so_not_taken_for_another_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """flock failing with ENOLCK (an NFS mount without its lock service): the data lock called it "in use by another
    process", sending the operator after a daemon that was not there, and a whole-file write escaped with a bare
    OSError, its file left open and an empty ``FILE.partial`` behind. Each now says, in one line naming the file,
    that its file system does not lock; nothing is left open or behind."""

    def no_locks(fd: int, operation: int) -> None:
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(fcntl, "flock", no_locks)
    before = _open_fds()
    lock = DataLock(tmp_path / "db" / "scheduler.lock", "scheduler")
    with pytest.raises(ServiceError, match="does not support file locks") as refused:
        lock.acquire()  # the database's own lock still refuses the start: it is what guards the database
    assert not isinstance(refused.value, LockHeld) and "in use" not in str(refused.value)
    assert str(lock.path) in str(refused.value) and not lock.held
    path = tmp_path / "export.csv"
    path.write_text("last night's\n")
    with pytest.raises(ServiceError, match=f"cannot lock {path}.partial: No locks available: its file system"):
        durable.write_whole(path, b"new\n")
    assert _open_fds() == before
    assert path.read_text() == "last night's\n" and not (tmp_path / "export.csv.partial").exists()
