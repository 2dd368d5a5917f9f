"""``icecrawler reshard``: copy a scheduler's databases into a new number of shards (offline)."""

from __future__ import annotations

import argparse
import json
import secrets
import shutil
import time
from contextlib import ExitStack
from pathlib import Path

from icecrawler.datalock import DataLock
from icecrawler.durable import publish, sync_dir, sync_tree
from icecrawler.errors import ConfigError
from icecrawler.settings import Settings
from icecrawler_cli.commands import BaseCommand
from scheduler_server.reshard_run import RUN_FILE, partial_of, run_of

#: What to do when a --from database is held: reshard reads databases no scheduler serves (docs/DEPLOY.md).
IN_USE = (
    "reshard reads only databases no scheduler holds: stop the scheduler first; for a --dry-run of a crawl that "
    "runs, give --from its newest hot backup instead (scheduler.backup_dir)"
)

#: A directory named twice: refused before the locks, where an old database given twice was "in use" by this run.
_EACH_ONCE = "--from and --to must name different directories, each once"


class Command(BaseCommand):
    summary = "copy the scheduler's databases into another number of shards (daemons stopped)"
    description = (
        "Move every task, with its period, cursor, fingerprint, history and lease, and every host's hold or ban\n"
        "block, from the scheduler databases of one layout (one unsharded scheduler, or all N shards) into new\n"
        "databases for M shards: task and host go to the shard crc32(host) % M, as the running shards place\n"
        "them. Stop every scheduler first (each database is locked while it is read). The old databases are\n"
        "not changed, so going back is starting the old schedulers again; a run killed while it renamed the new\n"
        "ones into place is finished by the same command again. Run it with the settings the schedulers run\n"
        "with: the sources' base_url settings decide each task's shard.\n\n"
        "  icecrawler reshard --from /srv/icecrawler/db --to /srv/icecrawler/shard0 /srv/icecrawler/shard1\n"
        "  ... --dry-run    # only how many tasks of which hosts each new shard would get\n\n"
        "Then start shard K with --set scheduler.shards=M --set scheduler.shard=K and its new db_dir, and list\n"
        "every shard in Scheduler.Proxies of the clients (docs/DEPLOY.md, 'Scheduler shards')."
    )

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        for flag, dest, what in (
            ("--from", "sources", "the db_dir of every old shard (or of the one unsharded scheduler), in any order"),
            ("--to", "targets", "a new, empty db_dir per new shard, shard 0 first (as many as new shards)"),
        ):
            parser.add_argument(flag, dest=dest, nargs="+", required=True, metavar="DIR", help=what)
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="only show how many tasks of which hosts each new shard would hold; write nothing",
        )

    def run(self, args: argparse.Namespace, settings: Settings, ice_args: list[str]) -> int:
        from icecrawler.shards import source_hosts
        from scheduler_server.integrity import LOCK_FILE, MARKER, open_checked
        from scheduler_server.reshard import plan, reshard
        from scheduler_server.store import TABLES, BdbQueueStore

        sources = [Path(path).resolve() for path in args.sources]
        targets = [Path(path).resolve() for path in args.targets]
        if len(set(sources)) != len(sources):  # before the locks: one named twice would be "in use" by this run
            raise ConfigError(_EACH_ONCE)
        with ExitStack() as locks:  # a scheduler running on --from is refused, with its pid, before anything else
            for path in sources:
                if path.is_dir():
                    locks.enter_context(DataLock(path / LOCK_FILE, "reshard", IN_USE))
            stopped = None if args.dry_run else _stopped_while_publishing(sources, targets, LOCK_FILE)
            if stopped is not None:
                publish(stopped)
                for parent in sorted({target.parent for target in targets}):  # renames a killed run never synced
                    sync_dir(parent)
                if stopped:
                    print(
                        f"finished the reshard into {len(targets)} shard(s) that was stopped while it renamed its "
                        f"databases into place ({len(stopped)} left to rename); its copies were complete and checked"
                    )
                else:
                    print(
                        f"nothing to do: the --to directories already hold this reshard's {len(targets)} shard(s), "
                        "every one renamed into place (a run killed after its last rename, or run twice)"
                    )
                return 0
        _check_paths(sources, targets)
        durable = settings.get_bool("scheduler.durable_commits")
        started = time.monotonic()
        with ExitStack() as stack:
            for path in sources:  # a running scheduler holds it: refused with its pid, before anything is opened
                stack.enter_context(DataLock(path / LOCK_FILE, "reshard", IN_USE))
            old = []
            for path in sources:
                store = open_checked(path, durable=durable)  # recovered and verified, as a scheduler opens it
                stack.callback(store.close)
                old.append(store)
            if args.dry_run:
                for shard, hosts in enumerate(plan(old, len(targets), source_hosts(settings))):
                    placed = ", ".join(f"{host} {count}" for host, count in sorted(hosts.items())) or "no tasks"
                    print(f"shard {shard} of {len(targets)}: {sum(hosts.values())} tasks ({placed})")
                return 0
            partials = [partial_of(path) for path in targets]
            new = []
            for partial in partials:
                if partial.exists():  # left by a reshard that did not finish: ours to replace
                    shutil.rmtree(partial)
                store = BdbQueueStore(partial, durable=durable)
                stack.callback(store.close)
                new.append(store)
            result = reshard(old, new, source_hosts(settings), progress=print)
        run = {
            "run": secrets.token_hex(8),
            "shards": len(targets),
            "from": sorted(map(str, sources)),
            "from_state": _source_state(sources, LOCK_FILE),
        }
        for shard, partial in enumerate(partials):
            (partial / MARKER).write_text(time.strftime("%Y-%m-%dT%H:%M:%S%z") + " (reshard)\n")
            (partial / RUN_FILE).write_text(json.dumps({**run, "shard": shard}) + "\n")
            open_checked(partial, durable=durable).close()  # the start-up checks, before it is published
            sync_tree(partial)  # every new database is on disk, its run file included, before the first rename
        publish(list(zip(partials, targets, strict=True)))
        print(f"{result.was_shards} shard(s) -> {result.shards} shard(s) in {time.monotonic() - started:.1f} s:")
        for shard, (target, entries) in enumerate(zip(targets, result.entries, strict=True)):
            counts = ", ".join(f"{table} {entries[table]}" for table in TABLES if table != "meta")
            print(f"  shard {shard}: {target}: {counts}")
        print(
            f"start shard K with --set scheduler.shards={result.shards} --set scheduler.shard=K and its db_dir; "
            "list every shard, in order, in the clients' Scheduler.Proxies"
        )
        return 0


def _source_state(sources: list[Path], lock_file: str) -> dict[str, list[list[object]]]:
    """Name, size and modification time of every file of each old database, as the reshard left them: a scheduler
    started on them since changes them (its recovery and checkpoints write), and the new shards are then older."""
    state: dict[str, list[list[object]]] = {}
    for source in sources:
        stats = sorted(
            (path.name, path.stat()) for path in source.iterdir() if path.is_file() and path.name != lock_file
        )
        state[str(source)] = [[name, stat.st_size, stat.st_mtime_ns] for name, stat in stats]
    return state


def _stopped_while_publishing(
    sources: list[Path], targets: list[Path], lock_file: str
) -> list[tuple[Path, Path]] | None:
    """(new database, --to path) for each rename left, when a run with these paths was stopped while it renamed its
    databases into place (every copy was complete and checked by then), [] when such a run renamed them all; None
    when the --to paths show no such run. Refused when the old databases changed since that run (a scheduler ran
    on them: going back to the old layout): its shards are older than they are."""
    placed = [run_of(target) for target in targets]
    waiting = [run_of(partial_of(target)) for target in targets]
    if not any(placed):
        return None
    runs = [done or left for done, left in zip(placed, waiting, strict=True)]
    first = runs[0]
    if first is None:
        return None
    expected = {"shards": len(targets), "from": sorted(map(str, sources))}
    if any(run != {**first, **expected, "shard": shard} for shard, run in enumerate(runs)):
        return None  # another run's, or other paths': left to _check_paths to refuse
    if "from_state" in first and first["from_state"] != _source_state(sources, lock_file):
        raise ConfigError(
            "--to holds the shards of a reshard of these --from databases, but they changed since (a scheduler ran "
            "on them after it?): the shards are older than them. Reshard again into new, empty --to directories"
        )
    left = [(partial_of(target), target) for target, run in zip(targets, waiting, strict=True) if run is not None]
    if any(target.exists() and (not target.is_dir() or any(target.iterdir())) for _, target in left):
        return None
    return left


def _check_paths(sources: list[Path], targets: list[Path]) -> None:
    """Old databases that exist, new ones that do not (or are empty folders), and no path in both lists."""
    for path in sources:
        if not path.is_dir():
            raise ConfigError(f"--from {path}: no such directory")
        if not (path / "tasks.db").is_file():  # opened anyway, it would become a new, empty database
            raise ConfigError(f"--from {path}: holds no scheduler database (no tasks.db); give each shard's db_dir")
    for path in targets:
        if (run := run_of(path)) is not None:
            raise ConfigError(
                f"--to {path}: already holds shard {run.get('shard')} of {run.get('shards')} made by an earlier "
                "reshard; reshard writes only new databases (one killed while it renamed its databases into place "
                "is finished by the same command: the same --from and --to)"
            )
        if path.exists() and (not path.is_dir() or any(path.iterdir())):
            raise ConfigError(
                f"--to {path}: already exists and is not empty; reshard writes only new databases (a run stopped "
                "while it renamed its databases into place is finished by running it again with the same --from "
                "and --to)"
            )
    if len(set(targets)) != len(targets) or set(sources) & set(targets):
        raise ConfigError(_EACH_ONCE)
