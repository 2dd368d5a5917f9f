"""A sandbox killed (``kill -9``) and started again with the same command continues the run its truth file records,
so the truth file stays one world that a judge can hold storage against; a sandbox given another run's clock or
scenario on that file is refused with one line."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from icecrawler.processes import ProcessGroup, free_port, wait_for_port
from icecrawler_local.oracle import read_truth_file
from sandbox import sandbox_argv
from tests.helpers import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SPEED = 60.0


def _keys(items: list[dict[str, Any]]) -> set[tuple[str, str, str, int]]:
    return {(str(i["source"]), str(i["target"]), str(i["id"]), int(i["published_ms"])) for i in items}


def _live_truth(port: int) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/__sandbox/truth", timeout=10) as answer:
        return list(json.loads(answer.read())["items"])


def _start(group: ProcessGroup, name: str, argv: list[str], port: int) -> None:
    process = group.start(name, argv)
    wait_for_port("127.0.0.1", port, 40.0, alive=process.alive)


def test_a_sandbox_killed_and_started_again_by_the_same_command_serves_the_same_world(tmp_path: Path) -> None:
    """What an operator types (``icecrawler sandbox --speed 60 --truth-file F``, no ``--clock-origin``), twice: the
    second sandbox must publish every item the first one wrote to F, with the same id and time. Before, it took its
    own start as the clock origin, so its world (ids, times, backlog) was another one, and F mixed the two: every
    item of the first world looked published and never stored."""
    truth = tmp_path / "truth.jsonl"
    port = free_port()
    argv = sandbox_argv(port, speed=SPEED, truth_file=truth)
    with ProcessGroup(tmp_path) as group:
        _start(group, "first", argv, port)
        wait_for(lambda: len(read_truth_file(truth)) > 0, "the first sandbox wrote no truth", timeout_s=30)
        group.processes[-1].kill9()
        written = _keys(read_truth_file(truth))
        _start(group, "second", argv, port)
        live = _keys(_live_truth(port))
    assert written, "nothing was written before the kill"
    assert written <= live, f"{len(written - live)} of {len(written)} items of the truth file are not published again"


def test_a_sandbox_given_another_runs_clock_on_a_truth_file_is_refused(tmp_path: Path) -> None:
    """Another ``--clock-origin`` or ``--speed`` (or scenario) on a truth file that records a run would append a
    second world to it: refused with one line naming the file and the run it holds, the file left as it was."""
    truth = tmp_path / "truth.jsonl"
    port = free_port()
    with ProcessGroup(tmp_path) as group:
        _start(group, "first", sandbox_argv(port, speed=SPEED, truth_file=truth), port)
        wait_for(lambda: len(read_truth_file(truth)) > 0, "the first sandbox wrote no truth", timeout_s=30)
        group.processes[-1].kill9()
        before = truth.read_bytes()
        for name, argv in (
            ("origin", sandbox_argv(free_port(), speed=SPEED, origin=1_795_996_800.0, truth_file=truth)),
            ("speed", sandbox_argv(free_port(), speed=SPEED * 2, truth_file=truth)),
            ("seed", sandbox_argv(free_port(), speed=SPEED, seed=99, truth_file=truth)),
        ):
            process = group.start(name, argv)
            code = process.popen.wait(timeout=60)
            assert code != 0, f"a sandbox with another {name} started on the run's truth file"
            log = process.log_tail()
            assert str(truth) in log and "another run" in log, log
            assert "Traceback" not in log, log
    assert truth.read_bytes() == before
