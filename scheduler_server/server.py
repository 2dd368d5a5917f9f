"""The scheduler daemon: a thin Ice servant over ``SchedulerCore`` plus the maintenance thread.

The servant only converts Slice <-> core types (``icecrawler.rpc``), calls the core and maps errors
(``rpc.map_errors``); everything else is in ``core`` (servants only adapt: CONTRIBUTING.md, code layout).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import Ice

from icecrawler import limits, rpc
from icecrawler.backups import (
    BackupNameLock,
    PeriodicBackups,
    backup_dir_keys,
    backups_lock,
    refuse_new_beside_backups,
    start_backups,
)
from icecrawler.clock import Clock, ClockJumpWatch
from icecrawler.datalock import DataLock
from icecrawler.errors import ConfigError, InvalidArgumentError, StorageUnavailableError
from icecrawler.listening import guarded_listening
from icecrawler.logs import FailureEpisode, LogThrottle
from icecrawler.metrics import MetricsConfig, MetricsEndpoint, ScrapeCollector, disk_space_families, serve
from icecrawler.models import Report, TaskKind
from icecrawler.security import Gate, guarded
from icecrawler.settings import Settings
from icecrawler.settings.validation import check_paths, validate_values
from scheduler_server.config import configured_accounts
from scheduler_server.core import SchedulerCore
from scheduler_server.integrity import LOCK_FILE, backup_checked, holds_database, open_checked
from scheduler_server.listing import list_tasks
from scheduler_server.observer import MAINTENANCE_STEPS
from scheduler_server.refusals import RefusalLog
from scheduler_server.reshard_run import unfinished_reshard

__all__ = ["Maintenance", "data_lock", "make_servant", "open_core", "refuse_unfinished_reshard", "run"]

log = logging.getLogger(__name__)

#: Ice properties the scheduler starts with (deploy/scheduler.conf or --Ice.* override them). Dispatch is
#: asynchronous, so two threads suffice: while one runs a group of calls (``groups``), the other reads and queues
#: the next requests. More threads only hand the GIL around: 8 clients making single calls got 1 312-1 502
#: cycles/s with 8 threads and 1 440-1 602 with 2 (docs/BENCHMARKS.md).
SCHEDULER_PROPERTIES = {"Ice.ThreadPool.Server.Size": "2"}


def _none(_: object) -> None:
    """An operation that returns nothing."""


def _check_count(items: Sequence[Any], name: str, limit: int) -> None:
    """The batch limit, checked before a batch is converted (a copy of an over-size batch is not made)."""
    if len(items) > limit:
        raise InvalidArgumentError(
            f"{name} has {len(items)} entries; the limit (scheduler.batch_limit) is {limit}",
            code="BatchTooLarge",
            field=name,
        )


#: How a state-changing call's asynchronous result is made: ``timed(operation, future, convert)``.
Timed = Callable[[str, rpc.FutureLike[Any], Callable[[Any], Any]], rpc.Converted[Any, Any]]


def _untimed(operation: str, future: rpc.FutureLike[Any], convert: Callable[[Any], Any]) -> rpc.Converted[Any, Any]:
    return rpc.then(future, convert)


def make_servant(core: SchedulerCore, gate: Gate | None = None, timed: Timed = _untimed) -> Ice.Object:
    """A ``Crawler::Scheduler`` servant delegating to ``core``; ``gate`` checks each caller's certificate role
    (``icecrawler.security``; default: every caller trusted, as over loopback); ``timed(operation, future,
    convert)`` makes each state-changing call's asynchronous result, ``rpc.then(future, convert)`` or, with metrics
    on, the same view timed (``SchedulerMetrics.timed``)."""
    C = rpc.crawler()
    limit = core.config.batch_limit
    refusals = RefusalLog()  # a caller's mistake is logged too, at most once a minute per operation and code

    class SchedulerServant(C.Scheduler):  # type: ignore[misc,name-defined]
        # State changes are dispatched asynchronously: the servant returns the core's future (see
        # scheduler_server.groups), so a dispatch thread never waits while the core runs a group of calls.

        def __init__(self) -> None:
            self.gate = gate or Gate(tls=False)

        def _lease(self, workerId: str, max: int, current: Ice.Current) -> Any:
            allowed = self.gate.require(current, "lease", "getUsers")
            keep_cookies = "cookies" in allowed
            return core.lease_async(workerId, max), (rpc.task_to_slice if keep_cookies else _task_without_cookies)

        @refusals.noted
        @rpc.map_errors
        def getUser(self, workerId: str, current: Ice.Current) -> rpc.Converted[Any, Any]:
            future, convert = self._lease(workerId, 1, current)
            return timed("lease", future, lambda tasks: convert(tasks[0]))

        @refusals.noted
        @rpc.map_errors
        def getUsers(self, workerId: str, max: int, current: Ice.Current) -> rpc.Converted[Any, list[Any]]:
            future, convert = self._lease(workerId, max, current)
            return timed("lease", future, lambda tasks: [convert(t) for t in tasks])

        def _reports(self, reports: Sequence[Any], current: Ice.Current) -> list[Report]:
            """The reports as the core takes them: the account cookies of a caller whose role is not given cookies
            are dropped (it was never leased them, so it cannot be refreshing them)."""
            converted = [rpc.report_from_slice(report) for report in reports]
            if "cookies" not in self.gate.allowed(current):
                for report in converted:
                    report.account_cookies = ""
            return converted

        @refusals.noted
        @rpc.map_errors
        @guarded("report")
        def putUser(self, report: Any, current: Ice.Current) -> rpc.Converted[Any, None]:
            return timed("report", core.report_async(self._reports([report], current)), _none)

        @refusals.noted
        @rpc.map_errors
        @guarded("report")
        def putUsers(self, reports: Sequence[Any], current: Ice.Current) -> rpc.Converted[Any, None]:
            _check_count(reports, "reports", limit)
            return timed("report", core.report_async(self._reports(reports, current)), _none)

        @refusals.noted
        @rpc.map_errors
        @guarded("report")
        def releaseUsers(self, leases: Sequence[Any], current: Ice.Current) -> rpc.Converted[Any, None]:
            _check_count(leases, "leases", limit)
            return timed("release", core.release_async([(lease.taskId, lease.leaseToken) for lease in leases]), _none)

        @refusals.noted
        @rpc.map_errors
        @guarded("add")
        def addUsers(self, ids: Sequence[str], kind: Any, current: Ice.Current) -> rpc.Converted[Any, int]:
            # Seeding is an operator's (admin) call: a client's listing crawl adds its discoveries with its
            # report (Report.discoveredIds, scheduler_server.discoveries), so a client certificate needs no addUsers.
            _check_count(ids, "ids", limit)
            return timed("add", core.add_async(list(ids), TaskKind[kind.name]), int)

        @refusals.noted
        @rpc.map_errors
        @guarded("remove")
        def removeUsers(self, ids: Sequence[str], kind: Any, current: Ice.Current) -> rpc.Converted[Any, int]:
            _check_count(ids, "ids", limit)
            return timed("remove", core.remove_async(list(ids), TaskKind[kind.name]), int)

        @refusals.noted
        @rpc.map_errors
        @guarded("hold")
        def holdHost(self, host: str, seconds: float, reason: str, current: Ice.Current) -> rpc.Converted[Any, float]:
            return timed("hold", core.hold_host_async(host, seconds, reason), float)

        @rpc.map_errors
        @guarded("status")
        def stats(self, current: Ice.Current) -> Any:
            stats = core.stats()
            return C.SchedulerStats(
                tasks=stats["tasks"],
                pending=stats["pending"],
                inflight=stats["inflight"],
                done=stats["done"],
                dueSoon=stats["due_soon"],
                leasesPerMin=stats["leases_per_min"],
                reportsPerMin=stats["reports_per_min"],
                detailJson=json.dumps(stats["detail"]),
            )

        @refusals.noted
        @rpc.map_errors
        @guarded("status")
        def taskInfo(self, taskId: str, current: Ice.Current) -> str:
            return json.dumps(core.task_info(taskId))

        @refusals.noted
        @rpc.map_errors
        @guarded("status")
        def listTasks(self, prefix: str, after: str, max: int, current: Ice.Current) -> str:
            return json.dumps(list_tasks(core, prefix, after, max))

    return SchedulerServant()


def _task_without_cookies(task: Any) -> Any:
    """A leased task for a caller whose role gets no account cookies (the account id stays)."""
    converted = rpc.task_to_slice(task)
    converted.account.cookieBlob = ""
    return converted


#: The most of the maintenance thread's time the global budget's rebalance may take. It reads every task record
#: (about 9 µs each), so once a pass took it over a second, every pass did: a crawl that grew to a million tasks (a
#: listing's discoveries add them for good) kept a core busy with it and reaped leases every few seconds instead
#: of every ``maintenance_interval_s``. The constant follows slowly changing rates, so a later one loses nothing.
BUDGET_SHARE = 0.1


class Maintenance(threading.Thread):
    """Reaps expired leases, prunes the completion log, re-spreads the global fetch budget and checkpoints,
    every few seconds, until stopped. It also says when the wall clock jumped: leases, holds, bans and due times
    are wall-clock times, so a jump changes them all at once (see ``report_clock_jump``). The budget's rebalance
    waits, after each one, nine times as long as it took (``BUDGET_SHARE``).

    Each step runs on every pass whatever the others did (``MAINTENANCE_STEPS``): a bug that fails one step on
    every pass must not stop the others for good (no checkpoint, and Berkeley DB keeps every log file; no prune, and
    the completion log grows). A step's failure is counted (``failures``, the metrics'
    ``maintenance_failures_total{step}``) and its traceback logged once a minute per step."""

    def __init__(
        self,
        core: SchedulerCore,
        interval_s: float,
        checkpoint_s: float,
        jumps: ClockJumpWatch | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(name="scheduler-maintenance", daemon=True)
        self.core = core
        self.interval_s = interval_s
        self.checkpoint_s = checkpoint_s
        self.jumps = jumps or ClockJumpWatch()
        self.stopped = threading.Event()
        self._monotonic = monotonic
        self._last_checkpoint = monotonic()
        #: Monotonic time before which the next rebalance waits (``BUDGET_SHARE``).
        self._rebalance_at = -float("inf")
        #: Rounds skipped on a full disk: logged once a minute at most, and once when a round succeeds again.
        self._skips = FailureEpisode()
        #: Failures of each step since start (a bug: anything but a full disk's StorageUnavailableError).
        self.failures: dict[str, int] = dict.fromkeys(MAINTENANCE_STEPS, 0)
        #: A step's traceback once a minute (on this thread's monotonic clock), with how many went unlogged.
        self._step_failures = LogThrottle(clock=monotonic)

    def run(self) -> None:
        while not self.stopped.wait(self.interval_s):
            try:
                self.tick()
            except Exception:  # keep reaping after a transient error; it is logged with its traceback
                if self.stopped.is_set():
                    return
                log.exception("scheduler maintenance failed")

    def tick(self) -> None:
        """One pass: clock check, reap, prune, the budget when its turn came, a checkpoint when due. A full disk fails
        every pass the same way: one WARNING a minute says so, and one line says when a pass
        succeeds again (``FailureEpisode``); calls get the declared error meanwhile. Any other failure is one step's
        (``_step``): the others run."""
        self._step("clock", self._check_clock)
        try:
            self._step("reap", self._reap)
            self._step("prune", lambda: self.core.prune_done(stop=self.stopped))
            self._step("budget", self._rebalance)
            self._step("checkpoint", self._checkpoint)
        except StorageUnavailableError as exc:
            if (failure := self._skips.failed(str(exc))).logged:
                log.warning("scheduler maintenance skipped%s: %s", failure.more("rounds skipped"), exc)
            return
        if self._skips.recovered():
            log.info("scheduler maintenance runs again (the database takes changes again)")

    def _step(self, name: str, step: Callable[[], object]) -> None:
        """Run one step; a failure other than a full disk's (raised: it ends the pass) is counted and logged, and the
        pass goes on. While stopping, a failure (the store closing under it) is raised as it is."""
        try:
            step()
        except StorageUnavailableError:
            raise
        except Exception:
            if self.stopped.is_set():
                raise
            self.failures[name] += 1
            if self.core.observer is not None:
                self.core.observer.maintenance_failed(name)
            if (admitted := self._step_failures.admit(name)) is not None:
                log.exception(
                    "scheduler maintenance: the %s step failed%s; the other steps run on",
                    name,
                    LogThrottle.more(admitted, "failures"),
                )

    def _check_clock(self) -> None:
        if jump := self.jumps.check():
            report_clock_jump(self.core, jump)

    def _reap(self) -> None:
        if expired := self.core.reap():
            log.info("%d expired lease(s) returned to pending", expired)

    def _rebalance(self) -> None:
        """A rebalance that fails waits its turn too: it read every record before it failed."""
        if self._monotonic() >= self._rebalance_at:
            started = self._monotonic()
            try:
                self.core.rebalance_budget()
            finally:
                ended = self._monotonic()
                self._rebalance_at = ended + (ended - started) * (1 / BUDGET_SHARE - 1)

    def _checkpoint(self) -> None:
        """A checkpoint that fails by a bug is tried again at the next one's time, not on every pass. One that fails
        on a full disk is tried on every pass, as every other write: it keeps the full-disk episode open (one WARNING
        a minute, no false "runs again" between tries) and checkpoints as soon as there is room."""
        if self._monotonic() - self._last_checkpoint >= self.checkpoint_s:
            try:
                self.core.checkpoint()
            except StorageUnavailableError:
                raise
            except Exception:
                self._last_checkpoint = self._monotonic()
                raise
            self._last_checkpoint = self._monotonic()

    def stop(self) -> None:
        self.stopped.set()
        self.join(timeout=10)


def report_clock_jump(core: SchedulerCore, seconds: float) -> None:
    """Say what a jump of the wall clock does to the crawl (logged, and counted by the metrics). Nothing is lost
    either way; run the machine's clock slewed, not stepped (DEPLOY.md, "Clocks")."""
    if seconds > 0:
        log.warning(
            "the wall clock jumped forward %.0f s (set by hand, an NTP step, or a resume from suspend): leases "
            "granted before it may end early, their tasks are leased again and a late report is told StaleLease; "
            "tasks due in that span come due at once",
            seconds,
        )
    else:
        log.warning(
            "the wall clock jumped back %.0f s (set by hand or an NTP step): tasks due in the last %.0f s wait that "
            "much longer, and so do leases, holds and ban blocks; a host's spacing, an account's per-minute budget "
            "and a visitor session's renewal are never waited longer than themselves",
            -seconds,
            -seconds,
        )
    if core.observer is not None:
        core.observer.clock_jumped(seconds)


def data_dirs(settings: Settings) -> dict[str, Path]:
    """The directories whose file systems the scheduler's /metrics watches: its database, and backups when on."""
    dirs = {"db": Path(settings.get_str("scheduler.db_dir"))}
    for key in backup_dir_keys(settings, "scheduler"):
        dirs["backup"] = Path(settings.get_str(key))
    return dirs


def _start_metrics(
    config: MetricsConfig,
    core: SchedulerCore,
    backups: PeriodicBackups | None = None,
    dirs: dict[str, Path] | None = None,
) -> tuple[Timed, MetricsEndpoint | None]:
    """The scheduler's /metrics (``metrics.scheduler.*``; shard K at port + K): the servant's latency timer and
    the endpoint, or no timer and None when off. With backups on, their age and counts too; with ``dirs``, the free
    space under each."""
    if config.port == 0:
        return _untimed, None
    from prometheus_client import CollectorRegistry

    from scheduler_server.metrics import SchedulerMetrics

    metrics = SchedulerMetrics(core)
    registry = CollectorRegistry()
    metrics.register(registry)
    if backups is not None:
        backups.register(registry, "icecrawler_scheduler")
    if dirs:
        registry.register(ScrapeCollector(lambda: disk_space_families("icecrawler_scheduler", dirs)))
    core.observer = metrics
    return metrics.timed, serve(config, registry, offset=core.config.shard)


def _backup_name(settings: Settings) -> str:
    """What this scheduler's backups are named after: ``scheduler``, or ``scheduler-shard<K>`` for a shard."""
    shards, shard = settings.get_int("scheduler.shards"), settings.get_int("scheduler.shard")
    return f"scheduler-shard{shard}" if shards > 1 else "scheduler"


def _start_backups(settings: Settings, core: SchedulerCore, lock: BackupNameLock | None) -> PeriodicBackups | None:
    """Hot backups of the queue database (``scheduler.backup_*``), or None when ``backup_dir`` is empty."""
    return start_backups(
        settings,
        "scheduler",
        lambda target: backup_checked(core.store, target),
        "scheduler database",
        name=_backup_name(settings),
        lock=lock,
    )


def open_core(settings: Settings) -> SchedulerCore:
    """The core over the Berkeley DB environment named by the settings (recovered and checked on open, see
    ``integrity``; the caller holds ``data_lock``)."""
    db_dir = Path(settings.get_str("scheduler.db_dir"))
    if not holds_database(db_dir):
        refuse_new_beside_backups(settings, "scheduler", _backup_name(settings), f"the scheduler database in {db_dir}")
    store = open_checked(
        db_dir,
        durable=settings.get_bool("scheduler.durable_commits"),
        recover=settings.get_bool("scheduler.recover"),
    )
    try:
        return SchedulerCore.from_settings(settings, store)
    except Exception:
        store.close()
        raise


def reload_accounts(settings: Settings, core: SchedulerCore) -> None:
    """On SIGHUP: read ``scheduler.accounts_dir`` again and serve what it holds now
    (``SchedulerCore.reload_accounts``). A file that does not read, or a full disk, leaves the accounts in use as
    they were."""
    try:
        changes = core.reload_accounts(configured_accounts(settings, core.config))
    except (ConfigError, StorageUnavailableError) as exc:
        log.error("accounts not reloaded, the ones in use stay: %s", exc)
        return
    log.info("accounts reloaded from %s: %s", settings.get_str("scheduler.accounts_dir"), changes.describe())


def refuse_unfinished_reshard(settings: Settings) -> None:
    """ConfigError when ``scheduler.db_dir`` holds no database while a reshard's copy for it waits beside it
    (``reshard_run.unfinished_reshard``). Checked before ``data_lock`` puts its lock file there: a ``--to``
    directory that holds anything is refused by the reshard that would finish the copy."""
    db_dir = Path(settings.get_str("scheduler.db_dir"))
    if not holds_database(db_dir) and (refusal := unfinished_reshard(db_dir)):
        raise ConfigError(refusal)


def data_lock(settings: Settings) -> DataLock:
    """The lock that keeps a second scheduler off this one's database directory."""
    return DataLock(Path(settings.get_str("scheduler.db_dir")) / LOCK_FILE, "scheduler")


def run(settings: Settings, ice_args: Sequence[str], listen: str = "") -> int:
    """Serve until SIGTERM/SIGINT: then refuse new leases, drain dispatches, close the environment.

    Settings, paths, Ice properties and endpoints are all checked before the database is opened, so a bad
    start-up fails at once with one line (``icecrawler_cli.cli``). ``listen`` overrides the adapter's endpoints.
    """
    validate_values(settings.as_dict())
    Clock.check_shared_origin(settings, "scheduler")
    check_paths(settings.as_dict(), dirs=["scheduler.db_dir", *backup_dir_keys(settings, "scheduler")])
    metrics_config = MetricsConfig.from_settings(settings, "scheduler")  # a bad value fails before anything starts
    refuse_unfinished_reshard(settings)
    with rpc.communicator(ice_args, SCHEDULER_PROPERTIES) as comm:
        gate = guarded_listening(
            comm,
            settings,
            rpc.SCHEDULER_ADAPTER,
            rpc.SCHEDULER_ENDPOINTS,
            listen=listen,
            message_size_max_kib=limits.scheduler_message_kib(settings),
        )
        names_lock = backups_lock(settings, "scheduler", _backup_name(settings))
        with data_lock(settings), names_lock or nullcontext():
            core = open_core(settings)
            # The budget's constant from the stored tasks before the first report, not one maintenance pass later:
            # until then every report would get the unbudgeted square-root period.
            core.rebalance_budget()
            rpc.settle_server_heap()  # after the queue index is loaded, so that collections never walk it
            maintenance = Maintenance(
                core,
                settings.get_float("scheduler.maintenance_interval_s"),
                settings.get_float("scheduler.checkpoint_interval_s"),
            )
            stats = core.stats()
            log.info(
                "scheduler%s: %d tasks (%d pending, %d in flight), policy %s, db %s",
                f" shard {core.config.shard} of {core.config.shards}" if core.config.shards > 1 else "",
                stats["tasks"],
                stats["pending"],
                stats["inflight"],
                stats["detail"]["policy"],
                settings.get_str("scheduler.db_dir"),
            )
            maintenance.start()
            backups = _start_backups(settings, core, names_lock)
            timed, endpoint = _start_metrics(metrics_config, core, backups, data_dirs(settings))
            closed = threading.Event()

            def shutdown() -> None:
                if not closed.is_set():
                    closed.set()
                    maintenance.stop()
                    if backups is not None:
                        backups.stop()  # a backup under way finishes before the database closes
                    if endpoint is not None:
                        endpoint.close()
                    core.close()
                    log.info("scheduler database closed")

            try:
                rpc.serve(
                    comm,
                    rpc.SCHEDULER_ADAPTER,
                    {rpc.SCHEDULER_IDENTITY: make_servant(core, gate, timed)},
                    rpc.SCHEDULER_ENDPOINTS,
                    on_shutdown=shutdown,
                    on_stop_requested=core.stop_leasing,
                    on_reload=lambda: reload_accounts(settings, core),
                )
            finally:
                shutdown()
    return 0
