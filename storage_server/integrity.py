"""Start-up checks of the storage server's SQLite files: a damaged or vanished store refuses to start.

Without them a store with a corrupt page started, took writes and failed half way through an export, and an
emptied or deleted store file started as a new empty store without a word. At start:

* the embedded store and the spool get ``PRAGMA quick_check`` (a full read of every page, without the index
  cross-checks: seconds per GB);
* a store or spool leaves a marker beside it once created (``<file>.created``); if the marker is there but the
  file is missing or empty, its records are gone: refuse.

Each refusal is one line naming the file, what is wrong, and what ``--recover`` (setting ``storage.recover``)
would do instead: move the damaged file aside (never delete it) and start a new one, copying over every row
that can still be read. That salvage keeps a journal beside the file (``<file>.salvaging``): one stopped midway is
refused at the next start and finished by the next ``--recover``.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path

from icecrawler.durable import aside_path, full_disk_refusal, remove_journal, salvage_aside, stopped_salvage, sync_dir
from icecrawler.errors import ServiceError

__all__ = ["backup_files", "check_sqlite_file", "check_store_file", "journal_of", "mark_created", "marker_of"]

log = logging.getLogger(__name__)

#: Rows copied per transaction when salvaging a damaged file.
_SALVAGE_CHUNK = 1000
#: A SQLite file and the WAL files that belong to it.
_SQLITE_SUFFIXES = ("", "-wal", "-shm")
#: Unreadable stretches a salvage skips before it gives up on a table.
_MAX_SKIPS = 200


def marker_of(path: Path) -> Path:
    """The file that says the store at ``path`` exists and held records."""
    return path.with_name(path.name + ".created")


def mark_created(path: Path) -> None:
    """Leave the marker beside a store that opened fine (once; its text is the creation time)."""
    marker = marker_of(path)
    if not marker.exists():
        marker.write_text(time.strftime("%Y-%m-%dT%H:%M:%S%z") + "\n")


def _quick_check(path: Path) -> str:
    """ "" when SQLite finds the file sound, else what it found (first lines)."""
    try:
        conn = sqlite3.connect(path, timeout=30.0)
        try:
            rows = [str(row[0]) for row in conn.execute("PRAGMA quick_check(5)")]
        finally:
            conn.close()
    except sqlite3.Error as exc:
        return str(exc)
    return "" if rows == ["ok"] else "; ".join(rows)[:300]


def backup_files(files: Sequence[Path], target: Path) -> None:
    """Online copies of live SQLite files into the new directory ``target`` (SQLite's backup API, from a
    connection of its own, so writers go on), each passing ``quick_check`` before the backup counts. The caller
    lists the spool before the store: a record the replay moves from one to the other meanwhile is then in the
    spool's copy, the store's, or both (rows are keyed, so both is harmless), never in neither."""
    target.mkdir()
    for path in files:
        if not path.exists():
            continue
        copy = target / path.name
        try:
            source = sqlite3.connect(path, timeout=30.0)
            try:
                destination = sqlite3.connect(copy)
                try:
                    source.backup(destination)
                finally:
                    destination.close()
            finally:
                source.close()
        except sqlite3.Error as exc:
            raise ServiceError(f"cannot back up {path}: {exc}") from exc
        problem = _quick_check(copy)
        if problem:
            raise ServiceError(f"the backup of {path} fails its check: {problem}")


def _move_aside(path: Path, target: Path | None = None) -> Path:
    """Move ``path`` and its WAL files (those still there) to ``target`` (default: a new ``.damaged-`` name);
    returns where the main file went."""
    target = target or aside_path(path)
    for suffix in _SQLITE_SUFFIXES:
        source = path.with_name(path.name + suffix)
        if source.exists():
            source.rename(target.with_name(target.name + suffix))
    sync_dir(path.parent)
    return target


def journal_of(path: Path) -> Path:
    """The journal of a ``--recover`` of ``path`` under way (``icecrawler.durable``): where the damaged file goes,
    and whether it is still being moved there ("moving") or the new file is being filled ("copying")."""
    return path.with_name(path.name + ".salvaging")


def _salvage_journaled(path: Path, what: str, problem: str) -> None:
    """Move the damaged file aside and copy its readable rows into a new one at ``path``, under a journal: a
    salvage stopped at any point is refused at the next start and finished by the next ``--recover``. Without it,
    a stop while copying left a new file holding part of the rows, which the next start served as the whole."""
    journal = journal_of(path)

    def clear() -> None:
        for suffix in _SQLITE_SUFFIXES:
            path.with_name(path.name + suffix).unlink(missing_ok=True)

    damaged = salvage_aside(path, journal, lambda: aside_path(path), lambda aside: _move_aside(path, aside), clear)
    copied = _salvage(damaged, path)  # each chunk a committed transaction (synchronous=FULL: on disk)
    remove_journal(journal)
    log.warning(
        "--recover: %s %s was damaged (%s): moved to %s, %s row(s) salvaged into a new file (%s)",
        what,
        path,
        problem,
        damaged,
        sum(copied.values()),
        ", ".join(f"{k} {v}" for k, v in copied.items()),
    )


def _salvage(damaged: Path, path: Path) -> dict[str, int]:
    """Copy every row that can still be read from ``damaged`` into a new file at ``path`` (same tables, same
    columns), skipping unreadable pages. Returns the rows copied per table."""
    copied: dict[str, int] = {}
    try:
        source = sqlite3.connect(f"file:{damaged}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        log.error("--recover: %s cannot be opened at all (%s); nothing salvaged", damaged, exc)
        return copied
    target = sqlite3.connect(path, isolation_level=None)
    try:
        try:
            tables = [
                (str(name), str(sql))
                for name, sql in source.execute(
                    "SELECT name, sql FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
                )
            ]
        except sqlite3.Error as exc:
            log.error("--recover: the schema of %s is unreadable (%s); nothing salvaged", damaged, exc)
            return copied
        for name, sql in tables:
            target.execute(sql.replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS", 1))
            copied[name] = _salvage_table(source, target, name)
    finally:
        source.close()
        target.close()
    return copied


def _salvage_table(source: sqlite3.Connection, target: sqlite3.Connection, name: str) -> int:
    """Copy the readable rows of one table in rowid order; past an unreadable page, skip ahead (1, 2, 4, ...
    rowids) until rows can be read again. Returns the rows copied."""
    copied, after, skip, skipped = 0, 0, 1, 0
    while skipped < _MAX_SKIPS:
        try:
            chunk = source.execute(
                f'SELECT rowid, * FROM "{name}" WHERE rowid > ? ORDER BY rowid LIMIT ?', (after, _SALVAGE_CHUNK)
            ).fetchall()
        except sqlite3.Error:
            after, skip, skipped = after + skip, skip * 2, skipped + 1
            continue
        if not chunk:
            break
        marks = ", ".join("?" for _ in chunk[0][1:])
        target.execute("BEGIN")
        target.executemany(f'INSERT OR REPLACE INTO "{name}" VALUES ({marks})', [row[1:] for row in chunk])
        target.execute("COMMIT")
        copied += len(chunk)
        after, skip = int(chunk[-1][0]), 1
    if skipped:
        log.error("--recover: table %s: %d unreadable stretch(es) skipped, %d rows copied", name, skipped, copied)
    return copied


def check_sqlite_file(path: Path, what: str, recover: bool) -> None:
    """Refuse a damaged SQLite file (``what`` names it in messages), or with ``recover`` move it aside and
    salvage its readable rows into a new one."""
    if not path.exists() or path.stat().st_size == 0:
        return
    started = time.monotonic()
    problem = _quick_check(path)
    log.info("%s %s checked in %.1fs: %s", what, path, time.monotonic() - started, problem or "ok")
    if not problem:
        return
    if refusal := full_disk_refusal(path, problem, f"{what} {path} cannot be checked"):
        raise ServiceError(refusal)
    if not recover:
        raise ServiceError(
            f"{what} {path} is damaged ({problem}); not starting on it: restore it from a backup, "
            f"or start with --recover to move it to {aside_path(path).name} and copy every readable row "
            "into a new file"
        )
    _salvage_journaled(path, what, problem)


def check_store_file(path: Path, recover: bool, what: str = "the embedded store") -> None:
    """A store (or the spool): vanished or emptied after it was created, damaged, or left half rebuilt by a stopped
    ``--recover`` (see the module docstring)."""
    if (salvaging := stopped_salvage(journal_of(path), f"{what} {path}", recover)) is not None:
        _salvage_journaled(path, what, f"a --recover stopped while {salvaging.get('stage')}")
        return
    marker = marker_of(path)
    gone = not path.exists() or path.stat().st_size == 0
    if gone and marker.exists():
        state = "missing" if not path.exists() else "empty (0 bytes)"
        if not recover:
            raise ServiceError(
                f"{what} {path} is {state}, but it was created there on "
                f"{marker.read_text().strip()} ({marker.name}): its records are gone. Restore it "
                "from a backup, or start with --recover to begin a new, empty one there"
            )
        if path.exists():
            _move_aside(path)
        marker.unlink()
        log.warning("--recover: %s %s was %s; starting a new, empty one", what, path, state)
        return
    check_sqlite_file(path, what, recover)
