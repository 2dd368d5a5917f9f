"""The durable spool: where acknowledged writes wait while the backend is down or slow.

A spool is a FIFO of opaque entries (``schema.encode_rows`` blobs, one per spooled batch) with a record count
each. ``append`` returns only once the entry is on disk (SQLite, WAL, ``synchronous=FULL``: fsync'd at every
commit), so a write acknowledged as spooled survives ``kill -9`` of the server. Entries leave only through
``remove`` after the backend took them, oldest first, so replay preserves the order of the writes, or through
``set_aside`` when one cannot be read (damaged on disk): it then moves, unchanged, to a table of its own
(``unreadable`` in the spool file), where it no longer holds up the entries after it.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections import deque
from pathlib import Path
from typing import Protocol

from icecrawler.durable import full_disk_note
from icecrawler.errors import StorageUnavailableError

__all__ = ["MemorySpool", "SpoolEntry", "SpoolQueue", "SqliteSpool"]

#: (sequence number, blob, records in it)
SpoolEntry = tuple[int, bytes, int]

#: Free pages (4 KiB each) a drained spool file may keep; past that, emptying it gives the disk back (``VACUUM``).
RECLAIM_FREE_PAGES = 256
#: Bytes a checkpointed write-ahead log is cut back to (SQLite keeps it at its largest size otherwise).
WAL_SIZE_LIMIT = 4 << 20

log = logging.getLogger(__name__)


class SpoolQueue(Protocol):
    """A durable FIFO of spooled batches."""

    def append(self, blob: bytes, records: int) -> None:
        """Durably add one entry; raise StorageUnavailableError if that is impossible (disk full, ...)."""

    def oldest(self) -> SpoolEntry | None:
        """The oldest entry, left in place (None when empty); StorageUnavailableError if the spool cannot be read."""
        ...

    def remove(self, seq: int) -> None:
        """Drop an entry once the backend has it; StorageUnavailableError (the entry stays) if that is impossible."""

    def set_aside(self, seq: int, reason: str) -> None:
        """Move an entry that cannot be read out of the queue, kept as it is (StorageUnavailableError if that is
        impossible: the entry stays)."""

    def depth(self) -> int:
        """Records waiting (not entries)."""
        ...

    def set_aside_count(self) -> tuple[int, int]:
        """(entries, records) set aside so far, this run or before (StorageUnavailableError if the spool cannot be
        read)."""
        ...

    def close(self) -> None:
        """Release the file."""


class MemorySpool:
    """Not durable: for unit tests of the service logic only."""

    def __init__(self) -> None:
        self._entries: deque[SpoolEntry] = deque()
        self._seq = 0
        self._lock = threading.Lock()
        #: Tests set this to simulate a full disk.
        self.broken = False
        #: (entry, reason) of the entries set aside.
        self.unreadable: list[tuple[SpoolEntry, str]] = []

    def append(self, blob: bytes, records: int) -> None:
        if self.broken:
            raise StorageUnavailableError("spool is broken (simulated)")
        with self._lock:
            self._seq += 1
            self._entries.append((self._seq, blob, records))

    def oldest(self) -> SpoolEntry | None:
        with self._lock:
            return self._entries[0] if self._entries else None

    def remove(self, seq: int) -> None:
        with self._lock:
            self._entries = deque(entry for entry in self._entries if entry[0] != seq)

    def set_aside(self, seq: int, reason: str) -> None:
        with self._lock:
            self.unreadable.extend((entry, reason) for entry in self._entries if entry[0] == seq)
            self._entries = deque(entry for entry in self._entries if entry[0] != seq)

    def depth(self) -> int:
        with self._lock:
            return sum(entry[2] for entry in self._entries)

    def set_aside_count(self) -> tuple[int, int]:
        with self._lock:
            return len(self.unreadable), sum(entry[2] for entry, _ in self.unreadable)

    def close(self) -> None:
        """Nothing to release."""


class SqliteSpool:
    """The spool as one SQLite file (``<storage.spool_dir>/spool.sqlite3``)."""

    def __init__(self, directory: str | Path) -> None:
        self.path = Path(directory) / "spool.sqlite3"
        self._lock = threading.Lock()
        conn: sqlite3.Connection | None = None
        try:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                conn = self._conn = sqlite3.connect(
                    self.path, timeout=30.0, check_same_thread=False, isolation_level=None
                )
                self._conn.execute("PRAGMA journal_mode=WAL")
                self._conn.execute("PRAGMA synchronous=FULL")
                self._conn.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")
                self._conn.execute(
                    "CREATE TABLE IF NOT EXISTS spool (seq INTEGER PRIMARY KEY AUTOINCREMENT, records INTEGER NOT "
                    "NULL, blob BLOB NOT NULL)"
                )
                self._depth = int(self._conn.execute("SELECT coalesce(sum(records), 0) FROM spool").fetchone()[0])
            except (OSError, sqlite3.Error) as exc:
                raise StorageUnavailableError(
                    f"cannot open the spool {self.path}: {exc}{full_disk_note(self.path, str(exc))}"
                ) from exc
            if self._depth == 0:
                with self._lock:
                    self._reclaim()  # a spool left large by an outage before this rule
            self._log_set_aside()
        except BaseException:
            if conn is not None:  # else the error's traceback holds it open
                conn.close()
            raise

    def _log_set_aside(self) -> None:
        """Say at the start how many entries wait in ``unreadable`` for an operator. The count is for the log only:
        a table that cannot be read (re-made by hand) makes it unknown, as in ``stats()``, not the start failed."""
        try:
            entries, records = self.set_aside_count()
        except StorageUnavailableError as exc:
            log.warning(
                "the spool %s: the entries (and records) set aside as unreadable are unknown, its table unreadable "
                'cannot be read: %s (docs/STORAGE.md, "Entries set aside")',
                self.path,
                exc.__cause__ or exc,
            )
            return
        if entries:
            log.warning(
                "the spool %s holds %d entries (%d records) set aside as unreadable, in its table unreadable: they "
                'are not replayed until repaired and put back (docs/STORAGE.md, "Entries set aside")',
                self.path,
                entries,
                records,
            )

    def append(self, blob: bytes, records: int) -> None:
        try:
            with self._lock:
                self._conn.execute("INSERT INTO spool (records, blob) VALUES (?, ?)", (records, blob))
                self._depth += records
        except sqlite3.Error as exc:
            raise StorageUnavailableError(f"cannot write the spool {self.path}: {exc}") from exc

    def oldest(self) -> SpoolEntry | None:
        try:
            with self._lock:
                row = self._conn.execute("SELECT seq, blob, records FROM spool ORDER BY seq LIMIT 1").fetchone()
        except sqlite3.Error as exc:
            raise StorageUnavailableError(f"cannot read the spool {self.path}: {exc}") from exc
        return None if row is None else (int(row[0]), bytes(row[1]), int(row[2]))

    def remove(self, seq: int) -> None:
        """A delete writes too (SQLite's WAL): on a full disk it fails like an append, and the entry stays."""
        try:
            with self._lock:
                row = self._conn.execute("DELETE FROM spool WHERE seq = ? RETURNING records", (seq,)).fetchone()
                self._taken_out(row)
        except sqlite3.Error as exc:
            raise StorageUnavailableError(f"cannot remove a replayed entry from the spool {self.path}: {exc}") from exc

    def _taken_out(self, row: tuple[int] | None) -> None:
        """An entry of ``row[0]`` records left the spool (under the lock): the depth falls, and the file is
        reclaimed once it is empty."""
        if row is not None:
            self._depth -= int(row[0])
            if self._depth == 0:
                self._reclaim()

    def set_aside(self, seq: int, reason: str) -> None:
        """Move the entry to ``unreadable`` (made on first use), blob unchanged, in one transaction (a full disk
        leaves it in place)."""
        try:
            with self._lock:
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    self._conn.execute(
                        "CREATE TABLE IF NOT EXISTS unreadable (seq INTEGER PRIMARY KEY, records INTEGER NOT NULL, "
                        "blob BLOB NOT NULL, reason TEXT NOT NULL, set_aside_at TEXT NOT NULL)"
                    )
                    self._conn.execute(
                        "INSERT OR REPLACE INTO unreadable (seq, records, blob, reason, set_aside_at) "
                        "SELECT seq, records, blob, ?, datetime('now') FROM spool WHERE seq = ?",
                        (reason, seq),
                    )
                    row = self._conn.execute("DELETE FROM spool WHERE seq = ? RETURNING records", (seq,)).fetchone()
                    self._conn.execute("COMMIT")
                except BaseException:
                    if self._conn.in_transaction:
                        self._conn.execute("ROLLBACK")
                    raise
                self._taken_out(row)
        except sqlite3.Error as exc:
            raise StorageUnavailableError(f"cannot set aside an entry of the spool {self.path}: {exc}") from exc

    def _reclaim(self) -> None:
        """Give back the disk an emptied spool holds (under ``_lock``). SQLite keeps a file at its largest size, its
        freed pages waiting for reuse, so a spool that once held a long outage's records kept that size for good,
        and every storage backup copied it whole (free pages too), ``backup_keep`` times over. Once drained, the
        file is rewritten (``VACUUM``, cheap with no rows left) and its write-ahead log cut back. A failure here
        (a full disk) costs only the space: it is logged and tried again at the next drain."""
        try:
            if int(self._conn.execute("PRAGMA freelist_count").fetchone()[0]) >= RECLAIM_FREE_PAGES:
                self._conn.execute("VACUUM")
            self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
        except sqlite3.Error as exc:
            log.warning("the drained spool %s keeps its disk space for now: %s", self.path, exc)

    def depth(self) -> int:
        with self._lock:
            return self._depth

    def set_aside_count(self) -> tuple[int, int]:
        """Read from the table each time, so that it counts the entries of earlier runs and sees an operator's
        repairs (the table is made on first use: none yet is none set aside)."""
        try:
            with self._lock:
                if not self._conn.execute(
                    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'unreadable'"
                ).fetchone():
                    return 0, 0
                entries, records = self._conn.execute(
                    "SELECT count(*), coalesce(sum(records), 0) FROM unreadable"
                ).fetchone()
        except sqlite3.Error as exc:
            raise StorageUnavailableError(
                f"cannot count the set-aside entries of the spool {self.path}: {exc}"
            ) from exc
        return int(entries), int(records)

    def close(self) -> None:
        with self._lock:
            self._conn.close()
