"""`icecrawler hbase start|stop|status`: idempotent start, and a clear bounded failure with the log tail."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from icecrawler.errors import ServiceError
from icecrawler.processes import free_port
from icecrawler_local.hbase_local import LocalHBase


@pytest.mark.hbase
def test_start_is_idempotent_and_status_reports_it(local_hbase: LocalHBase) -> None:
    began = time.monotonic()
    assert "already running" in local_hbase.start()
    assert time.monotonic() - began < local_hbase.start_timeout_s
    status = local_hbase.status()
    assert status["answering"] is True
    assert status["thrift"] == f"127.0.0.1:{local_hbase.thrift_port}"


def test_a_daemon_that_dies_fails_start_with_its_log_tail(tmp_path: Path) -> None:
    lib = tmp_path / "lib"
    lib.mkdir()
    for jar in ("hbase-server-0.jar", "hbase-thrift-0.jar"):  # jars "present": no Maven run
        (lib / jar).write_bytes(b"")
    java = tmp_path / "java"
    java.write_text("#!/bin/sh\necho 'Error: could not start the fake JVM' >&2\nexit 1\n")
    java.chmod(0o755)
    hbase = LocalHBase(
        tmp_path,
        thrift_port=free_port(),
        zookeeper_port=free_port(),
        master_port=free_port(),
        regionserver_port=free_port(),
        heap_mb=256,
        start_timeout_s=30.0,
        java=str(java),
    )
    with pytest.raises(ServiceError) as caught:
        hbase.start()
    assert "exited during start-up" in str(caught.value)
    assert "could not start the fake JVM" in str(caught.value)
    assert (tmp_path / "conf" / "hbase-site.xml").read_text().count("127.0.0.1") >= 5
    assert "HBase was not running" in hbase.stop()
