"""The ``rate`` policy's population calibration inside the scheduler: every report call's transaction keeps it in
``meta``, a new core (after a restart or kill -9) takes it back, a rolled-back report teaches it nothing, and a
stored value the policy cannot use is logged and learnt again."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from icecrawler.models import Report, TaskKind
from scheduler_server.core import SchedulerCore
from scheduler_server.startup import CALIBRATION_KEY
from scheduler_server.store import BdbQueueStore, MemoryQueueStore, QueueStore
from tests.scheduler.conftest import ManualClocks, make_settings, queued_together
from tests.scheduler.daemon import REPO
from tests.scheduler.test_budget import RATE_SETTINGS, crawl_rounds

ITEMS = {"reviews:jd:1": 30, "reviews:jd:2": 2}


def rate_core(store: QueueStore, clocks: ManualClocks, **overrides: object) -> SchedulerCore:
    return SchedulerCore.from_settings(make_settings(**{**RATE_SETTINGS, **overrides}), store, clocks)


def learnt(core: SchedulerCore) -> dict[str, Any]:
    assert core.calibration is not None
    return core.calibration.to_dict()


def stored(store: QueueStore) -> Any:
    with store.transaction() as txn:
        raw = txn.get("meta", CALIBRATION_KEY)
    return None if raw is None else json.loads(raw)


def test_the_calibration_is_kept_with_each_report_and_taken_back_by_the_next_core(
    store: QueueStore, clocks: ManualClocks
) -> None:
    core = rate_core(store, clocks)
    core.add(["jd:1", "jd:2"], TaskKind.ProductReviews)
    crawl_rounds(core, clocks, ITEMS, rounds=6)
    taught = learnt(core)
    assert taught["rows"]  # the reports taught it
    assert stored(store) == taught  # as of the last report call, exactly (floats survive JSON)
    # Another policy leaves the record alone, so going back to ``rate`` takes it back too.
    fixed = SchedulerCore.from_settings(make_settings(), store, clocks)
    assert fixed.calibration is None
    assert learnt(rate_core(store, clocks)) == taught
    assert rate_core(store, clocks, scheduler__rate_calibration=False).calibration is None


@pytest.mark.bdb
def test_the_calibration_survives_kill_9_after_its_last_report(tmp_path: Path) -> None:
    """A process that learns, prints what it learnt after its last (durable) report and is killed with SIGKILL:
    the next core on the same Berkeley DB environment takes back exactly that."""
    path = tmp_path / "db"
    script = (
        "import json, os, signal, sys; sys.path.insert(0, sys.argv[2]);"
        "from icecrawler.models import TaskKind;"
        "from scheduler_server.store import BdbQueueStore;"
        "from tests.scheduler.conftest import ManualClocks;"
        "from tests.scheduler.test_calibration import ITEMS, crawl_rounds, rate_core;"
        "clocks = ManualClocks(); core = rate_core(BdbQueueStore(sys.argv[1]), clocks);"
        "core.add(['jd:1', 'jd:2'], TaskKind.ProductReviews);"
        "crawl_rounds(core, clocks, ITEMS, rounds=6);"
        "print(json.dumps(core.calibration.to_dict()), flush=True);"
        "os.kill(os.getpid(), signal.SIGKILL)"
    )
    killed = subprocess.run(
        [sys.executable, "-c", script, str(path), str(REPO)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert killed.returncode == -9, killed.stderr
    taught = json.loads(killed.stdout)
    assert taught["rows"]
    store = BdbQueueStore(path)  # runs recovery, as a restarted daemon does
    try:
        assert learnt(rate_core(store, ManualClocks())) == taught
    finally:
        store.close()


def _last_round(broken: bool) -> dict[str, Any]:
    """Three rounds of reports, then one more round of reports: alone, or in a group with a call that fails."""
    store, clocks = MemoryQueueStore(), ManualClocks()
    core = rate_core(store, clocks)
    core.add(["weibo_pc:1"], TaskKind.WeiboUser)  # the id ``queued_together`` adds again (a no-op add)
    core.add(["jd:1", "jd:2"], TaskKind.ProductReviews)
    items = {**ITEMS, "user:weibo_pc:1": 1}
    crawl_rounds(core, clocks, items, rounds=3)
    before = learnt(core)
    clocks.advance(3600)
    tasks = core.lease("w", len(items))
    reports = [Report(task_id=t.id, lease_token=t.lease_token, new_items=items[t.id], window_items=10) for t in tasks]
    if not broken:
        core.report(reports)
    else:

        def fails(txn: Any, group: Any) -> Any:
            txn.put("meta", b"half-written", b"x")
            raise RuntimeError("disk on fire")

        with queued_together(core):
            good = core.report_async(reports)
            failing = core._call(fails, durable=False)
        assert good.result(10) is None
        with pytest.raises(RuntimeError, match="disk on fire"):
            failing.result(10)
    after = learnt(core)
    assert after != before  # the last round taught it something
    assert stored(store) == after
    return after


def test_a_report_whose_group_is_rolled_back_and_run_again_teaches_the_calibration_once() -> None:
    assert _last_round(broken=True) == _last_round(broken=False)


@pytest.mark.parametrize(
    "value",
    [
        b"\xff\xfe not JSON",
        b'["a", "list"]',
        b'{"bins_per_decade": 2.0, "silent_below_per_day": 0.1, "rows": [[0, -1.0, 2.0, 3.0, 4.0]]}',
        b'{"bins_per_decade": 3.0, "silent_below_per_day": 0.1, "rows": []}',
    ],
    ids=["not-json", "not-a-mapping", "negative-count", "other-classes"],
)
def test_a_stored_calibration_the_policy_cannot_use_is_logged_and_learnt_again(
    store: QueueStore, clocks: ManualClocks, caplog: pytest.LogCaptureFixture, value: bytes
) -> None:
    with store.transaction() as txn:
        txn.put("meta", CALIBRATION_KEY, value)
    with caplog.at_level(logging.WARNING, logger="scheduler_server.startup"):
        core = rate_core(store, clocks)
    assert "rate calibration is not used, it starts again from no evidence" in caplog.text
    assert learnt(core)["rows"] == []
    core.add(["jd:1", "jd:2"], TaskKind.ProductReviews)
    crawl_rounds(core, clocks, ITEMS, rounds=6)
    assert learnt(core)["rows"] and stored(store) == learnt(core)  # replaced by the first report call
