"""The scheduler's logic, without Ice: leases, reports, revisit periods, politeness, accounts.

State lives in a ``QueueStore`` (tables ``tasks``, ``pending``, ``inflight``, ``done``, ``meta``; see
``store`` and ``codec``). Every call that changes state does so inside ONE store transaction (never split
over two; calls made at the same time may share one, see Concurrency), so a crash at any moment leaves each
task either as it was or fully moved: pending (a ``pending`` key at its due time) or in flight (an
``inflight`` key at its lease deadline, holding the lease; a lease does not rewrite the task's record), never
both, never neither. The same two queues are also indexed in memory (``queues``: rebuilt from the tables at
start, changed inside the same transaction and rolled back with it), so that finding due tasks and expired
leases reads no B-tree.

Concurrency: state-changing calls (add, lease, report, release) go through a group runner (``groups``): the
calls queued while one group runs form the next group, which runs as ONE store transaction with one expiry pass
(group commit), on whichever caller's thread found the runner idle. Each call keeps its all-or-nothing effect:
its caller errors (bad lease, nothing due) are raised before it changed anything, and a group whose transaction
fails is run again call by call. One lock serialises the groups with the maintenance calls (reaper, pruning,
status). Memory-only side effects (politeness windows, rates, counters, the record cache: ``cache``) are
applied after the transaction commits, so a rolled-back call leaves no trace either.

Durability: adds, reports and releases complete only after ``store.sync()`` made their commit durable: one
fsync for the whole group. Leases are committed (written to the OS, so a scheduler crash keeps them) but not
synced: a machine crash can only forget a lease, which puts its task back in pending and makes the holder's
report fail with LeaseLost. Nothing is lost or duplicated, and the next synced commit makes every earlier lease
durable too (the log is sequential).

Clocks: due times, periods and policy observations use simulated time (``clock.speed``); lease deadlines,
host spacing, blocks and account budgets use the wall clock, since clients and sites live in real time.
"""

from __future__ import annotations

import json
import logging
import math
import operator
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

from icecrawler.clock import Clock
from icecrawler.errors import ConfigError, InvalidArgumentError, LeaseLostError, NoWorkError, ServiceError, quote
from icecrawler.models import (
    MAX_ITEM_TIMES,
    SOURCES,
    Account,
    Outcome,
    Report,
    Task,
    TaskKind,
    make_task_id,
    split_task_id,
)
from icecrawler.resume import describe as describe_gap
from icecrawler.resume import is_gap
from icecrawler.settings import Settings
from icecrawler.shards import ShardMap, source_hosts
from scheduler_server.accounts import AccountPool, load_accounts
from scheduler_server.cache import RecordCache
from scheduler_server.codec import (
    TaskRecord,
    decode_lease,
    decode_time_key,
    done_value,
    encode_lease,
    history_append,
    history_entries,
    time_key,
)
from scheduler_server.groups import GroupCall, GroupRunner, Pending
from scheduler_server.observer import CoreObserver
from scheduler_server.politeness import HostGate, RateWindow
from scheduler_server.queues import TaskQueues
from scheduler_server.store import QueueStore, Txn
from scheduler_server.visitors import VisitorSessions, is_visitor
from shhd.policies import Observation, RatePolicy, RevisitPolicy, budget_scale, make_policy

__all__ = ["Clocks", "SchedulerConfig", "SchedulerCore", "SystemClocks", "check_consistency"]

log = logging.getLogger(__name__)

#: Outcomes that count as a failed attempt of the task itself (exponential backoff after N of them).
TASK_FAILURES = frozenset(
    {Outcome.HttpError, Outcome.Timeout, Outcome.ConnectionError, Outcome.ParseError, Outcome.Busy, Outcome.TooLarge}
)
#: Outcomes that freeze the account the task was crawled with.
ACCOUNT_FAILURES = frozenset({Outcome.LoginRequired, Outcome.AccountFrozen, Outcome.Banned})
#: Outcomes that block the host.
HOST_FAILURES = frozenset({Outcome.Banned, Outcome.RateLimited})

_MAX_COUNT = 10_000_000
_MAX_TEXT = 256
#: A cursor may hold an open page-cap gap with its resume request (``icecrawler.resume``).
_MAX_CURSOR = 4096
_TOKEN_HISTORY = 3
_SCAN_CHUNK = 256
#: status counts due-soon tasks up to this many (the count is a scan; it must not stall the scheduler).
_DUE_SOON_CAP = 100_000
#: The ``meta`` key of the shard layout (``_check_layout``).
_LAYOUT_KEY = b"layout"
#: ``meta`` keys of tasks with an open page-cap gap (``icecrawler.resume``), and their value: shaped like a host
#: block that ended long ago, which is what a scheduler without gaps makes of it.
_GAP_KEY = b"gap:"
_GAP_VALUE = b'[0, "page-cap gap"]'
#: TaskKind by stored value (a dict lookup; calling the enum costs a microsecond per leased task).
_TASK_KINDS = {kind.value: kind for kind in TaskKind}
#: When a due task waits for an in-flight task of its host or for an account, idle clients retry after this.
_RETRY_HINT_MS = 200


class Clocks(Protocol):
    """Simulated time for periods and due times; wall time for leases and politeness."""

    def now(self) -> float: ...

    def wall(self) -> float: ...

    def wall_delay(self, sim_seconds: float) -> float:
        """Wall seconds until ``sim_seconds`` of simulated time have passed."""
        ...


@dataclass(frozen=True)
class SystemClocks:
    sim: Clock

    def now(self) -> float:
        return self.sim.now()

    def wall(self) -> float:
        return time.time()

    def wall_delay(self, sim_seconds: float) -> float:
        return self.sim.to_wall_delay(sim_seconds)


#: Policies that take a global fetch budget (they expose rate_of and set_budget_scale).
BudgetedPolicy = RatePolicy


@dataclass(frozen=True)
class SchedulerConfig:
    """The ``scheduler.*`` settings the core reads (documented in default_settings)."""

    lease_s: float
    batch_limit: int
    host_spacing_s: float
    host_block_s: float
    backoff_after_attempts: int
    min_period_s: float
    max_period_s: float
    initial_period_s: float
    account_sources: frozenset[str]
    account_budget_per_min: int
    account_freeze_s: float
    history_len: int
    done_retention_s: float
    #: Decoded task records kept in memory (``cache.RecordCache``); 0 = read every record from the store.
    record_cache: int = 50_000
    #: Global fetch budget (fetches per simulated second over all tasks) for policies that allocate one; 0 = off.
    fetch_budget_per_s: float = 0.0
    #: source -> host (netloc of ``sources.<source>.base_url``).
    hosts: dict[str, str] = field(default_factory=dict)
    #: This process is shard ``shard`` of ``shards`` (``icecrawler.shards``): it holds the tasks of the hosts
    #: that hash to it, and only those.
    shards: int = 1
    shard: int = 0

    @classmethod
    def from_settings(cls, settings: Settings) -> SchedulerConfig:
        sources = frozenset(s.strip() for s in settings.get_str("scheduler.account_sources").split(",") if s.strip())
        if sources - set(SOURCES):
            raise ConfigError(f"scheduler.account_sources: unknown sources {sorted(sources - set(SOURCES))}")
        config = cls(
            lease_s=settings.get_float("scheduler.lease_s"),
            batch_limit=settings.get_int("scheduler.batch_limit"),
            host_spacing_s=settings.get_float("scheduler.host_spacing_s"),
            host_block_s=settings.get_float("scheduler.host_block_s"),
            backoff_after_attempts=settings.get_int("scheduler.backoff_after_attempts"),
            min_period_s=settings.get_float("scheduler.min_period_s"),
            max_period_s=settings.get_float("scheduler.max_period_s"),
            initial_period_s=settings.get_float("scheduler.initial_period_s"),
            account_sources=sources,
            account_budget_per_min=settings.get_int("scheduler.account_budget_per_min"),
            account_freeze_s=settings.get_float("scheduler.account_freeze_s"),
            history_len=settings.get_int("scheduler.history_len"),
            done_retention_s=settings.get_float("scheduler.done_retention_s"),
            record_cache=settings.get_int("scheduler.record_cache"),
            fetch_budget_per_s=settings.get_float("scheduler.fetch_budget_per_s"),
            hosts=source_hosts(settings),
            shards=settings.get_int("scheduler.shards"),
            shard=settings.get_int("scheduler.shard"),
        )
        config.validate()
        return config

    def validate(self) -> None:
        if self.record_cache < 0:
            raise ConfigError("scheduler.record_cache must be >= 0 (0 = no cache)")
        if self.lease_s <= 0 or self.batch_limit < 1 or self.backoff_after_attempts < 1 or self.history_len < 1:
            raise ConfigError("scheduler.lease_s, batch_limit, backoff_after_attempts and history_len must be > 0")
        if not 0 < self.min_period_s <= self.initial_period_s <= self.max_period_s:
            raise ConfigError("need 0 < scheduler.min_period_s <= initial_period_s <= max_period_s")
        if self.fetch_budget_per_s < 0:
            raise ConfigError("scheduler.fetch_budget_per_s must be >= 0 (0 = no global budget)")
        if self.host_spacing_s < 0 or self.host_block_s < 0 or self.account_freeze_s < 0:
            raise ConfigError("scheduler.host_spacing_s, host_block_s and account_freeze_s must be >= 0")
        if not 0 <= self.shard < self.shards:
            raise ConfigError(f"need 0 <= scheduler.shard < scheduler.shards, got shard {self.shard} of {self.shards}")
        if self.shards > 1 and self.fetch_budget_per_s > 0:
            raise ConfigError(
                "scheduler.fetch_budget_per_s is spread over all tasks by one process; it cannot be "
                "used with scheduler.shards > 1"
            )


@dataclass
class _Effect:
    """What a committed change does to the in-memory politeness state."""

    host: str
    account_id: str = ""
    fetches: int = 0


#: Run after a call's transaction committed: applies its memory-only effects, returns its result (or raises a
#: caller error such as NoWork).
_Finish = Callable[[], Any]


@dataclass
class _Group:
    """What the calls combined into one transaction share: one clock reading, and the spaced hosts already
    leased in it (a spaced host gets at most one task per transaction)."""

    now_ms: int
    wall: float
    spaced_hosts: set[str] = field(default_factory=set)


class _AllRejected(Exception):
    """Every call of a group was rejected: roll its transaction back."""


#: Errors that are the caller's: a call's ``run`` raises them only before it changed anything.
_CALLER_ERRORS = (InvalidArgumentError, LeaseLostError, NoWorkError)


def _invalid(message: str, field_name: str, index: int = -1, code: str = "InvalidField") -> InvalidArgumentError:
    return InvalidArgumentError(message, code=code, field=field_name, index=index)


def _check_batch(items: Sequence[Any], name: str, limit: int) -> None:
    if not items:
        raise _invalid(f"{name} is empty", name, code="EmptyBatch")
    if len(items) > limit:
        raise _invalid(
            f"{name} has {len(items)} entries; the limit (scheduler.batch_limit) is {limit}", name, code="BatchTooLarge"
        )


def _check_task_id(task_id: str, field_name: str, index: int) -> None:
    try:
        split_task_id(task_id)
    except InvalidArgumentError as exc:
        raise _invalid(str(exc), field_name, index, code="InvalidId") from exc


def _check_range(value: float, low: float, high: float, field_name: str, index: int) -> None:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and low <= value <= high):
        raise _invalid(f"{field_name}={value!r} is outside [{low}, {high}]", field_name, index)


#: A report's numeric fields, picked in C (the fast path of ``_check_report``).
_report_numbers = operator.attrgetter(
    "new_items", "window_items", "fetches", "http_status", "newest_item_ms", "fingerprint", "retry_after_s"
)


class SchedulerCore:
    """Leases due tasks, applies reports, keeps politeness and the account pool; see the module docstring."""

    def __init__(
        self, store: QueueStore, policy: RevisitPolicy, clocks: Clocks, config: SchedulerConfig, accounts: AccountPool
    ) -> None:
        self.store = store
        self.policy = policy
        self.clocks = clocks
        self.config = config
        self.accounts = accounts
        self.gate = HostGate(config.host_spacing_s)
        self.shard_map = ShardMap(config.hosts, config.shards)
        self._lock = threading.RLock()
        self._runner = GroupRunner(self._run_calls, self._sync)
        #: Told about every committed change (the daemon's metrics, ``scheduler_server.metrics``); None = nobody.
        self.observer: CoreObserver | None = None
        self._stopping = False
        self._leases = RateWindow()
        self._reports = RateWindow()
        self._counts: dict[str, int] = {}
        self.queues = TaskQueues()
        #: Decoded records exactly as last committed (with the current lease, if any), so that a lease, report,
        #: release or expiry need not read and decode its record again. An entry is taken out before its record
        #: changes, and records are kept again only after their call committed (in the finishers, in call
        #: order), so a rolled-back call leaves no changed record behind. Empty after a restart.
        self.records = RecordCache(config.record_cache)
        #: Tasks whose cursor holds an open page-cap gap (``icecrawler.resume``): ``stats()["open_gaps"]``.
        self.open_gaps: set[str] = set()
        self._load()

    @classmethod
    def from_settings(cls, settings: Settings, store: QueueStore, clocks: Clocks | None = None) -> SchedulerCore:
        config = SchedulerConfig.from_settings(settings)
        try:
            policy = make_policy(
                settings.get_str("scheduler.policy"),
                min_period_s=config.min_period_s,
                max_period_s=config.max_period_s,
                initial_period_s=config.initial_period_s,
                reference_period_s=settings.get_float("scheduler.rate_reference_period_s"),
            )
        except ValueError as exc:
            raise ConfigError(f"scheduler.policy: {exc}") from exc
        accounts = load_accounts(settings.get_str("scheduler.accounts_dir"), config.account_sources)
        shard_map = ShardMap(config.hosts, config.shards)
        for pooled in accounts:
            if len({shard_map.of_source(source) for source in pooled.sources}) > 1:
                raise ConfigError(
                    f"account {pooled.account.id} serves sources on different scheduler shards "
                    f"({', '.join(sorted(pooled.sources))}); its request budget needs one owner: "
                    "give each shard's hosts their own accounts"
                )
        pool = AccountPool(
            accounts,
            config.account_sources,
            config.account_budget_per_min,
            config.account_freeze_s,
            VisitorSessions.from_settings(settings),
        )
        for source in sorted(config.account_sources - {s for a in accounts for s in a.sources}):
            if not pool.uses_visitors(source):
                log.warning(
                    "no account can crawl %s (scheduler.account_sources): its tasks wait until one is added", source
                )
        return cls(store, policy, clocks or SystemClocks(Clock.from_settings(settings)), config, pool)

    # --- start-up -------------------------------------------------------------------------------------------

    def _load(self) -> None:
        """Counters, persisted host blocks and account freezes, the in-memory queues (from the queue tables) and
        hosts occupied by surviving leases."""
        wall = self.clocks.wall()
        with self.store.transaction() as txn:
            self._counts = {name: txn.count(name) for name in ("tasks", "pending", "inflight", "done")}
            self._check_layout(txn)
            for key, value in txn.scan("meta", limit=1_000_000):
                if key == _LAYOUT_KEY:
                    continue
                if key.startswith(_GAP_KEY):
                    self.open_gaps.add(key[len(_GAP_KEY) :].decode())
                    continue
                kind, _, name = key.decode().partition(":")
                until, reason = json.loads(value)
                if kind == "host":
                    self.gate.block(name, until, reason)
                elif kind == "account":
                    self.accounts.freeze(name, until, reason)
            for table in ("pending", "inflight"):
                start = b""
                while chunk := txn.scan(table, start, limit=_SCAN_CHUNK * 4):
                    for key, _ in chunk:
                        ms, task_id = decode_time_key(key)
                        if table == "pending":
                            self.queues.pending(task_id, task_id.split(":", 2)[1], ms)
                        else:
                            self.queues.inflight(task_id, ms)
                            self.gate.restore_inflight(self._host(task_id), wall)
                    start = chunk[-1][0] + b"\0"

    def _check_layout(self, txn: Txn) -> None:
        """The database remembers which shard of how many it is: tasks are placed by ``crc32(host) % shards``,
        so opening it as another shard, or with another shard count, would strand tasks on the wrong shard."""
        layout = {"shard": self.config.shard, "shards": self.config.shards}
        stored = txn.get("meta", _LAYOUT_KEY)
        if stored is None:
            txn.put("meta", _LAYOUT_KEY, json.dumps(layout).encode())
        elif json.loads(stored) != layout:
            was = json.loads(stored)
            raise ConfigError(
                f"this scheduler database is shard {was['shard']} of {was['shards']}, but "
                f"scheduler.shard/scheduler.shards say {layout['shard']} of {layout['shards']}; "
                "use the shard's own scheduler.db_dir (changing the shard count is not supported)"
            )

    @contextmanager
    def _transaction(self) -> Iterator[Txn]:
        """A store transaction that covers the in-memory queues too: both commit, or both roll back."""
        self.queues.begin()
        try:
            with self.store.transaction() as txn:
                yield txn
        except BaseException:
            self.queues.rollback()
            raise
        self.queues.commit()

    def _call(self, run: Callable[[Txn, _Group], _Finish], durable: bool) -> Pending[Any]:
        """Queue a change for the group runner (``groups``); ``run`` works inside the group's transaction and
        returns the finisher, and raises a caller error only before it changed anything."""
        try:
            # Deferred: the caller's own ``result()`` or Ice's reply callback runs the queue (``GroupRunner``).
            return self._runner.submit(GroupCall(run, durable), deferred=True)
        except RuntimeError as exc:
            raise ServiceError("the scheduler is closed") from exc

    def _sync(self) -> None:
        """The group runner's sync, timed for the observer."""
        if self.observer is None:
            self.store.sync()
            return
        started = time.perf_counter()
        self.store.sync()
        self.observer.synced(time.perf_counter() - started)

    def _run_calls(self, calls: list[GroupCall]) -> None:
        """On the group runner's thread: expire leases, run ``calls`` in one transaction, then finish each after
        the commit. Each call still changes state all or nothing: a caller error comes before its call changed
        anything (a group of rejected calls is rolled back, so it changes nothing at all), and if the
        transaction fails, every call of the group is run again alone, so a failure is only its own caller's."""
        with self._lock:
            group = _Group(int(self.clocks.now() * 1000), self.clocks.wall())
            finishers: list[tuple[GroupCall, _Finish]] = []
            try:
                with self._transaction() as txn:
                    expired = self._expire(txn, group.now_ms, group.wall, self.config.batch_limit)
                    for call in calls:
                        try:
                            finishers.append((call, call.run(txn, group)))
                        except _CALLER_ERRORS as exc:
                            call.error = exc
                    if not finishers:
                        raise _AllRejected
            except _AllRejected:
                return
            except Exception as exc:
                if len(calls) == 1:
                    calls[0].error = exc
                    return
                for call in calls:
                    call.error = None
                    self._run_calls([call])
                return
            self._expired(expired, group.wall)
            if self.observer is not None:
                self.observer.group(len(calls))
            for call, finish in finishers:
                try:
                    call.result = finish()
                except _CALLER_ERRORS as exc:
                    call.error = exc

    def _host(self, task_id: str) -> str:
        return self.config.hosts[task_id.split(":", 2)[1]]

    # --- adding tasks ---------------------------------------------------------------------------------------

    def add(self, ids: Sequence[str], kind: TaskKind) -> int:
        """Add ``"<source>:<target>"`` ids of one kind, due now. Known ids are ignored; returns how many were new.
        All or nothing: one invalid id rejects the batch. Returns once the change is durable."""
        return int(self._runner.wait(self.add_async(ids, kind)))

    def add_async(self, ids: Sequence[str], kind: TaskKind) -> Pending[int]:
        """``add`` without waiting (bad arguments raise)."""
        _check_batch(ids, "ids", self.config.batch_limit)
        task_ids: list[tuple[str, str, str]] = []
        for index, text in enumerate(ids):
            source, sep, target = str(text).partition(":")
            try:
                if not sep:
                    raise InvalidArgumentError(f"{quote(text)} is not <source>:<target>")
                task_ids.append((make_task_id(kind, source, target), source, target))
            except InvalidArgumentError as exc:
                raise _invalid(str(exc), f"ids[{index}]", index, code="InvalidId") from exc
            if self.config.shards > 1 and self.shard_map.of_source(source) != self.config.shard:
                raise _invalid(
                    f"{quote(text)} belongs to scheduler shard {self.shard_map.of_source(source)} of "
                    f"{self.config.shards} (its host {self.config.hosts[source]}), not to this shard "
                    f"{self.config.shard}",
                    f"ids[{index}]",
                    index,
                    code="WrongShard",
                )
        return self._call(lambda txn, group: self._add_in(txn, group, task_ids, kind), durable=True)

    def _add_in(self, txn: Txn, group: _Group, task_ids: list[tuple[str, str, str]], kind: TaskKind) -> _Finish:
        added: list[TaskRecord] = []
        for task_id, source, target in task_ids:
            if txn.get("tasks", task_id.encode()) is not None:
                continue
            record = TaskRecord(
                id=task_id,
                kind=kind.value,
                source=source,
                target=target,
                due_ms=group.now_ms,
                period_s=self.config.initial_period_s,
                policy_state=self.policy.initial_state(),
                created_ms=group.now_ms,
            )
            txn.put("tasks", task_id.encode(), record.to_bytes())
            txn.put("pending", time_key(group.now_ms, task_id), b"")
            self.queues.pending(task_id, source, group.now_ms)
            added.append(record)

        def finish() -> int:
            self.records.keep(added)
            self._counts["tasks"] += len(added)
            self._counts["pending"] += len(added)
            return len(added)

        return finish

    # --- leasing --------------------------------------------------------------------------------------------

    def lease(self, worker_id: str, max_tasks: int = 1) -> list[Task]:
        """Lease up to ``max_tasks`` due tasks to ``worker_id``; NoWorkError if none may be handed out now."""
        tasks: list[Task] = self._runner.wait(self.lease_async(worker_id, max_tasks))
        return tasks

    def lease_async(self, worker_id: str, max_tasks: int = 1) -> Pending[list[Task]]:
        """``lease`` without waiting: the future completes with the tasks or the error (bad arguments raise)."""
        if not worker_id or len(worker_id) > _MAX_TEXT:
            raise _invalid(f"workerId must be 1-{_MAX_TEXT} characters", "workerId")
        if max_tasks < 1:
            raise _invalid(f"max must be >= 1, got {max_tasks}", "max")
        if max_tasks > self.config.batch_limit:
            raise _invalid(
                f"max={max_tasks} exceeds scheduler.batch_limit={self.config.batch_limit}", "max", code="BatchTooLarge"
            )
        return self._call(lambda txn, group: self._lease_in(txn, group, worker_id, max_tasks), durable=False)

    def _lease_in(self, txn: Txn, group: _Group, worker_id: str, max_tasks: int) -> _Finish:
        if self._stopping:
            raise NoWorkError("the scheduler is shutting down", code="ShuttingDown")
        records: list[TaskRecord] = []
        tasks, waits = self._lease_due(txn, group, worker_id, max_tasks, records)
        next_due_ms = -1 if tasks else self._next_due_ms(group.now_ms, waits)

        def finish() -> list[Task]:
            if not tasks:
                raise NoWorkError(
                    "no task is due" if next_due_ms != 0 else "due tasks wait for politeness", next_due_ms
                )
            self.records.keep(records)
            for task in tasks:
                self.gate.leased(self.config.hosts[task.source], group.wall)
            self._counts["pending"] -= len(tasks)
            self._counts["inflight"] += len(tasks)
            self._leases.add(group.wall, len(tasks))
            if self.observer is not None:
                self.observer.leased(tasks)
            return tasks

        return finish

    def _lease_due(
        self, txn: Txn, group: _Group, worker_id: str, max_tasks: int, records: list[TaskRecord]
    ) -> tuple[list[Task], list[float]]:
        """Lease due tasks in due-time order over all sources; a source whose host or accounts refuse its next
        task is skipped for the rest of the call (its wait is returned). The leased records are appended to
        ``records``."""
        tasks: list[Task] = []
        waits: list[float] = []
        now_ms, wall = group.now_ms, group.wall
        deadline_ms = int((wall + self.config.lease_s) * 1000)
        # One read of the OS random source for the whole call, not one per lease token (same 64 bits each).
        tokens = secrets.token_hex(8 * max_tasks)
        sources = self.queues.sources()
        batch_hosts = group.spaced_hosts
        head = self.queues.head
        while len(tasks) < max_tasks and sources:
            first: tuple[int, str] | None = None
            first_source = ""
            for source in sources:
                due = head(source)
                if due is not None and due[0] <= now_ms and (first is None or due < first):
                    first, first_source = due, source
            if first is None:
                break
            host = self.config.hosts[first_source]
            wait = float("inf") if host in batch_hosts else self.gate.ready_in(host, wall)
            account = self.accounts.pick(first_source, wall) if wait <= 0 else None
            if account is None:
                sources.remove(first_source)
                waits.append(wait)
                continue
            token = tokens[16 * len(tasks) : 16 * len(tasks) + 16]
            tasks.append(self._lease_one(txn, first[1], token, worker_id, account, deadline_ms, records))
            if self.config.host_spacing_s > 0:
                batch_hosts.add(host)
        return tasks, waits

    def _lease_one(
        self,
        txn: Txn,
        task_id: str,
        token: str,
        worker_id: str,
        account: Account,
        deadline_ms: int,
        records: list[TaskRecord],
    ) -> Task:
        record = self._record(txn, task_id)
        records.append(record)
        record.state = "inflight"
        record.lease_token = token
        record.lease_deadline_ms = deadline_ms
        record.worker = worker_id
        record.account_id = account.id
        if not txn.delete("pending", time_key(record.due_ms, task_id)):
            raise ServiceError(f"{task_id} is queued in memory but has no pending key at {record.due_ms}")
        # The lease lives in its inflight entry; the record is written again when the lease ends (``_stored``).
        txn.put("inflight", time_key(deadline_ms, task_id), encode_lease(token, worker_id, account.id))
        self.queues.inflight(task_id, deadline_ms)
        return Task(
            id=task_id,
            kind=_TASK_KINDS[record.kind],
            source=record.source,
            target=record.target,
            params=dict(record.params),
            lease_token=record.lease_token,
            lease_deadline_ms=deadline_ms,
            period_s=record.period_s,
            cursor=record.cursor,
            attempts=record.attempts,
            account=account,
        )

    def _next_due_ms(self, now_ms: int, waits: list[float]) -> int:
        """Wall milliseconds until something may be leased (-1: the pending queue is empty)."""
        if waits:
            finite = [w for w in waits if math.isfinite(w)]
            return max(1, int(min(finite) * 1000)) if finite else _RETRY_HINT_MS
        first_ms = self.queues.first_due_ms()
        if first_ms is None:
            return -1
        return max(0, int(self.clocks.wall_delay(first_ms - now_ms)))

    # --- reports and releases ---------------------------------------------------------------------------------

    def report(self, reports: Sequence[Report]) -> None:
        """Apply crawl reports, all or nothing: each one releases its lease and re-queues its task. Returns once
        the change is durable."""
        self._runner.wait(self.report_async(reports))

    def report_async(self, reports: Sequence[Report]) -> Pending[None]:
        """``report`` without waiting: the future completes once the change is durable (bad arguments raise)."""
        _check_batch(reports, "reports", self.config.batch_limit)
        seen: set[str] = set()
        for index, item in enumerate(reports):
            self._check_report(item, index)
            if item.task_id in seen:
                raise _invalid(f"task {item.task_id} reported twice in one batch", f"reports[{index}].taskId", index)
            seen.add(item.task_id)
        return self._call(lambda txn, group: self._report_in(txn, group, reports), durable=True)

    def _report_in(self, txn: Txn, group: _Group, reports: Sequence[Report]) -> _Finish:
        # Every lease is checked before anything changes, so a LeaseLost leaves the transaction untouched.
        records = [
            self._leased(txn, item.task_id, item.lease_token, index, "reports") for index, item in enumerate(reports)
        ]
        effects = [
            self._apply(txn, record, item, group.now_ms, group.wall)
            for record, item in zip(records, reports, strict=True)
        ]

        def finish() -> None:
            self.records.keep(records)
            for record in records:
                (self.open_gaps.add if is_gap(record.cursor) else self.open_gaps.discard)(record.id)
            wall = group.wall
            for effect in effects:
                self.gate.ended(effect.host, wall)
                self.accounts.charge(effect.account_id, effect.fetches - 1, wall)
            self._counts["inflight"] -= len(reports)
            self._counts["pending"] += len(reports)
            self._counts["done"] += len(reports)
            self._reports.add(wall, len(reports))
            if self.observer is not None:
                self.observer.reported(records, reports)

        return finish

    def _check_report(self, item: Report, index: int) -> None:
        where = f"reports[{index}]"
        _check_task_id(item.task_id, f"{where}.taskId", index)
        if not item.lease_token or len(item.lease_token) > _MAX_TEXT:
            raise _invalid("leaseToken must be 1-256 characters", f"{where}.leaseToken", index)
        if not isinstance(item.outcome, Outcome):
            raise _invalid(f"unknown outcome {item.outcome!r}", f"{where}.outcome", index)
        # The common case in one expression (plain ints in range, no retry hint); anything else takes the
        # field-by-field checks below, which accept the same values and name the first bad field.
        new, window, fetches, status, newest, fingerprint, retry = _report_numbers(item)
        if (
            type(new) is int
            and type(window) is int
            and type(fetches) is int
            and type(status) is int
            and type(newest) is int
            and type(fingerprint) is int
            and 0 <= new <= _MAX_COUNT
            and 0 <= window <= _MAX_COUNT
            and 0 <= fetches <= _MAX_COUNT
            and 0 <= status <= 999
            and 0 <= newest <= 2**62
            and 0 <= fingerprint <= 2**64 - 1
            and (type(retry) is float or type(retry) is int)
            and 0 <= retry <= self.config.max_period_s
            and len(item.cursor) <= _MAX_CURSOR
            and len(item.error_class) <= _MAX_TEXT
            and not item.new_item_times_ms
        ):
            return
        for name, value, high in (
            ("newItems", item.new_items, _MAX_COUNT),
            ("windowItems", item.window_items, _MAX_COUNT),
            ("fetches", item.fetches, _MAX_COUNT),
            ("httpStatus", item.http_status, 999),
            ("newestItemMs", item.newest_item_ms, 2**62),
            ("fingerprint", item.fingerprint, 2**64 - 1),
            ("retryAfterS", item.retry_after_s, self.config.max_period_s),
        ):
            _check_range(value, 0, high, f"{where}.{name}", index)
        for name, text, limit in (("cursor", item.cursor, _MAX_CURSOR), ("errorClass", item.error_class, _MAX_TEXT)):
            if len(text) > limit:
                raise _invalid(f"{name} is longer than {limit} characters", f"{where}.{name}", index)
        times = item.new_item_times_ms
        if len(times) > min(MAX_ITEM_TIMES, max(item.new_items, 0)):
            raise _invalid(
                f"{len(times)} item times for {item.new_items} new items (at most min(newItems, {MAX_ITEM_TIMES}))",
                f"{where}.newItemTimesMs",
                index,
            )
        for time_ms in times:
            _check_range(time_ms, 1, 2**62, f"{where}.newItemTimesMs", index)

    def _stored(self, txn: Txn, task_id: str) -> TaskRecord | None:
        """The task's record as stored, with its current lease (from its inflight entry) if it is in flight;
        None for an unknown task."""
        raw = txn.get("tasks", task_id.encode())
        if raw is None:
            return None
        record = TaskRecord.from_bytes(raw)
        deadline_ms = self.queues.deadline.get(task_id)
        if deadline_ms is not None:
            value = txn.get("inflight", time_key(deadline_ms, task_id))
            if value is None:
                raise ServiceError(f"{task_id} is in flight in memory but has no inflight entry at {deadline_ms}")
            _hold_lease(record, deadline_ms, value)
        return record

    def _record(self, txn: Txn, task_id: str) -> TaskRecord:
        """The task's record, to be changed: taken out of the cache, else read from the store."""
        record = self.records.take(task_id) or self._stored(txn, task_id)
        if record is None:
            raise KeyError(task_id)
        return record

    def _leased(self, txn: Txn, task_id: str, token: str, index: int, name: str) -> TaskRecord:
        """The task's record if ``token`` is its current lease; otherwise UnknownTask or LeaseLost."""
        cached = self.records.take(task_id)  # the record is about to change (or the call fails)
        if cached is not None and cached.lease_token == token:
            return cached
        record = self._stored(txn, task_id)
        if record is None:
            raise _invalid(f"unknown task {task_id}", f"{name}[{index}].taskId", index, code="UnknownTask")
        if record.state != "inflight" or record.lease_token != token:
            stale = token in record.old_tokens
            raise LeaseLostError(
                f"lease {quote(token)} of {quote(task_id)} "
                + ("expired or was given back" if stale else "was never issued"),
                task_id=task_id,
                index=index,
                code="StaleLease" if stale else "UnknownLease",
            )
        return record

    def _end_lease(self, txn: Txn, record: TaskRecord, due_ms: int) -> None:
        """Move a task from in flight back to pending at ``due_ms``. The ended token is remembered, so a late
        or repeated report with it is told StaleLease rather than UnknownLease."""
        txn.delete("inflight", time_key(record.lease_deadline_ms, record.id))
        record.old_tokens = [*record.old_tokens, record.lease_token][-_TOKEN_HISTORY:]
        record.state = "pending"
        record.lease_token = ""
        record.lease_deadline_ms = 0
        record.due_ms = due_ms
        txn.put("pending", time_key(due_ms, record.id), b"")
        self.queues.pending(record.id, record.source, due_ms)
        txn.put("tasks", record.id.encode(), record.to_bytes())

    def _backoff_s(self, attempts: int) -> float:
        """No delay before ``backoff_after_attempts`` failures, then min_period doubling up to max_period."""
        over = attempts - self.config.backoff_after_attempts
        if over < 0:
            return 0.0
        return min(self.config.max_period_s, self.config.min_period_s * 2.0 ** min(over, 60))

    def _apply(self, txn: Txn, record: TaskRecord, item: Report, now_ms: int, wall: float) -> _Effect:
        effect = _Effect(self.config.hosts[record.source], record.account_id, max(1, item.fetches))
        record.last_outcome = item.outcome.value
        record.last_error = item.error_class
        record.last_crawl_ms = now_ms
        delay_s = 0.0
        if item.outcome is Outcome.Ok:
            had_gap = is_gap(record.cursor)
            delay_s = self._observe(record, item, now_ms)
            if is_gap(record.cursor) != had_gap:  # kept in meta too, so a restart knows them without a scan
                if had_gap:
                    txn.delete("meta", _GAP_KEY + record.id.encode())
                else:
                    txn.put("meta", _GAP_KEY + record.id.encode(), _GAP_VALUE)
        elif item.outcome is Outcome.NotFound:
            delay_s = self.config.max_period_s
        elif item.outcome in TASK_FAILURES:
            record.attempts += 1
            delay_s = self._backoff_s(record.attempts)
        # A visitor session the site ended is renewed instead of blocking the host (or freezing anything).
        renewed = item.outcome is not Outcome.Ok and self.accounts.settle(
            record.account_id, item.outcome, item.error_class, item.http_status, wall
        )
        if item.outcome in HOST_FAILURES and not renewed:
            until = wall + (item.retry_after_s or self.config.host_block_s)
            self.gate.block(effect.host, until, item.outcome.value)
            txn.put("meta", f"host:{effect.host}".encode(), json.dumps([until, item.outcome.value]).encode())
        if item.outcome in ACCOUNT_FAILURES and record.account_id and not is_visitor(record.account_id):
            until = wall + max(item.retry_after_s, self.config.account_freeze_s)
            self.accounts.freeze(record.account_id, until, item.outcome.value)
            txn.put("meta", f"account:{record.account_id}".encode(), json.dumps([until, item.outcome.value]).encode())
        # Same JSON as json.dumps of {"outcome", "new", "period_s", "worker", "fetches", **_lease_interval}.
        deadline_ms = record.lease_deadline_ms
        txn.put(
            "done",
            time_key(now_ms, f"{record.id}#{record.lease_token}"),
            done_value(
                item.outcome.value,
                item.new_items,
                record.period_s,
                record.worker,
                item.fetches,
                deadline_ms - int(self.config.lease_s * 1000),
                deadline_ms,
                int(wall * 1000),
            ),
        )
        self._end_lease(txn, record, now_ms + int(delay_s * 1000))
        return effect

    def _observe(self, record: TaskRecord, item: Report, now_ms: int) -> float:
        """A successful crawl: the policy turns the change signals into the next period (clamped)."""
        decision = self.policy.next_period(
            record.policy_state,
            Observation(
                now_s=now_ms / 1000,
                fingerprint=item.fingerprint,
                new_items=item.new_items,
                window_items=item.window_items,
                newest_item_s=item.newest_item_ms / 1000,
                new_item_times_s=tuple(time_ms / 1000 for time_ms in item.new_item_times_ms),
            ),
        )
        period = min(self.config.max_period_s, max(self.config.min_period_s, decision.period_s))
        distance = decision.distance
        if distance < 0 and record.fingerprint and item.fingerprint:
            distance = (record.fingerprint ^ item.fingerprint).bit_count()
        record.policy_state = decision.state
        record.period_s = period
        record.attempts = 0
        record.crawls += 1
        record.item_count += item.new_items
        record.newest_item_ms = max(record.newest_item_ms, item.newest_item_ms)
        record.fingerprint = item.fingerprint or record.fingerprint
        record.cursor = item.cursor or record.cursor
        if record.kind == TaskKind.Listing.value:
            record.discovered += item.new_items
        record.history = history_append(
            record.history, now_ms, period, distance, item.new_items, self.config.history_len
        )
        return period

    def release(self, leases: Sequence[tuple[str, str]]) -> None:
        """Give leases back unused (client shutdown): due at once, no attempt counted. All or nothing. Returns
        once the change is durable."""
        self._runner.wait(self.release_async(leases))

    def release_async(self, leases: Sequence[tuple[str, str]]) -> Pending[None]:
        """``release`` without waiting (bad arguments raise)."""
        _check_batch(leases, "leases", self.config.batch_limit)
        for index, (task_id, token) in enumerate(leases):
            _check_task_id(task_id, f"leases[{index}].taskId", index)
            if not token:
                raise _invalid("leaseToken is empty", f"leases[{index}].leaseToken", index)
        if len({task_id for task_id, _ in leases}) != len(leases):
            raise _invalid("a task is named twice", "leases")
        return self._call(lambda txn, group: self._release_in(txn, group, leases), durable=True)

    def _release_in(self, txn: Txn, group: _Group, leases: Sequence[tuple[str, str]]) -> _Finish:
        records = [self._leased(txn, task_id, token, index, "leases") for index, (task_id, token) in enumerate(leases)]
        for record in records:
            self._end_lease(txn, record, group.now_ms)

        def finish() -> None:
            self.records.keep(records)
            for task_id, _ in leases:
                self.gate.ended(self._host(task_id), group.wall)
            self._counts["inflight"] -= len(leases)
            self._counts["pending"] += len(leases)

        return finish

    # --- maintenance ------------------------------------------------------------------------------------------

    def reap(self, limit: int = 10_000) -> int:
        """Return expired leases to pending, counting an attempt each. Returns how many expired. Run by the
        maintenance thread every tick, it also runs the group queue if a handed-off call left it stalled."""
        self._runner.rescue()
        with self._lock:
            expired = self._reap_locked(limit)
        self.store.sync()
        return expired

    def _reap_locked(self, limit: int) -> int:
        wall = self.clocks.wall()
        with self._transaction() as txn:
            expired = self._expire(txn, int(self.clocks.now() * 1000), wall, limit)
        self._expired(expired, wall)
        return len(expired)

    def _expire(self, txn: Txn, now_ms: int, wall: float, limit: int) -> list[TaskRecord]:
        """Inside a transaction: leases past their deadline go back to pending with one more attempt. Every
        state-changing call does this first, in its own transaction; returns their records (for ``_expired``)."""
        records = []
        for task_id in self.queues.expired(int(wall * 1000), limit):
            record = self._record(txn, task_id)
            record.attempts += 1
            records.append(record)
            # The completion log keeps expired leases too, so that an audit sees every lease interval.
            expired = {"outcome": "LeaseExpired", "worker": record.worker, **self._lease_interval(record, wall)}
            txn.put("done", time_key(now_ms, f"{record.id}#{record.lease_token}"), json.dumps(expired).encode())
            self._end_lease(txn, record, now_ms + int(self._backoff_s(record.attempts) * 1000))
        return records

    def _lease_interval(self, record: TaskRecord, wall: float) -> dict[str, int]:
        """When the lease being ended was handed out and when it ends (wall ms), for the completion log: an
        audit can check that no task was ever leased twice at the same time."""
        return {
            "leased_wall_ms": record.lease_deadline_ms - int(self.config.lease_s * 1000),
            "deadline_wall_ms": record.lease_deadline_ms,
            "ended_wall_ms": int(wall * 1000),
        }

    def _expired(self, records: list[TaskRecord], wall: float) -> None:
        """After the commit: expired leases free their hosts (and are in the completion log)."""
        self.records.keep(records)
        for record in records:
            self.gate.ended(self.config.hosts[record.source], wall)
        self._counts["inflight"] -= len(records)
        self._counts["pending"] += len(records)
        self._counts["done"] += len(records)
        if records and self.observer is not None:
            self.observer.expired(records)

    def rebalance_budget(self) -> float | None:
        """Spread ``scheduler.fetch_budget_per_s`` over all tasks by the square-root rule (the ``rate`` policy's
        global allocation): recompute its constant from every task's current rate estimate. Periods change at
        each task's next report. Returns the new constant, or None when no budget applies."""
        if self.config.fetch_budget_per_s <= 0 or not isinstance(self.policy, BudgetedPolicy):
            return None
        # Chunk by chunk, each in its own short read under the lock, so that leases and reports go on between
        # chunks: the constant is an estimate over slowly changing rates and needs no single snapshot.
        rates: list[float] = []
        start = b""
        while True:
            with self._lock, self.store.transaction() as txn:
                chunk = txn.scan("tasks", start, limit=_SCAN_CHUNK * 4)
            if not chunk:
                break
            rates.extend(self.policy.rate_of(TaskRecord.from_bytes(raw).policy_state) for _, raw in chunk)
            start = chunk[-1][0] + b"\0"
        if not rates:
            return None
        scale = budget_scale(rates, self.config.fetch_budget_per_s, self.config.min_period_s, self.config.max_period_s)
        self.policy.set_budget_scale(scale)
        return scale

    def prune_done(self, limit: int = 10_000) -> int:
        """Drop completion-log entries older than ``scheduler.done_retention_s``."""
        with self._lock:
            cutoff = int((self.clocks.now() - self.config.done_retention_s) * 1000)
            with self.store.transaction() as txn:
                old = txn.scan("done", b"", time_key(cutoff), limit)
                for key, _ in old:
                    txn.delete("done", key)
            self._counts["done"] -= len(old)
        self.store.sync()
        return len(old)

    def checkpoint(self) -> None:
        with self._lock:
            self.store.checkpoint()

    def stop_leasing(self) -> None:
        """From now on getUser(s) raise NoWork(ShuttingDown); reports are still accepted."""
        with self._lock:
            self._stopping = True

    def close(self) -> None:
        """Run the calls already queued (leases now raise ShuttingDown), then close the store."""
        self.stop_leasing()
        self._runner.close()
        with self._lock:
            self.store.close()

    # --- introspection -----------------------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Counts, rates over the last minute and per-host/account/listing detail (never cookies)."""
        with self._lock:
            wall = self.clocks.wall()
            now_ms = int(self.clocks.now() * 1000)
            due_soon = self.queues.due_before(now_ms + 60_000, _DUE_SOON_CAP)
            with self.store.transaction() as txn:
                listings = {
                    key.decode(): TaskRecord.from_bytes(value).discovered
                    for key, value in txn.scan("tasks", b"listing:", b"listing;", 1000)
                }
            return {
                **self._counts,
                "due_soon": due_soon,
                "leases_per_min": self._leases.total(wall),
                "reports_per_min": self._reports.total(wall),
                "detail": {
                    "hosts": self.gate.describe(wall),
                    "accounts": self.accounts.describe(wall),
                    "listings": listings,
                    "policy": self.policy.name,
                    "lease_s": self.config.lease_s,
                    "batch_limit": self.config.batch_limit,
                    "shard": self.config.shard,
                    "shards": self.config.shards,
                    "shutting_down": self._stopping,
                    # Tasks with an open page-cap gap (icecrawler.resume): a gauge, 0 once the crawl caught up.
                    "open_gaps": len(self.open_gaps),
                },
            }

    def gauges(self) -> dict[str, Any]:
        """Cheap current values for the metrics (no B-tree read): task counts, the due backlog (pending tasks due
        now, and how long the most overdue one has waited, simulated seconds), blocked hosts, accounts by state."""
        with self._lock:
            wall = self.clocks.wall()
            now_ms = int(self.clocks.now() * 1000)
            due = self.queues.due_before(now_ms + 1, _DUE_SOON_CAP)
            first_ms = self.queues.first_due_ms()
            hosts = self.gate.describe(wall)
            accounts = self.accounts.describe(wall)
            counts = dict(self._counts)
        states: dict[str, int] = {"ok": 0, "frozen": 0}
        for account in accounts.values():
            states[account["state"]] = states.get(account["state"], 0) + 1
        return {
            **counts,
            "due": due,
            "due_age_s": max(0.0, (now_ms - first_ms) / 1000) if due and first_ms is not None else 0.0,
            "blocked_hosts": sum(1 for host in hosts.values() if host["block"]["reason"]),
            "accounts": states,
        }

    def task_info(self, task_id: str) -> dict[str, Any]:
        """One task's metadata and recent period/distance history."""
        _check_task_id(task_id, "taskId", -1)
        with self._lock:
            with self.store.transaction() as txn:
                record = self._stored(txn, task_id)
            if record is None:
                raise _invalid(f"unknown task {task_id}", "taskId", code="UnknownTask")
            info = {key: value for key, value in vars(record).items() if key != "old_tokens"}
            info["lease_token"] = "<held>" if record.lease_token else ""
            info["due_in_s"] = (
                round((record.due_ms / 1000 - self.clocks.now()), 3) if record.state == "pending" else None
            )
            info["gap"] = describe_gap(record.cursor)
            info["history"] = [
                {"time_ms": int(t), "period_s": p, "distance": int(d), "new_items": int(n)}
                for t, p, d, n in history_entries(record.history)
            ]
            return info


def _hold_lease(record: TaskRecord, deadline_ms: int, lease: bytes) -> None:
    """Put the lease of the task's ``inflight`` entry (at ``deadline_ms``) into its stored record."""
    token, worker, account_id = decode_lease(lease)
    record.state, record.lease_token, record.lease_deadline_ms = "inflight", token, deadline_ms
    record.worker, record.account_id = worker, account_id


def check_consistency(
    store: QueueStore, limit: int = 10_000_000, queues: TaskQueues | None = None, records: RecordCache | None = None
) -> tuple[dict[str, int], list[str]]:
    """Audit: every task is in exactly one of pending/inflight; a pending key is at the due time its record names,
    an inflight entry holds a lease (and agrees with its record when the record names one too), and no queue key
    points at a missing task; given a running core's ``queues``, its in-memory
    queues hold exactly the same entries as the tables; given its record cache, every cached record is the
    stored one, with its current lease. Returns per-state counts and a list of problems (empty when
    consistent)."""
    problems: list[str] = []
    with store.transaction() as txn:
        stored = {key.decode(): TaskRecord.from_bytes(value) for key, value in txn.scan("tasks", limit=limit)}
        pending = [decode_time_key(key) for key, _ in txn.scan("pending", limit=limit)]
        leases = [(decode_time_key(key), value) for key, value in txn.scan("inflight", limit=limit)]
    inflight = [(key, decode_lease(value)[0]) for key, value in leases]
    where: dict[str, list[str]] = {task_id: [] for task_id in stored}
    for due_ms, task_id in pending:
        record = stored.get(task_id)
        if record is None or record.state != "pending" or record.due_ms != due_ms:
            problems.append(f"pending key ({due_ms}, {task_id}) does not match its record")
        where.setdefault(task_id, []).append("pending")
    for (deadline_ms, task_id), token in inflight:
        record = stored.get(task_id)
        if (
            record is None
            or not token
            or (record.state == "inflight" and (record.lease_deadline_ms != deadline_ms or record.lease_token != token))
        ):
            problems.append(f"inflight key ({deadline_ms}, {task_id}) does not match its record")
        where.setdefault(task_id, []).append("inflight")
    problems.extend(f"{task_id} is in {places or 'no queue'}" for task_id, places in where.items() if len(places) != 1)
    if queues is not None:
        if queues.due != {task_id: due_ms for due_ms, task_id in pending}:
            problems.append("the in-memory pending queue differs from the pending table")
        if queues.deadline != {task_id: deadline_ms for (deadline_ms, task_id), _ in inflight}:
            problems.append("the in-memory in-flight queue differs from the inflight table")
    if records is not None:
        for (deadline_ms, task_id), lease in leases:
            if task_id in stored:
                _hold_lease(stored[task_id], deadline_ms, lease)
        problems.extend(
            f"the cached record of {cached.id} is not the stored one"
            for cached in records
            if cached.id not in stored or vars(cached) != vars(stored[cached.id])
        )
    counts = {"tasks": len(stored), "pending": len(pending), "inflight": len(inflight)}
    return counts, problems
