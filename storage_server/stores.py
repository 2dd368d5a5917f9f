"""Record stores: one small ``RecordStore`` protocol and its backends (memory for unit tests, embedded SQLite,
HBase through Thrift in ``storage_server.hbase_store``).

A store only knows rows (``schema.Row``: a key and plain columns). It upserts by row key, so writing the same row
twice leaves one row, and it scans in key order (one owner's rows newest first, see ``schema``). A backend
failure leaves a store as ``StorageUnavailableError``; the service above decides to spool.
"""

from __future__ import annotations

import operator
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Protocol

from icecrawler.durable import full_disk_note
from icecrawler.errors import StorageUnavailableError
from storage_server.schema import COLUMNS, TABLES, Column, Row

__all__ = ["MemoryStore", "RecordStore", "SqliteStore"]


class RecordStore(Protocol):
    """Where records end up. Implementations must be safe to call from several threads."""

    #: Shown in ``stats()`` and ``icecrawler status``.
    name: str

    def put(self, table: str, rows: Sequence[Row]) -> None:
        """Upsert ``rows`` (all or none as far as the backend allows; a retry of the same rows is harmless)."""

    def scan(self, table: str, prefix: bytes = b"") -> Iterator[Row]:
        """Rows whose key starts with ``prefix``, in key order."""
        ...

    def count(self, table: str) -> int:
        """Rows in ``table`` (may scan the table: meant for stats and tests, not for hot paths)."""
        ...

    def delete_prefix(self, table: str, prefix: bytes) -> int:
        """Delete the rows whose key starts with ``prefix`` (one owner's: ``icecrawler purge``); how many."""
        ...

    def interrupt(self) -> None:
        """End the backend calls under way soon, with ``StorageUnavailableError``, and refuse new ones: the service
        is stopping, and a call that waits on a hung backend must not hold the stop (its records are spooled)."""

    def close(self) -> None:
        """Release connections; the store is not used afterwards."""


def _check_table(table: str) -> None:
    if table not in TABLES:
        raise ValueError(f"unknown table {table!r} (known: {', '.join(TABLES)})")


class MemoryStore:
    """A dict per table: the reference behaviour for the contract tests, and the unit tests' backend."""

    name = "memory"

    def __init__(self) -> None:
        self._tables: dict[str, dict[bytes, dict[str, Column]]] = {table: {} for table in TABLES}
        self._lock = threading.Lock()
        #: Tests set this to simulate an outage: every call raises StorageUnavailableError.
        self.down = False

    def _check_up(self) -> None:
        if self.down:
            raise StorageUnavailableError("memory store is down (simulated)")

    def put(self, table: str, rows: Sequence[Row]) -> None:
        _check_table(table)
        self._check_up()
        with self._lock:
            for row in rows:
                self._tables[table][row.key] = dict(row.columns)

    def scan(self, table: str, prefix: bytes = b"") -> Iterator[Row]:
        _check_table(table)
        self._check_up()
        with self._lock:
            items = sorted((key, columns) for key, columns in self._tables[table].items() if key.startswith(prefix))
        for key, columns in items:
            yield Row(key, dict(columns))

    def count(self, table: str) -> int:
        _check_table(table)
        self._check_up()
        return len(self._tables[table])

    def delete_prefix(self, table: str, prefix: bytes) -> int:
        _check_table(table)
        self._check_up()
        with self._lock:
            keys = [key for key in self._tables[table] if key.startswith(prefix)]
            for key in keys:
                del self._tables[table][key]
        return len(keys)

    def interrupt(self) -> None:
        """Nothing to end: its calls never wait on anything outside the process."""

    def close(self) -> None:
        """Nothing to release."""


_SQL_TYPES = {int: "INTEGER", str: "TEXT"}

#: Bytes the embedded store's write-ahead log is cut back to when a checkpoint lets it restart. It normally stays
#: near 16 MiB (SQLite checkpoints every 1 000 pages of 16 KiB); writes made during a long read (an export, a backup,
#: a count) grow it further, and without a limit SQLite kept it at the largest size it ever reached.
WAL_SIZE_LIMIT = 64 << 20


def _prefix_end(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key starting with ``prefix`` (None: no upper bound)."""
    trimmed = prefix.rstrip(b"\xff")
    if not trimmed:
        return None
    return trimmed[:-1] + bytes([trimmed[-1] + 1])


class SqliteStore:
    """The embedded default: one SQLite file, WAL mode, one transaction per batch, no server to run.

    Each table has a unique ``row_key`` BLOB (its index gives key-order scans; a plain rowid table with ~1 KB
    rows inserts several times faster than a WITHOUT ROWID one) and one typed column per field, so anyone can
    query the file directly::

        sqlite3 var/storage/icecrawler.sqlite3 "SELECT user_name, text FROM weibo ORDER BY row_key LIMIT 5"

    ``synchronous=NORMAL`` in WAL mode: a committed batch survives a crash of the server process (the
    ``kill -9`` case); only an OS crash or power loss can lose the last commits.
    """

    name = "embedded"

    def __init__(self, path: str | Path, wal_size_limit: int = WAL_SIZE_LIMIT) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        #: ``WAL_SIZE_LIMIT``; a test cuts the log back to less, so as not to write hundreds of MB to see it.
        self.wal_size_limit = wal_size_limit
        self._lock = threading.Lock()
        self._conn = self._connect()
        with self._lock, self._conn:
            for table, columns in COLUMNS.items():
                defs = ", ".join(f'"{name}" {_SQL_TYPES[kind]} NOT NULL' for name, kind in columns)
                self._conn.execute(f'CREATE TABLE IF NOT EXISTS "{table}" (row_key BLOB NOT NULL UNIQUE, {defs})')
        #: Picks a row's column values in table order, in C (the per-row cost matters at 20k rows/s).
        self._fields = {table: operator.itemgetter(*(name for name, _ in cols)) for table, cols in COLUMNS.items()}
        self._insert = {
            table: 'INSERT OR REPLACE INTO "{}" (row_key, {}) VALUES (?, {})'.format(
                table, ", ".join(f'"{name}"' for name, _ in columns), ", ".join("?" for _ in columns)
            )
            for table, columns in COLUMNS.items()
        }

    def _connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(self.path, timeout=30.0, check_same_thread=False, isolation_level=None)
            conn.execute("PRAGMA page_size=16384")  # only takes effect on a new file; ~1 KB rows fit better
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(f"PRAGMA journal_size_limit={int(self.wal_size_limit)}")
        except sqlite3.Error as exc:
            raise StorageUnavailableError(
                f"cannot open embedded store {self.path}: {exc}{full_disk_note(self.path, str(exc))}"
            ) from exc
        return conn

    def put(self, table: str, rows: Sequence[Row]) -> None:
        _check_table(table)
        fields = self._fields[table]
        values = [(row.key, *fields(row.columns)) for row in rows]
        try:
            with self._lock:
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    self._conn.executemany(self._insert[table], values)
                except BaseException:
                    self._conn.execute("ROLLBACK")
                    raise
                self._conn.execute("COMMIT")
        except sqlite3.Error as exc:
            raise StorageUnavailableError(f"embedded store write failed: {exc}") from exc

    def scan(self, table: str, prefix: bytes = b"") -> Iterator[Row]:
        _check_table(table)
        names = [name for name, _ in COLUMNS[table]]
        select = ", ".join(f'"{name}"' for name in names)
        sql = f'SELECT row_key, {select} FROM "{table}" WHERE row_key >= ?'
        params: list[bytes] = [prefix]
        end = _prefix_end(prefix)
        if end is not None:
            sql += " AND row_key < ?"
            params.append(end)
        reader = self._connect()  # its own connection: a long export never holds the writer's lock
        try:
            for record in reader.execute(sql + " ORDER BY row_key", params):
                yield Row(bytes(record[0]), dict(zip(names, record[1:], strict=True)))
        except sqlite3.Error as exc:
            raise StorageUnavailableError(f"embedded store scan failed: {exc}") from exc
        finally:
            reader.close()

    def count(self, table: str) -> int:
        _check_table(table)
        try:
            with self._lock:
                return int(self._conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0])
        except sqlite3.Error as exc:  # as every other call: ``stats()`` then reports the counts unknown (-1)
            raise StorageUnavailableError(f"embedded store count failed: {exc}") from exc

    def delete_prefix(self, table: str, prefix: bytes) -> int:
        _check_table(table)
        sql, params = f'DELETE FROM "{table}" WHERE row_key >= ?', [prefix]
        end = _prefix_end(prefix)
        if end is not None:
            sql += " AND row_key < ?"
            params.append(end)
        try:
            with self._lock:
                return int(self._conn.execute(sql, params).rowcount)  # autocommit: one statement, one transaction
        except sqlite3.Error as exc:
            raise StorageUnavailableError(f"embedded store delete failed: {exc}") from exc

    def interrupt(self) -> None:
        """Nothing to end: a local file's calls end by themselves (SQLite's busy timeout bounds a lock wait)."""

    def close(self) -> None:
        with self._lock:
            self._conn.close()
