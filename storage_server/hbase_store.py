"""The HBase backend: batched puts through the Thrift1 server with a happybase connection pool.

Layout in HBase: tables ``weibo`` and ``review`` (prefixed by ``storage.hbase.table_prefix``), one column family
``d`` holding one version, and one cell per record, ``d:j``: the record's fields as a UTF-8 JSON object (ids as
JSON integers, exact at 64 bits; the HBase shell shows it readably). Row keys are ``schema``'s, so owner, time
and id are also in the key.

Thrift and socket errors are translated here into ``StorageUnavailableError``: the service spools on it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from concurrent.futures import wait as futures_wait
from queue import Empty
from typing import Any

import happybase
from thriftpy2.thrift import TException
from thriftpy2.transport import TTransportException

from icecrawler.errors import StorageUnavailableError
from icecrawler.settings import Settings
from storage_server.schema import COLUMNS, TABLES, Column, Row

__all__ = ["FAMILY", "RECORD_QUALIFIER", "HBaseStore", "decode_columns", "describe_error", "encode_columns"]

log = logging.getLogger(__name__)

FAMILY = "d"
#: The one cell per record. One cell instead of one qualifier per field: a put of ~1 KB records runs several
#: times faster through Thrift1 (``icecrawler bench storage`` measures the HBase path against raw happybase puts).
RECORD_QUALIFIER = FAMILY.encode() + b":j"
_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
#: What can go wrong below happybase: Thrift protocol/transport errors, sockets, an exhausted pool.
_BACKEND_ERRORS = (TException, OSError, socket.timeout, happybase.pool.NoConnectionsAvailable)
#: The longest backend error text kept for the log and ``stats()`` (one line, not a Java stack trace).
MAX_ERROR_CHARS = 300
#: How often a thread waiting for a pooled connection, or for the tables check under way, looks whether the store
#: was interrupted (a stop).
ACQUIRE_SLICE_S = 0.25
#: happybase's timeout (ms) given to a busy connection that ``interrupt`` ends: happybase's pool opens a new socket
#: for it at once, connecting for that long; with ``timeout_s`` a Thrift host that drops connection attempts (a
#: full accept queue, a firewall) would hold the calling thread, and so the stop, that long.
INTERRUPTED_CONNECT_MS = 1
#: Unreadable rows named one by one in a scan's warnings; the rest are only counted.
MAX_SKIP_WARNINGS = 10


def describe_error(exc: BaseException) -> str:
    """One short line for a backend error. HBase's Thrift ``IOError`` carries the server's whole Java stack trace
    (kilobytes) in its message; its first line names the cause, and only that belongs in a log line or in
    ``icecrawler status``."""
    message = getattr(exc, "message", None)
    if isinstance(message, bytes):
        message = message.decode("utf-8", "replace")
    text = message if isinstance(message, str) and message.strip() else str(exc)
    first = text.strip().splitlines()[0] if text.strip() else ""
    if len(first) > MAX_ERROR_CHARS:
        first = first[:MAX_ERROR_CHARS] + "..."
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def _dropped(exc: BaseException) -> bool:
    """Whether ``exc`` says the server closed a connection that was open (not: refused one, or timed out)."""
    if isinstance(exc, TTransportException):
        return exc.type == TTransportException.END_OF_FILE
    return isinstance(exc, (BrokenPipeError, ConnectionResetError))


def _timed_out(exc: BaseException) -> bool:
    """Whether ``exc`` is a socket timeout: the Thrift server took the call but HBase behind it did not answer."""
    if isinstance(exc, TTransportException):
        return exc.type == TTransportException.TIMED_OUT
    return isinstance(exc, TimeoutError)


def timeout_ms(timeout_s: float) -> int:
    """``timeout_s`` as happybase's socket timeout in ms, at least 1: thriftpy2 takes 0 for no timeout at all, so
    a positive timeout below 1 ms truncated to 0 would let every call wait forever."""
    return max(1, round(timeout_s * 1000))


def encode_columns(columns: dict[str, Column]) -> dict[bytes, bytes]:
    """Plain columns -> the record's one HBase cell ``d:j`` (its fields as a UTF-8 JSON object)."""
    return {RECORD_QUALIFIER: _JSON.encode(columns).encode()}


def decode_columns(table: str, cells: dict[bytes, bytes]) -> dict[str, Column]:
    """The record cell -> plain columns, typed by the table schema (a missing field reads as 0 / "").

    ``ValueError`` for a row that holds no readable record (no ``d:j`` cell, or one that is not a JSON object of
    the schema's types: written by hand, or half written by something else); ``scan`` skips such rows."""
    raw = cells.get(RECORD_QUALIFIER)
    if raw is None:
        names = ", ".join(sorted(name.decode(errors="replace") for name in cells)) or "none"
        raise ValueError(f"no {RECORD_QUALIFIER.decode()} cell (cells: {names})")
    try:
        data = json.loads(raw)
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        raise ValueError(f"{RECORD_QUALIFIER.decode()} is not JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise ValueError(f"{RECORD_QUALIFIER.decode()} is JSON but not an object")
    columns: dict[str, Column] = {}
    for name, kind in COLUMNS[table]:
        value = data.get(name)
        try:
            columns[name] = int(value or 0) if kind is int else str(value if value is not None else "")
        except (TypeError, ValueError) as exc:
            raise ValueError(f"field {name!r} is not an integer: {value!r:.40}") from exc
    return columns


class HBaseStore:
    """``RecordStore`` on HBase. Tables are created on first use, so the server can start while HBase is down."""

    name = "hbase"

    def __init__(self, host: str, port: int, *, pool_size: int, timeout_s: float, table_prefix: str = "") -> None:
        self.host = host
        self.port = port
        self.timeout_s = timeout_s
        self._pool_args: dict[str, Any] = {
            "size": pool_size,
            "host": host,
            "port": port,
            "timeout": timeout_ms(timeout_s),
            "autoconnect": False,
            "table_prefix": table_prefix or None,
            "transport": "buffered",
            "protocol": "binary",
        }
        self.table_prefix = table_prefix
        self._pool_instance: happybase.ConnectionPool | None = None
        #: Whether both tables were seen with family ``d``; reset by a failed put, so that a table dropped or
        #: altered while the server runs is checked (and re-created) again instead of failing every replay.
        self._ready = False
        self._was_ready = False
        #: Guards ``_probe``, ``_pool_instance`` and ``_busy``; never held over a network call, so no thread waits
        #: out another's Thrift timeout on it (before, the threads needing HBase took turns, each waiting
        #: ``timeout_s``, and a stop waited for all of them).
        self._lock = threading.Lock()
        #: The tables check under way (one at a time): other threads share its outcome instead of checking again.
        self._probe: Future[None] | None = None
        #: The connections of calls under way, whose sockets ``interrupt`` shuts down.
        self._busy: set[Any] = set()
        self._interrupted = threading.Event()

    @classmethod
    def from_settings(cls, settings: Settings) -> HBaseStore:
        return cls(
            settings.get_str("storage.hbase.host"),
            settings.get_int("storage.hbase.port"),
            pool_size=settings.get_int("storage.hbase.pool_size"),
            timeout_s=settings.get_float("storage.hbase.timeout_s"),
            table_prefix=settings.get_str("storage.hbase.table_prefix"),
        )

    @property
    def _pool(self) -> happybase.ConnectionPool:
        """Created on first use: happybase's pool connects in its constructor, and HBase may be down now. Made
        outside the lock (a connect may wait ``timeout_s``); of two made at once, the first installed is kept."""
        with self._lock:
            if self._pool_instance is not None:
                return self._pool_instance
        self._check_open()
        made = happybase.ConnectionPool(**self._pool_args)
        with self._lock:
            if self._pool_instance is None:
                self._pool_instance, made = made, None
            pool = self._pool_instance
        if made is not None:
            _close_idle(made)
        return pool

    def _check_open(self) -> None:
        """Refuse a call once ``interrupt`` ran: the service is stopping, and the caller spools."""
        if self._interrupted.is_set():
            raise StorageUnavailableError(f"HBase at {self.host}:{self.port}: the storage server is stopping")

    @contextlib.contextmanager
    def _acquired(self) -> Iterator[Any]:
        """A connection of the pool, waited for at most ``timeout_s`` in slices, so that a stop (``interrupt``)
        ends the wait at once."""
        pool = self._pool  # may connect first (up to ``timeout_s`` per connection): not part of the wait
        deadline = time.monotonic() + self.timeout_s
        while True:
            self._check_open()
            left = deadline - time.monotonic()
            held = contextlib.ExitStack()
            try:
                connection = held.enter_context(pool.connection(timeout=max(0.0, min(ACQUIRE_SLICE_S, left))))
            except happybase.pool.NoConnectionsAvailable:
                if left <= ACQUIRE_SLICE_S:
                    raise
                continue
            with held:
                yield connection
            return

    @contextlib.contextmanager
    def _connection(self) -> Iterator[Any]:
        """A pooled connection whose socket is closed when a call on it fails: happybase then gives the connection
        a new socket without closing the old one, which would stay open until the garbage collector finds it.
        While in use, ``interrupt`` can shut its socket down from another thread; any error after that (thriftpy2
        asserts on a socket closed between two calls of one put) is the stop's ``StorageUnavailableError``."""
        with self._acquired() as connection:
            with self._lock:
                self._busy.add(connection)
            try:
                self._check_open()
                yield connection
            except StorageUnavailableError:
                raise
            except Exception as exc:
                interrupted = self._interrupted.is_set()
                if interrupted or isinstance(exc, _BACKEND_ERRORS):
                    self._close_transport(connection)
                if interrupted and not isinstance(exc, _BACKEND_ERRORS):
                    raise StorageUnavailableError(
                        f"HBase at {self.host}:{self.port}: the call under way ended by the server's stop"
                    ) from exc
                raise
            finally:
                with self._lock:
                    self._busy.discard(connection)

    def _close_transport(self, connection: Any) -> None:
        """Close ``connection``'s socket, under the lock: thriftpy2's ``TSocket.close`` is not thread-safe (its
        shutdown wakes the thread reading the socket, which closes it too and sets it to ``None`` under the first
        close), and ``interrupt`` closes sockets that other threads use. A close does not block. Whatever it
        raises is dropped: the socket is being given up anyway."""
        with self._lock, contextlib.suppress(Exception):
            connection.transport.close()

    def _fail(self, what: str, exc: BaseException) -> StorageUnavailableError:
        if self._interrupted.is_set():  # its socket was shut down by ``interrupt``: no fault of the Thrift server
            return StorageUnavailableError(f"HBase at {self.host}:{self.port}: {what} ended by the server's stop")
        detail = (
            f"no answer within storage.hbase.timeout_s={self.timeout_s:g}s"
            " (HBase still starting, its master down, or the table disabled?)"
            if _timed_out(exc)
            else describe_error(exc)
        )
        if _dropped(exc):
            detail += (
                " (the Thrift server closed the connection: restarted, or not HBase's Thrift1 server with buffered"
                " transport and binary protocol, e.g. started with -framed or -compact)"
            )
        return StorageUnavailableError(f"HBase at {self.host}:{self.port}: {what} failed: {detail}")

    def _full_name(self, table: str) -> str:
        """The table's name in HBase (happybase adds the prefix): what an operator looks for in the shell."""
        return f"{self.table_prefix}_{table}" if self.table_prefix else table

    def _ensure_tables(self, connection: Any) -> None:
        """The tables checked once (``_check_tables``) before the first call and after a failed put. One thread
        checks; threads arriving meanwhile wait for its outcome instead of checking in turn, and no lock is held
        over the check's Thrift calls. A waiter has no deadline of its own: the check makes several calls, each
        bounded by ``timeout_s`` (a deadline of one ``timeout_s`` failed waiters while a slow HBase answered every
        call in time), and a stop ends the wait at once. When the Thrift server dropped the checking thread's
        connection (it restarted), a waiter starts or joins one more check, as the checking thread's put tries once
        more on a new connection."""
        for attempt in (1, 2):
            if self._ready:
                return
            with self._lock:
                if self._ready:
                    return
                probe, mine = self._probe, self._probe is None
                if probe is None:
                    probe = self._probe = Future()
            if mine:
                self._run_probe(probe, connection)
                return
            while not probe.done():
                self._check_open()
                futures_wait([probe], timeout=ACQUIRE_SLICE_S)
            try:
                probe.result()
            except StorageUnavailableError as exc:  # the checking thread raises the exception itself: a copy here
                raise StorageUnavailableError(str(exc)) from None
            except _BACKEND_ERRORS as exc:
                if attempt == 1 and _dropped(exc) and not self._interrupted.is_set():
                    continue
                raise self._fail("tables check", exc) from None
            return

    def _run_probe(self, probe: Future[None], connection: Any) -> None:
        """Check the tables on ``connection`` and hand the outcome to the threads waiting on ``probe``. The probe
        is no longer the one under way when they wake, so a waiter that checks again starts a new one."""
        try:
            self._check_tables(connection)
        except BaseException as exc:
            with self._lock:
                self._probe = None
            probe.set_exception(exc)
            raise
        with self._lock:
            self._probe = None
        probe.set_result(None)

    def _check_tables(self, connection: Any) -> None:
        """Create a missing table; refuse one without family ``d`` (every put to it would fail) with one line."""
        existing = {name.decode() for name in connection.tables()}
        for table in TABLES:
            if table in existing:
                self._check_families(table, connection.table(table).families())
                continue
            try:
                connection.create_table(table, {FAMILY: {"max_versions": 1}})
            except TException as exc:  # another server created it meanwhile
                if "exist" not in str(exc).lower():
                    raise
            (log.warning if self._was_ready else log.info)(
                "HBase table %s %s; created it",
                self._full_name(table),
                "vanished while the server ran" if self._was_ready else "did not exist",
            )
        self._ready = self._was_ready = True

    def _check_families(self, table: str, families: dict[bytes, Any]) -> None:
        """Refuse a table without family ``d``: every put to it would fail with a Java stack trace."""
        if FAMILY.encode() not in families:
            names = ", ".join(sorted(name.decode(errors="replace") for name in families)) or "none"
            raise StorageUnavailableError(
                f"HBase at {self.host}:{self.port}: table {self._full_name(table)} has column families [{names}], "
                f"not {FAMILY!r}: add family {FAMILY!r} (one version) or drop the table (the storage server "
                f"spools writes until then)"
            )

    def put(self, table: str, rows: Sequence[Row]) -> None:
        """One multi-row put. Tried once more, on a fresh connection, when the Thrift server had dropped the pooled
        one (it restarted since the connection was last used): HBase is up, and the put is idempotent."""
        if table not in TABLES:
            raise ValueError(f"unknown table {table!r}")
        for attempt in (1, 2):
            try:
                with self._connection() as connection:
                    self._ensure_tables(connection)
                    # No batch_size: the whole call is one mutateRows RPC, i.e. one multi-row put on the server.
                    with connection.table(table).batch() as batch:
                        for row in rows:
                            batch.put(row.key, encode_columns(row.columns))
                return
            except _BACKEND_ERRORS as exc:
                self._ready = False  # the table may be gone or altered: check it again before the next put
                if attempt == 1 and _dropped(exc) and not self._interrupted.is_set():
                    log.info(
                        "HBase at %s:%d dropped a pooled connection; putting again on a new one", self.host, self.port
                    )
                    continue
                raise self._fail("put", exc) from exc

    def scan(self, table: str, prefix: bytes = b"") -> Iterator[Row]:
        """Rows in key order; a row with no readable record (``decode_columns``) is skipped with a warning, so one
        bad row neither stops an export nor becomes a record of zeros."""
        if table not in TABLES:
            raise ValueError(f"unknown table {table!r}")
        skipped = 0
        try:
            with self._connection() as connection:
                self._ensure_tables(connection)
                for key, cells in connection.table(table).scan(row_prefix=prefix or None, batch_size=500):
                    try:
                        columns = decode_columns(table, cells)
                    except ValueError as exc:
                        skipped += 1
                        if skipped <= MAX_SKIP_WARNINGS:
                            log.warning("HBase table %s: row %s skipped: %s", self._full_name(table), key.hex(), exc)
                        continue
                    yield Row(key, columns)
        except _BACKEND_ERRORS as exc:
            raise self._fail("scan", exc) from exc
        if skipped:
            log.warning(
                "HBase table %s: %d unreadable row(s) skipped (left as they are in HBase)",
                self._full_name(table),
                skipped,
            )

    def count(self, table: str) -> int:
        if table not in TABLES:
            raise ValueError(f"unknown table {table!r}")
        try:
            with self._connection() as connection:
                self._ensure_tables(connection)
                scanner = connection.table(table).scan(
                    filter=b"FirstKeyOnlyFilter() AND KeyOnlyFilter()", batch_size=5000
                )
                return sum(1 for _ in scanner)
        except _BACKEND_ERRORS as exc:
            raise self._fail("count", exc) from exc

    def delete_prefix(self, table: str, prefix: bytes) -> int:
        if table not in TABLES:
            raise ValueError(f"unknown table {table!r}")
        deleted = 0
        try:
            with self._connection() as connection:
                self._ensure_tables(connection)
                handle = connection.table(table)
                keys = handle.scan(row_prefix=prefix or None, filter=b"KeyOnlyFilter()", batch_size=5000)
                with handle.batch(batch_size=1000) as batch:  # deletes in RPCs of 1000 rows
                    for key, _ in keys:
                        batch.delete(key)
                        deleted += 1
        except _BACKEND_ERRORS as exc:
            raise self._fail("delete", exc) from exc
        return deleted

    def drop_tables(self) -> None:
        """Delete this store's tables (tests use a per-run table prefix and clean up with this)."""
        try:
            with self._connection() as connection:
                existing = {name.decode() for name in connection.tables()}
                for table in TABLES:
                    if table in existing:
                        connection.delete_table(table, disable=True)
            self._ready = self._was_ready = False
        except _BACKEND_ERRORS as exc:
            raise self._fail("drop tables", exc) from exc

    def interrupt(self) -> None:
        """End the calls under way now and refuse new ones (the service is stopping): each busy connection's
        socket is shut down from this thread, so a call waiting on a Thrift server that never answers fails at
        once (its caller spools or keeps its spooled entry) instead of after ``timeout_s``. happybase's pool then
        opens a new socket for the connection at once: it gets ``INTERRUPTED_CONNECT_MS`` to connect, not
        ``timeout_s``. Never raises."""
        self._interrupted.set()
        with self._lock:
            busy = list(self._busy)
        for connection in busy:
            connection.timeout = INTERRUPTED_CONNECT_MS  # what happybase's _refresh_thrift_client builds from
            self._close_transport(connection)

    def close(self) -> None:
        """happybase pools have no close; drop idle connections by letting the pool go."""
        self.interrupt()
        if self._pool_instance is not None:
            _close_idle(self._pool_instance)


def _close_idle(pool: happybase.ConnectionPool) -> None:
    """Close the connections waiting in ``pool`` (happybase's pools have no close of their own)."""
    queue = getattr(pool, "_queue", None)
    while queue is not None and not queue.empty():
        with contextlib.suppress(Empty, *_BACKEND_ERRORS):
            queue.get_nowait().close()
