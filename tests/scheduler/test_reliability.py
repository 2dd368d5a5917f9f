"""The scheduler's database under abuse: one daemon per database directory (and no stale lock after kill -9),
damaged or incomplete Berkeley DB environments refused at start (or salvaged with --recover), and a full disk:
a declared error to the caller, the daemon keeps running and serves again once there is space, nothing
acknowledged is lost."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from icecrawler import rpc
from icecrawler.datalock import DataLock
from icecrawler.errors import ServiceError, StorageUnavailableError
from icecrawler.models import TaskKind
from scheduler_server.core import SchedulerCore
from scheduler_server.integrity import SALVAGE_JOURNAL, open_checked
from scheduler_server.server import Maintenance
from scheduler_server.store import BdbQueueStore
from tests.helpers import killed_midway, refused_as_half_rebuilt, refused_start, salvage_killed_at
from tests.scheduler.conftest import ManualClocks, make_settings
from tests.scheduler.daemon import REPO, scheduler_daemon, scheduler_proxy
from tests.tmpfs import fill, small_tmpfs

pytestmark = [pytest.mark.bdb]


def start_second(db_dir: Path, tmp: Path, *extra: str) -> str:
    """``icecrawler scheduler`` on ``db_dir`` with ``extra`` options, which must refuse to start: its one error line
    (``refused_start``)."""
    return refused_start("scheduler", tmp, f"--set=scheduler.db_dir={db_dir}", *extra)


def seeded_db(path: Path, count: int) -> None:
    """A queue database in ``path`` holding ``count`` tasks, closed cleanly (as a stopped daemon leaves it)."""
    store = open_checked(path)
    core = SchedulerCore.from_settings(make_settings(), store, ManualClocks())
    for start in range(0, count, 50):
        core.add([f"jd:{100 + n}" for n in range(start, min(count, start + 50))], TaskKind.ProductReviews)
    core.close()


def task_count(path: Path) -> int:
    store = BdbQueueStore(path)
    try:
        with store.transaction() as txn:
            return txn.count("tasks")
    finally:
        store.close()


# --- one database, one daemon ----------------------------------------------------------------------------------


def test_a_data_lock_is_exclusive_names_its_holder_and_is_free_again_once_released(tmp_path: Path) -> None:
    first = DataLock(tmp_path / "scheduler.lock", "scheduler").acquire()
    with pytest.raises(ServiceError, match=r"in use by scheduler pid \d+.*one data directory serves one scheduler"):
        DataLock(tmp_path / "scheduler.lock", "scheduler").acquire()
    first.release()
    DataLock(tmp_path / "scheduler.lock", "scheduler").acquire().release()


@pytest.mark.ice
def test_a_second_scheduler_on_the_same_db_dir_refuses_and_a_killed_ones_lock_is_not_stale(tmp_path: Path) -> None:
    with scheduler_daemon(tmp_path) as daemon:
        second = start_second(daemon.db_dir, tmp_path)
        assert f"{daemon.db_dir} is in use by scheduler pid {daemon.process.pid if daemon.process else 0}" in second
        with scheduler_proxy(daemon) as prx:  # the first one is unharmed
            assert prx.addUsers(["jd:1"], rpc.crawler().TaskKind.ProductReviews) == 1
        daemon.kill9()
        daemon.start()  # the kernel dropped the dead daemon's lock: no stale lock file blocks the restart
        with scheduler_proxy(daemon) as prx:
            assert prx.stats().tasks == 1


# --- damaged databases ------------------------------------------------------------------------------------------


def damage_logs(path: Path) -> None:
    for log in path.glob("log.*"):
        log.unlink()


def damage_table(path: Path) -> None:
    (path / "pending.db").unlink()


def damage_pages(path: Path) -> None:
    data = bytearray((path / "tasks.db").read_bytes())
    middle = len(data) // 2
    data[middle : middle + 8192] = b"\xa5" * 8192  # two pages in the middle of the file
    (path / "tasks.db").write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (damage_logs, "its transaction logs (log.*) are missing"),
        (damage_table, "pending.db is missing"),
        (damage_pages, "tasks.db fails verification"),
    ],
)
def test_a_damaged_queue_database_refuses_to_start_and_recover_salvages_it(
    tmp_path: Path, damage: Any, message: str
) -> None:
    path = tmp_path / "db"
    seeded_db(path, 300)
    damage(path)
    with pytest.raises(ServiceError) as refused:
        open_checked(path)
    text = str(refused.value)
    assert message in text and "--recover" in text and "\n" not in text
    store = open_checked(path, recover=True)
    core = SchedulerCore.from_settings(make_settings(), store, ManualClocks())
    try:
        counts = core.stats()
        assert counts["tasks"] == counts["pending"] > 0 and counts["inflight"] == 0
        if damage is not damage_pages:  # intact table files: every task is salvaged
            assert counts["tasks"] == 300
        assert len(core.lease("w", 10)) == 10  # the salvaged queue serves
    finally:
        core.close()
    assert list(tmp_path.glob("db.damaged-*")), "the damaged directory is kept aside, never deleted"
    open_checked(path).close()  # and the new one passes the checks from now on


@pytest.mark.parametrize("point", ["moving", "copying"])
def test_a_recover_killed_midway_is_refused_until_the_next_recover_finishes_it(tmp_path: Path, point: str) -> None:
    """kill -9 while --recover moves the damaged files aside, or while it copies them into the new database: the
    next start refuses the half-rebuilt directory in one line, and the next --recover finishes the job, every task
    kept (the table files were intact; only the logs were gone). Before, a stop while copying left a new database
    with part of the tasks and no sign of it, which the next start served as the whole queue."""
    path = tmp_path / "db"
    seeded_db(path, 300)
    damage_logs(path)
    script = salvage_killed_at(
        point, "scheduler_server.integrity", "_copy_table", "integrity.open_checked(sys.argv[1], recover=True)"
    )
    killed_midway(script, str(path), str(REPO))
    refused_as_half_rebuilt(lambda: open_checked(path))
    open_checked(path, recover=True).close()
    assert task_count(path) == 300
    store = open_checked(path)  # a finished rebuild passes the checks from now on, and serves every task
    core = SchedulerCore.from_settings(make_settings(), store, ManualClocks())
    try:
        assert core.stats()["pending"] == 300
    finally:
        core.close()
    aside = list(tmp_path.glob("db.damaged-*"))
    assert len(aside) == 1 and (aside[0] / "tasks.db").exists() and (aside[0] / "scheduler.created").exists()
    assert not (path / SALVAGE_JOURNAL).exists()
    (path / SALVAGE_JOURNAL).write_text("{half")  # damage that no salvage writes: named, never taken as done
    with pytest.raises(ServiceError, match=r"unreadable scheduler\.salvaging"):
        open_checked(path, recover=True)


def test_a_clean_database_and_one_left_by_a_crash_both_pass_the_checks(tmp_path: Path) -> None:
    path = tmp_path / "db"
    seeded_db(path, 20)
    open_checked(path).close()
    crashed = subprocess.run(
        [
            sys.executable,
            "-c",
            (
                "import os, sys; sys.path.insert(0, sys.argv[2]);"
                "from scheduler_server.integrity import open_checked;"
                "store = open_checked(sys.argv[1]);"
                "cm = store.transaction(); txn = cm.__enter__(); txn.put('tasks', b'x', b'y');"
                "os._exit(9)"
            ),
            str(path),
            str(REPO),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert crashed.returncode == 9, crashed.stderr
    assert task_count(path) == 20  # the uncommitted put was rolled back by recovery
    open_checked(path).close()


@pytest.mark.ice
def test_the_daemon_refuses_a_database_without_logs_in_one_line(tmp_path: Path) -> None:
    seeded_db(tmp_path / "db", 5)
    damage_logs(tmp_path / "db")
    refused = start_second(tmp_path / "db", tmp_path)
    assert "logs (log.*) are missing" in refused and "--recover" in refused


# --- a full disk ----------------------------------------------------------------------------------------------------


@pytest.mark.ice
def test_a_full_disk_is_a_declared_error_the_daemon_survives_and_serves_again(tmp_path: Path) -> None:
    C = rpc.crawler()
    acknowledged: list[str] = []
    with (
        small_tmpfs(tmp_path / "fs", 48) as fs,
        scheduler_daemon(tmp_path, scheduler__db_dir=fs / "db") as daemon,
        scheduler_proxy(daemon) as prx,
    ):

        def add() -> None:
            ids = [f"jd:{len(acknowledged) + n + 1}" for n in range(500)]
            assert prx.addUsers(ids, C.TaskKind.ProductReviews) == 500
            acknowledged.extend(ids)

        add()
        filler = fill(fs)
        refusal = None
        for _ in range(400):  # the log file was allocated ahead: the error comes when the log must grow
            try:
                add()
            except C.StorageUnavailable as exc:
                refusal = exc
                break
        assert refusal is not None, "the disk never filled up"
        assert "No space left on device" in refusal.message and "nothing was changed" in refusal.message
        assert daemon.process is not None and daemon.process.alive()
        assert prx.stats().tasks == len(acknowledged)  # still answering, nothing half-applied
        filler.unlink()
        add()  # space is back: it serves again
        assert prx.stats().tasks == len(acknowledged)
        daemon.kill9()
        daemon.start()
        assert prx.stats().tasks == len(acknowledged)  # every acknowledged add survived the crash
        assert "Traceback" not in (daemon.process.log_tail(400) if daemon.process else "")


def test_maintenance_on_a_full_disk_warns_once_a_minute_and_says_when_it_runs_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Maintenance runs every second; on a full disk each round fails the same way. One WARNING a minute says so
    (with how many rounds failed since), not one a second for as long as the disk is full, and one line says when
    it runs again."""
    with small_tmpfs(tmp_path / "fs", 48) as fs:
        store = open_checked(fs / "db")
        core = SchedulerCore.from_settings(make_settings(), store, ManualClocks())
        try:
            filler = fill(fs)
            with pytest.raises(StorageUnavailableError):
                for start in range(0, 200_000, 50):  # the log file was allocated ahead: it fails when it must grow
                    core.add([f"jd:{n}" for n in range(start + 1, start + 51)], TaskKind.ProductReviews)
            maintenance = Maintenance(core, interval_s=1.0, checkpoint_s=0.0)
            with caplog.at_level(logging.INFO, logger="scheduler_server.server"):
                for _ in range(10):
                    maintenance.tick()
                skipped = [r for r in caplog.records if "maintenance skipped" in r.getMessage()]
                assert len(skipped) == 1 and skipped[0].levelno == logging.WARNING
                assert "No space left on device" in skipped[0].getMessage()
                filler.unlink()
                maintenance.tick()
            assert "scheduler maintenance runs again" in caplog.text
        finally:
            core.close()


@pytest.mark.ice
def test_leases_and_reports_on_a_full_disk_are_refused_whole_and_a_refused_report_is_taken_later(
    tmp_path: Path,
) -> None:
    """getUsers and putUsers on a full disk: each refused call is a declared error that changed nothing (no task
    leased to nobody, no report half applied), and a client that keeps a refused report and sends it again with the
    same lease once there is room has it taken; every acknowledged report survives a kill -9."""
    C = rpc.crawler()
    settings = {"scheduler__lease_s": 3600, "scheduler__policy": "fixed", "scheduler__initial_period_s": 3600}
    with (
        small_tmpfs(tmp_path / "fs", 48) as fs,
        scheduler_daemon(tmp_path, scheduler__db_dir=fs / "db", **settings) as daemon,
        scheduler_proxy(daemon) as prx,
    ):
        for start in range(0, 6000, 200):
            prx.addUsers([f"jd:{n}" for n in range(start + 1, start + 201)], C.TaskKind.ProductReviews)
        held = [task for _ in range(15) for task in prx.getUsers("w1", 200)]  # 3000 leased, 3000 pending
        filler = fill(fs)
        reported: list[Any] = []
        refused: list[Any] = []
        for start in range(0, len(held), 20):
            reports = [
                C.Report(taskId=t.id, leaseToken=t.leaseToken, newItems=1, windowItems=9, cursor="c" * 2000)
                for t in held[start : start + 20]
            ]
            try:
                prx.putUsers(reports)
                reported += reports
            except C.StorageUnavailable as exc:
                assert "No space left on device" in exc.message and "nothing was changed" in exc.message
                refused += reports
                break
        assert refused, "the disk never filled up"
        with pytest.raises(C.StorageUnavailable, match="nothing was changed"):
            prx.getUsers("w2", 20)
        stats = prx.stats()
        assert (stats.inflight, stats.done) == (len(held) - len(reported), len(reported))  # nothing half applied
        assert daemon.process is not None and daemon.process.alive()
        filler.unlink()
        prx.putUsers(refused)  # kept by the client and sent again with the same lease: taken now
        assert len(prx.getUsers("w2", 20)) == 20  # leasing again
        daemon.kill9()
        daemon.start()
        stats = prx.stats()
        assert (stats.tasks, stats.done, stats.inflight) == (
            6000,
            len(reported) + len(refused),
            len(held) - len(reported) - len(refused) + 20,
        )


@pytest.mark.ice
@pytest.mark.parametrize("recover", [False, True])
@pytest.mark.parametrize("state", ["new", "crashed"])
def test_a_database_on_a_full_disk_at_start_is_refused_as_a_full_disk_not_as_damage(
    tmp_path: Path, state: str, recover: bool
) -> None:
    """A first start on a full disk cannot write the first log file, and a database left by a crash cannot be
    recovered without writing: the refusal says the disk is full, not that the database is damaged (whose cure,
    --recover, needs room for a second copy), and once there is space the same directory starts with every task."""
    C = rpc.crawler()
    ids = [f"jd:{n}" for n in range(1, 201)] if state == "crashed" else []
    with small_tmpfs(tmp_path / "fs", 48) as fs:
        if ids:
            with (
                scheduler_daemon(tmp_path, scheduler__db_dir=fs / "db") as daemon,
                scheduler_proxy(daemon) as prx,
            ):
                assert prx.addUsers(ids, C.TaskKind.ProductReviews) == len(ids)
                daemon.kill9()
        filler = fill(fs)
        refused = start_second(fs / "db", tmp_path, *(["--recover"] if recover else []))
        assert "is full" in refused and "Free some space" in refused and "is damaged" not in refused, refused
        assert not list(fs.glob("db.damaged-*"))  # nothing moved aside
        filler.unlink()
        with scheduler_daemon(tmp_path, scheduler__db_dir=fs / "db") as daemon, scheduler_proxy(daemon) as prx:
            assert prx.stats().tasks == len(ids)
            assert prx.addUsers(["jd:1", "jd:999"], C.TaskKind.ProductReviews) == (1 if ids else 2)


def test_recover_keeps_the_lock_file_where_the_next_daemon_looks(tmp_path: Path) -> None:
    path = tmp_path / "db"
    seeded_db(path, 10)
    lock = DataLock(path / "scheduler.lock", "scheduler").acquire()
    try:
        damage_logs(path)
        open_checked(path, recover=True).close()
        with pytest.raises(ServiceError, match="in use by scheduler"):  # still held, in the same place
            DataLock(path / "scheduler.lock", "scheduler").acquire()
    finally:
        lock.release()
