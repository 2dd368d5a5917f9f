"""Backups of the storage server's own files (``storage.backup_*``): taken by the running server while records are
written, rotated, each file checked, and a backup restored into a new server holds every record acknowledged
before it was taken. Real server over Ice, real SQLite files."""

from __future__ import annotations

import itertools
import shutil
import sqlite3
import time
import urllib.request
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from icecrawler import rpc
from icecrawler.backups import BackupPlan
from icecrawler.errors import ServiceError
from icecrawler.processes import free_port
from storage_server.integrity import backup_files
from tests.helpers import disk_space, refused_start, wait_for
from tests.scheduler.daemon import REPO
from tests.storage.conftest import BIG_ID, StorageServerRunner, make_post

pytestmark = [pytest.mark.ice, pytest.mark.slow]

BATCH = 40


def post_ids(store: Path) -> set[int]:
    conn = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    try:
        return {int(row[0]) for row in conn.execute("SELECT id FROM weibo")}
    finally:
        conn.close()


def serves(directory: Path, client_comm: Any) -> tuple[int, int]:
    """(posts, spool depth) a storage server started on the files in ``directory`` reports; stopped after."""
    again = StorageServerRunner(directory, {})
    again.start()
    try:
        stats = again.proxy(client_comm).ice_invocationTimeout(30000).stats()
        return stats.posts, stats.spoolDepth
    finally:
        again.stop()


def test_the_server_backs_up_its_files_while_writes_go_on_and_a_backup_restores(
    tmp_path: Path, storage_server: Callable[..., StorageServerRunner], client_comm: Any
) -> None:
    backup_dir = tmp_path / "backups"
    metrics_port = free_port()
    server = storage_server(
        **{
            "storage.backup_dir": str(backup_dir),
            "storage.backup_interval_s": "1",
            "storage.backup_keep": "2",
            "metrics.storage.port": str(metrics_port),
            "metrics.storage.port_span": "1",
        }
    )
    proxy = server.proxy(client_comm).ice_invocationTimeout(30000)
    plan = BackupPlan(backup_dir, "storage", interval_s=1, keep=2)
    acked: list[int] = []
    deadline = time.monotonic() + 60
    while len(plan.complete()) < 2 or len(acked) < 20 * BATCH:  # bounded: 60 s
        assert time.monotonic() < deadline, "no two backups while writing"
        batch = [rpc.post_to_slice(make_post(BIG_ID - len(acked) - i, minute=i % 60)) for i in range(BATCH)]
        ack = proxy.writeWB(batch)
        assert ack.stored + ack.spooled == BATCH
        acked += [post.id for post in batch]
    # Every record is acknowledged now; a backup taken from here on must hold them all.
    last_ack = time.time()
    wait_for(lambda: any(taken >= last_ack for taken, _ in plan.complete()), "no backup after the last write", 60)
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as answer:
        metrics = answer.read().decode()
    server.stop()
    log = (server.tmp / f"storage-{server.starts}.log").read_text()

    backups = plan.complete()
    assert 1 <= len(backups) <= 2
    newest = backups[-1][1]
    assert sorted(p.name for p in newest.iterdir()) == ["spool.sqlite3", "store.sqlite3"]
    assert post_ids(newest / "store.sqlite3") == set(acked)
    samples = [line.split() for line in metrics.splitlines() if line.startswith("icecrawler_storage_backup")]
    shown = {name: float(value) for name, value in samples}
    assert shown["icecrawler_storage_backups_total"] >= 3 and shown["icecrawler_storage_backup_failures_total"] == 0
    disk = disk_space(metrics, "icecrawler_storage")
    assert set(disk) == {"spool", "store", "backup"} and all(0 < free <= size for free, size in disk.values()), disk
    assert "storage files backed up to" in log and "Traceback" not in log, log[-3000:]

    # Restore: the backup's files in place of a new server's, which then serves every record.
    restored = tmp_path / "restored"
    restored.mkdir()
    shutil.copy(newest / "store.sqlite3", restored / "store.sqlite3")
    (restored / "spool").mkdir()
    shutil.copy(newest / "spool.sqlite3", restored / "spool" / "spool.sqlite3")
    assert serves(restored, client_comm) == (len(acked), 0)


def test_a_copy_that_fails_its_check_is_not_a_backup(tmp_path: Path) -> None:
    good = tmp_path / "good.sqlite3"
    conn = sqlite3.connect(good)
    conn.execute("CREATE TABLE t (x)")
    conn.executemany("INSERT INTO t VALUES (?)", [(n,) for n in range(100)])
    conn.commit()
    conn.close()
    backup_files([good, tmp_path / "absent.sqlite3"], tmp_path / "copy")
    assert [p.name for p in (tmp_path / "copy").iterdir()] == ["good.sqlite3"]  # an absent file is skipped
    garbage = tmp_path / "garbage.sqlite3"
    garbage.write_bytes(b"not a database at all" * 100)
    with pytest.raises(ServiceError, match=r"garbage\.sqlite3"):
        backup_files([garbage], tmp_path / "copy2")


def move_aside(path: Path) -> None:
    """DEPLOY.md's restore step: the file *and* SQLite's ``-wal`` / ``-shm`` beside it go, or SQLite replays the
    killed server's newer log onto the restored file."""
    for part in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        if part.exists():
            part.rename(part.with_name(part.name + ".before-restore"))


def test_a_restore_after_kill_9_holds_what_the_backup_holds_and_no_more(
    tmp_path: Path, storage_server: Callable[..., StorageServerRunner], client_comm: Any
) -> None:
    """Restored by DEPLOY.md's steps after a kill -9, the store is the backup's: the records written after it are
    not there (a killed server leaves its write-ahead log beside the store; copied over without moving it aside,
    the backup came back with the newer records replayed onto it)."""
    backup_dir = tmp_path / "backups"
    server = storage_server(
        **{"storage.backup_dir": str(backup_dir), "storage.backup_interval_s": "1", "storage.backup_keep": "100"}
    )
    proxy = server.proxy(client_comm).ice_invocationTimeout(30000)
    plan = BackupPlan(backup_dir, "storage", interval_s=1, keep=100)
    before = [rpc.post_to_slice(make_post(BIG_ID - i, minute=i % 60)) for i in range(BATCH)]
    assert proxy.writeWB(before).stored == BATCH
    last_ack = time.time()
    wait_for(lambda: any(taken >= last_ack for taken, _ in plan.complete()), "no backup after the first batch", 60)
    backup = next(path for taken, path in plan.complete() if taken >= last_ack)
    after = [rpc.post_to_slice(make_post(BIG_ID - 1000 - i, minute=i % 60)) for i in range(BATCH)]
    assert proxy.writeWB(after).stored == BATCH
    server.kill9()
    store, spool = server.tmp / "store.sqlite3", server.tmp / "spool" / "spool.sqlite3"
    assert store.with_name("store.sqlite3-wal").exists(), "the killed server left no write-ahead log"

    held = post_ids(backup / "store.sqlite3")
    assert held == {post.id for post in before}  # taken before the second batch was written
    move_aside(store)
    move_aside(spool)
    shutil.copy(backup / "store.sqlite3", store)
    shutil.copy(backup / "spool.sqlite3", spool)
    assert serves(server.tmp, client_comm) == (len(held), 0)
    assert post_ids(store) == held


def descriptor_storage_settings(server_id: str, workdir: Path) -> dict[str, str]:
    """The ``--set`` options deploy/icegrid/icecrawler.xml gives a ``Storage`` instance, ``${server}`` filled in and
    its relative paths under ``workdir`` (the descriptor's ``pwd``)."""
    root = ElementTree.parse(REPO / "deploy" / "icegrid" / "icecrawler.xml").getroot()
    template = next(t for t in root.iter("server-template") if t.get("id") == "Storage")
    options = [str(option.text) for option in template.iter("option")]
    settings: dict[str, str] = {}
    for flag, value in itertools.pairwise(options):
        if flag == "--set":
            key, _, text = value.replace("${server}", server_id).partition("=")
            if key in ("storage.embedded.path", "storage.spool_dir"):
                text = str(workdir / text)
            if "${" not in text:  # the application's variables (insecure=...) are no part of this
                settings[key] = text
    return settings


def test_replicas_sharing_a_backup_dir_under_icegrid_each_keep_their_own_backups(
    tmp_path: Path, storage_server: Callable[..., StorageServerRunner]
) -> None:
    """Two ``Storage`` replicas of the IceGrid descriptor on one node read one icecrawler.toml, so one backup_dir.
    Before each server named its backups, both wrote ``storage-<time>``: each took the other's newest backup for
    its own (so skipped its own), pruned it, and deleted the other's copy under way (most backups failed)."""
    backup_dir, workdir = tmp_path / "backups", tmp_path / "work"
    ports: dict[str, int] = {}
    for server_id in ("Storage-1", "Storage-2"):
        ports[server_id] = free_port()
        storage_server(
            **descriptor_storage_settings(server_id, workdir),
            **{
                "storage.backup_dir": str(backup_dir),
                "storage.backup_interval_s": "1",
                "storage.backup_keep": "2",
                "metrics.storage.port": str(ports[server_id]),
                "metrics.storage.port_span": "1",
            },
        )

    def counter(server_id: str, name: str) -> float:
        with urllib.request.urlopen(f"http://127.0.0.1:{ports[server_id]}/metrics", timeout=10) as answer:
            text = answer.read().decode()
        return float(next(line.split()[-1] for line in text.splitlines() if line.startswith(name + " ")))

    def both_backed_up_twice() -> bool:
        return all(counter(server_id, "icecrawler_storage_backups_total") >= 2 for server_id in ports)

    wait_for(both_backed_up_twice, "each replica should have taken two backups", 60)
    for server_id in ports:
        assert counter(server_id, "icecrawler_storage_backup_failures_total") == 0, server_id
        own = BackupPlan(backup_dir, server_id, interval_s=1, keep=2).complete()
        assert own, f"no backup named after {server_id}: {sorted(p.name for p in backup_dir.iterdir())}"
        for _, backup in own:
            assert sorted(p.name for p in backup.iterdir()) == sorted([f"{server_id}.sqlite3", "spool.sqlite3"])


def test_a_store_gone_while_its_backups_are_there_is_refused_not_begun_anew(tmp_path: Path) -> None:
    """The store's directory deleted (or a disk that did not mount) while backups of the store are on disk: a new,
    empty store would answer every export with nothing, and its backups would replace the good ones within
    backup_keep intervals. The server refuses in one line naming both; with the store restored it serves its posts."""
    data, backup_dir = tmp_path / "data", tmp_path / "backups"
    files = {"storage.embedded.path": str(data / "store.sqlite3"), "storage.spool_dir": str(data / "spool")}
    backups = {"storage.backup_dir": str(backup_dir), "storage.backup_interval_s": "3600"}
    runner = StorageServerRunner(tmp_path / "first", files)
    runner.start()
    try:
        with rpc.communicator() as comm:
            assert runner.proxy(comm).writeWB([rpc.post_to_slice(make_post(n)) for n in range(1, 11)]).stored == 10
    finally:
        runner.stop()
    runner = StorageServerRunner(tmp_path / "second", {**files, **backups})  # the first backup is taken at start
    runner.start()
    try:
        wait_for(lambda: len(BackupPlan(backup_dir, "storage", 3600, 7).complete()) == 1, "no backup")
    finally:
        runner.stop()
    shutil.rmtree(data)
    sets = [arg for key, value in {**files, **backups}.items() for arg in ("--set", f"{key}={value}")]
    refused = refused_start("storage", tmp_path, *sets)
    assert str(data) in refused and str(backup_dir) in refused and "is missing" in refused, refused
    assert not (data / "store.sqlite3").exists()  # nothing begun there
    newest = BackupPlan(backup_dir, "storage", 3600, 7).complete()[-1][1]
    (data / "spool").mkdir(parents=True, exist_ok=True)
    shutil.copy(newest / "store.sqlite3", data / "store.sqlite3")  # the restore docs/DEPLOY.md describes
    shutil.copy(newest / "spool.sqlite3", data / "spool" / "spool.sqlite3")
    assert post_ids(data / "store.sqlite3") == set(range(1, 11))
    runner = StorageServerRunner(tmp_path / "restored", {**files, **backups})
    runner.start()
    try:
        with rpc.communicator() as comm:
            assert runner.proxy(comm).stats().posts == 10
    finally:
        runner.stop()


def test_a_second_storage_server_backing_up_under_the_same_name_into_the_same_folder_is_refused(
    tmp_path: Path,
) -> None:
    """Two storage servers with their own files but one backup_dir and backup_name (outside IceGrid, one settings
    file): each took the other's backups for its own, deleted the other's copy under way and pruned the other's.
    The second is refused at start in one line naming the folder, the holder and the settings to change."""
    backup_dir = tmp_path / "backups"
    backups = {"storage.backup_dir": str(backup_dir), "storage.backup_interval_s": "3600"}
    other = StorageServerRunner(tmp_path / "other", {})  # its own files, made before backups were set up
    other.start()
    other.stop()
    runner = StorageServerRunner(tmp_path / "first", backups)
    runner.start()
    try:
        wait_for(lambda: len(BackupPlan(backup_dir, "storage", 3600, 7).complete()) == 1, "no backup")
        sets = [arg for key, value in {**other.assignments, **backups}.items() for arg in ("--set", f"{key}={value}")]
        refused = refused_start("storage", tmp_path, *sets)
        assert str(backup_dir) in refused and "storage pid" in refused and "storage.backup_name" in refused, refused
        assert runner.process is not None and runner.process.alive()
    finally:
        runner.stop()
    assert len(BackupPlan(backup_dir, "storage", 3600, 7).complete()) == 1
