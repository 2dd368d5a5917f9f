"""``icecrawler demo`` end to end: the README's first command. It must start every process, crawl, drain and end
with stored == published for every source (exit code 0), and Ctrl-C at any moment must leave no process behind.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import interrupt_when_ready

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
    # Interrupted once everything started and is crawling.
    run = interrupt_when_ready(_demo_argv(tmp_path, "--duration", "120", "--every", "2"), "[crawl", signal.SIGINT)
    assert len(run.children) == 5, run.output  # sandbox, storage, scheduler, two clients
    assert sorted(map(int, re.findall(r": pid (\d+)$", run.output, re.M))) == sorted(run.children)
    assert run.left == [], run.output[-3000:]
    assert run.returncode == 130, run.output[-3000:]
    assert "interrupted: every process the demo started has been stopped" in run.output


def test_kill_9_of_the_demo_leaves_no_process_behind(tmp_path: Path) -> None:
    # kill -9 gives the demo no chance to stop its children, each in a session of its own: they must notice that
    # their parent died (icecrawler.processes.die_with_parent) and stop, rather than crawl on forever.
    run = interrupt_when_ready(_demo_argv(tmp_path, "--duration", "120", "--every", "2"), "[crawl", signal.SIGKILL)
    assert len(run.children) == 5, run.output  # sandbox, storage, scheduler, two clients
    assert run.left == [], run.output[-3000:]
    assert run.returncode == -signal.SIGKILL
    paths = sorted((tmp_path / "var" / "logs").glob("*.log"))
    assert len(paths) >= 5, paths
    logs = "\n".join(path.read_text(errors="replace") for path in paths)
    assert "Traceback" not in logs, logs[-4000:]


@pytest.mark.parametrize("daemon", ["storage", "scheduler"])
def test_a_daemon_that_dies_ends_the_demo_naming_it_and_its_log(tmp_path: Path, daemon: str) -> None:
    # kill -9 of one of the demo's daemons mid-crawl: the demo must say which one ended and where its log is, stop
    # the others and fail then, rather than crawl and drain on to its bound with nothing stored (storage) or end on
    # a bare "ConnectionRefusedException" (scheduler).
    def pid_of_daemon(output: str) -> int:
        found = re.search(rf"^  {daemon}: pid (\d+)$", output, re.M)
        assert found, output
        return int(found.group(1))

    argv = _demo_argv(tmp_path, "--duration", "30", "--every", "2")
    run = interrupt_when_ready(argv, "[crawl", signal.SIGKILL, timeout_s=200, victim=pid_of_daemon)
    log = (tmp_path / "var" / "logs" / f"{daemon}.log").resolve()
    assert f"{daemon} (pid {run.signalled}) was killed by SIGKILL" in run.output, run.output[-3000:]
    assert f"its log: {log}" in run.output and log.is_file(), run.output[-3000:]
    assert "cut-off" not in run.output, "the demo crawled on after the daemon died"
    assert run.returncode == 1, run.output[-3000:]
    assert run.left == [], run.output[-3000:]
