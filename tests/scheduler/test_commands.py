"""``icecrawler seed``, ``remove``, ``hold`` and ``status`` as a user runs them, against a real scheduler daemon."""

from __future__ import annotations

import io
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from icecrawler import rpc
from icecrawler.errors import ConfigError
from icecrawler.models import TaskKind
from icecrawler.processes import icecrawler_argv
from icecrawler.sourcespec import group_by_kind
from icecrawler_cli.commands.seed import read_ids
from icecrawler_cli.commands.status import render_text
from scheduler_server.core import SchedulerCore
from scheduler_server.store import MemoryQueueStore
from tests.scheduler.conftest import ManualClocks, make_settings
from tests.scheduler.daemon import SchedulerDaemon, scheduler_daemon, scheduler_proxy

pytestmark = [pytest.mark.ice, pytest.mark.bdb]


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SchedulerDaemon]:
    with scheduler_daemon(tmp_path_factory.mktemp("cmd")) as running:
        yield running


def cli(daemon: SchedulerDaemon, *args: str) -> subprocess.CompletedProcess[str]:
    conf = daemon.tmp / "client.conf"
    conf.write_text(f"Scheduler.Proxy={daemon.proxy}\nStorage.Proxy=storage:tcp -h 127.0.0.1 -p 1\n")
    return subprocess.run(
        icecrawler_argv(*args, f"--Ice.Config={conf}"), capture_output=True, text=True, timeout=60, check=False
    )


def test_seed_then_status(daemon: SchedulerDaemon, tmp_path: Path) -> None:
    ids = tmp_path / "ids.txt"
    ids.write_text("# products\njd:100012043978\n\nweibo_pc:2803301701  # a user\n")
    seeded = cli(daemon, "seed", "weibo_mobile:1669879400", "--file", str(ids), "--listing", "ecshop:3")
    assert seeded.returncode == 0, seeded.stderr
    assert seeded.stdout.split("\n")[:3] == ["user: 2 new of 2", "reviews: 1 new of 1", "listing: 1 new of 1"]
    status = cli(daemon, "status", "--json")
    assert status.returncode == 0, status.stderr
    report = json.loads(status.stdout)
    assert (report["scheduler"]["tasks"], report["scheduler"]["pending"]) == (4, 4)
    assert report["scheduler"]["listings"] == {"listing:ecshop:3": 0}
    assert report["storage"]["reachable"] is False
    text = cli(daemon, "status")
    assert "4 tasks, 4 pending" in text.stdout and "storage: not reachable" in text.stdout
    # No client runs: the due tasks are taken by nobody, which status says in words.
    assert "nothing was leased in the last minute although 4 task(s) are due: no client is running" in text.stdout
    task = cli(daemon, "status", "--task", "reviews:jd:100012043978", "--json")
    assert json.loads(task.stdout)["state"] == "pending"


def test_bad_input_is_a_clear_error(daemon: SchedulerDaemon) -> None:
    unknown = cli(daemon, "status", "--task", "reviews:jd:404")
    assert unknown.returncode == 2 and "unknown task reviews:jd:404" in unknown.stderr
    invalid = cli(daemon, "seed", "--kind", "user", "weibo_pc:1", "weibo_pc:bad id")
    assert invalid.returncode == 2 and "ids[1]" not in invalid.stdout and "invalid target" in invalid.stderr
    assert json.loads(cli(daemon, "status", "--json").stdout)["scheduler"]["tasks"] == 4


def test_remove_then_status(daemon: SchedulerDaemon, tmp_path: Path) -> None:
    # The seed test's targets (seeding again adds nothing), so that this test also runs on its own.
    seeded = cli(daemon, "seed", "weibo_mobile:1669879400", "jd:100012043978", "weibo_pc:2803301701")
    assert seeded.returncode == 0 and cli(daemon, "seed", "--listing", "ecshop:3").returncode == 0
    ids = tmp_path / "gone.txt"
    ids.write_text("weibo_pc:2803301701\nweibo_pc:404  # never seeded\n")
    removed = cli(daemon, "remove", "jd:100012043978", "--file", str(ids), "--listing", "ecshop:3")
    assert removed.returncode == 0, removed.stderr
    assert removed.stdout.split("\n")[:3] == [
        "reviews: 1 removed of 1",
        "user: 1 removed of 2",
        "listing: 1 removed of 1",
    ]
    listed = cli(daemon, "tasks", "--json")
    assert [json.loads(line)["id"] for line in listed.stdout.splitlines()] == ["user:weibo_mobile:1669879400"]
    invalid = cli(daemon, "remove", "weibo_mobile:1669879400", "weibo_pc:bad id")
    assert invalid.returncode == 2 and "invalid target" in invalid.stderr
    assert cli(daemon, "remove").returncode == 2
    assert json.loads(cli(daemon, "status", "--json").stdout)["scheduler"]["tasks"] == 1
    assert cli(daemon, "seed", "jd:100012043978").stdout.startswith("reviews: 1 new of 1")  # it can come back


def test_hold_and_lift_a_host(daemon: SchedulerDaemon) -> None:
    held = cli(daemon, "hold", "127.0.0.1:8800", "--for", "2h", "--reason", "maintenance")
    assert held.returncode == 0 and held.stdout == "127.0.0.1:8800: held for 7200 s more\n", held.stderr
    status = json.loads(cli(daemon, "status", "--json").stdout)["scheduler"]
    assert status["hosts"]["127.0.0.1:8800"]["block"]["reason"] == "held by the operator: maintenance"
    lifted = cli(daemon, "hold", "127.0.0.1:8800", "--lift")
    assert lifted.returncode == 0
    assert (
        lifted.stdout
        == "127.0.0.1:8800: lifted (any hold or ban's block on it has ended); its tasks are leased again\n"
    )
    for args, message in (
        (("nowhere.example", "--for", "1h"), "is not a host of any source"),
        (("127.0.0.1:8800", "--for", "soon"), "give a number of seconds"),
        (("127.0.0.1:8800", "--for", "0"), "use --lift"),
    ):
        refused = cli(daemon, "hold", *args)
        assert refused.returncode == 2 and message in refused.stderr, refused.stderr


def test_seed_kind_inference() -> None:
    assert group_by_kind(["jd:1", "weibo_mobile:2", "ecshop:3"], None) == {
        TaskKind.ProductReviews: ["jd:1", "ecshop:3"],
        TaskKind.WeiboUser: ["weibo_mobile:2"],
    }
    assert group_by_kind(["ecshop:9"], TaskKind.Listing) == {TaskKind.Listing: ["ecshop:9"]}
    assert group_by_kind(["weibo_web:1669879400", "weibo_pc:2"], None) == {
        TaskKind.WeiboUser: ["weibo_web:1669879400", "weibo_pc:2"]
    }
    assert group_by_kind(["user:weibo_pc:1", "reviews:jd:2", "listing:ecshop:3", "jd:4"], None) == {
        TaskKind.WeiboUser: ["weibo_pc:1"],
        TaskKind.ProductReviews: ["jd:2", "jd:4"],
        TaskKind.Listing: ["ecshop:3"],
    }  # task ids as icecrawler tasks prints them name their own kind
    with pytest.raises(ConfigError, match="is a listing task, but --kind says reviews"):
        group_by_kind(["listing:ecshop:3"], TaskKind.ProductReviews)
    with pytest.raises(ConfigError, match="unknown source"):
        group_by_kind(["nowhere:1"], None)
    with pytest.raises(ConfigError, match="cannot read"):
        read_ids([], "/nonexistent/ids.txt")


def test_ids_from_standard_input(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("reviews:jd:1\n\n# a comment\nweibo_pc:2  # a user\n"))
    assert read_ids(["jd:0"], "-") == ["jd:0", "reviews:jd:1", "weibo_pc:2"]


def test_a_source_the_scheduler_does_not_know_is_named_as_the_scheduler_s(daemon: SchedulerDaemon) -> None:
    """An id the command let through (``--kind`` skips its own source check, as a source added through
    ICECRAWLER_SOURCE_MODULES in this shell but not in the scheduler's would) and the scheduler refused: the line
    says who refused and what the scheduler's process lacks."""
    refused = cli(daemon, "seed", "--kind", "reviews", "nowhere:1")
    assert refused.returncode == 2, refused.stderr
    assert "the scheduler refused the ids: unknown source 'nowhere'" in refused.stderr
    assert "ICECRAWLER_SOURCE_MODULES" in refused.stderr


def test_tasks_prints_a_reported_error_class_with_its_control_characters_escaped(daemon: SchedulerDaemon) -> None:
    """A report's errorClass is a client's text, which may quote a site: stored as sent, but printed by
    ``icecrawler tasks`` with ESC and newlines escaped, so it neither drives the terminal nor splits its line."""
    C = rpc.crawler()
    with scheduler_proxy(daemon) as prx:
        assert prx.addUsers(["weibo_pc:77"], C.TaskKind.WeiboUser) == 1
        leased = prx.getUsers("escapes", 20)
        task = next(task for task in leased if task.id == "user:weibo_pc:77")
        others = [C.LeaseRef(other.id, other.leaseToken) for other in leased if other is not task]
        if others:
            prx.releaseUsers(others)
        error_class = "weibo-code-\x1b[2J\x1b[31mred\nforged line"
        busy = C.Outcome.Busy
        prx.putUser(C.Report(taskId=task.id, leaseToken=task.leaseToken, outcome=busy, errorClass=error_class))
        assert json.loads(prx.taskInfo(task.id))["last_error"] == error_class  # kept as sent
    listed = cli(daemon, "tasks", "--prefix", "user:weibo_pc:77")
    assert listed.returncode == 0, listed.stderr
    assert "\x1b" not in listed.stdout
    line, summary = listed.stdout.splitlines()  # the task on one line, then the count
    assert line.endswith("last Busy (weibo-code-\\x1b[2J\\x1b[31mred\\nforged line)") and summary == "1 task(s)"


def test_status_says_due_tasks_nobody_leases_and_nothing_once_a_client_leases() -> None:
    """The line on due work that nobody takes is gone as soon as a client leases (the last minute's leases)."""
    clocks = ManualClocks()
    core = SchedulerCore.from_settings(make_settings(), MemoryQueueStore(), clocks)
    core.add(["jd:1", "jd:2"], TaskKind.ProductReviews)

    def said() -> str:
        stats = core.stats()
        return render_text({"scheduler": {**stats, **stats["detail"]}, "storage": {"reachable": False}})

    assert "nothing was leased in the last minute although 2 task(s) are due" in said()
    core.lease("w", 1)
    assert "nothing was leased" not in said()
    clocks.advance(3600)  # the lease expired long ago (the maintenance thread reaps it), and nothing leased since
    core.reap()
    assert "nothing was leased in the last minute although 2 task(s) are due" in said()


def test_status_says_nothing_of_a_task_due_within_the_minute_but_not_yet_due() -> None:
    """A quiet crawl with long periods has a task due within the next minute now and then, and no lease in the
    last one: status said "no client is running" for it, which it read off the due-within-a-minute count."""
    from tests.scheduler.test_core import ok

    clocks = ManualClocks()
    settings = make_settings(scheduler__initial_period_s=120.0)
    core = SchedulerCore.from_settings(settings, MemoryQueueStore(), clocks)
    core.add(["jd:1"], TaskKind.ProductReviews)
    (task,) = core.lease("w", 1)
    core.report([ok(task.id, task.lease_token)])  # due again in 120 s (the fixed policy's period)
    clocks.advance(90)  # the lease is out of the last minute's count; the task is due in 30 s
    stats = core.stats()
    assert (stats["due_soon"], stats["detail"]["due_now"], stats["leases_per_min"]) == (1, 0, 0)
    text = render_text({"scheduler": {**stats, **stats["detail"]}, "storage": {"reachable": False}})
    assert "nothing was leased" not in text
    clocks.advance(40)
    stats = core.stats()
    text = render_text({"scheduler": {**stats, **stats["detail"]}, "storage": {"reachable": False}})
    assert "nothing was leased in the last minute although 1 task(s) are due" in text
    older = {key: value for key, value in {**stats, **stats["detail"]}.items() if key != "due_now"}
    text = render_text({"scheduler": older, "storage": {"reachable": False}})  # a scheduler too old to say due_now
    assert "nothing was leased in the last minute although 1 task(s) are due" in text


def test_tasks_says_on_stderr_when_its_limit_cut_the_list(daemon: SchedulerDaemon) -> None:
    """``icecrawler tasks --outcome NotFound --ids | icecrawler remove --file -`` stopped at --limit (1000 by default)
    without a word, so a pipe meant to remove every gone target removed the first thousand. The list on stdout stays
    as it was; stderr says that more match."""
    assert cli(daemon, "seed", "jd:901", "jd:902", "jd:903").returncode == 0
    try:
        cut = cli(daemon, "tasks", "--prefix", "reviews:jd:90", "--ids", "--limit", "2")
        assert cut.returncode == 0 and cut.stdout.splitlines() == ["reviews:jd:901", "reviews:jd:902"], cut.stderr
        assert "stopped at --limit 2; more tasks match" in cut.stderr
        whole = cli(daemon, "tasks", "--prefix", "reviews:jd:90", "--ids", "--limit", "3")
        assert len(whole.stdout.splitlines()) == 3 and "more tasks match" not in whole.stderr
    finally:
        cli(daemon, "remove", "jd:901", "jd:902", "jd:903")


#: A byte that is no UTF-8 character, as a shell passes it (``$'\xff'``, a file name in another encoding): Python
#: keeps it in ``sys.argv`` as a lone surrogate.
NOT_UTF8 = os.fsdecode(b"\xff")


@pytest.mark.parametrize(
    "args",
    [
        ("status", "--task", f"user:weibo_pc:{NOT_UTF8}"),
        ("seed", f"weibo_pc:{NOT_UTF8}"),
        ("remove", f"jd:1{NOT_UTF8}"),
        ("tasks", "--prefix", NOT_UTF8),
        ("hold", "weibo.com", "--for", "1h", "--reason", f"maintenance {NOT_UTF8}"),
    ],
    ids=["status", "seed", "remove", "tasks", "hold"],
)
def test_an_argument_that_is_not_utf8_text_is_a_one_line_error(daemon: SchedulerDaemon, args: tuple[str, ...]) -> None:
    """Text for the scheduler that is not UTF-8 cannot go over Ice: a UnicodeEncodeError traceback (exit 1) before.
    Now one line naming the argument, exit 2, and the scheduler serves on."""
    done = cli(daemon, *args)
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert done.returncode == 2 and len(errors) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "not UTF-8" in errors[0] and "\\xff" in errors[0], errors[0]
    assert cli(daemon, "status").returncode == 0
