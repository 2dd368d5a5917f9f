"""Nothing acknowledged is lost: HBase is killed with ``kill -9`` mid-stream (its write-ahead log must bring back
every put it acknowledged), the storage server is kill -9'd with a full spool, both come back, and every
acknowledged record is in HBase exactly once. Real HBase, real Ice server.

One HBase crash/start cycle (slow on two cores); it restarts the shared HBase that `make test` started.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from typing import Any

import happybase
import pytest

from icecrawler import rpc
from icecrawler_local.hbase_local import LocalHBase
from storage_server.hbase_store import HBaseStore, decode_columns
from tests.helpers import wait_for
from tests.storage.conftest import BIG_ID, StorageServerRunner, make_post

pytestmark = [pytest.mark.hbase, pytest.mark.ice, pytest.mark.slow]

BATCH = 50
USERS = 7


def post_batch(start: int) -> list[Any]:
    """BATCH posts with ids start.. (above 2**53), spread over a few users and minutes."""
    return [
        rpc.post_to_slice(make_post(BIG_ID - start - i, user_id=1000 + (start + i) % USERS, minute=i % 60))
        for i in range(BATCH)
    ]


def stored_ids(port: int, prefix: str) -> list[int]:
    connection = happybase.Connection("127.0.0.1", port, table_prefix=prefix, timeout=60000)
    try:
        return [int(decode_columns("weibo", cells)["id"]) for _, cells in connection.table("weibo").scan()]
    finally:
        connection.close()


def test_hbase_outage_and_storage_kill9_lose_nothing(
    local_hbase: LocalHBase, table_prefix: str, storage_server: Callable[..., StorageServerRunner], client_comm: Any
) -> None:
    # The tables exist before the healthy phase. Creating them is the server's first write, and on a loaded two-core
    # machine that can take longer than the 3 s write timeout below, which would spool the whole phase (as designed).
    store = HBaseStore("127.0.0.1", local_hbase.thrift_port, pool_size=1, timeout_s=60, table_prefix=table_prefix)
    try:
        assert list(store.scan("weibo")) == []
    finally:
        store.close()
    server = storage_server(
        **{
            "storage.backend": "hbase",
            "storage.hbase.port": str(local_hbase.thrift_port),
            "storage.hbase.table_prefix": table_prefix,
            "storage.write_timeout_s": "3",
            "storage.hbase.timeout_s": "3",
        }
    )
    proxy = server.proxy(client_comm).ice_invocationTimeout(60000)
    acked: list[int] = []
    next_id = 0
    spooled = 0

    def write(batches: int) -> None:
        nonlocal next_id, spooled
        for _ in range(batches):
            batch = post_batch(next_id)
            ack = proxy.writeWB(batch)
            assert ack.stored + ack.spooled == BATCH
            spooled += ack.spooled
            acked.extend(post.id for post in batch)
            next_id += BATCH

    write(6)  # healthy: straight into HBase
    assert spooled == 0
    try:
        local_hbase.kill9()  # a crash: the 6 batches HBase acknowledged must survive it (write-ahead log)
        write(6)  # HBase gone: every batch is spooled, none refused
        redelivered = post_batch(0)
        assert proxy.writeWB(redelivered).spooled == BATCH  # a re-delivered batch, spooled a second time
        depth = proxy.stats().spoolDepth
        assert depth >= 6 * BATCH

        server.kill9()  # crash with a full spool
        server.start()  # same spool directory
        proxy = server.proxy(client_comm).ice_invocationTimeout(60000)
        assert proxy.stats().spoolDepth == depth  # nothing lost, nothing replayed yet
        write(2)  # still down: queued behind the spool
    finally:
        local_hbase.start()

    wait_for(lambda: proxy.stats().spoolDepth == 0, "the spool never drained into HBase", 180.0)
    write(2)  # healthy again
    ids = stored_ids(local_hbase.thrift_port, table_prefix)
    assert len(ids) == len(set(ids)), "a record is stored twice"
    assert set(ids) == set(acked)
    assert len(ids) == 16 * BATCH
    # stats count the rows in HBase itself (on a thread of their own; a call may still see the previous count)
    wait_for(lambda: proxy.stats().posts == 16 * BATCH, "stats() never counted every record", 60.0)
    assert proxy.stats().spoolDepth == 0
    happybase_connection = happybase.Connection("127.0.0.1", local_hbase.thrift_port, table_prefix=table_prefix)
    try:
        for table in ("weibo", "review"):
            happybase_connection.delete_table(table, disable=True)
    finally:
        happybase_connection.close()


#: Trials of the mid-write kill, and the largest batch the server takes (its put to HBase takes a moment).
MID_WRITE_TRIALS = 4
BIG_BATCH = 5000


def test_storage_killed_mid_write_then_the_batch_resent_leaves_every_row_once(
    local_hbase: LocalHBase, table_prefix: str, storage_server: Callable[..., StorageServerRunner], client_comm: Any
) -> None:
    """kill -9 of the storage server while a big writeWB is on its way into HBase (some rows put, some not: HBase's
    multi-row put is atomic per row only), at a few seeded moments; the client's rule then applies (a batch
    without an acknowledgement is sent again) and every record is in HBase once, none twice, none half."""
    rng = random.Random(20261207)
    server = storage_server(
        **{
            "storage.backend": "hbase",
            "storage.hbase.port": str(local_hbase.thrift_port),
            "storage.hbase.table_prefix": table_prefix,
            "storage.write_timeout_s": "60",
        }
    )
    sent: set[int] = set()
    interrupted = 0
    for trial in range(MID_WRITE_TRIALS):
        batch = [
            rpc.post_to_slice(make_post(BIG_ID - trial * BIG_BATCH - i, user_id=1000 + i % USERS, minute=i % 60))
            for i in range(BIG_BATCH)
        ]
        proxy = server.proxy(client_comm).ice_invocationTimeout(120000)
        proxy.ice_ping()  # connected: the kill below lands in the call, not before it
        killer = threading.Timer(rng.uniform(0.02, 0.2), server.kill9)
        killer.start()
        try:
            proxy.writeWB(batch)
        except Exception:  # the kill beat the acknowledgement: what a client sees, and why it resends
            interrupted += 1
        killer.join()
        server.start()
        ack = server.proxy(client_comm).ice_invocationTimeout(120000).writeWB(batch)
        assert ack.stored + ack.spooled == BIG_BATCH
        sent.update(post.id for post in batch)
    proxy = server.proxy(client_comm).ice_invocationTimeout(60000)
    wait_for(lambda: proxy.stats().spoolDepth == 0, "the spool never drained into HBase", 120.0)
    ids = stored_ids(local_hbase.thrift_port, table_prefix)
    assert len(ids) == len(set(ids)) == len(sent), f"{interrupted} of {MID_WRITE_TRIALS} writes interrupted"
    assert set(ids) == sent
    logs = "\n".join(path.read_text(errors="replace") for path in server.tmp.glob("storage-*.log"))
    assert "Traceback" not in logs, logs[-3000:]
    store = HBaseStore("127.0.0.1", local_hbase.thrift_port, pool_size=1, timeout_s=60, table_prefix=table_prefix)
    store.drop_tables()
    store.close()
