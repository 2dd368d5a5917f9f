"""Stopping a storage server while HBase hangs: its Thrift port takes connections and never answers (HBase's master
down under a live Thrift server, a Thrift server stopped in a debugger). The stop must not wait out the Thrift
timeout of each call under way, one after another, and must lose nothing: every acknowledged record is in the
spool and reaches a store after the restart. A real storage daemon over real Ice, a real TCP peer that never
answers (no HBase needed), the real spool, and the embedded store after the restart."""

from __future__ import annotations

import contextlib
import signal
import socket
import sqlite3
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from icecrawler import rpc
from storage_server import schema
from storage_server.stores import SqliteStore
from tests.helpers import wait_for
from tests.storage.conftest import StorageServerRunner, make_review

pytestmark = [pytest.mark.ice]

#: Thrift timeout of each call: far longer than the stop may take, so a stop that waits for the calls shows.
HBASE_TIMEOUT_S = 120
#: Batches written at once: more than the pool's connections, so some calls wait for a connection, some for the
#: tables check, some sit on a socket.
BATCHES = 6
BATCH = 20
#: The wait for the stop: generous for a loaded machine, and far below one Thrift timeout.
STOP_WAIT_S = 60.0


def spooled_review_ids(spool_dir: Path) -> list[str]:
    """Every review id in the spool file, read as the next start reads it."""
    with contextlib.closing(sqlite3.connect(spool_dir / "spool.sqlite3")) as spool:
        rows = spool.execute("SELECT blob FROM spool ORDER BY seq").fetchall()
    ids: list[str] = []
    for (blob,) in rows:
        table, decoded = schema.decode_rows(bytes(blob))
        assert table == schema.REVIEW
        ids += [str(row.columns["id"]) for row in decoded]
    return ids


def test_a_storage_server_stops_promptly_while_hbase_hangs_and_loses_nothing(tmp_path: Path, client_comm: Any) -> None:
    """Before, the tables check held a lock over its Thrift call, so every thread that needed HBase (the writers,
    the replay, the count) waited its turn, each for storage.hbase.timeout_s, and the stop waited for all of them:
    past two minutes here, past systemd's TimeoutStopSec (then SIGKILL) with the default 10 s and a few writes."""
    with socket.create_server(("127.0.0.1", 0), backlog=64) as silent:  # the kernel accepts; nobody answers
        runner = StorageServerRunner(
            tmp_path / "server",
            {
                "storage.backend": "hbase",
                "storage.hbase.port": str(silent.getsockname()[1]),
                "storage.hbase.timeout_s": str(HBASE_TIMEOUT_S),
                "storage.write_timeout_s": "1",
            },
        )
        runner.start()
        assert runner.process is not None
        proxy = runner.proxy(client_comm).ice_invocationTimeout(60_000)
        written = [[f"b{batch}-r{n}" for n in range(BATCH)] for batch in range(BATCHES)]
        acks: list[Any] = []
        errors: list[BaseException] = []

        def write(ids: list[str]) -> None:
            try:
                acks.append(proxy.writeReviews([rpc.review_to_slice(make_review(i)) for i in ids]))
            except BaseException as exc:  # reported by the assertion below
                errors.append(exc)

        writers = [threading.Thread(target=write, args=(ids,)) for ids in written]
        for thread in writers:
            thread.start()
        for thread in writers:
            thread.join(timeout=STOP_WAIT_S)
        assert not errors and len(acks) == BATCHES, errors
        assert all((ack.stored, ack.spooled) == (0, BATCH) for ack in acks), acks

        runner.process.popen.send_signal(signal.SIGTERM)
        try:
            code = runner.process.popen.wait(timeout=STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            runner.kill9()
            raise AssertionError(
                f"the storage server was still stopping {STOP_WAIT_S:g} s after SIGTERM:\n{runner.process.log_tail()}"
            ) from None
        runner.stop()
        assert code == 0, runner.process.log_tail()

    every_id = sorted(i for ids in written for i in ids)
    spool_dir = Path(runner.assignments["storage.spool_dir"])
    assert sorted(spooled_review_ids(spool_dir)) == every_id  # each acknowledged record, durable

    runner.assignments["storage.backend"] = "embedded"  # the same spool, now with a store that answers
    runner.start()
    try:
        wait_for(lambda: proxy.stats().spoolDepth == 0, "the spool never drained into the store", 60.0)
    finally:
        runner.stop()
    store = SqliteStore(runner.assignments["storage.embedded.path"])
    try:
        assert sorted(str(row.columns["id"]) for row in store.scan(schema.REVIEW)) == every_id
    finally:
        store.close()
