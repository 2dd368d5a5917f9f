"""HBase's Thrift server killed with ``kill -9`` and started again while HBase itself runs on: the storage server's
pooled connections to the old Thrift process are dead, and the first write after the restart must still go to
HBase, not be spooled as if HBase were down. Real HBase; restarts the Thrift server of the shared one."""

from __future__ import annotations

from pathlib import Path

import pytest

from icecrawler_local.hbase_local import LocalHBase
from storage_server import schema
from storage_server.hbase_store import HBaseStore
from storage_server.service import StorageService
from storage_server.spool import SqliteSpool
from tests.storage.conftest import make_post

pytestmark = [pytest.mark.hbase, pytest.mark.slow]


def test_the_first_write_after_a_thrift_restart_reaches_hbase(
    local_hbase: LocalHBase, table_prefix: str, tmp_path: Path
) -> None:
    store = HBaseStore("127.0.0.1", local_hbase.thrift_port, pool_size=1, timeout_s=30.0, table_prefix=table_prefix)
    service = StorageService(
        store, SqliteSpool(str(tmp_path / "spool")), max_text_chars=1000, batch_limit=100, write_timeout_s=30.0
    )
    try:
        assert service.write_posts([make_post(1)]).stored == 1  # the pool's one connection is open now
        local_hbase.kill9(names=("thrift",))
        local_hbase.start()
        result = service.write_posts([make_post(2)])
        assert (result.stored, result.spooled) == (1, 0), service.stats().detail["last_backend_error"]
        assert service.backend_up()
        assert sorted(int(row.columns["id"]) for row in store.scan(schema.WEIBO)) == [1, 2]
    finally:
        service.close()
        cleanup = HBaseStore(
            "127.0.0.1", local_hbase.thrift_port, pool_size=1, timeout_s=60.0, table_prefix=table_prefix
        )
        cleanup.drop_tables()
        cleanup.close()
