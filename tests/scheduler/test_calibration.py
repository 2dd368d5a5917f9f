"""What the ``rate`` policy steers by, inside the scheduler: the transaction of every group that applies a report
keeps the population calibration in ``meta``, a new core (after a restart or kill -9) takes it back, a rolled-back
report teaches it nothing, and a stored value the policy cannot use is logged and learnt again; a restarted daemon
has its budget constant before its first report; status shows all of it."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from icecrawler import rpc
from icecrawler.models import Report, TaskKind
from icecrawler_cli.commands.status import render_text
from scheduler_server.core import SchedulerCore
from scheduler_server.startup import CALIBRATION_KEY
from scheduler_server.store import BdbQueueStore, MemoryQueueStore, QueueStore
from tests.scheduler.conftest import ManualClocks, make_settings, queued_together
from tests.scheduler.daemon import REPO, scheduler_daemon, scheduler_proxy
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
    assert stored(store) == taught  # as of the last report, exactly (floats survive JSON)
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
    assert learnt(core)["rows"] and stored(store) == learnt(core)  # replaced by the first group with a report


def test_status_shows_the_budget_constant_the_daily_anchor_and_the_calibration(
    store: QueueStore, clocks: ManualClocks
) -> None:
    core = rate_core(store, clocks, scheduler__fetch_budget_per_s=1e-5)
    core.add(["jd:1", "jd:2"], TaskKind.ProductReviews)
    crawl_rounds(core, clocks, ITEMS, rounds=6)
    before = core.stats()["detail"]["revisit"]
    assert before["budget_scale"] is None and before["longest_period_s"] == 86400.0  # no rebalance yet
    scale = core.rebalance_budget()
    shown = core.stats()["detail"]["revisit"]
    assert shown["budget_scale"] == scale
    assert shown["longest_period_s"] == pytest.approx(1.75 * 2 / 1e-5)  # past max_period_s: the budget is small
    assert shown["daily_anchor"] is True and shown["targets_keep_one_clock"] is False
    classes = shown["calibration"]
    assert classes and all(c["per_day_from"] < c["per_day_below"] and c["factor"] > 0 for c in classes)
    assert json.loads(json.dumps(shown)) == shown  # it travels in the status JSON
    stats = core.stats()
    text = render_text({"scheduler": {**stats, **stats["detail"]}, "storage": {"reachable": False}})
    assert f"rate policy: budget constant {scale:.4g}, longest period 97.2 h, daily anchor on, calibration over" in text
    fixed = SchedulerCore.from_settings(make_settings(), store, clocks)
    assert fixed.stats()["detail"]["revisit"] == {}


@pytest.mark.ice
@pytest.mark.bdb
def test_a_restarted_daemon_has_its_budget_constant_before_its_first_report(tmp_path: Path) -> None:
    """Maintenance runs once an hour here, so only the start-up rebalance can have set the constant."""
    settings = {
        "scheduler__policy": "rate",
        "scheduler__fetch_budget_per_s": 0.01,
        "scheduler__maintenance_interval_s": 3600,
    }
    with scheduler_daemon(tmp_path, **settings) as daemon:
        with scheduler_proxy(daemon) as prx:
            assert json.loads(prx.stats().detailJson)["revisit"]["budget_scale"] is None  # no tasks at start
            assert prx.addUsers(["weibo_pc:1", "weibo_pc:2", "weibo_pc:3"], rpc.crawler().TaskKind.WeiboUser) == 3
            assert json.loads(prx.stats().detailJson)["revisit"]["budget_scale"] is None  # no pass since
        daemon.kill9()
        daemon.start()
        with scheduler_proxy(daemon) as prx:
            shown = json.loads(prx.stats().detailJson)["revisit"]
    assert isinstance(shown["budget_scale"], float) and shown["budget_scale"] > 0
    assert shown["calibration"] == []  # nothing reported yet
