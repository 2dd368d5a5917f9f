"""``icecrawler reshard`` against real daemons and real Berkeley DB: an unsharded scheduler's tasks, crawled and
in flight, move to two shards, which serve them as they were (periods, outcomes, due times, leases); and a
running scheduler's database is refused."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from icecrawler import rpc
from icecrawler.backups import BackupPlan
from icecrawler.processes import icecrawler_argv
from tests.helpers import refused_start, wait_for
from tests.scheduler.daemon import REPO, SchedulerDaemon, scheduler_daemon, scheduler_proxy
from tests.scheduler.test_shards import TWO_HOSTS

pytestmark = [pytest.mark.ice, pytest.mark.bdb]

SETTINGS = {**TWO_HOSTS, "scheduler__policy": "fixed", "scheduler__initial_period_s": 600, "log__level": "WARNING"}
SETS = [f"--set={key.replace('__', '.')}={value}" for key, value in SETTINGS.items()]


def reshard(*args: str) -> subprocess.CompletedProcess[str]:
    argv = icecrawler_argv("reshard", *args, *SETS)
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120, check=False)


def every_task(daemon: SchedulerDaemon) -> dict[str, dict[str, Any]]:
    with scheduler_proxy(daemon) as proxy:
        return {row["id"]: row for row in json.loads(proxy.listTasks("", "", 1000))}


def test_an_unsharded_schedulers_tasks_move_to_two_shards_as_they_were(tmp_path: Path) -> None:
    C = rpc.crawler()
    (tmp_path / "single").mkdir()
    with scheduler_daemon(tmp_path / "single", **SETTINGS) as single, scheduler_proxy(single) as proxy:
        proxy.addUsers([f"jd:{n}" for n in range(12)] + [f"ecshop:{n}" for n in range(8)], C.TaskKind.ProductReviews)
        leased = proxy.getUsers("w", 20)
        done = [
            C.Report(taskId=task.id, leaseToken=task.leaseToken, outcome=C.Outcome.Ok, newItems=3, fetches=1)
            for task in leased[:14]
        ]
        proxy.putUsers(done)
        in_flight = leased[14:]
        before = every_task(single)
        assert single.stop() == 0
    targets = [str(tmp_path / "s0" / "db"), str(tmp_path / "s1" / "db")]
    dry = reshard("--from", str(single.db_dir), "--to", *targets, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "shard 0 of 2: 12 tasks (127.0.0.1:8800 12)" in dry.stdout
    assert "shard 1 of 2: 8 tasks (127.0.0.3:8800 8)" in dry.stdout
    assert not (tmp_path / "s0").exists() and not (tmp_path / "s1").exists()
    Path(targets[1]).mkdir(parents=True)  # an empty folder made ready for it: taken
    stale = tmp_path / "s0" / "db.partial"  # what a reshard killed mid-copy leaves: replaced, never used
    stale.mkdir(parents=True)
    (stale / "tasks.db").write_bytes(b"half a table")
    result = reshard("--from", str(single.db_dir), "--to", *targets)
    assert result.returncode == 0, result.stderr
    assert "1 shard(s) -> 2 shard(s)" in result.stdout and "shard 1:" in result.stdout
    assert not list(tmp_path.glob("**/*.partial"))
    with ExitStack() as stack:
        shards = []
        for shard in (0, 1):
            settings = {**SETTINGS, "scheduler__shards": 2, "scheduler__shard": shard}
            shards.append(stack.enter_context(scheduler_daemon(tmp_path / f"s{shard}", **settings)))
        after = [every_task(daemon) for daemon in shards]
        assert {task_id.split(":")[1] for task_id in after[0]} == {"jd"}
        assert {task_id.split(":")[1] for task_id in after[1]} == {"ecshop"}
        merged = after[0] | after[1]
        assert merged.keys() == before.keys()
        for task_id, row in before.items():
            moved = merged[task_id]
            assert {k: v for k, v in moved.items() if not k.endswith("S")} == {
                k: v for k, v in row.items() if not k.endswith("S")
            }
            assert moved["periodS"] == row["periodS"]
            left = "dueInS" if row["state"] == "pending" else "leaseLeftS"
            assert row[left] - 120 < moved[left] <= row[left]  # the same due time (or lease end), less the time passed
        for task in in_flight:  # each lease moved with its task: the report is taken on the task's new shard
            owner = shards[0] if ":jd:" in task.id else shards[1]
            with scheduler_proxy(owner) as proxy:
                proxy.putUsers([C.Report(taskId=task.id, leaseToken=task.leaseToken, outcome=C.Outcome.Ok, fetches=1)])
        for daemon, count in ((shards[0], 12), (shards[1], 8)):
            with scheduler_proxy(daemon) as proxy:
                stats = proxy.stats()
                assert (stats.tasks, stats.pending, stats.inflight) == (count, count, 0)
        assert sum(scheduler_stats_done(daemon) for daemon in shards) == 20  # the completion log moved too


def scheduler_stats_done(daemon: SchedulerDaemon) -> int:
    with scheduler_proxy(daemon) as proxy:
        return int(proxy.stats().done)


def test_a_running_schedulers_database_is_refused_and_bad_paths_are_one_line_errors(tmp_path: Path) -> None:
    (tmp_path / "single").mkdir()
    with scheduler_daemon(tmp_path / "single", **SETTINGS) as single:
        result = reshard("--from", str(single.db_dir), "--to", str(tmp_path / "s0"), str(tmp_path / "s1"))
        assert result.returncode != 0
        assert "is in use by scheduler pid" in result.stderr
        # What to do about it, for a reshard: not a daemon's "give this one its own directory".
        assert "stop the scheduler first" in result.stderr and "scheduler.backup_dir" in result.stderr
        assert "its own directory" not in result.stderr
        assert not (tmp_path / "s0").exists() and not (tmp_path / "s0.partial").exists()
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    for args, message in (
        (["--from", str(tmp_path / "nowhere"), "--to", str(tmp_path / "s0")], "no such directory"),
        (["--from", str(tmp_path), "--to", str(tmp_path / "s0")], "holds no scheduler database"),
        (["--from", str(single.db_dir), "--to", str(tmp_path / "full")], "already exists and is not empty"),
        (["--from", str(single.db_dir), "--to", str(single.db_dir)], "already exists and is not empty"),
        # One database named twice was taken for a running scheduler's: "in use by reshard pid <its own>".
        (["--from", str(single.db_dir), f"{single.db_dir}/.", "--to", str(tmp_path / "s0")], "each once"),
        (["--from", str(single.db_dir), str(single.db_dir), "--to", str(tmp_path / "s0"), "--dry-run"], "each once"),
    ):
        result = reshard(*args)
        assert result.returncode != 0 and message in result.stderr, result.stderr
        assert "Traceback" not in result.stderr


def test_a_dry_run_reads_a_running_schedulers_newest_backup(tmp_path: Path) -> None:
    # The daemon's own database is locked while it runs; a hot backup is a complete database of the same layout,
    # so the plan for a running crawl comes from the newest one (docs/DEPLOY.md, "Scheduler shards").
    (tmp_path / "single").mkdir()
    backups = BackupPlan(tmp_path / "backups", "scheduler", interval_s=1, keep=50)
    settings = {
        **SETTINGS,
        "scheduler__backup_dir": backups.directory,
        "scheduler__backup_interval_s": backups.interval_s,
        "scheduler__backup_keep": backups.keep,
    }
    with scheduler_daemon(tmp_path / "single", **settings) as single:
        with scheduler_proxy(single) as proxy:
            proxy.addUsers(
                [f"jd:{n}" for n in range(5)] + [f"ecshop:{n}" for n in range(3)], rpc.crawler().TaskKind.ProductReviews
            )
        seeded = time.time()
        wait_for(
            lambda: any(taken > seeded for taken, _ in backups.complete()),
            "the daemon took no backup after the seeds",
            timeout_s=60,
        )
        newest = backups.complete()[-1][1]
        targets = [str(tmp_path / "s0"), str(tmp_path / "s1")]
        dry = reshard("--from", str(newest), "--to", *targets, "--dry-run")
        assert dry.returncode == 0, dry.stderr
        assert "shard 0 of 2: 5 tasks (127.0.0.1:8800 5)" in dry.stdout
        assert "shard 1 of 2: 3 tasks (127.0.0.3:8800 3)" in dry.stdout
        refused = reshard("--from", str(single.db_dir), "--to", *targets, "--dry-run")
        assert refused.returncode != 0 and "is in use by scheduler pid" in refused.stderr
        with scheduler_proxy(single) as proxy:
            assert proxy.stats().tasks == 8  # the running scheduler served on
    assert not (tmp_path / "s0").exists() and not (tmp_path / "s1").exists()


#: ``icecrawler reshard`` that kills itself (SIGKILL) right after it renamed its Nth new database into place (N in
#: ``DIE_AFTER_RENAME``).
_KILLED_BETWEEN_RENAMES = """
import os, pathlib, runpy, signal, sys
rename = pathlib.Path.rename
renamed = []
def rename_then_die(self, target):
    moved = rename(self, target)
    if self.name.endswith(".partial"):
        renamed.append(target)
        if len(renamed) == int(os.environ["DIE_AFTER_RENAME"]):
            os.kill(os.getpid(), signal.SIGKILL)
    return moved
pathlib.Path.rename = rename_then_die
sys.argv = ["icecrawler", *sys.argv[1:]]
runpy.run_module("icecrawler_cli", run_name="__main__")
"""


def _reshard_killed_after_rename(tmp_path: Path, renames: int) -> tuple[Path, list[str]]:
    """A scheduler of 10 tasks (6 on shard 0's host, 4 on shard 1's), stopped, and a reshard of it into two shards
    killed with -9 right after its ``renames``-th rename; (its db_dir, the --to paths)."""
    (tmp_path / "single").mkdir()
    with scheduler_daemon(tmp_path / "single", **SETTINGS) as single, scheduler_proxy(single) as proxy:
        proxy.addUsers(
            [f"jd:{n}" for n in range(6)] + [f"ecshop:{n}" for n in range(4)], rpc.crawler().TaskKind.ProductReviews
        )
        assert single.stop() == 0
    targets = [str(tmp_path / "s0" / "db"), str(tmp_path / "s1" / "db")]
    args = ["reshard", "--from", str(single.db_dir), "--to", *targets, *SETS]
    killed = subprocess.run(
        [sys.executable, "-c", _KILLED_BETWEEN_RENAMES, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "DIE_AFTER_RENAME": str(renames)},
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    return single.db_dir, targets


def _serve_their_tasks(tmp_path: Path) -> None:
    """Each new shard starts on its database and holds its host's tasks, all pending."""
    with ExitStack() as stack:
        for shard, count in ((0, 6), (1, 4)):
            settings = {**SETTINGS, "scheduler__shards": 2, "scheduler__shard": shard}
            daemon = stack.enter_context(scheduler_daemon(tmp_path / f"s{shard}", **settings))
            with scheduler_proxy(daemon) as shard_proxy:
                stats = shard_proxy.stats()
                assert (stats.tasks, stats.pending) == (count, count)


def test_a_reshard_killed_between_its_renames_is_finished_by_running_it_again(tmp_path: Path) -> None:
    """kill -9 after the first new shard was renamed into place: one --to path holds a shard, the other's copy
    waits beside it. The same command again renames what is left (each copy was complete and checked before any
    rename), and the shards serve every task; other paths are refused as before."""
    db_dir, targets = _reshard_killed_after_rename(tmp_path, 1)
    assert Path(targets[0]).is_dir() and not Path(targets[1]).exists()
    assert (tmp_path / "s1" / "db.partial").is_dir()

    other = reshard("--from", str(db_dir), "--to", targets[0], str(tmp_path / "s1" / "elsewhere"))
    assert other.returncode != 0 and "already holds shard 0 of 2 made by an earlier reshard" in other.stderr
    again = reshard("--from", str(db_dir), "--to", *targets)
    assert again.returncode == 0, again.stderr
    assert "finished the reshard into 2 shard(s)" in again.stdout and "1 left to rename" in again.stdout
    assert not list(tmp_path.glob("**/*.partial"))
    # Once more (a script that reruns until it succeeds): nothing left to do, and it says so.
    done = reshard("--from", str(db_dir), "--to", *targets)
    assert done.returncode == 0 and "nothing to do" in done.stdout, done.stderr
    _serve_their_tasks(tmp_path)


def test_a_shard_started_before_a_killed_reshard_was_finished_refuses_to_begin_empty(tmp_path: Path) -> None:
    """kill -9 between the renames, then the new shards started without running the reshard again: shard 1's
    db_dir does not exist yet (its complete copy waits as ``db.partial``). Was: it began a new, empty database
    there and served none of its host's tasks, and the rerun was then refused for good ("already holds shard 0"),
    with the copy stranded beside it. Now the start is refused in one line naming the copy and the command that
    finishes it, nothing is begun there, and the rerun finishes the reshard."""
    db_dir, targets = _reshard_killed_after_rename(tmp_path, 1)
    sets = [f"--set={key}={value}" for key, value in (("scheduler.shards", 2), ("scheduler.shard", 1))]
    refused = refused_start("scheduler", tmp_path, *SETS, *sets, f"--set=scheduler.db_dir={targets[1]}")
    assert f"{targets[1]}.partial" in refused and "icecrawler reshard" in refused, refused
    assert not Path(targets[1]).exists()  # nothing begun there
    again = reshard("--from", str(db_dir), "--to", *targets)
    assert again.returncode == 0 and "1 left to rename" in again.stdout, again.stderr
    _serve_their_tasks(tmp_path)


def test_a_reshard_killed_after_its_last_rename_is_done_and_a_rerun_says_so(tmp_path: Path) -> None:
    """kill -9 after the last rename, before the folders were synced and the summary printed: every shard is in
    place, and the same command (what an operator runs when unsure) succeeds and says there is nothing to do,
    where it used to refuse with "finished by the same command" (a kill -9 harness found it)."""
    db_dir, targets = _reshard_killed_after_rename(tmp_path, 2)
    assert all(Path(target).is_dir() for target in targets) and not list(tmp_path.glob("**/*.partial"))
    again = reshard("--from", str(db_dir), "--to", *targets)
    assert again.returncode == 0 and "nothing to do" in again.stdout, again.stderr
    _serve_their_tasks(tmp_path)


def test_a_finished_reshard_is_not_taken_as_current_once_the_old_scheduler_ran_again(tmp_path: Path) -> None:
    """Going back is starting the old scheduler again; its database then moves on, and the shards of the earlier
    reshard are older than it. The same command must not call them done (nor run while that scheduler holds the
    database)."""
    db_dir, targets = _reshard_killed_after_rename(tmp_path, 2)
    with scheduler_daemon(tmp_path / "single", **SETTINGS) as single:
        busy = reshard("--from", str(db_dir), "--to", *targets)
        assert busy.returncode != 0 and "is in use by scheduler pid" in busy.stderr
        assert single.stop() == 0
    stale = reshard("--from", str(db_dir), "--to", *targets)
    assert stale.returncode != 0 and "changed since" in stale.stderr, stale.stdout
