"""Transactional ordered key-value storage for the scheduler's queues (huey's storage/serializer split).

The core sees only ``QueueStore``: named tables of ``bytes -> bytes`` kept in key order, changed only inside
``transaction()``, which commits when the block ends and rolls everything back when it raises. Two
implementations run the same contract tests (tests/scheduler/test_store.py):

* ``MemoryQueueStore``: dicts plus sorted key lists and an undo log; for pure-logic tests.
* ``BdbQueueStore``: a transactional Berkeley DB environment (txn, log, lock, mpool) opened with DB_RECOVER,
  one B-tree per table, so a ``kill -9`` at any moment leaves exactly the committed state.

Keys are compared as raw bytes, so big-endian integers at the front of a key sort by number (the pending
queue is keyed by due time that way; see ``codec``).
"""

from __future__ import annotations

import bisect
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from berkeleydb import db

from icecrawler.errors import ServiceError, StorageUnavailableError

__all__ = [
    "ADDED_TABLES",
    "HELD_KEY",
    "HELD_VALUE",
    "SCAN_CHUNK",
    "TABLES",
    "BdbQueueStore",
    "MemoryQueueStore",
    "QueueStore",
    "Txn",
    "chunks",
    "entries",
    "held_key",
]

log = logging.getLogger(__name__)

#: The scheduler's tables: per-task metadata, the delayed queue, leases, the completion log, small scheduler-wide
#: records (host blocks, account freezes, the clock origin), and task records that do not decode (``quarantine``).
TABLES: tuple[str, ...] = ("tasks", "pending", "inflight", "done", "meta", "quarantine")
#: Tables that a database written by an earlier version lacks: opening it creates them, so the start-up check
#: (``integrity``) does not take their absence for a lost file, as long as the table never held a record. The first
#: record written to one also writes ``held_key(table)`` in ``meta`` (``quarantine.set_aside``): from then on a
#: missing file is a lost one, and ``BdbQueueStore`` refuses to open (an empty new file would hide the loss).
ADDED_TABLES: tuple[str, ...] = ("quarantine",)
#: The prefix of the ``meta`` keys ``held_key`` makes, and their value: shaped like a host block that ended long ago,
#: which is what an earlier version that meets the key makes of it (``startup.GAP_VALUE`` likewise).
HELD_KEY = b"table-held:"
HELD_VALUE = b'[0, "this table has held records"]'
#: In-memory log buffer of the Berkeley DB environment (see ``BdbQueueStore``).
_LOG_BUFFER_BYTES = 4 << 20
#: The mode of the files the environment creates (tables, logs): ``meta`` holds the sites' refreshes of the accounts'
#: logins (``scheduler_server.refreshes``), secrets like the accounts files, so the scheduler's user alone reads them.
_FILE_MODE = 0o600
#: Entries read per scan by ``entries``: a walk of a big table holds this many at a time, not the table.
SCAN_CHUNK = 1024


class Txn(Protocol):
    """One transaction's view of every table."""

    def get(self, table: str, key: bytes) -> bytes | None: ...

    def put(self, table: str, key: bytes, value: bytes) -> None: ...

    def delete(self, table: str, key: bytes) -> bool:
        """Remove ``key``; False if it was not there."""
        ...

    def scan(
        self, table: str, start: bytes = b"", stop: bytes | None = None, limit: int = 1000
    ) -> list[tuple[bytes, bytes]]:
        """Up to ``limit`` items with ``start <= key < stop`` (no upper bound if ``stop`` is None), in key order."""
        ...

    def count(self, table: str) -> int: ...


class QueueStore(Protocol):
    """Where the scheduler's state lives; see the module docstring."""

    def transaction(self) -> Any:
        """Context manager yielding a ``Txn``: commit on normal exit, roll back on an exception."""
        ...

    def sync(self) -> None:
        """Make every committed transaction durable. Callers acknowledge a change only after this returns;
        calling it outside their own locks lets concurrent callers share one fsync (group commit)."""
        ...

    def checkpoint(self) -> None:
        """Bound recovery time and log size (no-op where meaningless)."""
        ...

    def backup(self, target: Path) -> None:
        """Copy the whole state into the new directory ``target`` while calls go on (a hot backup)."""
        ...

    def close(self) -> None: ...


def held_key(table: str) -> bytes:
    """The ``meta`` key that says an added table (``ADDED_TABLES``) has held records, so its file must be there."""
    return HELD_KEY + table.encode()


def chunks(
    scan: Callable[[bytes], list[tuple[bytes, bytes]]], start: bytes = b""
) -> Iterator[list[tuple[bytes, bytes]]]:
    """Every entry ``scan`` (a ``Txn.scan`` from the key it is given, with a limit) reaches, one scan at a time, each
    from just after the last key of the one before, until one comes back empty. A single scan with a big limit
    once stopped a walk of ``meta`` at its limit without a word; the caller may delete what it was given, and may
    run each scan in a transaction of its own (none is then held while it works on a chunk)."""
    while chunk := scan(start):
        yield chunk
        start = chunk[-1][0] + b"\0"


def entries(txn: Txn, table: str, start: bytes = b"", stop: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
    """Every entry of ``table`` with ``start <= key < stop`` in key order, in ``txn``, read ``SCAN_CHUNK`` at a
    time (``chunks``)."""
    for chunk in chunks(lambda first: txn.scan(table, first, stop, limit=SCAN_CHUNK), start):
        yield from chunk


# --- memory ---------------------------------------------------------------------------------------------------


class _MemoryTable:
    def __init__(self) -> None:
        self.values: dict[bytes, bytes] = {}
        self.keys: list[bytes] = []

    def put(self, key: bytes, value: bytes) -> bytes | None:
        old = self.values.get(key)
        if old is None:
            bisect.insort(self.keys, key)
        self.values[key] = value
        return old

    def delete(self, key: bytes) -> bytes | None:
        old = self.values.pop(key, None)
        if old is not None:
            del self.keys[bisect.bisect_left(self.keys, key)]
        return old


class _MemoryTxn:
    def __init__(self, tables: dict[str, _MemoryTable]) -> None:
        self._tables = tables
        self.undo: list[tuple[str, bytes, bytes | None]] = []

    def _table(self, table: str) -> _MemoryTable:
        try:
            return self._tables[table]
        except KeyError as exc:
            raise KeyError(f"unknown table {table!r}") from exc

    def get(self, table: str, key: bytes) -> bytes | None:
        return self._table(table).values.get(key)

    def put(self, table: str, key: bytes, value: bytes) -> None:
        self.undo.append((table, key, self._table(table).put(key, bytes(value))))

    def delete(self, table: str, key: bytes) -> bool:
        old = self._table(table).delete(key)
        if old is not None:
            self.undo.append((table, key, old))
        return old is not None

    def scan(
        self, table: str, start: bytes = b"", stop: bytes | None = None, limit: int = 1000
    ) -> list[tuple[bytes, bytes]]:
        t = self._table(table)
        first = bisect.bisect_left(t.keys, start)
        last = len(t.keys) if stop is None else bisect.bisect_left(t.keys, stop)
        return [(key, t.values[key]) for key in t.keys[first : min(last, first + limit)]]

    def count(self, table: str) -> int:
        return len(self._table(table).keys)

    def rollback(self) -> None:
        for table, key, old in reversed(self.undo):
            if old is None:
                self._tables[table].delete(key)
            else:
                self._tables[table].put(key, old)


class MemoryQueueStore:
    """In-process store with real rollback; one transaction at a time."""

    def __init__(self) -> None:
        self._tables = {name: _MemoryTable() for name in TABLES}
        self._lock = threading.RLock()

    @contextmanager
    def transaction(self) -> Iterator[_MemoryTxn]:
        with self._lock:
            txn = _MemoryTxn(self._tables)
            try:
                yield txn
            except BaseException:
                txn.rollback()
                raise

    def sync(self) -> None:
        """Memory is as durable as it gets."""

    def checkpoint(self) -> None:
        """Nothing to checkpoint in memory."""

    def backup(self, target: Path) -> None:
        raise ServiceError("an in-memory queue store keeps no files to back up (the daemon runs on Berkeley DB)")

    def close(self) -> None:
        """Nothing to release."""


# --- Berkeley DB ----------------------------------------------------------------------------------------------


class _BdbTxn:
    def __init__(self, dbs: dict[str, Any], txn: Any) -> None:
        self._dbs = dbs
        self._txn = txn

    def get(self, table: str, key: bytes) -> bytes | None:
        value = self._dbs[table].get(key, txn=self._txn)
        return None if value is None else bytes(value)

    def put(self, table: str, key: bytes, value: bytes) -> None:
        self._dbs[table].put(key, value, txn=self._txn)

    def delete(self, table: str, key: bytes) -> bool:
        try:
            self._dbs[table].delete(key, txn=self._txn)
        except db.DBNotFoundError:
            return False
        return True

    def scan(
        self, table: str, start: bytes = b"", stop: bytes | None = None, limit: int = 1000
    ) -> list[tuple[bytes, bytes]]:
        items: list[tuple[bytes, bytes]] = []
        cursor = self._dbs[table].cursor(txn=self._txn)
        try:
            item = cursor.set_range(start) if start else cursor.first()
            while item is not None and len(items) < limit:
                key, value = item
                if stop is not None and key >= stop:
                    break
                items.append((key, value))
                item = cursor.next()
        finally:
            cursor.close()
        return items

    def count(self, table: str) -> int:
        return int(self._dbs[table].stat(txn=self._txn)["ndata"])


def _warn_if_readable(path: Path) -> None:
    """One WARNING when tables or logs in ``path`` are readable by others than the scheduler's user: those created
    before the mode was 0600 (0640 under the usual umask) keep their mode, and ``meta`` holds the refreshed logins.
    The scheduler does not change a file's mode itself: a group that reads them may be the operator's choice (a
    backup agent); the line says the command that makes them private."""
    readable: list[str] = []
    for file in sorted((*path.glob("*.db"), *path.glob("log.*"))):
        try:
            if file.stat().st_mode & 0o077:
                readable.append(file.name)
        except FileNotFoundError:  # a log file removed meanwhile
            continue
    if readable:
        log.warning(
            "%s: %s readable by other users than the scheduler's; they hold the sites' refreshes of the accounts' "
            "logins: chmod 600 %s",
            path,
            ", ".join(readable),
            " ".join(str(path / name) for name in readable),
        )


class BdbQueueStore:
    """A transactional Berkeley DB environment in ``path``; see the module docstring.

    Commits write their log records to the OS (DB_TXN_WRITE_NOSYNC), which already survives a crash of the
    scheduler process. With ``durable`` (setting ``scheduler.durable_commits``) ``sync()`` then fsyncs the log
    (DB_ENV->log_flush) before the caller replies; concurrent callers share one fsync (group commit). Off, a
    machine crash may lose the last acknowledged commits (never consistency: recovery replays a prefix).
    """

    def __init__(self, path: str | Path, *, durable: bool = True, cache_mb: int = 64) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self._commit_flags = db.DB_TXN_WRITE_NOSYNC
        self._durable = durable
        self._cache_mb = cache_mb
        self._closed = True
        #: Set when Berkeley DB asked for recovery (a failed log write panics the environment): the next
        #: transaction reopens it first (recovery replays the committed log), so the daemon serves again.
        self._needs_recovery = False
        self._open()
        _warn_if_readable(self.path)

    def _open(self) -> None:
        try:
            self._env = db.DBEnv()
            self._env.set_cachesize(0, self._cache_mb << 20, 1)
            # A group's transaction logs a few KB per task cycle; with the default 32 KB log buffer a group of
            # 100 reports wrote it out in several pieces before its commit. This holds a whole group.
            self._env.set_lg_bsize(_LOG_BUFFER_BYTES)
            self._env.set_lk_detect(db.DB_LOCK_DEFAULT)
            self._env.log_set_config(db.DB_LOG_AUTO_REMOVE, 1)
            # Log files are zero-filled when created, so a full disk shows up as a failed switch to a new log
            # file, never as a write into a log file that has no blocks behind it.
            self._env.log_set_config(db.DB_LOG_ZERO, 1)
            # No file is memory-mapped: DB_NOMMAP for the tables, and DB_PRIVATE keeps the regions (cache, locks,
            # log buffer) in this process's memory instead of __db.* files. On a full file system a write to a
            # mapped page of a sparse file kills the process with SIGBUS; a write() just fails, which becomes
            # StorageUnavailableError. One process per environment is what DataLock enforces anyway.
            self._env.set_flags(db.DB_NOMMAP, 1)
            self._env.open(
                str(self.path),
                db.DB_CREATE
                | db.DB_INIT_TXN
                | db.DB_INIT_LOG
                | db.DB_INIT_LOCK
                | db.DB_INIT_MPOOL
                | db.DB_RECOVER
                | db.DB_THREAD
                | db.DB_PRIVATE,
                _FILE_MODE,
            )
            self._dbs: dict[str, Any] = {}
            absent = [name for name in ADDED_TABLES if not (self.path / f"{name}.db").exists()]
            for name in TABLES:  # ``meta`` opens before every added table
                if name in absent and self._dbs["meta"].get(held_key(name)) is not None:
                    self._close_handles(checkpoint=False)
                    raise ServiceError(
                        f"{name}.db is missing, but this database has kept records in it (meta {held_key(name)!r}): "
                        "they would be lost without a word"
                    )
                handle = db.DB(self._env)
                handle.open(
                    f"{name}.db",
                    dbtype=db.DB_BTREE,
                    flags=db.DB_CREATE | db.DB_AUTO_COMMIT | db.DB_THREAD,
                    mode=_FILE_MODE,
                )
                self._dbs[name] = handle
        except db.DBError as exc:
            raise ServiceError(f"cannot open the Berkeley DB environment in {self.path}: {exc}") from exc
        self._closed = False
        self._needs_recovery = False

    def _unavailable(self, exc: db.DBError, doing: str) -> StorageUnavailableError:
        """A Berkeley DB failure as the caller's declared error (nothing it asked for was changed)."""
        if isinstance(exc, db.DBRunRecoveryError):
            self._needs_recovery = True
        message = exc.args[-1] if exc.args else str(exc)
        return StorageUnavailableError(
            f"the scheduler database in {self.path} cannot {doing} now ({message}); "
            "nothing was changed, try again later"
        )

    def _recover(self) -> None:
        """Reopen the environment after a panic; recovery keeps exactly the committed transactions."""
        log.warning("reopening the scheduler database in %s after a failure (running recovery)", self.path)
        self._close_handles(checkpoint=False)
        self._open()
        log.warning("scheduler database recovered; serving again")

    @contextmanager
    def transaction(self) -> Iterator[_BdbTxn]:
        if self._closed:
            raise ServiceError("the scheduler database is closed")
        if self._needs_recovery:
            try:
                self._recover()
            except ServiceError as exc:
                self._closed, self._needs_recovery = False, True
                raise StorageUnavailableError(f"the scheduler database cannot recover yet: {exc}") from exc
        try:
            txn = self._env.txn_begin(flags=self._commit_flags)
        except db.DBError as exc:
            raise self._unavailable(exc, "begin a transaction") from exc
        try:
            yield _BdbTxn(self._dbs, txn)
        except BaseException as exc:
            try:
                txn.abort()
            except db.DBError:
                self._needs_recovery = True
            if isinstance(exc, db.DBError):
                raise self._unavailable(exc, "take changes") from exc
            raise
        try:
            txn.commit(self._commit_flags)
        except db.DBError as exc:
            raise self._unavailable(exc, "commit") from exc

    def sync(self) -> None:
        if self._durable and not self._closed:
            try:
                self._env.log_flush()
            except db.DBError as exc:
                if not self._closed:  # a close racing with the last reply is fine: close flushes too
                    raise self._unavailable(exc, "flush its log") from exc

    def checkpoint(self) -> None:
        if self._needs_recovery:
            return
        try:
            self._env.txn_checkpoint()
        except db.DBError as exc:
            raise self._unavailable(exc, "checkpoint") from exc

    def backup(self, target: Path) -> None:
        """A hot backup into ``target`` (created) while transactions go on: a checkpoint, then Berkeley DB's own
        copy of the table files followed by the logs (``DB_ENV->backup``), then catastrophic recovery in the copy,
        so that it opens as this environment stood at the end of the copied logs, every committed transaction in.
        It is a directory a scheduler can start on as it is (``scheduler.db_dir``)."""
        if self._needs_recovery or self._closed:
            raise StorageUnavailableError(f"the scheduler database in {self.path} cannot be backed up now")
        try:
            self._env.txn_checkpoint()
            self._env.backup(str(target), db.DB_CREATE | db.DB_EXCL)
        except db.DBError as exc:
            raise self._unavailable(exc, "be backed up") from exc
        copy = db.DBEnv()
        try:
            copy.open(
                str(target),
                db.DB_CREATE
                | db.DB_INIT_TXN
                | db.DB_INIT_LOG
                | db.DB_INIT_LOCK
                | db.DB_INIT_MPOOL
                | db.DB_RECOVER_FATAL
                | db.DB_PRIVATE,
                _FILE_MODE,
            )
            copy.txn_checkpoint()
        except db.DBError as exc:
            raise ServiceError(f"the backup in {target} does not recover: {exc}") from exc
        finally:
            copy.close()

    def _close_handles(self, checkpoint: bool) -> None:
        """Close everything; a failed checkpoint (full disk) or close only costs recovery time at the next open:
        every acknowledged change is in the log."""
        try:
            if checkpoint:
                self._env.txn_checkpoint()
        except db.DBError as exc:
            log.warning(
                "scheduler database: no checkpoint at close (%s); the next start recovers from the log",
                exc.args[-1] if exc.args else exc,
            )
        for handle in self._dbs.values():
            try:
                handle.close()
            except db.DBError as exc:
                log.warning("scheduler database: closing a table failed (%s)", exc.args[-1] if exc.args else exc)
        try:
            self._env.close()
        except db.DBError as exc:
            log.warning("scheduler database: closing the environment failed (%s)", exc.args[-1] if exc.args else exc)

    def close(self) -> None:
        """Checkpoint and close every handle (a clean shutdown needs no recovery next time)."""
        if self._closed:
            return
        self._closed = True
        self._close_handles(checkpoint=not self._needs_recovery)
