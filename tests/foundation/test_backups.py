"""The rotating-backup mechanism (``icecrawler.backups``), with plain directories: names, rotation, what counts as
due, and that a failed or interrupted backup never looks like one."""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from icecrawler.backups import (
    PARTIAL_SUFFIX,
    REMOVING_SUFFIX,
    BackupNameLock,
    BackupPlan,
    PeriodicBackups,
    backups_lock,
)
from icecrawler.datalock import LockHeld, LocksUnsupported
from icecrawler.errors import ServiceError
from icecrawler.settings import Settings
from tests.helpers import record_fsyncs_and_renames, wait_for

DAY = 86400.0
NOON = 1_796_126_400.0  # 2026-12-01 12:00:00 UTC


def write_one(target: Path) -> None:
    target.mkdir()
    (target / "data").write_text("copy")


def test_a_backup_is_named_by_its_utc_time_and_only_the_newest_are_kept(tmp_path: Path) -> None:
    plan = BackupPlan(tmp_path, "scheduler", interval_s=DAY, keep=2)
    taken = [plan.take(write_one, now=NOON + n * DAY) for n in range(4)]
    assert taken[0].name == "scheduler-20261201T120000Z"
    assert [p.name for _, p in plan.complete()] == [taken[2].name, taken[3].name]
    assert sorted(p.name for p in tmp_path.iterdir()) == [taken[2].name, taken[3].name]
    assert (taken[3] / "data").read_text() == "copy"


def test_due_follows_the_newest_complete_backup_on_disk(tmp_path: Path) -> None:
    plan = BackupPlan(tmp_path, "scheduler", interval_s=DAY, keep=3)
    assert plan.due(NOON)
    plan.take(write_one, now=NOON)
    assert not plan.due(NOON + DAY - 1)
    assert plan.due(NOON + DAY)
    # A daemon started again later judges by the same files: nothing in memory decides it.
    assert not BackupPlan(tmp_path, "scheduler", interval_s=DAY, keep=3).due(NOON + 60)


def test_a_failed_backup_leaves_nothing_and_an_interrupted_one_is_cleared_by_the_next(tmp_path: Path) -> None:
    plan = BackupPlan(tmp_path, "scheduler", interval_s=DAY, keep=3)

    def fails(target: Path) -> None:
        write_one(target)
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space"):
        plan.take(fails, now=NOON)
    assert list(tmp_path.iterdir()) == [] and plan.due(NOON)
    crashed = tmp_path / f"scheduler-20261130T000000Z{PARTIAL_SUFFIX}"  # a daemon killed mid-copy
    write_one(crashed)
    assert plan.complete() == []
    plan.take(write_one, now=NOON)
    assert not crashed.exists() and len(plan.complete()) == 1


def test_other_files_and_other_kinds_in_the_directory_are_never_touched(tmp_path: Path) -> None:
    (tmp_path / "scheduler-notes").mkdir()
    (tmp_path / "scheduler-shard1-20261101T000000Z").mkdir()
    (tmp_path / "readme.txt").write_text("x")
    (tmp_path / f"scheduler-shard1-20261101T000000Z{PARTIAL_SUFFIX}").mkdir()  # another shard, copying now
    plan = BackupPlan(tmp_path, "scheduler", interval_s=DAY, keep=1)
    for n in range(3):
        plan.take(write_one, now=NOON + n * DAY)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [
        "readme.txt",
        "scheduler-20261203T120000Z",
        "scheduler-notes",
        "scheduler-shard1-20261101T000000Z",
        f"scheduler-shard1-20261101T000000Z{PARTIAL_SUFFIX}",
    ]


def test_two_backups_in_one_second_and_bad_plans_are_refused(tmp_path: Path) -> None:
    plan = BackupPlan(tmp_path, "scheduler", interval_s=DAY, keep=2)
    plan.take(write_one, now=NOON)
    with pytest.raises(FileExistsError, match="within one second"):
        plan.take(write_one, now=NOON + 0.5)
    for prefix, interval, keep in (("", DAY, 1), ("a/b", DAY, 1), ("s", 0.0, 1), ("s", DAY, 0)):
        with pytest.raises(ValueError):
            BackupPlan(tmp_path, prefix, interval_s=interval, keep=keep)


def test_the_thread_backs_up_when_due_and_retries_a_failure_later(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="icecrawler.backups")
    attempts: list[float] = []

    def flaky(target: Path) -> None:
        attempts.append(time.monotonic())
        if len(attempts) == 1:
            raise OSError(28, "No space left on device")
        write_one(target)

    plan = BackupPlan(tmp_path, "scheduler", interval_s=1.0, keep=2)
    backups = PeriodicBackups(plan, flaky, "test state", check_s=0.05, retry_s=0.3)
    backups.start()
    try:
        wait_for(lambda: backups.taken >= 3, "the thread never took three backups", timeout_s=30)
    finally:
        backups.stop()
    assert backups.failed == 1
    assert attempts[1] - attempts[0] >= 0.3  # the failure was retried after retry_s, not at once
    assert len(plan.complete()) == 2  # rotated while it ran
    assert "test state backup failed" in caplog.text and "No space left on device" in caplog.text
    assert "test state backed up to" in caplog.text and "Traceback" not in caplog.text


def test_metrics_show_the_newest_backups_age_and_the_counts(tmp_path: Path) -> None:
    plan = BackupPlan(tmp_path, "scheduler", interval_s=DAY, keep=2)
    backups = PeriodicBackups(plan, write_one, "test state")
    backups.started_at = NOON - 600  # never started as a thread here

    def values(now: float) -> dict[str, float]:
        return {
            sample.name: sample.value
            for family in backups.metric_families("icecrawler_scheduler", now=now)
            for sample in family.samples
        }

    # No backup yet: the age counts from the start, so backups that never succeed show as growing.
    assert values(NOON)["icecrawler_scheduler_backup_age_seconds"] == 600
    plan.take(write_one, now=NOON + 60)
    backups.taken, backups.failed = 1, 2
    shown = values(NOON + 3600)
    assert shown["icecrawler_scheduler_backup_age_seconds"] == 3540
    assert shown["icecrawler_scheduler_backup_interval_seconds"] == DAY
    assert shown["icecrawler_scheduler_backups_total"] == 1
    assert shown["icecrawler_scheduler_backup_failures_total"] == 2


def test_a_backup_is_on_disk_before_it_is_renamed_into_place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every file and folder of the copy is fsynced before the rename, and the backup folder after it: a power
    cut never leaves a published backup with pages missing, nor loses the rename of one reported as taken."""

    def write_two(target: Path) -> None:
        write_one(target)
        (target / "logs").mkdir()
        (target / "logs" / "log.0000000001").write_text("log")

    events = record_fsyncs_and_renames(monkeypatch)
    final = BackupPlan(tmp_path, "scheduler", interval_s=DAY, keep=2).take(write_two, now=NOON)
    partial = final.with_name(final.name + PARTIAL_SUFFIX)
    assert [event for event in events if event[0] == "rename"] == [("rename", partial)]
    rename_at = events.index(("rename", partial))
    written = {partial / path.relative_to(final) for path in final.rglob("*")} | {partial}
    assert written <= {path for kind, path in events[:rename_at] if kind == "fsync"}
    assert ("fsync", tmp_path) in events[rename_at:]


#: A child that takes one backup in a directory whose one old backup (``keep=1``) is big, so that pruning it takes a
#: while: the test kills it with -9 in the middle of that deletion.
_PRUNE_CHILD = """
import sys
from pathlib import Path
from icecrawler.backups import BackupPlan
def write(target):
    target.mkdir()
    (target / "data").write_text("copy")
print("ready", flush=True)
BackupPlan(Path(sys.argv[1]), "storage", interval_s=86400.0, keep=1).take(write, now=float(sys.argv[2]))
"""
_FOLDERS = 60
_FILES = 60


def _entries(folder: Path) -> int:
    """How many entries ``folder`` holds; as many as a whole old backup when it is not there (it may be renamed
    between any two looks)."""
    try:
        return len(os.listdir(folder))
    except FileNotFoundError:
        return _FOLDERS


def test_a_kill_9_while_an_old_backup_is_deleted_leaves_no_broken_backup(tmp_path: Path) -> None:
    """A daemon killed while it deleted an old backup left a half-deleted folder under the backup's own name (a
    kill -9 harness found an empty ``storage-...`` folder and a scheduler backup without its logs): a restore, which
    reaches for an older backup, would take it for one. It is renamed out of the backups' names first; the next
    start removes what is left."""
    old = tmp_path / "storage-20261201T120000Z"
    for folder in range(_FOLDERS):
        (old / f"part{folder:03d}").mkdir(parents=True)
        for name in range(_FILES):
            (old / f"part{folder:03d}" / f"f{name}").write_bytes(b"x" * 64)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    child = subprocess.Popen(
        [sys.executable, "-c", _PRUNE_CHILD, str(tmp_path), str(NOON + DAY)], env=env, stdout=subprocess.PIPE
    )
    killed_mid_delete = False
    try:
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        deadline = time.monotonic() + 60
        while child.poll() is None and time.monotonic() < deadline:
            # Deleting has begun (a part is gone, whichever the file system lists first), wherever the folder is
            # now, and has not finished.
            places = [old, old.with_name(old.name + REMOVING_SUFFIX)]
            if any(_entries(place) < _FOLDERS for place in places):
                os.kill(child.pid, signal.SIGKILL)
                killed_mid_delete = True
                break
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(timeout=30)
        if child.stdout is not None:
            child.stdout.close()
    if not killed_mid_delete:
        pytest.fail("the child finished before the kill: make the old backup bigger")
    plan = BackupPlan(tmp_path, "storage", interval_s=DAY, keep=1)
    listed = [path for _, path in plan.complete()]
    # Only the new backup looks like one: the half-deleted old one is not under a backup's name.
    assert listed == [tmp_path / "storage-20261202T120000Z"], listed
    assert (listed[0] / "data").read_text() == "copy"
    plan.tidy()  # what the backup thread does when the daemon starts again
    assert sorted(path.name for path in tmp_path.iterdir()) == ["storage-20261202T120000Z"]


def test_backups_past_keep_that_crashes_left_go_at_the_next_start(tmp_path: Path) -> None:
    """A daemon killed after each publish and before its prune, again and again, piled up backups past ``keep`` (a
    harness found 35 with keep=2): the thread's start removes them, and the leftovers of a copy or a removal."""
    for n in range(5):
        write_one(tmp_path / f"scheduler-2026120{n + 1}T120000Z")
    write_one(tmp_path / f"scheduler-20261206T120000Z{PARTIAL_SUFFIX}")
    write_one(tmp_path / f"scheduler-20261130T120000Z{REMOVING_SUFFIX}")
    plan = BackupPlan(tmp_path, "scheduler", interval_s=3650 * DAY, keep=2)  # none due: only the tidying runs
    backups = PeriodicBackups(plan, write_one, "test state", check_s=3600.0)
    backups.start()
    try:
        wait_for(lambda: len(list(tmp_path.iterdir())) == 2, "the start never tidied the directory", timeout_s=30)
    finally:
        backups.stop()
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "scheduler-20261204T120000Z",
        "scheduler-20261205T120000Z",
    ]


def test_an_old_backup_that_cannot_be_removed_does_not_fail_the_new_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Pruning used to delete with errors ignored; renamed first, a rename that fails (a permission, a busy mount)
    must not turn a backup that was taken into a failure, nor stop the next ones."""
    plan = BackupPlan(tmp_path, "scheduler", interval_s=DAY, keep=1)
    plan.take(write_one, now=NOON)
    real_rename = Path.rename

    def refused(self: Path, target: Path) -> Path:
        if str(target).endswith(REMOVING_SUFFIX):
            raise PermissionError(13, "Permission denied")
        return real_rename(self, target)

    monkeypatch.setattr(Path, "rename", refused)
    taken = plan.take(write_one, now=NOON + DAY)
    assert taken.is_dir() and len(plan.complete()) == 2
    assert "could not remove old backup" in caplog.text
    plan.tidy()  # the start of a backup thread: the same warning, no exception
    monkeypatch.undo()
    plan.take(write_one, now=NOON + 2 * DAY)
    assert [path.name for _, path in plan.complete()] == ["scheduler-20261203T120000Z"]


def test_a_backup_named_in_the_future_by_a_clock_set_ahead_neither_stops_backups_nor_outlives_newer_ones(
    tmp_path: Path,
) -> None:
    """A clock that was a year ahead when a backup was taken, and was then set right, leaves a backup whose name is
    in the future. It was taken before now (when, nobody knows): it must not make every backup look a year from due
    (none taken, and an age of 0 that no stale-backup alert sees), and the prune must not keep it over the newer
    backups taken since, as the newest."""
    plan = BackupPlan(tmp_path, "scheduler", interval_s=DAY, keep=2)
    backups = PeriodicBackups(plan, write_one, "test state")
    backups.started_at = NOON - 600
    ahead = plan.take(write_one, now=NOON + 365 * DAY)
    assert plan.due(NOON)

    def age(now: float) -> float:
        family = backups.metric_families("icecrawler_scheduler", now=now)[0]
        return float(family.samples[0].value)

    assert age(NOON) == 600  # as if there were none: the age counts from the start
    first = plan.take(write_one, now=NOON)
    assert not plan.due(NOON + 60) and age(NOON + 60) == 60
    assert [p for _, p in plan.complete()] == [ahead, first]  # the future-named one is the oldest
    second = plan.take(write_one, now=NOON + DAY)
    assert sorted(tmp_path.iterdir()) == [first, second]  # keep=2: the future-named one went first


def _backups_settings(directory: Path) -> Settings:
    return Settings().copy_with(scheduler__backup_dir=str(directory), scheduler__backup_interval_s=1.0)


def test_a_backup_name_lock_that_cannot_be_made_at_start_is_a_warning_and_each_backup_tries_it_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A backup folder not yet made on a full file system: the lock file on the backups' name could not be made, and
    the daemon refused to start, where it used to start and serve while its backups failed and alerted. Only another
    daemon holding the lock refuses the start now; else one warning, and each backup takes the lock first, failing
    (counted, logged) until it can."""
    caplog.set_level(logging.INFO, logger="icecrawler.backups")
    directory = tmp_path / "backups"
    lock = backups_lock(_backups_settings(directory), "scheduler", "scheduler")
    assert lock is not None
    full = [True]
    real_open = os.open

    def open_on_a_full_disk(path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        if full and Path(path) == lock.path:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_open(path, flags, mode, dir_fd=dir_fd)

    monkeypatch.setattr(os, "open", open_on_a_full_disk)
    assert lock.acquire() is lock and not lock.held
    assert f"cannot create the lock file {lock.path}: No space left on device; starting without it" in caplog.text
    plan = BackupPlan(directory, "scheduler", interval_s=1.0, keep=2)
    backups = PeriodicBackups(plan, write_one, "test state", check_s=0.05, retry_s=0.05, lock=lock)
    backups.start()
    try:
        wait_for(lambda: backups.failed >= 2, "a backup without the lock did not fail", timeout_s=30)
        assert backups.taken == 0 and plan.complete() == []
        full.clear()  # room again
        wait_for(lambda: backups.taken >= 1, "no backup once the lock could be made", timeout_s=30)
        assert lock.held
    finally:
        backups.stop()
        lock.release()
    assert "test state backup failed" in caplog.text and "Traceback" not in caplog.text


def _two_daemons_one_name(directory: Path) -> tuple[BackupNameLock, BackupNameLock]:
    """The backup-name locks of two daemons backing up as "scheduler" into ``directory``: the first one held."""
    settings = _backups_settings(directory)
    held = backups_lock(settings, "scheduler", "scheduler")
    other = backups_lock(settings, "scheduler", "scheduler")
    assert held is not None and other is not None
    held.acquire()
    return held, other


def test_a_backup_name_lock_held_by_another_daemon_refuses_the_start_and_fails_a_backup_that_finds_it_taken(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Another daemon holding the backups' name is the one refusal at start. One that took it while this daemon ran
    without it (it could not be made at start) fails this daemon's backups, naming the holder: nothing of the
    other's is tidied or pruned."""
    directory = tmp_path / "backups"
    other, mine = _two_daemons_one_name(directory)
    write_one(directory / f"scheduler-20261201T120000Z{PARTIAL_SUFFIX}")  # the other's backup under way
    plan = BackupPlan(directory, "scheduler", interval_s=1.0, keep=2)
    backups = PeriodicBackups(plan, write_one, "test state", check_s=0.05, retry_s=0.05, lock=mine)
    try:
        with pytest.raises(LockHeld, match=f"{directory} is in use by scheduler pid {os.getpid()}"):
            mine.acquire()
        backups.start()
        wait_for(lambda: backups.failed >= 1, "a backup under another daemon's lock did not fail", timeout_s=30)
    finally:
        backups.stop()
        other.release()
    assert backups.taken == 0 and not mine.held
    assert sorted(path.name for path in directory.iterdir()) == [
        ".scheduler.lock",
        "scheduler-20261201T120000Z.partial",
    ]
    assert "test state backup failed" in caplog.text and "in use by scheduler pid" in caplog.text


def test_a_backup_name_lock_on_a_file_system_without_locks_is_a_warning_and_the_backups_go_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """flock failing with ENOLCK (an NFS mount without its lock service) was taken for another daemon holding the
    lock, and refused the start naming "another process"; then every backup failed on it. Backups to such a mount
    worked before the lock existed, and go on: nobody can hold a lock there."""
    directory = tmp_path / "backups"
    lock = backups_lock(_backups_settings(directory), "scheduler", "scheduler")
    assert lock is not None

    def no_locks(fd: int, operation: int) -> None:
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(fcntl, "flock", no_locks)
    assert not lock.acquire().held and lock.ours
    assert "does not support file locks" in caplog.text and "backing up without it" in caplog.text
    assert "in use by" not in caplog.text
    lock.take()  # what a backup does first: no error, nothing held
    backups = PeriodicBackups(
        BackupPlan(directory, "scheduler", interval_s=3600.0, keep=2), write_one, "test state", lock=lock
    )
    backups.start()
    try:
        wait_for(lambda: backups.taken == 1, "no backup was taken on a file system without locks", 30, 0.02)
    finally:
        backups.stop()
    assert backups.failed == 0


def test_a_daemon_without_its_name_lock_is_not_put_off_by_the_backups_of_the_daemon_holding_it(
    tmp_path: Path,
) -> None:
    """A daemon that could not make its lock file at start (a full disk) runs without the name's lock. A second daemon
    with the same name, started later, took the lock and backed up; the first then found that fresh backup of its name
    and was never due again: no backup, no failure counted, and its backup age was the other's, so no alert fired. It
    takes the lock before it asks whether a backup is due, and fails (counted) while another daemon holds it; its
    backup age is its own."""
    directory = tmp_path / "backups"
    holder, mine = _two_daemons_one_name(directory)
    plan = BackupPlan(directory, "scheduler", interval_s=3600.0, keep=2)
    plan.take(write_one)  # the holder's fresh backup
    backups = PeriodicBackups(plan, write_one, "test state", check_s=0.05, retry_s=0.05, lock=mine)
    backups.start()
    try:
        wait_for(lambda: backups.failed >= 2, "a daemon without its name's lock was silently put off", timeout_s=30)
    finally:
        backups.stop()
        holder.release()
    assert backups.taken == 0
    families = {family.name: family for family in backups.metric_families("test", now=backups.started_at + 7200)}
    assert families["test_backup_age_seconds"].samples[0].value == 7200.0


def test_a_lock_error_that_is_not_a_file_system_without_locks_is_not_taken_for_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only ENOLCK and EOPNOTSUPP say a file system takes no locks; a backup lock that met another error (EIO) went
    on without the lock for the rest of the daemon's life."""
    lock = backups_lock(_backups_settings(tmp_path / "backups"), "scheduler", "scheduler")
    assert lock is not None

    def failing(fd: int, operation: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(fcntl, "flock", failing)
    assert not lock.acquire().held and not lock.ours
    with pytest.raises(ServiceError, match="Input/output error") as refused:
        lock.take()
    assert not isinstance(refused.value, LocksUnsupported) and not lock.ours


def test_an_empty_backup_name_locks_the_name_the_backups_get(tmp_path: Path) -> None:
    """Backups with an empty ``backup_name`` are named after the role (``start_backups``); the lock was on
    ``..lock``, a name no daemon with the role's name would meet."""
    lock = backups_lock(_backups_settings(tmp_path / "backups"), "scheduler", "")
    assert lock is not None and lock.path.name == ".scheduler.lock"
