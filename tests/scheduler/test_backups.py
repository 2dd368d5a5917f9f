"""Hot backups of the queue database (``scheduler.backup_*``): taken by the running daemon while clients lease and
report, rotated, and each one a directory a scheduler starts on with every task, consistent. Real daemon, real
Berkeley DB, real Ice."""

from __future__ import annotations

import re
import shutil
import urllib.request
from pathlib import Path

import pytest

from icecrawler import rpc
from icecrawler.backups import BackupPlan
from icecrawler.errors import ServiceError, StorageUnavailableError
from icecrawler.processes import ProcessGroup, free_port
from scheduler_server.integrity import MARKER, backup_checked, open_checked
from scheduler_server.store import BdbQueueStore, MemoryQueueStore
from tests.helpers import disk_space, refused_start, wait_for
from tests.scheduler.daemon import CHURN_SETTINGS, SchedulerDaemon, audit, scheduler_daemon, scheduler_proxy
from tests.tmpfs import fill, fill_inodes, small_tmpfs

pytestmark = [pytest.mark.ice, pytest.mark.bdb, pytest.mark.slow]

C = rpc.crawler()
SEEDS = 60


def test_the_daemon_backs_up_while_clients_work_and_a_backup_is_a_database_to_start_on(tmp_path: Path) -> None:
    backup_dir = tmp_path / "backups"
    seeded = {f"user:weibo_pc:{n}" for n in range(SEEDS)}
    metrics_port = free_port()
    with scheduler_daemon(
        tmp_path,
        **CHURN_SETTINGS,
        scheduler__backup_dir=backup_dir,
        scheduler__backup_interval_s=1,
        scheduler__backup_keep=2,
        metrics__scheduler__port=metrics_port,
        metrics__scheduler__port_span=1,
    ) as daemon:
        with scheduler_proxy(daemon) as prx:
            assert prx.addUsers([i.split(":", 1)[1] for i in sorted(seeded)], C.TaskKind.WeiboUser) == SEEDS
        client = daemon.client("churn", "churn", "--name", "c0", "--batch", "5", "--seconds", "300")
        plan = BackupPlan(backup_dir, "scheduler", interval_s=1, keep=2)
        wait_for(lambda: len(plan.complete()) == 2, "the daemon never took two backups", timeout_s=60)
        first = plan.complete()[0][1]
        wait_for(lambda: not first.exists(), "old backups were never rotated out", timeout_s=60)
        with scheduler_proxy(daemon) as prx:
            done_before_kill = prx.stats().done
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as answer:
            metrics = answer.read().decode()
        assert client.alive()
        daemon.kill9()
        log = daemon.process.log_path.read_text() if daemon.process else ""
    assert done_before_kill > SEEDS, "the clients were not working while the backups were taken"
    assert "scheduler database backed up to" in log and "Traceback" not in log, log[-3000:]
    assert len(plan.complete()) <= 2
    samples = [line.split() for line in metrics.splitlines() if line.startswith("icecrawler_scheduler_backup")]
    shown = {name: float(value) for name, value in samples}
    assert shown["icecrawler_scheduler_backups_total"] >= 3  # two kept, at least one rotated out
    assert shown["icecrawler_scheduler_backup_failures_total"] == 0
    assert shown["icecrawler_scheduler_backup_interval_seconds"] == 1
    assert shown["icecrawler_scheduler_backup_age_seconds"] >= 0
    disk = disk_space(metrics, "icecrawler_scheduler")
    assert set(disk) == {"db", "backup"} and all(0 < free <= size for free, size in disk.values()), disk

    newest = plan.complete()[-1][1]
    assert (newest / MARKER).exists() and list(newest.glob("log.*")), sorted(p.name for p in newest.iterdir())
    counts, problems, ids = audit(newest)
    assert problems == [] and ids == seeded, problems[:5]
    assert counts["pending"] + counts["inflight"] == SEEDS

    # Restore: a copy of the newest backup as a new scheduler's database directory.
    restored = tmp_path / "restored"
    shutil.copytree(newest, restored / "db")
    with ProcessGroup(restored / "logs") as group:
        again = SchedulerDaemon(group, restored, {"scheduler.policy": "fixed", "scheduler.lease_s": "1"})
        again.start()
        with scheduler_proxy(again) as prx:
            wait_for(lambda: prx.stats().inflight == 0, "the backup's leases never expired", timeout_s=30)
            stats = prx.stats()
            leased = prx.getUsers("restore-check", SEEDS)
        assert stats.tasks == SEEDS and stats.pending == SEEDS
        assert {task.id for task in leased} <= seeded and len(leased) > 0
        assert again.stop() == 0


def test_a_backup_taken_mid_write_holds_every_committed_transaction(tmp_path: Path) -> None:
    store = BdbQueueStore(tmp_path / "db")
    try:
        with store.transaction() as txn:
            for n in range(2000):
                txn.put("tasks", f"t{n:05d}".encode(), b"x" * 200)
        store.backup(tmp_path / "copy")
        with store.transaction() as txn:
            txn.put("tasks", b"after-the-backup", b"y")
        with pytest.raises(StorageUnavailableError, match="File exists"):
            store.backup(tmp_path / "copy")  # never over an existing backup
    finally:
        store.close()
    copy = BdbQueueStore(tmp_path / "copy")
    try:
        with copy.transaction() as txn:
            keys = [key for key, _ in txn.scan("tasks", limit=10_000)]
    finally:
        copy.close()
    assert len(keys) == 2000 and b"after-the-backup" not in keys
    # The copy holds the refreshed logins too: the scheduler's user alone reads its tables and logs.
    files = [*(tmp_path / "copy").glob("*.db"), *(tmp_path / "copy").glob("log.*")]
    assert files and {file.name: file.stat().st_mode & 0o077 for file in files} == {file.name: 0 for file in files}


def test_the_in_memory_store_says_it_has_nothing_to_back_up(tmp_path: Path) -> None:
    with pytest.raises(ServiceError, match="no files to back up"):
        MemoryQueueStore().backup(tmp_path / "copy")
    assert not (tmp_path / "copy").exists()


def test_a_backup_that_fails_its_check_is_refused_and_a_checked_one_opens_like_the_original(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_checked(tmp_path / "db")
    try:
        with store.transaction() as txn:
            txn.put("tasks", b"t1", b"x")
        backup_checked(store, tmp_path / "good")
        real_backup = store.backup

        def loses_its_logs(target: Path) -> None:
            real_backup(target)
            for log_file in target.glob("log.*"):
                log_file.unlink()

        monkeypatch.setattr(store, "backup", loses_its_logs)
        with pytest.raises(ServiceError, match="transaction logs"):
            backup_checked(store, tmp_path / "bad")
    finally:
        store.close()
    open_checked(tmp_path / "good").close()  # what a restored scheduler runs first


def test_a_full_backup_disk_is_named_in_the_log_and_backups_resume_once_there_is_room(tmp_path: Path) -> None:
    """Berkeley DB's message names only the database being copied; the ERROR line must name the backup directory
    and its room, so that nobody goes looking on the database's own disk. The daemon serves on, and takes the next
    backup once there is room."""
    with (
        small_tmpfs(tmp_path / "backups", 48) as backup_dir,
        scheduler_daemon(
            tmp_path, scheduler__backup_dir=backup_dir, scheduler__backup_interval_s=1, scheduler__backup_keep=1
        ) as daemon,
        scheduler_proxy(daemon) as prx,
    ):
        assert daemon.process is not None
        log = daemon.process.log_tail
        wait_for(lambda: len(BackupPlan(backup_dir, "scheduler", 1, 1).complete()) == 1, "no first backup")
        filler = fill(backup_dir)
        wait_for(lambda: "backup failed" in log(50), lambda: f"no failed backup on the full disk:\n{log()}")
        failed = next(line for line in log(50).splitlines() if "backup failed" in line)
        room = re.search(rf"\(backup directory {re.escape(str(backup_dir))}: (\d+) bytes free there", failed)
        assert room is not None, failed
        assert prx.addUsers(["jd:1"], C.TaskKind.ProductReviews) == 1  # serves on
        newest = BackupPlan(backup_dir, "scheduler", 1, 1).complete()[-1]
        # Whatever the failed copy had written is gone again: the room left is less than one more copy needs.
        assert int(room[1]) < sum(path.stat().st_size for path in newest[1].rglob("*") if path.is_file()), failed
        filler.unlink()
        wait_for(
            lambda: BackupPlan(backup_dir, "scheduler", 1, 1).complete()[-1] != newest,
            lambda: f"no backup once there was room:\n{log()}",
        )
        assert not list(backup_dir.glob("*.partial"))


def test_a_backup_folder_not_yet_made_on_a_full_disk_does_not_stop_the_start(tmp_path: Path) -> None:
    """The lock file on the backups' name could not be made in a backup folder not yet made on a full disk, and the
    scheduler refused to start; before that lock it started and served while its backups failed and alerted, as the
    docs say it does. It warns, serves, fails its backups while the disk is full, and takes the lock and a backup
    once there is room."""
    with small_tmpfs(tmp_path / "mnt", 48, inodes=64) as mount:
        # Room for the start-up check's probe and the backup folder (one inode, used and freed, then used): none for
        # the lock file in it, as on a disk that makes an empty file but no folder more.
        filler, inode_fillers = fill(mount), fill_inodes(mount, leave=1)
        backup_dir = mount / "backups"
        with (
            scheduler_daemon(tmp_path, scheduler__backup_dir=backup_dir, scheduler__backup_interval_s=1) as daemon,
            scheduler_proxy(daemon) as prx,
        ):
            assert daemon.process is not None
            log = daemon.process.log_tail
            assert prx.addUsers(["jd:1"], C.TaskKind.ProductReviews) == 1  # serves
            wait_for(lambda: "backup failed" in log(50), lambda: f"no failed backup on the full disk:\n{log()}")
            assert f"cannot create the lock file {backup_dir}/.scheduler.lock" in log(), log()
            filler.unlink()
            shutil.rmtree(inode_fillers)
            wait_for(
                lambda: len(BackupPlan(backup_dir, "scheduler", 1, 7).complete()) >= 1,
                lambda: f"no backup once there was room:\n{log()}",
            )
            assert (backup_dir / ".scheduler.lock").exists()


@pytest.mark.parametrize("how", ["deleted", "emptied"])
def test_a_database_gone_while_its_backups_are_there_is_refused_not_begun_anew(tmp_path: Path, how: str) -> None:
    """The database directory deleted (or a disk that did not mount, leaving an empty directory) while backups of it
    are on disk: a new, empty database would serve no tasks and, one backup a day, replace every good backup within
    backup_keep days. The daemon refuses in one line naming both; a restored backup starts; with the backups moved
    away a new database starts."""
    backup_dir, db_dir = tmp_path / "backups", tmp_path / "db"
    settings = {"scheduler__backup_dir": backup_dir, "scheduler__backup_interval_s": 3600}
    with scheduler_daemon(tmp_path) as daemon, scheduler_proxy(daemon) as prx:
        assert prx.addUsers(["jd:1", "jd:2"], C.TaskKind.ProductReviews) == 2
    with scheduler_daemon(tmp_path, **settings):  # backups on: the first one is taken at start
        wait_for(lambda: len(BackupPlan(backup_dir, "scheduler", 3600, 7).complete()) == 1, "no backup")
    shutil.rmtree(db_dir)
    if how == "emptied":
        db_dir.mkdir()
    refused = refused_start(
        "scheduler", tmp_path, f"--set=scheduler.db_dir={db_dir}", f"--set=scheduler.backup_dir={backup_dir}"
    )
    assert str(db_dir) in refused and str(backup_dir) in refused, refused
    assert not (db_dir / MARKER).exists()  # nothing begun there
    newest = BackupPlan(backup_dir, "scheduler", 3600, 7).complete()[-1][1]
    shutil.rmtree(db_dir, ignore_errors=True)
    shutil.copytree(newest, db_dir)  # the restore docs/DEPLOY.md describes
    with scheduler_daemon(tmp_path, **settings) as daemon, scheduler_proxy(daemon) as prx:
        assert prx.stats().tasks == 2
    shutil.rmtree(db_dir)
    backup_dir.rename(tmp_path / "old-backups")  # beginning anew on purpose
    with scheduler_daemon(tmp_path, **settings) as daemon, scheduler_proxy(daemon) as prx:
        assert prx.stats().tasks == 0


def test_a_second_scheduler_backing_up_under_the_same_name_into_the_same_folder_is_refused(tmp_path: Path) -> None:
    """Two schedulers (two crawls on one machine, one settings file) with their own databases but one backup_dir:
    each took the other's newest backup for its own (no backup due), deleted the other's copy under way as a
    leftover and pruned the other's backups. The second is refused at start in one line naming the folder and the
    holder, and starts once the first has stopped."""
    backup_dir = tmp_path / "backups"
    settings = {"scheduler__backup_dir": backup_dir, "scheduler__backup_interval_s": 3600}
    other = tmp_path / "other"
    other.mkdir()
    other_db = other / "db"
    with scheduler_daemon(other) as daemon, scheduler_proxy(daemon) as prx:  # its own crawl, before
        assert prx.addUsers(["jd:1"], C.TaskKind.ProductReviews) == 1
    with scheduler_daemon(tmp_path, **settings) as daemon:
        wait_for(lambda: len(BackupPlan(backup_dir, "scheduler", 3600, 7).complete()) == 1, "no backup")
        refused = refused_start(
            "scheduler", tmp_path, f"--set=scheduler.db_dir={other_db}", f"--set=scheduler.backup_dir={backup_dir}"
        )
        assert str(backup_dir) in refused and "scheduler pid" in refused, refused
        assert daemon.process is not None and daemon.process.alive()
    assert len(BackupPlan(backup_dir, "scheduler", 3600, 7).complete()) == 1
    with scheduler_daemon(other, **settings) as daemon, scheduler_proxy(daemon) as prx:
        assert prx.stats().tasks == 1
