"""``icecrawler demo`` end to end: the README's first command. It must start every process, crawl, drain and end
with stored == published for every source (exit code 0), and Ctrl-C at any moment must leave no process behind.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.ice, pytest.mark.bdb, pytest.mark.slow]

SOURCES = ("weibo_pc", "weibo_mobile", "weibo_web", "ecshop", "jd")


def _demo_argv(tmp_path: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "icecrawler_cli",
        "demo",
        "--var-dir",
        str(tmp_path / "var"),
        "--output-dir",
        str(tmp_path / "out"),
        *extra,
    ]


def _gone(pid: int) -> bool:
    """The process no longer runs (it is absent, or a zombie nobody has reaped yet)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def test_demo_crawls_drains_and_stores_everything_published(tmp_path: Path) -> None:
    # Speed 120 halves the drain (the longest period, 20 simulated minutes, is 10 wall seconds).
    done = subprocess.run(
        _demo_argv(tmp_path, "--duration", "15", "--speed", "120", "--every", "3"),
        capture_output=True,
        text=True,
        timeout=280,
    )
    output = done.stdout + done.stderr
    print(output)
    assert done.returncode == 0, output[-4000:]
    assert "OK: stored == published for every source" in output
    for source in SOURCES:
        row = re.search(rf"^{source}\s+(\d+)\s+(\d+)\s+(\d+)\s+\d+\s+.*\s(\d+)\s+yes$", output, re.M)
        assert row, f"no successful table row for {source}:\n{output[-3000:]}"
        published, stored, dupes, fetches = (int(x) for x in row.groups())
        assert published > 0 and stored == published and dupes == 0 and fetches > 0
    assert (tmp_path / "out" / "periods.png").stat().st_size > 10_000
    assert re.search(r"^\[crawl .* stored \d+ .* in flight \d+", output, re.M), "no progress line"
    assert not (tmp_path / "var").exists(), "a successful run without --keep removes its var dir"


def test_ctrl_c_stops_every_process_the_demo_started(tmp_path: Path) -> None:
    demo = subprocess.Popen(
        _demo_argv(tmp_path, "--duration", "120", "--every", "2"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    pids: list[int] = []
    lines: list[str] = []
    try:
        assert demo.stdout is not None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = demo.stdout.readline()
            if not line:
                break
            lines.append(line)
            found = re.search(r": pid (\d+)$", line.strip())
            if found:
                pids.append(int(found.group(1)))
            if line.startswith("[crawl"):  # everything started and crawling: interrupt it now
                break
        assert len(pids) == 5, "".join(lines)  # sandbox, storage, scheduler, two clients
        assert not any(_gone(pid) for pid in pids)
        os.kill(demo.pid, signal.SIGINT)
        rest, _ = demo.communicate(timeout=90)
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait(timeout=30)
    output = "".join(lines) + rest
    assert demo.returncode == 130, output[-3000:]
    assert "interrupted: every process the demo started has been stopped" in output
    for _ in range(100):  # bounded: the last children may take a moment to be reaped
        if all(_gone(pid) for pid in pids):
            break
        time.sleep(0.1)
    assert [pid for pid in pids if not _gone(pid)] == [], output[-3000:]
