"""Operator friction from the kill -9 run, each fixed and checked against the real daemons: endpoints given on
the command line, a command that lists tasks (and those found gone, for ``icecrawler remove``), progress lines
without carriage returns in logs, and a server that answers with an error told apart from one that cannot be
reached. (A wrong ``export`` store path is a row of test_startup_errors.)"""

from __future__ import annotations

import io
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import Ice
import pytest

from icecrawler import rpc
from icecrawler.models import Post
from icecrawler.processes import ManagedProcess, ProcessGroup, free_port, icecrawler_argv, wait_for_port
from icecrawler_cli.commands.export import Progress
from icecrawler_cli.commands.tasks import pages
from tests.storage.conftest import make_post

pytestmark = [pytest.mark.ice]


def listening(group: ProcessGroup, role: str, port: int, *args: str, host: str = "127.0.0.1") -> ManagedProcess:
    """``icecrawler ROLE --listen tcp -h HOST -p PORT ARGS...`` started in ``group``, once its port answers."""
    process = group.start(role, icecrawler_argv(role, "--listen", f"tcp -h {host} -p {port}", *args))
    wait_for_port("127.0.0.1", port, 30, alive=process.alive)
    return process


@pytest.fixture(scope="module")
def scheduler(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``icecrawler scheduler --listen ...``: no property file at all, the endpoint from the command line."""
    work = tmp_path_factory.mktemp("operator")
    port = free_port()
    with ProcessGroup(work / "logs") as group:
        process = listening(group, "scheduler", port, "--set", f"scheduler.db_dir={work / 'db'}")
        yield f"scheduler:tcp -h 127.0.0.1 -p {port}"
        assert process.alive(), process.log_tail()


def _cli(*args: str, proxy: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    conf = tmp / "client.conf"
    conf.write_text(f"Scheduler.Proxy={proxy}\nStorage.Proxy=storage:tcp -h 127.0.0.1 -p {free_port()}\n")
    return subprocess.run(icecrawler_argv(*args, f"--Ice.Config={conf}"), capture_output=True, text=True, timeout=60)


def test_tasks_lists_every_task_with_its_state(scheduler: str, tmp_path: Path) -> None:
    C = rpc.crawler()
    ids = [f"ecshop:{n}" for n in range(1, 8)]
    with rpc.communicator() as comm:
        proxy = C.SchedulerPrx(comm, scheduler)
        proxy.addUsers(ids, C.TaskKind.ProductReviews)
        leased = proxy.getUser("operator-test")
        # Paging by id: pages of 2 still return every task once, in order.
        rows = list(pages(proxy, "reviews:ecshop:", 100, page=2))
        assert [row["id"] for row in rows] == sorted(f"reviews:{i}" for i in ids)
        states = {row["id"]: row["state"] for row in rows}
        assert states[leased.id] == "inflight" and list(states.values()).count("pending") == 6
    listed = _cli("tasks", "--prefix", "reviews:ecshop:", "--limit", "3", proxy=scheduler, tmp=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[-1] == "3 task(s)" and "pending" in listed.stdout
    as_json = _cli("tasks", "--json", proxy=scheduler, tmp=tmp_path)
    assert {json.loads(line)["id"] for line in as_json.stdout.splitlines()} >= {f"reviews:{i}" for i in ids}


def test_tasks_lists_a_scheduler_whose_batch_limit_is_below_the_page(tmp_path: Path) -> None:
    port = free_port()
    with ProcessGroup(tmp_path / "logs") as group:
        listening(
            group,
            "scheduler",
            port,
            "--set",
            f"scheduler.db_dir={tmp_path / 'db'}",
            "--set",
            "scheduler.batch_limit=20",
        )
        proxy = f"scheduler:tcp -h 127.0.0.1 -p {port}"
        with rpc.communicator() as comm:
            C = rpc.crawler()
            C.SchedulerPrx(comm, proxy).addUsers([f"jd:{n}" for n in range(20)], C.TaskKind.ProductReviews)
        listed = _cli("tasks", "--ids", proxy=proxy, tmp=tmp_path)
        assert listed.returncode == 0, listed.stderr
        assert sorted(listed.stdout.split()) == sorted(f"reviews:jd:{n}" for n in range(20))


def test_targets_found_gone_are_listed_and_removed_in_one_pipe(scheduler: str, tmp_path: Path) -> None:
    C = rpc.crawler()
    mine = [f"reviews:ecshop:{n}" for n in (901, 902, 903)]
    with rpc.communicator() as comm:
        proxy = C.SchedulerPrx(comm, scheduler)
        proxy.addUsers([task_id.split(":", 1)[1] for task_id in mine], C.TaskKind.ProductReviews)
        leased = proxy.getUsers("operator-test", 100)
        outcomes = {mine[0]: C.Outcome.NotFound, mine[1]: C.Outcome.Ok}
        proxy.putUsers(
            [C.Report(taskId=t.id, leaseToken=t.leaseToken, outcome=outcomes[t.id]) for t in leased if t.id in outcomes]
        )
        proxy.releaseUsers([C.LeaseRef(taskId=t.id, leaseToken=t.leaseToken) for t in leased if t.id not in outcomes])
    listed = _cli("tasks", "--prefix", "reviews:ecshop:90", proxy=scheduler, tmp=tmp_path)
    lines = {line.split()[0]: line for line in listed.stdout.splitlines()[:-1]}
    assert "last NotFound" in lines[mine[0]] and "last Ok" in lines[mine[1]] and "never crawled" in lines[mine[2]]
    gone = _cli("tasks", "--outcome", "NotFound", "--ids", proxy=scheduler, tmp=tmp_path)
    assert gone.returncode == 0 and gone.stdout == f"{mine[0]}\n", gone.stdout + gone.stderr
    conf = tmp_path / "client.conf"
    removed = subprocess.run(
        icecrawler_argv("remove", "--file", "-", f"--Ice.Config={conf}"),
        input=gone.stdout,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert removed.returncode == 0 and removed.stdout == "reviews: 1 removed of 1\n", removed.stdout + removed.stderr
    after = _cli("tasks", "--prefix", "reviews:ecshop:90", "--json", proxy=scheduler, tmp=tmp_path)
    assert [json.loads(line)["id"] for line in after.stdout.splitlines()] == mine[1:]


def test_tasks_refuses_a_page_over_the_batch_limit(scheduler: str) -> None:
    C = rpc.crawler()
    with rpc.communicator() as comm, pytest.raises(C.InvalidArgument) as refused:
        C.SchedulerPrx(comm, scheduler).listTasks("", "", 1_000_000)
    assert refused.value.code == C.ErrorCode.BatchTooLarge


class FailingScheduler(rpc.crawler().Scheduler):  # type: ignore[misc,name-defined]
    """A scheduler that answers every call with a failure of its own (an UnknownException on the wire)."""

    def stats(self, current: Any) -> Any:
        raise RuntimeError("database is corrupt")


FailingScheduler.__abstractmethods__ = frozenset()  # the other operations are never called here


@pytest.fixture()
def failing_scheduler() -> Iterator[str]:
    port = free_port()
    with rpc.communicator() as comm:
        adapter = comm.createObjectAdapterWithEndpoints("Failing", f"tcp -h 127.0.0.1 -p {port}")
        adapter.add(FailingScheduler(), Ice.stringToIdentity("scheduler"))
        adapter.activate()
        yield f"scheduler:tcp -h 127.0.0.1 -p {port}"


def test_a_failing_scheduler_is_not_called_unreachable(failing_scheduler: str, tmp_path: Path) -> None:
    result = _cli("status", proxy=failing_scheduler, tmp=tmp_path)
    assert result.returncode == 2
    assert "reachable but failed" in result.stderr and "UnknownException" in result.stderr
    assert "cannot reach" not in result.stderr
    down = _cli("status", proxy=f"scheduler:tcp -h 127.0.0.1 -p {free_port()}", tmp=tmp_path)
    assert down.returncode == 2 and "cannot reach the scheduler" in down.stderr


def test_export_progress_has_no_carriage_returns_off_a_terminal(tmp_path: Path) -> None:
    from storage_server.schema import WEIBO, post_row
    from storage_server.stores import SqliteStore

    store = SqliteStore(str(tmp_path / "s.sqlite3"))
    store.put(
        WEIBO,
        [
            post_row(Post(id=n, user_id=1, text="t", created_at="2024-05-01T12:00:00+08:00", source="weibo_pc"))
            for n in range(1, 2501)
        ],
    )
    store.close()
    result = subprocess.run(
        icecrawler_argv(
            "export",
            "--table",
            "weibo",
            "--set",
            f"storage.embedded.path={tmp_path / 's.sqlite3'}",
            "-o",
            str(tmp_path / "out.jsonl"),
        ),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "\r" not in result.stderr and result.stderr.strip().endswith("2,500 records, done")
    assert len((tmp_path / "out.jsonl").read_text().splitlines()) == 2500


def test_progress_redraws_only_on_a_terminal() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    log, tty = io.StringIO(), Terminal()
    for stream in (log, tty):
        progress = Progress("export weibo", stream, every_s=0.0)
        for count in (1000, 2000):
            progress.update(count)
        progress.done(2500)
    assert "\r" not in log.getvalue() and log.getvalue().count("\n") == 3
    assert tty.getvalue().count("\r") == 3 and tty.getvalue().count("\n") == 1


def test_listen_on_the_command_line_wins_over_the_property_file(tmp_path: Path) -> None:
    port, other = free_port(), free_port()
    conf = tmp_path / "storage.conf"
    conf.write_text(f"StorageAdapter.Endpoints=tcp -h 127.0.0.1 -p {other}\n")
    with ProcessGroup(tmp_path / "logs") as group:
        listening(
            group,
            "storage",
            port,
            f"--Ice.Config={conf}",
            "--set",
            f"storage.embedded.path={tmp_path / 's.sqlite3'}",
            "--set",
            f"storage.spool_dir={tmp_path / 'spool'}",
        )
        with rpc.communicator() as comm:
            assert rpc.crawler().StoragePrx(comm, f"storage:tcp -h 127.0.0.1 -p {port}").stats().backend


def test_insecure_endpoint_starts_only_when_allowed_and_then_warns(tmp_path: Path) -> None:
    port = free_port("0.0.0.0")
    with ProcessGroup(tmp_path / "logs") as group:
        process = listening(
            group,
            "scheduler",
            port,
            "--set",
            f"scheduler.db_dir={tmp_path / 'db'}",
            "--set",
            "security.allow_insecure=true",
            host="0.0.0.0",
        )
        assert "INSECURE" in process.log_tail(50)


def test_an_unreachable_server_is_named_by_the_proxy_that_was_tried(scheduler: str, tmp_path: Path) -> None:
    """A wrong port or a daemon that is not running: the one line says which proxy was tried, so the operator can
    tell a typo in the property file from a daemon that is down (before, only "connection refused")."""
    gone = f"scheduler:tcp -h 127.0.0.1 -p {free_port()}"
    for args in (("status",), ("tasks",), ("seed", "jd:100012043978"), ("hold", "club.jd.com", "--lift")):
        result = _cli(*args, proxy=gone, tmp=tmp_path)
        assert result.returncode == 2, (args, result.stderr)
        assert "cannot reach the scheduler" in result.stderr and gone in result.stderr, (args, result.stderr)
    # The scheduler answers, the storage server does not: status says where it looked for storage.
    result = _cli("status", "--json", proxy=scheduler, tmp=tmp_path)
    assert result.returncode == 0, result.stderr
    storage = json.loads(result.stdout)["storage"]
    assert storage["reachable"] is False and storage["proxy"].startswith("storage:tcp -h 127.0.0.1 -p ")
    text = _cli("status", proxy=scheduler, tmp=tmp_path)
    assert "storage: not reachable at storage:tcp -h 127.0.0.1 -p " in text.stdout, text.stdout


def test_status_says_in_words_that_the_storage_backend_is_down(scheduler: str, tmp_path: Path) -> None:
    """HBase down (nothing listens at its Thrift port): storage spools what it is given and status says the backend
    is down and why, rather than "-1 posts, -1 reviews" and a spool depth for the operator to decode."""
    port, thrift = free_port(), free_port()
    with ProcessGroup(tmp_path / "logs") as group:
        backend = ["storage.backend=hbase", f"storage.hbase.port={thrift}", "storage.hbase.timeout_s=2"]
        paths = [f"storage.spool_dir={tmp_path / 'spool'}", "metrics.storage.port=0"]
        listening(group, "storage", port, *(arg for pair in backend + paths for arg in ("--set", pair)))
        proxy = f"storage:tcp -h 127.0.0.1 -p {port}"
        with rpc.communicator() as comm:
            ack = rpc.crawler().StoragePrx(comm, proxy).writeWB([rpc.post_to_slice(make_post(1))])
        assert (ack.stored, ack.spooled) == (0, 1)
        conf = tmp_path / "client.conf"
        conf.write_text(f"Scheduler.Proxy={scheduler}\nStorage.Proxy={proxy}\n")
        result = subprocess.run(
            icecrawler_argv("status", f"--Ice.Config={conf}"), capture_output=True, text=True, timeout=60
        )
    assert result.returncode == 0, result.stderr
    assert "storage (hbase): row counts unknown (the backend did not answer them), spool depth 1" in result.stdout
    assert "backend hbase DOWN: its writes fail (" in result.stdout and str(thrift) in result.stdout, result.stdout
    assert "-1 posts" not in result.stdout


def test_status_with_a_malformed_storage_proxy_still_reports_the_scheduler(scheduler: str, tmp_path: Path) -> None:
    """``status`` works with the scheduler alone: a Storage.Proxy that does not parse (a typo in the property file)
    is a storage server not reached, named with the text tried, not an error that hides the scheduler's state."""
    conf = tmp_path / "client.conf"
    conf.write_text(f"Scheduler.Proxy={scheduler}\nStorage.Proxy=storage:tcp -h 127.0.0.1 -p\n")
    result = subprocess.run(
        icecrawler_argv("status", "--json", f"--Ice.Config={conf}"), capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert "tasks" in report["scheduler"]
    assert report["storage"]["reachable"] is False
    assert report["storage"]["proxy"] == "storage:tcp -h 127.0.0.1 -p"
