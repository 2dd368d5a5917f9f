"""The HBase tables as a hostile operator or harness leaves them: created with another column family, dropped while
the server runs; and HBase not there at all when the storage server starts. Nothing acknowledged may be lost, the
error must be one readable line (not HBase's Java stack trace), and once the table is right the spool drains by
itself. Real HBase through its Thrift server, real storage server processes."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import wait as futures_wait
from pathlib import Path
from typing import Any

import happybase
import pytest
from happybase.connection import ColumnDescriptor, Hbase
from thriftpy2.rpc import make_server
from thriftpy2.transport import TSocket, TTransportException

from icecrawler import rpc
from icecrawler.errors import StorageUnavailableError
from icecrawler.processes import free_port
from icecrawler_local.hbase_local import LocalHBase
from storage_server import hbase_store, schema
from storage_server.export import export
from storage_server.hbase_store import MAX_ERROR_CHARS, HBaseStore, timeout_ms
from storage_server.service import StorageService
from storage_server.spool import SqliteSpool
from tests.helpers import wait_for
from tests.storage.conftest import StorageServerRunner, make_post

#: Longest a line about the backend may be: the summary, the host and what failed.
LINE_LIMIT = MAX_ERROR_CHARS + 200


@pytest.fixture
def hbase(local_hbase: LocalHBase, table_prefix: str) -> Iterator[happybase.Connection]:
    """A plain happybase connection in the test's table namespace (the "operator"); drops the tables after."""
    connection = happybase.Connection("127.0.0.1", local_hbase.thrift_port, table_prefix=table_prefix, timeout=60000)
    yield connection
    for name in connection.tables():
        connection.delete_table(name, disable=True)
    connection.close()


@pytest.fixture
def service(local_hbase: LocalHBase, table_prefix: str, tmp_path: Path) -> Iterator[StorageService]:
    store = HBaseStore("127.0.0.1", local_hbase.thrift_port, pool_size=2, timeout_s=30.0, table_prefix=table_prefix)
    service = StorageService(
        store, SqliteSpool(str(tmp_path / "spool")), max_text_chars=1000, batch_limit=100, write_timeout_s=30.0
    )
    yield service
    service.close()


def stored_ids(service: StorageService) -> list[int]:
    return [int(row.columns["id"]) for row in service.store.scan(schema.WEIBO)]


@pytest.mark.hbase
def test_a_table_without_family_d_spools_with_one_clear_line_and_drains_once_the_table_is_fixed(
    hbase: happybase.Connection, service: StorageService, table_prefix: str
) -> None:
    hbase.create_table("weibo", {"x": {}})
    result = service.write_posts([make_post(1), make_post(2)])
    assert (result.stored, result.spooled) == (0, 2)  # acknowledged, durably, though HBase refused it
    error = service.stats().detail["last_backend_error"]
    assert f"table {table_prefix}_weibo has column families [x], not 'd'" in error, error
    assert "\n" not in error and len(error) < LINE_LIMIT, error
    assert service.spool.depth() == 2  # records, not batches

    hbase.delete_table("weibo", disable=True)  # the operator's fix: the server creates the table as it needs it
    assert service.wait_drained(120.0), service.stats().detail["last_backend_error"]
    assert sorted(stored_ids(service)) == [1, 2]
    assert service.stats().detail["backend_up"] is True


@pytest.mark.hbase
def test_a_table_dropped_while_the_server_runs_is_created_again_and_nothing_is_lost(
    hbase: happybase.Connection, service: StorageService
) -> None:
    assert service.write_posts([make_post(1)]).stored == 1
    hbase.delete_table("weibo", disable=True)
    result = service.write_posts([make_post(2)])  # HBase refuses the put: spooled, then replayed into a new table
    assert result.stored + result.spooled == 1
    assert service.wait_drained(120.0), service.stats().detail["last_backend_error"]
    error = service.stats().detail["last_backend_error"]
    assert "\n" not in error and len(error) < LINE_LIMIT, error
    assert stored_ids(service) == [2]  # the dropped row is gone with its table; the acknowledged one is there
    assert service.write_posts([make_post(3)]).stored == 1


@pytest.mark.ice
def test_a_storage_server_started_while_hbase_is_down_names_the_cause(
    storage_server: Callable[..., StorageServerRunner], client_comm: Any
) -> None:
    closed = free_port()  # nothing listens there: HBase's Thrift server is down
    server = storage_server(**{"storage.backend": "hbase", "storage.hbase.port": closed, "storage.hbase.timeout_s": 2})
    process = server.process
    assert process is not None
    wait_for(lambda: "did not answer a row count" in process.log_tail(200), lambda: process.log_tail(200), 30.0)
    lines = [line for line in process.log_tail(200).splitlines() if "did not answer a row count" in line]
    assert len(lines) == 1, process.log_tail(200)
    assert f"Could not connect to ('127.0.0.1', {closed})" in lines[0], lines[0]  # why, not only "down, or slow"
    assert f"at 127.0.0.1:{closed} (Thrift)" in lines[0] and "spooled in" in lines[0], lines[0]  # where, and the spool
    ack = server.proxy(client_comm).writeWB([rpc.post_to_slice(make_post(1))])
    assert (ack.stored, ack.spooled) == (0, 1)


@pytest.mark.hbase
def test_half_written_and_foreign_rows_are_skipped_with_a_warning_and_the_export_goes_on(
    hbase: happybase.Connection, service: StorageService, table_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    assert service.write_posts([make_post(1), make_post(2)]).stored == 2
    table = hbase.table("weibo")
    table.put(b"\x00half", {b"d:j": b'{"id": 3, "te'})  # a record cell cut short
    table.put(b"\x00list", {b"d:j": b"[3]"})
    table.put(b"\x00word", {b"d:j": b'{"id": "three"}'})
    table.put(b"\x00bare", {b"d:x": b"1"})  # no record cell at all: not a record of zeros
    out = io.StringIO()
    with caplog.at_level(logging.WARNING, logger="storage_server.hbase_store"):
        assert export(service.store, "weibo", out) == 2
    assert sorted(json.loads(line)["id"] for line in out.getvalue().splitlines()) == [1, 2]
    warnings = [record.getMessage() for record in caplog.records]
    assert any(b"\x00half".hex() in line and "is not JSON" in line for line in warnings), warnings
    assert any(b"\x00bare".hex() in line and "no d:j cell" in line for line in warnings), warnings
    assert f"HBase table {table_prefix}_weibo: 4 unreadable row(s) skipped (left as they are in HBase)" in warnings
    assert len(list(table.scan())) == 6  # nothing deleted


def assert_put_fails(port: int, timeout_s: float, message: str) -> None:
    """A put to a Thrift stand-in on ``port`` fails with a StorageUnavailableError matching ``message``."""
    store = HBaseStore("127.0.0.1", port, pool_size=1, timeout_s=timeout_s)
    try:
        with pytest.raises(StorageUnavailableError, match=message):
            store.put(schema.WEIBO, [schema.post_row(make_post(1))])
    finally:
        store.close()


def test_a_thrift_port_that_takes_connections_but_never_answers_fails_with_the_setting_that_bounds_it() -> None:
    """HBase slow to come up, or its master killed under a running Thrift server: the call hangs, bounded."""
    with socket.create_server(("127.0.0.1", 0)) as silent:  # the kernel accepts connections; nobody answers
        assert_put_fails(silent.getsockname()[1], 1.0, r"no answer within storage\.hbase\.timeout_s=1s")


def test_calls_waiting_on_a_thrift_port_that_never_answers_end_when_the_store_is_interrupted() -> None:
    """A stop while HBase hangs: the call on a socket (the tables check), the one waiting for that check's outcome
    and the one waiting for a pooled connection all end with StorageUnavailableError once ``interrupt`` shuts the
    sockets down, not after storage.hbase.timeout_s each; later calls are refused at once."""
    with socket.create_server(("127.0.0.1", 0), backlog=16) as silent:
        store = HBaseStore("127.0.0.1", silent.getsockname()[1], pool_size=2, timeout_s=600.0)
        errors: list[BaseException] = []

        def put(post_id: int) -> None:
            try:
                store.put(schema.WEIBO, [schema.post_row(make_post(post_id))])
            except BaseException as exc:  # reported by the assertions below
                errors.append(exc)

        callers = [threading.Thread(target=put, args=(n,)) for n in range(3)]
        try:
            for thread in callers:
                thread.start()
            wait_for(lambda: len(store._busy) == 2, "the puts never took both pooled connections", 30.0, 0.05)
            store.interrupt()
            for thread in callers:
                thread.join(timeout=60.0)
            assert not any(thread.is_alive() for thread in callers), "a put still waits after the interrupt"
            assert len(errors) == 3 and all(isinstance(exc, StorageUnavailableError) for exc in errors), errors
            with pytest.raises(StorageUnavailableError, match="stopping"):
                store.put(schema.WEIBO, [schema.post_row(make_post(9))])
        finally:
            store.close()


def test_a_thrift_server_that_hangs_up_on_every_request_is_named_as_a_transport_or_protocol_mismatch() -> None:
    """What an HBase Thrift server started with -framed or -compact does with happybase's buffered binary call."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        stop = threading.Event()

        def hang_up() -> None:
            server.settimeout(0.2)
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    connection, _ = server.accept()
                    with connection:
                        connection.settimeout(5.0)
                        with contextlib.suppress(OSError):
                            connection.recv(4)

        thread = threading.Thread(target=hang_up, daemon=True)
        thread.start()
        try:
            assert_put_fails(server.getsockname()[1], 10.0, r"buffered transport and binary protocol")
        finally:
            stop.set()
            thread.join(timeout=5.0)


class StandInHBase:
    """The calls of HBase's Thrift1 interface a put makes, answered by a real Thrift server on loopback (thriftpy2,
    happybase's own interface definition): HBase answering, or dropping a connection, on a cue from the test, which
    a real HBase cannot be made to do on demand."""

    def __init__(self, *, drop_first_check: bool = False) -> None:
        self.puts = 0
        self._lock = threading.Lock()
        #: Set when the first tables check reaches the server.
        self.checking = threading.Event()
        #: Set by the test once a put waits for the outcome of the tables check under way.
        self.waiter = threading.Event()
        #: Whether the dropped check saw a put waiting for it (else the test shows nothing).
        self.dropped_with_a_waiter = False
        self._drop = drop_first_check

    def getTableNames(self) -> list[bytes]:
        first = not self.checking.is_set()
        self.checking.set()
        if first and self._drop:
            # Hang up only once another put waits for this check's outcome, so that put sees the dropped connection.
            self.dropped_with_a_waiter = self.waiter.wait(60.0)
            raise TTransportException(TTransportException.END_OF_FILE, "dropped")  # the server hangs up
        return [table.encode() for table in schema.TABLES]

    def getColumnDescriptors(self, name: bytes) -> dict[bytes, ColumnDescriptor]:
        return {b"d:": ColumnDescriptor(name=b"d:", maxVersions=1)}

    def mutateRows(self, table: bytes, batches: list[Any], attributes: dict[bytes, bytes]) -> None:
        with self._lock:
            self.puts += 1


@contextlib.contextmanager
def thrift_stand_in(handler: StandInHBase) -> Iterator[int]:
    """``handler`` served on a loopback port (yielded) until the block ends."""
    port = free_port()
    server = make_server(Hbase, handler, "127.0.0.1", port, client_timeout=0)  # 0: a client may stay idle
    server.trans.listen()  # before the first put connects

    def serve() -> None:
        """``server.serve`` without its ``listen``, ending when the listening socket is closed."""
        while True:
            try:
                client = server.trans.accept()
            except (OSError, AssertionError):  # closed: the block ended
                return
            threading.Thread(target=server.handle, args=(client,), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield port
    finally:
        server.trans.close()
        thread.join(timeout=10.0)


def put_concurrently(store: HBaseStore, post_ids: Sequence[int]) -> list[BaseException | None]:
    """One put per id, each in its own thread, all at once; each put's outcome (None: stored)."""
    outcomes: list[BaseException | None] = [None] * len(post_ids)

    def put(index: int) -> None:
        try:
            store.put(schema.WEIBO, [schema.post_row(make_post(post_ids[index]))])
        except BaseException as exc:  # reported by the callers' assertions
            outcomes[index] = exc

    threads = [threading.Thread(target=put, args=(index,), daemon=True) for index in range(len(post_ids))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120.0)
    assert not any(thread.is_alive() for thread in threads), "a put never ended"
    return outcomes


def test_puts_waiting_for_a_slow_tables_check_succeed_when_hbase_answers_every_call_in_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The tables check makes several Thrift calls, each bounded by storage.hbase.timeout_s, so in all it may take
    longer than timeout_s while HBase answers every call in time. Before, the puts waiting for that check gave up
    after one timeout_s and spooled. Here the check is held for several timeout_s (longer would only make the old
    deadline fail more surely)."""
    timeout_s = 0.2
    handler = StandInHBase()
    with thrift_stand_in(handler) as port:
        store = HBaseStore("127.0.0.1", port, pool_size=4, timeout_s=timeout_s)
        check_tables = store._check_tables
        release = threading.Event()

        def held_check(connection: happybase.Connection) -> None:
            assert release.wait(60.0), "the test never released the tables check"
            check_tables(connection)

        monkeypatch.setattr(store, "_check_tables", held_check)
        outcomes: list[BaseException | None] = []
        puts = threading.Thread(target=lambda: outcomes.extend(put_concurrently(store, [1, 2, 3, 4])), daemon=True)
        try:
            puts.start()
            time.sleep(5 * timeout_s)
            release.set()
            puts.join(timeout=120.0)
            assert not puts.is_alive(), "the puts never ended"
            assert outcomes == [None] * 4, outcomes
        finally:
            release.set()
            store.close()
    assert handler.puts == 4


def test_a_put_waiting_for_a_tables_check_whose_connection_the_thrift_server_dropped_checks_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Thrift server restarted since the pool's connections were opened: the checking put tries once more on a
    new connection. Before, a put waiting for that check failed with the dropped connection and spooled."""
    handler = StandInHBase(drop_first_check=True)

    def waiting(*args: Any, **kwargs: Any) -> Any:
        """``futures_wait`` as the store calls it to wait for the check under way, telling the stand-in so."""
        handler.waiter.set()
        return futures_wait(*args, **kwargs)

    monkeypatch.setattr(hbase_store, "futures_wait", waiting)
    with thrift_stand_in(handler) as port:
        store = HBaseStore("127.0.0.1", port, pool_size=2, timeout_s=30.0)
        outcomes: list[BaseException | None] = []
        first = threading.Thread(target=lambda: outcomes.extend(put_concurrently(store, [1])), daemon=True)
        try:
            first.start()
            assert handler.checking.wait(60.0), "the first put never checked the tables"
            outcomes.extend(put_concurrently(store, [2]))
            first.join(timeout=120.0)
            assert not first.is_alive(), "the first put never ended"
            assert outcomes == [None, None], outcomes
        finally:
            store.close()
    assert handler.dropped_with_a_waiter, "the second put never waited for the first one's tables check"
    assert handler.puts == 2


#: The store's calls that check the tables and then make more Thrift calls on the same connection.
CALLS_AFTER_THE_CHECK: dict[str, Callable[[HBaseStore], object]] = {
    "put": lambda store: store.put(schema.WEIBO, [schema.post_row(make_post(1))]),
    "count": lambda store: store.count(schema.WEIBO),
    "scan": lambda store: list(store.scan(schema.WEIBO)),
    "delete_prefix": lambda store: store.delete_prefix(schema.WEIBO, b"\x00"),
}


@pytest.mark.parametrize("call", CALLS_AFTER_THE_CHECK.values(), ids=CALLS_AFTER_THE_CHECK.keys())
def test_a_stop_between_two_thrift_calls_ends_the_call_as_the_stops(
    monkeypatch: pytest.MonkeyPatch, call: Callable[[HBaseStore], object]
) -> None:
    """Before, the next call on the socket the stop had closed failed thriftpy2's ``assert sock is not None``: a
    bare AssertionError, which the service does not take for a backend that is unavailable."""
    with thrift_stand_in(StandInHBase()) as port:
        store = HBaseStore("127.0.0.1", port, pool_size=1, timeout_s=30.0)
        check_tables = store._check_tables

        def check_then_stop(connection: happybase.Connection) -> None:
            check_tables(connection)
            stop = threading.Thread(target=store.interrupt)  # the stop, from the service's thread
            stop.start()
            stop.join(timeout=30.0)

        monkeypatch.setattr(store, "_check_tables", check_then_stop)
        try:
            with pytest.raises(StorageUnavailableError, match="ended by the server's stop") as raised:
                call(store)
            assert isinstance(raised.value.__cause__, AssertionError), repr(raised.value.__cause__)
        finally:
            store.close()


#: How long the interrupting close of ``RacingSocket`` lets the reading thread close the socket first.
RACE_WAIT_S = 3.0


class RacingSocket(TSocket):
    """thriftpy2's socket, whose ``close`` (shut down, close, set to None) is not thread-safe, with the
    interleaving that made ``interrupt`` raise forced: the shutdown from another thread wakes the thread reading
    the socket, which closes it and sets it to None before the interrupting close goes on."""

    reading = threading.Event()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reader: int | None = None
        self.reader_closed = threading.Event()

    def read(self, sz: int) -> bytes:
        self.reader = threading.get_ident()
        RacingSocket.reading.set()
        return super().read(sz)

    def close(self) -> None:
        if self.sock is None or self.reader in (None, threading.get_ident()):
            super().close()
            self.reader_closed.set()
            return
        self.sock.shutdown(socket.SHUT_RDWR)  # thriftpy2's close, step by step
        self.reader_closed.wait(RACE_WAIT_S)
        self.sock.close()
        self.sock = None


def test_an_interrupt_racing_the_close_of_the_interrupted_call_does_not_raise(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before, ``interrupt`` raised AttributeError ('NoneType' object has no attribute 'close') in about one stop
    in fifteen while HBase hung: the storage server's stop was cut short and the daemon exited 1."""
    monkeypatch.setattr(happybase.connection, "TSocket", RacingSocket)
    RacingSocket.reading.clear()
    with socket.create_server(("127.0.0.1", 0)) as silent:  # the kernel accepts connections; nobody answers
        store = HBaseStore("127.0.0.1", silent.getsockname()[1], pool_size=1, timeout_s=600.0)
        outcome: list[BaseException | None] = []
        caller = threading.Thread(target=lambda: outcome.extend(put_concurrently(store, [1])), daemon=True)
        caller.start()
        try:
            assert RacingSocket.reading.wait(60.0), "the put never waited for an answer"
            store.interrupt()
            caller.join(timeout=120.0)
            assert not caller.is_alive(), "the put still waits after the interrupt"
            assert len(outcome) == 1 and isinstance(outcome[0], StorageUnavailableError), outcome
        finally:
            store.close()


def test_an_interrupted_call_does_not_wait_to_reconnect_to_a_thrift_port_that_drops_connection_attempts() -> None:
    """happybase's pool gives a connection whose call failed a new socket at once. Before, that connect was
    allowed storage.hbase.timeout_s, and a Thrift host dropping connection attempts (here a full accept queue)
    held the interrupted call, and so the stop, that long."""
    with socket.create_server(("127.0.0.1", 0), backlog=0) as full:
        full.settimeout(60.0)
        port = full.getsockname()[1]
        store = HBaseStore("127.0.0.1", port, pool_size=1, timeout_s=600.0)
        outcome: list[BaseException | None] = []
        caller = threading.Thread(target=lambda: outcome.extend(put_concurrently(store, [1])), daemon=True)
        caller.start()
        fillers: list[socket.socket] = []
        try:
            accepted, _ = full.accept()  # the pool's connection ...
            with accepted:
                accepted.settimeout(60.0)
                assert accepted.recv(1), "the put never called"  # ... with the put's first call on it
                for _ in range(8):  # fill the accept queue: the kernel drops further connection attempts
                    filler = socket.socket()
                    filler.setblocking(False)
                    filler.connect_ex(("127.0.0.1", port))
                    fillers.append(filler)
                with socket.socket() as attempt:
                    attempt.settimeout(1.0)
                    try:
                        attempt.connect(("127.0.0.1", port))
                    except TimeoutError:
                        pass  # the precondition: connection attempts to the port are dropped
                    except OSError as exc:
                        pytest.skip(
                            f"precondition not met: this kernel refuses connections to a full accept queue "
                            f"(net.ipv4.tcp_abort_on_overflow=1?) instead of dropping them: {exc!r}"
                        )
                    else:
                        pytest.skip("precondition not met: this kernel accepted a connection past a full accept queue")
                store.interrupt()
                caller.join(timeout=60.0)
                assert not caller.is_alive(), "the interrupted put still waits to reconnect"
                assert len(outcome) == 1 and isinstance(outcome[0], StorageUnavailableError), outcome
                assert "ended by the server's stop" in str(outcome[0])
        finally:
            for filler in fillers:
                filler.close()
            store.close()


def test_a_timeout_below_one_millisecond_is_not_taken_for_no_timeout() -> None:
    """thriftpy2 takes a socket timeout of 0 ms for none at all. Before, storage.hbase.timeout_s=0.0004 became 0 ms:
    every call to a Thrift server that never answers waited forever, and so did the stop."""
    with socket.create_server(("127.0.0.1", 0)) as silent:  # the kernel accepts connections; nobody answers
        store = HBaseStore("127.0.0.1", silent.getsockname()[1], pool_size=1, timeout_s=0.0004)
        outcome: list[BaseException | None] = []
        caller = threading.Thread(target=lambda: outcome.extend(put_concurrently(store, [1])), daemon=True)
        caller.start()
        try:
            caller.join(timeout=60.0)
            assert not caller.is_alive(), "the put still waits for an answer"
            assert len(outcome) == 1 and isinstance(outcome[0], StorageUnavailableError), outcome
        finally:
            store.close()
    assert [timeout_ms(s) for s in (0.0004, 0.001, 0.0016, 2.5)] == [1, 1, 2, 2500]
