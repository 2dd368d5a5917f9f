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
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import happybase
import pytest

from icecrawler import rpc
from icecrawler.errors import StorageUnavailableError
from icecrawler.processes import free_port
from icecrawler_local.hbase_local import LocalHBase
from storage_server import schema
from storage_server.export import export
from storage_server.hbase_store import MAX_ERROR_CHARS, HBaseStore
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
