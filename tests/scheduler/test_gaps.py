"""The scheduler's side of page-cap gaps: a gap cursor is kept in the task record through the report (both
stores), counted in ``stats()["detail"]["open_gaps"]`` (also after a restart), shown by ``task_info`` (``status
--task``), and cleared when a report closes the gap."""

from __future__ import annotations

from pathlib import Path

import pytest

from icecrawler.errors import InvalidArgumentError
from icecrawler.models import Report, TaskKind
from icecrawler.resume import Gap, encode_cursor
from icecrawler_cli.commands.status import render_text
from scheduler_server.core import SchedulerCore
from scheduler_server.store import BdbQueueStore
from tests.scheduler.conftest import ManualClocks, make_settings

GAP = encode_cursor(
    Gap(
        base="2024-05-01T12:00:00+08:00|r1",
        top="2024-05-01T18:00:00+08:00|r999",
        low="2024-05-01T15:00:00+08:00|r500",
        request={"url": "/comment", "page": 6, "params": {"page": "5", "pageSize": "10"}},
    )
)


def crawl(core: SchedulerCore, clocks: ManualClocks, cursor: str) -> None:
    clocks.advance(3600)
    task = core.lease("w", 1)[0]
    core.report([Report(task_id=task.id, lease_token=task.lease_token, new_items=30, cursor=cursor)])


def test_a_gap_is_kept_counted_shown_and_cleared(core: SchedulerCore, clocks: ManualClocks) -> None:
    core.add(["jd:1", "jd:2"], TaskKind.ProductReviews)
    crawl(core, clocks, "2024-05-01T12:00:00+08:00|r1")
    crawl(core, clocks, "2024-05-01T11:00:00+08:00|q1")
    assert core.stats()["detail"]["open_gaps"] == 0
    crawl(core, clocks, GAP)
    assert core.stats()["detail"]["open_gaps"] == 1
    gapped = next(t for t in ("reviews:jd:1", "reviews:jd:2") if core.task_info(t)["cursor"] == GAP)
    info = core.task_info(gapped)["gap"]
    assert info == {
        "open": True,
        "since_cursor": "2024-05-01T12:00:00+08:00|r1",
        "resume_at_item": "2024-05-01T15:00:00+08:00|r500",
        "cursor_when_closed": "2024-05-01T18:00:00+08:00|r999",
        "resume_page": 6,
        "visits": 1,
    }
    clocks.advance(3600)
    task = next(t for t in core.lease("w", 2) if t.id == gapped)
    assert task.cursor == GAP  # the next lease carries the resume point to the client
    core.report([Report(task_id=task.id, lease_token=task.lease_token, cursor="2024-05-01T18:00:00+08:00|r999")])
    assert core.stats()["detail"]["open_gaps"] == 0 and core.task_info(gapped)["gap"] is None


@pytest.mark.bdb
def test_open_gaps_are_counted_again_after_a_restart(tmp_path: Path) -> None:
    clocks = ManualClocks()
    core = SchedulerCore.from_settings(make_settings(), BdbQueueStore(tmp_path / "db"), clocks)
    core.add(["jd:1", "jd:2", "jd:3"], TaskKind.ProductReviews)
    crawl(core, clocks, GAP)
    core.close()
    again = SchedulerCore.from_settings(make_settings(), BdbQueueStore(tmp_path / "db"), clocks)
    try:
        assert again.stats()["detail"]["open_gaps"] == 1
    finally:
        again.close()


def test_a_cursor_may_hold_a_resume_request_but_not_without_bound(core: SchedulerCore, clocks: ManualClocks) -> None:
    core.add(["jd:1"], TaskKind.ProductReviews)
    task = core.lease("w", 1)[0]
    with pytest.raises(InvalidArgumentError, match="cursor is longer than 4096"):
        core.report([Report(task_id=task.id, lease_token=task.lease_token, cursor="gap1:" + "x" * 4092)])
    long_gap = encode_cursor(Gap(base="1", top="9", low="5", request={"url": "/comment", "pad": "x" * 3000}))
    assert 3000 < len(long_gap) <= 4096
    core.report([Report(task_id=task.id, lease_token=task.lease_token, cursor=long_gap)])


def test_status_names_the_open_gaps() -> None:
    section = {
        "tasks": 3,
        "pending": 3,
        "inflight": 0,
        "done": 9,
        "due_soon": 1,
        "leases_per_min": 0.0,
        "reports_per_min": 0.0,
        "policy": "shhd",
        "open_gaps": 2,
    }
    text = render_text({"scheduler": section, "storage": {"reachable": False}})
    assert "2 task(s) with an open page-cap gap" in text
    assert "open page-cap gap" not in render_text(
        {"scheduler": {**section, "open_gaps": 0}, "storage": {"reachable": False}}
    )
