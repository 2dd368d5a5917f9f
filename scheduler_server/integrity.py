"""Start-up checks of the scheduler's Berkeley DB environment: a damaged queue database refuses to start.

Without them, deleted transaction logs or a deleted table file opened as an empty (or silently stale) queue,
and a corrupt page was only found by the call that read it. ``open_checked`` runs, before the daemon serves:

1. A marker (``scheduler.created``) says this directory held a queue database. If it is there but the logs
   (``log.*``) or a table file (``<table>.db``) are gone, refuse: recovery would run without them and start
   from whatever the data files hold, or from nothing.
2. Normal recovery (``DB_RECOVER``: replays the logs, the ``kill -9`` case), then a clean close.
3. ``DB->verify`` of every table file (structure and page checks; a full read).

A failure is one line naming the directory, what is wrong, and what ``--recover`` (setting ``scheduler.recover``)
would do: move the directory aside (never delete it), open a new one, copy every record still readable from the
old table files, and rebuild the pending queue from the task records (leases held then are dropped, so those
tasks are simply due again). That salvage keeps a journal (``SALVAGE_JOURNAL``): one stopped midway is refused at the
next start and finished by the next ``--recover``.
"""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path
from typing import Any

from berkeleydb import db

from icecrawler.durable import (
    aside_path,
    full_disk_refusal,
    journal_files,
    remove_journal,
    salvage_aside,
    stopped_salvage,
    sync_dir,
    sync_tree,
)
from icecrawler.errors import ServiceError
from scheduler_server.codec import time_key
from scheduler_server.quarantine import UndecodableRecord, decode_record, set_aside
from scheduler_server.store import ADDED_TABLES, TABLES, BdbQueueStore, QueueStore

__all__ = ["LOCK_FILE", "MARKER", "SALVAGE_JOURNAL", "backup_checked", "holds_database", "open_checked", "salvage"]

log = logging.getLogger(__name__)

#: The file that says this directory holds a queue database.
MARKER = "scheduler.created"
#: The daemon's lock file in the directory (``scheduler_server.server.data_lock``).
LOCK_FILE = "scheduler.lock"
#: The journal of a ``--recover`` under way (``icecrawler.durable``), in the directory it rebuilds: where the damaged
#: files go, and whether they are still being moved there ("moving") or the new database is being built ("copying").
SALVAGE_JOURNAL = "scheduler.salvaging"
#: Records copied per transaction while salvaging.
_CHUNK = 1000


def _missing_files(path: Path) -> str:
    """What is missing from a directory that held a queue database ("" if nothing)."""
    if not (path / MARKER).exists():
        return ""
    if not any(path.glob("log.*")):
        return "its transaction logs (log.*) are missing"
    missing = [f"{table}.db" for table in TABLES if table not in ADDED_TABLES and not (path / f"{table}.db").exists()]
    return f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} missing" if missing else ""


def _verify(path: Path) -> str:
    """``DB->verify`` of every table file of a closed environment ("" when all pass)."""
    for table in TABLES:
        file = path / f"{table}.db"
        if not file.exists():
            continue
        try:
            db.DB().verify(str(file))
        except db.DBError as exc:
            return f"{file.name} fails verification ({exc.args[-1] if exc.args else exc})"
    return ""


def _copy_table(source: Path, store: BdbQueueStore, table: str) -> int:
    """Copy the records of one old table file that Berkeley DB's salvage (``DB->verify`` with DB_SALVAGE, what
    ``db_dump -r`` does) can still read into ``store``; returns how many."""
    dump = source.with_name(source.name + ".salvage")
    try:
        db.DB().verify(str(source), outfile=str(dump), flags=db.DB_SALVAGE)
    except db.DBError as exc:  # expected for a damaged file: the dump holds what was readable
        log.info("--recover: salvaging %s: %s", source, exc.args[-1] if exc.args else exc)
    pairs = _dumped_pairs(dump.read_text(errors="replace") if dump.exists() else "")
    copied = 0
    for start in range(0, len(pairs), _CHUNK):
        copied += _put(store, table, pairs[start : start + _CHUNK])
    return copied


def _dumped_pairs(text: str) -> list[tuple[bytes, bytes]]:
    """The key/data pairs of a ``db_dump`` (hex) text: data lines start with a space, key then value."""
    values: list[bytes] = []
    in_data = False
    for line in text.splitlines():
        if line == "HEADER=END":
            in_data = True
        elif line == "DATA=END":
            in_data = False
        elif in_data and line.startswith(" "):
            try:
                values.append(bytes.fromhex(line.strip()))
            except ValueError:
                values.append(b"")
    return [(values[n], values[n + 1]) for n in range(0, len(values) - 1, 2) if values[n]]


def _put(store: BdbQueueStore, table: str, items: list[tuple[bytes, bytes]]) -> int:
    with store.transaction() as txn:
        for key, value in items:
            txn.put(table, key, value)
    return len(items)


def _rebuild_queues(store: BdbQueueStore) -> int:
    """Every task pending at its recorded due time, no leases: the one state the salvaged records are sure to
    describe. Returns the number of tasks."""
    tasks = 0
    with store.transaction() as txn:
        for table in ("pending", "inflight"):
            while keys := [key for key, _ in txn.scan(table, limit=_CHUNK)]:
                for key in keys:
                    txn.delete(table, key)
        start = b""
        while chunk := txn.scan("tasks", start, limit=_CHUNK):
            for key, value in chunk:
                try:
                    record = decode_record(key, value)
                except UndecodableRecord as exc:  # an unreadable record cannot be queued; the rest can
                    log.error(
                        "--recover: task record %r does not decode (%s); moved to the quarantine table", key[:80], exc
                    )
                    set_aside(txn, key, value)  # with its open gap, as a running core does
                    continue
                record.state, record.lease_token, record.lease_deadline_ms = "pending", "", 0
                txn.put("tasks", key, record.to_bytes())
                txn.put("pending", time_key(record.due_ms, record.id), b"")
                tasks += 1
            start = chunk[-1][0] + b"\0"
    return tasks


def salvage(path: Path, durable: bool) -> Path:
    """Move ``path``'s files aside and build a new queue database there from what can be read; returns where the old
    files went. A journal in the directory (``SALVAGE_JOURNAL``) says how far it got, so a salvage stopped at any
    point (kill -9, a power cut) is finished by the next ``--recover``, and until then the directory is refused:
    without it, a stop while copying left a new database holding part of the tasks, which the next start took for
    the whole queue."""
    journal = path / SALVAGE_JOURNAL

    def new_aside() -> Path:
        aside = aside_path(path)
        aside.mkdir()
        return aside

    def move_aside(aside: Path) -> None:
        for entry in _rebuilt_entries(path):
            entry.rename(aside / entry.name)
        sync_dir(aside)

    def clear() -> None:
        for entry in _rebuilt_entries(path):
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()

    aside = salvage_aside(path, journal, new_aside, move_aside, clear)
    store = BdbQueueStore(path, durable=durable)
    try:
        copied = {
            table: _copy_table(aside / f"{table}.db", store, table)
            for table in TABLES
            if (aside / f"{table}.db").exists()
        }
        tasks = _rebuild_queues(store)
    finally:
        store.close()
    (path / MARKER).write_text(time.strftime("%Y-%m-%dT%H:%M:%S%z") + " (--recover)\n")
    sync_tree(path)
    remove_journal(journal)
    log.warning(
        "--recover: moved the damaged queue database to %s; copied %s; %d task(s) queued again",
        aside,
        ", ".join(f"{table} {count}" for table, count in copied.items()) or "nothing",
        tasks,
    )
    return aside


def _rebuilt_entries(path: Path) -> list[Path]:
    """The directory's entries that a salvage moves aside or rebuilds: all but the running daemon's lock (it stays
    where the next daemon looks) and the salvage's own journal."""
    kept = {LOCK_FILE, *journal_files(path / SALVAGE_JOURNAL)}
    return [entry for entry in path.iterdir() if entry.name not in kept]


def backup_checked(store: QueueStore, target: Path) -> None:
    """A hot backup (``QueueStore.backup``) that must pass the start-up checks before it counts: its logs and every
    table file are there and every table verifies. It then carries the marker, so a restored copy that later loses
    its logs or a table is refused like the original."""
    store.backup(target)
    (target / MARKER).write_text(time.strftime("%Y-%m-%dT%H:%M:%S%z") + " (backup)\n")
    problem = _missing_files(target) or _verify(target)
    if problem:
        raise ServiceError(f"the backup in {target} fails its check: {problem}")


def _problem(path: Path, durable: bool, options: dict[str, Any]) -> str:
    """What is wrong with the queue database in ``path`` ("" if nothing): missing files, a failed recovery, a table
    that fails verification."""
    problem = _missing_files(path)
    if not problem:
        try:
            BdbQueueStore(path, durable=durable, **options).close()
        except ServiceError as exc:
            problem = str(exc)
    return problem or _verify(path)


def holds_database(path: Path) -> bool:
    """Whether ``path`` holds a queue database, or what is left of one (its marker, a table, a log, the journal of a
    ``--recover`` under way): opening a directory that holds none begins a new, empty database."""
    return (
        any(path.glob("*.db"))
        or any(path.glob("log.*"))
        or (path / MARKER).exists()
        or (path / SALVAGE_JOURNAL).exists()
    )


def open_checked(path: str | Path, *, durable: bool = True, recover: bool = False, **options: Any) -> BdbQueueStore:
    """The queue database in ``path``, checked (see the module docstring); raises ServiceError instead of
    opening a damaged one, or one that a stopped ``--recover`` left half rebuilt, unless ``recover``."""
    path = Path(path)
    if (salvaging := stopped_salvage(path / SALVAGE_JOURNAL, f"the scheduler database in {path}", recover)) is not None:
        log.warning("--recover: finishing the rebuild of %s that was stopped (%s)", path, salvaging.get("stage"))
        salvage(path, durable)
    elif problem := _problem(path, durable, options):
        if refusal := full_disk_refusal(path, problem, f"the scheduler database in {path} cannot be opened"):
            raise ServiceError(refusal)
        if not recover:
            raise ServiceError(
                f"the scheduler database in {path} is damaged: {problem}. Not starting on it: restore "
                "it from a backup, or start with --recover to move it aside and copy every readable "
                "record into a new one (leases held then are dropped)"
            )
        log.warning("--recover: the scheduler database in %s is damaged: %s", path, problem)
        salvage(path, durable)
    store = BdbQueueStore(path, durable=durable, **options)
    marker = path / MARKER
    if not marker.exists():
        marker.write_text(time.strftime("%Y-%m-%dT%H:%M:%S%z") + "\n")
    return store
