"""Rotating backups in one directory: when the next one is due, how it is named, and which old ones go.

A daemon that keeps state for months (the scheduler's queue database, the storage server's spool and embedded
store) backs it up on a thread of its own (``PeriodicBackups``). The mechanism is the same whatever is copied, so it
lives here and the daemon passes the function that writes one copy into a fresh directory. A copy is written under
``<name>.partial`` and renamed only once complete, so a crash or a full disk mid-backup never leaves something that
looks like a backup. An old backup is removed the same way round: renamed to ``<name>.removing`` first, then
deleted, so a daemon killed while deleting one leaves no half-deleted folder under a backup's name (a restore would
take it for one). Leftovers of both kinds, and backups past ``keep`` that a crash left, go when the backup thread
starts and before each backup. Names carry the UTC time
(``<prefix>-20261205T081500Z``), so they sort by age, and "due" is judged from the newest complete backup on disk: a
daemon that restarts often still backs up once per interval.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from icecrawler.datalock import DataLock, LockHeld, LocksUnsupported
from icecrawler.durable import names_full_disk, publish, sync_tree
from icecrawler.errors import ConfigError, ServiceError

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry
    from prometheus_client.core import Metric

    from icecrawler.settings import Settings

__all__ = [
    "PARTIAL_SUFFIX",
    "REMOVING_SUFFIX",
    "BackupNameLock",
    "BackupPlan",
    "PeriodicBackups",
    "backup_dir_keys",
    "backups_lock",
    "refuse_new_beside_backups",
    "start_backups",
]

log = logging.getLogger(__name__)

PARTIAL_SUFFIX = ".partial"
#: An old backup on its way out (renamed before it is deleted).
REMOVING_SUFFIX = ".removing"
_STAMP = "%Y%m%dT%H%M%SZ"


@dataclass(frozen=True)
class BackupPlan:
    """Backups of one kind (``prefix``) in ``directory``: one every ``interval_s`` seconds, the newest ``keep``."""

    directory: Path
    prefix: str
    interval_s: float
    keep: int

    def __post_init__(self) -> None:
        if not self.prefix or "/" in self.prefix:
            raise ValueError(f"a backup prefix must be a plain name, not {self.prefix!r}")
        if not self.interval_s > 0 or self.keep < 1:
            raise ValueError(f"a backup needs interval_s > 0 and keep >= 1, not {self.interval_s}, {self.keep}")

    def _ours(self, suffix: str = "") -> list[tuple[float, Path]]:
        """This kind's backups (with ``suffix``: partial copies, or old ones being removed), oldest first, with the
        unix time in their names. Anything else in the directory, another kind's backups included
        (``scheduler-shard1-...`` beside ``scheduler-...``), is never listed, so never removed."""
        found = []
        for path in self.directory.glob(f"{self.prefix}-*{suffix}"):
            stamp = path.name[len(self.prefix) + 1 : len(path.name) - len(suffix)]
            try:
                taken = datetime.strptime(stamp, _STAMP).replace(tzinfo=UTC).timestamp()
            except ValueError:
                continue
            if path.is_dir():
                found.append((taken, path))
        return sorted(found)

    def complete(self, now: float | None = None) -> list[tuple[float, Path]]:
        """The complete backups of this kind, oldest first, with the unix time in their names. One named after
        ``now`` (default: the clock's time) was taken while the clock was ahead, before it was set right: it is older
        than now by an unknown time, so it sorts before the others, and is the first the prune removes."""
        now = time.time() if now is None else now
        return sorted(self._ours(), key=lambda backup: (backup[0] <= now, backup[0]))

    def newest(self, now: float) -> float | None:
        """The time in the name of the newest complete backup taken at or before ``now``; None when there is none."""
        return max((taken for taken, _ in self._ours() if taken <= now), default=None)

    def due(self, now: float) -> bool:
        """Whether the newest complete backup is ``interval_s`` old (or there is none, one named in the future
        counting as none: a clock set back by a year must not put the next backup a year off)."""
        newest = self.newest(now)
        return newest is None or now - newest >= self.interval_s

    def take(self, write: Callable[[Path], None], now: float | None = None) -> Path:
        """Write one backup with ``write(target)`` (``target`` does not exist yet), publish it, prune old ones;
        returns its path. An exception from ``write`` leaves no new backup and is raised."""
        now = time.time() if now is None else now
        name = f"{self.prefix}-{datetime.fromtimestamp(now, UTC).strftime(_STAMP)}"
        final = self.directory / name
        partial = self.directory / (name + PARTIAL_SUFFIX)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.tidy(now)
        if final.exists():
            raise FileExistsError(f"backup {final} already exists (two backups within one second?)")
        try:
            write(partial)
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise
        sync_tree(partial)
        publish([(partial, final)])
        self._prune(now)
        return final

    def tidy(self, now: float | None = None) -> None:
        """Remove what a crash left: partial copies, old backups half removed, and backups past ``keep`` (a daemon
        killed after publishing a backup and before pruning, again and again, would pile them up)."""
        if not self.directory.is_dir():
            return
        for _, leftover in self._ours(PARTIAL_SUFFIX) + self._ours(REMOVING_SUFFIX):
            shutil.rmtree(leftover, ignore_errors=True)
        self._prune(now)

    def _prune(self, now: float | None) -> None:
        """Remove complete backups past the newest ``keep``: each renamed out of the backups' names first. One that
        cannot be removed is a warning, never a failed backup: the new one is taken, and the next prune tries again."""
        for _, old in self.complete(now)[: -self.keep]:
            going = old.with_name(old.name + REMOVING_SUFFIX)
            try:
                old.rename(going)
                shutil.rmtree(going)
            except OSError as exc:
                log.warning("could not remove old backup %s (keeping the newest %d): %s", old, self.keep, exc)
                continue
            log.info("removed old backup %s (keeping the newest %d)", old, self.keep)


class PeriodicBackups(threading.Thread):
    """Takes a backup whenever one is due, on a thread of its own: a long copy never delays the daemon's other
    housekeeping (a scheduler keeps reaping leases meanwhile). A failed backup (a full disk, say) is logged in one
    line and tried again after ``retry_s``, never in a loop. With ``lock`` (the daemon's ``BackupNameLock``) nothing is
    tidied or written in the backup directory until the lock is held: a backup that cannot take it fails like any
    other, and the next one tries again."""

    def __init__(
        self,
        plan: BackupPlan,
        write: Callable[[Path], None],
        what: str,
        check_s: float = 60.0,
        retry_s: float = 600.0,
        lock: BackupNameLock | None = None,
    ) -> None:
        super().__init__(name=f"{plan.prefix}-backups", daemon=True)
        self.plan = plan
        self.write = write
        self.what = what
        self.check_s = min(check_s, plan.interval_s)
        self.retry_s = min(retry_s, plan.interval_s)
        self.lock = lock
        self.stopped = threading.Event()
        self.started_at = time.time()
        #: Backups taken and failed since start (metrics, logs, tests).
        self.taken = 0
        self.failed = 0

    def run(self) -> None:
        try:
            if self.lock is None or self.lock.ours:  # else another daemon's copy under way may be what looks left
                self.plan.tidy()
        except OSError as exc:  # the backup below tries again, and says so if it fails
            log.warning("%s backups: could not tidy %s: %s", self.what, self.plan.directory, exc)
        wait = 0.0
        while not self.stopped.wait(wait):
            wait = self.check_s
            try:
                # The lock before "due": the name's backups may be another daemon's, whose fresh one would put this
                # daemon's off for good, without a failure counted or an alert.
                if self.lock is not None:
                    self.lock.take()
                if not self.plan.due(time.time()):
                    continue
                started = time.monotonic()
                path = self.plan.take(self.write)
            except Exception as exc:  # one line, then the next try; the daemon runs on
                self.failed += 1
                log.error(
                    "%s backup failed, next try in %.0fs: %s: %s (backup directory %s%s)",
                    self.what,
                    self.retry_s,
                    type(exc).__name__,
                    exc,
                    self.plan.directory,
                    _room_left(self.plan.directory, str(exc)),
                )
                wait = self.retry_s
                continue
            self.taken += 1
            log.info("%s backed up to %s in %.1fs", self.what, path, time.monotonic() - started)

    def metric_families(self, prefix: str, now: float | None = None) -> list[Metric]:
        """For ``/metrics``: how old the newest backup is (since start while there is none, so that backups that
        never succeed show as growing), the interval to compare it with, and the backups taken and failed."""
        from icecrawler.metrics import counter, gauge  # only a daemon that serves /metrics pays for the import

        now = time.time() if now is None else now
        # Without the name's lock the newest backup of that name may be another daemon's, not this one's.
        newest = self.plan.newest(now) if self.lock is None or self.lock.ours else None
        newest = self.started_at if newest is None else newest
        return [
            gauge(f"{prefix}_backup_age_seconds", "Seconds since the newest complete backup.", max(0.0, now - newest)),
            gauge(f"{prefix}_backup_interval_seconds", "Seconds between two backups.", self.plan.interval_s),
            counter(f"{prefix}_backups", "Backups taken since start.", float(self.taken)),
            counter(f"{prefix}_backup_failures", "Backups that failed since start.", float(self.failed)),
        ]

    def register(self, registry: CollectorRegistry, prefix: str) -> None:
        """Serve ``metric_families(prefix)`` in ``registry`` at every scrape."""
        from icecrawler.metrics import ScrapeCollector

        registry.register(ScrapeCollector(lambda: self.metric_families(prefix)))

    def stop(self) -> None:
        """No new backup; waits for one under way to finish, so the caller may close what it copies."""
        self.stopped.set()
        if self.is_alive():
            self.join()


def _room_left(directory: Path, failure: str) -> str:
    """For a failure that says a disk is full, the room left in the backup directory: the copying library's message
    names only the files it copied, and the full disk may be theirs or the backups'."""
    if not names_full_disk(failure):
        return ""
    try:
        free = shutil.disk_usage(directory).free
    except OSError:
        return ""
    return f": {free} bytes free there; a backup needs room for one copy more than backup_keep"


def backup_dir_keys(settings: Settings, role: str) -> list[str]:
    """``[<role>.backup_dir]`` when backups are on, else ``[]``: what a daemon adds to its start-up path checks."""
    key = f"{role}.backup_dir"
    return [key] if settings.get_str(key) else []


class BackupNameLock(DataLock):
    """The lock a daemon holds on its backups' name in its backup directory (``backups_lock``). Only another daemon
    holding it refuses the start: a lock file that cannot be made (a full disk, where the backups would fail anyway)
    is one warning, and the daemon starts and serves without it, as it serves on while its backups fail; ``take``
    tries again before each backup, which fails until it holds the lock. On a file system that takes no locks at
    all (NFS without its lock service) the backups go on without it, as they did before there was one: a backup
    folder on such a mount is common, and two daemons sharing one name there are the rarer harm."""

    def __init__(self, path: str | Path, role: str, advice: str = "") -> None:
        super().__init__(path, role, advice)
        self.unsupported = False

    @property
    def ours(self) -> bool:
        """Whether this daemon may tidy and write its backups: it holds the lock, or nobody can hold one there."""
        return self.held or self.unsupported

    def acquire(self) -> BackupNameLock:
        """At start: LockHeld when another daemon holds it; any other failure is logged, and the lock left untaken."""
        try:
            super().acquire()
        except LockHeld:
            raise
        except LocksUnsupported as exc:
            self._without_locks(exc)
        except ServiceError as exc:
            log.warning("%s; starting without it: each backup tries to take it first, and fails until it can", exc)
        return self

    def take(self) -> None:
        """Before a backup: take the lock unless this daemon may back up already, or raise (LockHeld,
        ServiceError) as ``DataLock``."""
        if self.ours:
            return
        try:
            DataLock.acquire(self)
        except LocksUnsupported as exc:
            self._without_locks(exc)

    def _without_locks(self, exc: LocksUnsupported) -> None:
        self.unsupported = True
        log.warning(
            "%s; backing up without it: a second daemon backing up under this name into this folder is not "
            "refused there",
            exc,
        )


def backups_lock(settings: Settings, role: str, name: str) -> BackupNameLock | None:
    """The lock a daemon holds on its backups' name (``name``) in ``<role>.backup_dir`` for as long as it runs, or
    None when backups are off. Two daemons with their own data whose backups have one name in one folder (two crawls
    on one machine, one settings file) would each take the other's newest backup for its own, delete the other's
    copy under way as a crash's leftover and prune the other's backups: the second is refused at start, naming the
    first."""
    directory = settings.get_str(f"{role}.backup_dir")
    if not directory:
        return None
    name = name or role  # as ``start_backups`` names them
    own_name = f" or {role}.backup_name" if f"{role}.backup_name" in settings.as_dict() else ""
    return BackupNameLock(
        Path(directory) / f".{name}.lock",
        role,
        f"its backups are named {name}-<UTC time> there too, and two daemons backing up under one name delete and "
        f"prune each other's backups: give this one its own {role}.backup_dir{own_name}",
    )


def refuse_new_beside_backups(settings: Settings, role: str, name: str, what: str, holding: str = "") -> None:
    """Raise ConfigError when a daemon is about to begin ``what`` (its data, found missing) anew while
    ``<role>.backup_dir`` holds backups of it (``name``; with ``holding``, only backups with a file of that name
    count): the data was deleted, or its disk did not mount. A new, empty one would serve nothing and, one backup per
    interval, replace every good backup within ``backup_keep`` intervals. A restore (a backup copied in place) or
    moving the backups away lets it start."""
    directory = settings.get_str(f"{role}.backup_dir")
    if not directory:
        return
    plan = BackupPlan(
        Path(directory), name, settings.get_float(f"{role}.backup_interval_s"), settings.get_int(f"{role}.backup_keep")
    )
    backups = [backup for backup in plan.complete() if not holding or (backup[1] / holding).exists()]
    if backups:
        raise ConfigError(
            f"{what} is missing, but {directory} holds {len(backups)} backup(s) of it (the newest "
            f"{backups[-1][1].name}): it was deleted, or its disk is not mounted. Not beginning a new, empty one, "
            "whose backups would replace those: restore the newest (docs/DEPLOY.md, 'Restoring'), or move the "
            "backups away to begin anew"
        )


def start_backups(
    settings: Settings,
    role: str,
    write: Callable[[Path], None],
    what: str,
    name: str = "",
    lock: BackupNameLock | None = None,
) -> PeriodicBackups | None:
    """A running backup thread from ``<role>.backup_dir``, ``.backup_interval_s`` and ``.backup_keep``, or None when
    the directory is empty (off). Backups are named ``<name or role>-<UTC time>``; ``lock`` is the daemon's
    ``backups_lock`` on that name, taken before each backup when the start could not take it."""
    directory = settings.get_str(f"{role}.backup_dir")
    if not directory:
        return None
    plan = BackupPlan(
        Path(directory),
        name or role,
        settings.get_float(f"{role}.backup_interval_s"),
        settings.get_int(f"{role}.backup_keep"),
    )
    backups = PeriodicBackups(plan, write, what, lock=lock)
    backups.start()
    return backups
