"""``icecrawler_local.launcher.Cluster``: what it says when a daemon it starts ends before it listens (the demo's and
the end-to-end tests' first words on a failed start)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from icecrawler.errors import ServiceError
from icecrawler.processes import ProcessGroup, free_port
from icecrawler_local.launcher import Cluster


def test_a_daemon_that_ends_before_it_listens_is_named_with_its_exit_code_and_log(tmp_path: Path) -> None:
    # A scheduler on a full disk exits 2 having written nothing to its log: the error said only "process died before
    # listening on 127.0.0.1:PORT", so neither how it ended nor where to look.
    with ProcessGroup(tmp_path / "logs") as group:
        cluster = Cluster(tmp_path / "work", group)
        script = "import sys; print('first line'); print('the file system is full'); sys.exit(2)"
        process = group.start("scheduler", [sys.executable, "-c", script])
        port = free_port()
        with pytest.raises(ServiceError) as failed:
            cluster.wait_listening(process, "127.0.0.1", port, timeout_s=60)
    first, *tail = str(failed.value).splitlines()
    log = (tmp_path / "logs" / "scheduler.log").resolve()
    assert first == (
        f"scheduler did not start: scheduler (pid {process.pid}) exited with code 2 before listening on "
        f"127.0.0.1:{port}; its log: {log}"
    )
    assert tail[-1].strip() == "the file system is full"
