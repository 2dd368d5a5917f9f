"""The IceGrid node writes each server's stdout and stderr to ``<IceGrid.Node.Output>/<server-id>.out``
(deploy/icegrid/node.conf: /var/log/icecrawler) for as long as the server runs, and nothing bounded those files: a
client logs a line for every crawl that meets the page cap, a ban or a login wall, so over months they fill the disk.
deploy/logrotate/icecrawler rotates them. Here Debian's real logrotate runs the shipped file (its paths moved under a
temporary root) against a file a running process keeps appending to, as a server writes its output: every rotation
empties the live file in place, the writer's next lines land at its start (no hole of NUL bytes), and no more old
files are kept than the file says."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.helpers import SHIPPED_LOGROTATE, shipped_logrotate, wait_for

#: A server's output: numbered lines, appended for as long as it runs.
WRITER = (
    "import itertools, sys, time\n"
    "for n in itertools.count():\n"
    "    print(f'line {n}', flush=True)\n"
    "    time.sleep(0.005)\n"
)


def lines_in(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def test_the_shipped_logrotate_file_bounds_the_node_output_of_a_running_server(tmp_path: Path) -> None:
    assert SHIPPED_LOGROTATE.is_file(), "deploy/logrotate/icecrawler is missing: the node's *.out files grow for good"
    text = SHIPPED_LOGROTATE.read_text()
    assert "/var/log/icecrawler/*.out" in text and "copytruncate" in text
    kept = int(re.search(r"^\s*rotate\s+(\d+)", text, re.MULTILINE)[1])  # type: ignore[index]
    out = tmp_path / "log"
    out.mkdir()
    rotate = shipped_logrotate(out, tmp_path)
    live = out / "Client-1.out"
    with live.open("ab") as output:  # the server opens it once, for appending (its Ice runtime, from Ice.StdOut)
        writer = subprocess.Popen([sys.executable, "-c", WRITER], stdout=output, stderr=subprocess.STDOUT)
    try:
        for _ in range(kept + 3):
            wait_for(lambda: lines_in(live) >= 20, "the writer wrote nothing more", timeout_s=30, interval_s=0.05)
            before = live.stat().st_size
            rotate()
            # The copy holds everything written before the rotation; the live file was emptied in place (below: the
            # writer's lines go on at its start, after the copy's last one).
            assert (out / "Client-1.out.1").stat().st_size >= before
        # The checks below read the writer's lines after the last rotation: wait for one (not a fixed sleep, which
        # a loaded machine can pass without running the writer at all).
        wait_for(lambda: lines_in(live) > 0, "the writer wrote nothing after the last rotation", 30, 0.05)
        assert writer.poll() is None, "rotating stopped the server's output"
    finally:
        writer.terminate()
        writer.wait(10)
    body = live.read_bytes()
    assert b"\0" not in body, "the server went on writing at its old offset: the live file is a hole of NUL bytes"
    assert body.startswith(b"line "), body[:40]
    newest_rotated = (out / "Client-1.out.1").read_bytes()
    first_live = int(body.split(b"\n", 1)[0].split()[1])
    last_rotated = int(newest_rotated.rstrip(b"\n").rsplit(b"\n", 1)[-1].split()[1])
    assert first_live > last_rotated
    rotated = sorted(path.name for path in out.iterdir() if path.name != live.name)
    assert len(rotated) == kept, rotated
