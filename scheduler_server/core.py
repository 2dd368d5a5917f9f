"""The scheduler's logic, without Ice: add, lease, report, release, remove and expire tasks, hold hosts, and take
new accounts (``SchedulerCore``).

This module holds the seven operations and the group-commit plumbing they share (some 630 lines, a tenth of them
this docstring: each operation's step inside the transaction and its finisher after the commit are meant to be
read side by side, so they are not split further). Its parts, each in its own
module: the settings and their wiring (``config``), argument checks (``checks``), what a report's outcome does,
as data (``outcomes``), the moves of a task between the queues (``moves``), a listing report's discoveries
(``discoveries``), group commit (``groups``), what a
core restores at start (``startup``), the budget rebalance (``budget``), status (``status``) and the audit
(``audit``). ``SchedulerConfig``, ``Clocks`` and ``check_consistency`` are importable from
here too.

State lives in a ``QueueStore`` (tables ``tasks``, ``pending``, ``inflight``, ``done``, ``meta``; see
``store`` and ``codec``). Every call that changes state does so inside ONE store transaction (never split
over two; calls made at the same time may share one, see Concurrency), so a crash at any moment leaves each
task either as it was or fully moved: pending (a ``pending`` key at its due time) or in flight (an
``inflight`` key at its lease deadline, holding the lease; a lease does not rewrite the task's record), never
both, never neither. The same two queues are also indexed in memory (``queues``: rebuilt from the tables at
start, changed inside the same transaction and rolled back with it), so that finding due tasks and expired
leases reads no B-tree.

Concurrency: state-changing calls (add, lease, report, release, remove, hold) go through a group runner (``groups``):
the calls queued while one group runs form the next group, which runs as ONE store transaction with one expiry pass
(group commit), on whichever caller's thread found the runner idle. Each call keeps its all-or-nothing effect: its
caller errors (bad lease, nothing due) are raised before it changed anything, and a group whose transaction fails is run
again call by call. One lock serialises the groups with the maintenance calls (reaper, pruning, status). Memory-only
side effects (politeness windows, host blocks, account freezes, visitor renewals, rates, counters, the record cache:
``cache``) are applied after the transaction commits, in call order, so a rolled-back call leaves no trace either;
within a group, a host blocked or an account frozen by one report is already withheld from the leases of the later
calls. One exception: picking an account for a lease counts against its per-minute budget at once (the pick decides the
lease), and may start minting a visitor session, so a rolled-back lease may over-count one request (which errs on the
polite side) or have started a mint that the next lease uses anyway.

Durability: adds, reports, releases, removals and holds complete only after ``store.sync()`` made their commit durable:
one fsync for the whole group. Leases are committed (written to the OS, so a scheduler crash keeps them) but not synced:
a machine crash can only forget a lease, which puts its task back in pending and makes the holder's report fail with
LeaseLost. Nothing is lost or duplicated, and the next synced commit makes every earlier lease durable too (the log is
sequential).

Clocks: due times, periods and policy observations use simulated time (``clock.speed``); lease deadlines,
host spacing, blocks and account budgets use the wall clock, since clients and sites live in real time.
"""

from __future__ import annotations

import json
import math
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from icecrawler.errors import InvalidArgumentError, LeaseLostError, NoWorkError, ServiceError
from icecrawler.models import Outcome, Report, Task, TaskKind
from icecrawler.resume import is_gap
from icecrawler.settings import Settings
from icecrawler.shards import ShardMap
from scheduler_server import status
from scheduler_server.accounts import AccountChanges, AccountPool, PooledAccount, RefreshVerdict, account_changes
from scheduler_server.audit import check_consistency
from scheduler_server.budget import rebalance_budget
from scheduler_server.cache import RecordCache
from scheduler_server.checks import (
    check_hold_args,
    check_lease_args,
    check_release_args,
    check_reports,
    parse_target_ids,
)
from scheduler_server.codec import TaskRecord, done_value, history_append, time_key
from scheduler_server.config import BudgetedPolicy, Clocks, SchedulerConfig, core_parts
from scheduler_server.discoveries import add_discoveries
from scheduler_server.groups import GroupCall, GroupRunner, Pending
from scheduler_server.moves import TaskMoves
from scheduler_server.observer import CoreObserver
from scheduler_server.outcomes import Hold, OutcomeEffects, outcome_effects
from scheduler_server.politeness import HELD_BY_OPERATOR, HostGate, RateWindow
from scheduler_server.quarantine import Quarantine, RecordQuarantined, drop_shadowed, settle_quarantined
from scheduler_server.queues import TaskQueues
from scheduler_server.refreshes import StoredRefresh, encode_refresh, refresh_key
from scheduler_server.startup import (
    CALIBRATION_KEY,
    GAP_KEY,
    GAP_VALUE,
    REMOVED_AT_KEY,
    lease_restored,
    removed_at_key,
    removed_lease_key,
    removed_lease_of,
    restore_state,
    sweep_stored_refreshes,
)
from scheduler_server.store import QueueStore, Txn
from shhd.calibration import RateCalibration
from shhd.policies import Observation, RevisitPolicy, resume_state

__all__ = ["Clocks", "SchedulerConfig", "SchedulerCore", "check_consistency"]

#: TaskKind by stored value (a dict lookup; calling the enum costs a microsecond per leased task).
_TASK_KINDS = {kind.value: kind for kind in TaskKind}
#: When a due task waits for an in-flight task of its host or for an account, idle clients retry after this.
_RETRY_HINT_MS = 200
#: Reports whose account cookies are not taken: the login they crawled with failed, whatever the site set.
_LOGIN_FAILED = frozenset({Outcome.LoginRequired, Outcome.AccountFrozen, Outcome.Banned})

#: Run after a call's transaction committed: applies its memory-only effects, returns its result (or raises a
#: caller error such as NoWork).
_Finish = Callable[[], Any]


@dataclass
class _Group:
    """What the calls combined into one transaction share: one clock reading, the hosts that get no further task
    in it (a spaced host already leased in it, a host blocked by one of its reports) and the accounts frozen by
    one of its reports (their freezes reach the account pool only after the commit)."""

    now_ms: int
    wall: float
    held_hosts: set[str] = field(default_factory=set)
    frozen_accounts: set[str] = field(default_factory=set)
    #: (account id, site) -> blob: the logins the group's reports refreshed, stored in its transaction and taken by
    #: the pool after the commit (``AccountPool.judge``), so a later report of the group compares with them.
    refreshes: dict[tuple[str, str], str] = field(default_factory=dict)
    #: The ``rate`` calibration before the group's first report (``RateCalibration.to_dict``): written to ``meta``
    #: once at the end of the group, and put back if its transaction rolls back; None while no report ran.
    learnt_before: dict[str, Any] | None = None


class _AllRejected(Exception):
    """Every call of a group was rejected: roll its transaction back."""


#: Errors that are the caller's: a call's ``run`` raises them only before it changed anything.
_CALLER_ERRORS = (InvalidArgumentError, LeaseLostError, NoWorkError)


def _hold_key(kind: str, name: str) -> bytes:
    return f"{kind}:{name}".encode()


def _persist_hold(txn: Txn, kind: str, hold: Hold, login: str = "") -> None:
    """A host block or account freeze as a ``meta`` entry (``startup`` restores them); an account's freeze also
    names the login it was for (``accounts.login_digest``)."""
    value = [hold.until, hold.reason, *([login] if login else [])]
    txn.put("meta", _hold_key(kind, hold.name), json.dumps(value).encode())


def _lease_tokens(record: TaskRecord) -> list[str]:
    """The leases a late report of a removed task may name: the one it is under, if any, and the last ended ones."""
    return [*record.old_tokens, *([record.lease_token] if record.state == "inflight" else [])]


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
        #: Serialises the groups with maintenance and status. It, the counters (``counts``), the rate windows and
        #: ``stopping`` are public because the core's helper modules (``startup``, ``status``, ``budget``,
        #: ``listing``) read them: those hold no state of their own.
        self.lock = threading.RLock()
        self._runner = GroupRunner(self._run_group, self._sync)
        #: Told about every committed change (the daemon's metrics, ``scheduler_server.metrics``); None = nobody.
        self.observer: CoreObserver | None = None
        self.stopping = False
        self.lease_rate = RateWindow()
        self.report_rate = RateWindow()
        self.counts: dict[str, int] = {}
        self.queues = TaskQueues()
        #: Decoded records exactly as last committed (with the current lease, if any), so that a lease, report,
        #: release or expiry need not read and decode its record again. An entry is taken out before its record
        #: changes, and records are kept again only after their call committed (in the finishers, in call
        #: order), so a rolled-back call leaves no changed record behind. Empty after a restart.
        self.records = RecordCache(config.record_cache)
        #: Task records that did not decode, moved aside where they were met (``quarantine``): logged and counted
        #: after the commit of the transaction that moved them (``_transaction``, ``quarantine.settle_quarantined``).
        self.quarantine = Quarantine(self.queues)
        self.moves = TaskMoves(config, self.queues, self.records, self.quarantine)
        #: Tasks whose cursor holds an open page-cap gap (``icecrawler.resume``): ``stats()["open_gaps"]``.
        self.open_gaps: set[str] = set()
        #: The ``rate`` policy's population calibration (``shhd.calibration``), learnt from every report: kept in
        #: ``meta`` by each group that applied a report and taken back by ``restore_state``; None with another
        #: policy.
        self.calibration: RateCalibration | None = policy.calibration if isinstance(policy, BudgetedPolicy) else None
        #: The keys of this policy's state (``resumed_state``).
        self._state_keys = frozenset(policy.initial_state())
        drop_shadowed(store)  # before the counts are read: a task both live and quarantined is live
        restore_state(self)

    @classmethod
    def from_settings(cls, settings: Settings, store: QueueStore, clocks: Clocks | None = None) -> SchedulerCore:
        config, policy, clocks, accounts = core_parts(settings, clocks)
        return cls(store, policy, clocks, config, accounts)

    def resumed_state(self, state: dict[str, Any]) -> dict[str, Any]:
        """A task's stored policy state as this policy goes on from it: one written under another
        ``scheduler.policy`` (changed between restarts) or by an older version lacks keys, which start as a new
        task's, and keys this policy does not know are dropped (``shhd.policies.resume_state``); one with exactly its
        keys, the common case, is returned as it is."""
        return state if state.keys() == self._state_keys else resume_state(self.policy, state)

    # --- group commit (the steps are described in ``groups``) ------------------------------------------------

    @contextmanager
    def _transaction(self, group: _Group | None = None) -> Iterator[Txn]:
        """A store transaction that covers the in-memory queues too, and the calibration as ``group``'s reports
        taught it: all commit, or all roll back."""
        self.queues.begin()
        try:
            with self.store.transaction() as txn:
                yield txn
        except BaseException:
            self.queues.rollback()
            self.quarantine.rollback()
            if group is not None and group.learnt_before is not None and self.calibration is not None:
                self.calibration.load(group.learnt_before)  # a report rolled back taught nothing
            raise
        self.queues.commit()
        if self.quarantine.changed:
            settle_quarantined(self)

    def transaction(self) -> Any:
        """A store transaction that covers the in-memory queues and the quarantine (``_transaction``), for the
        helper modules that read records (``status``) and so may quarantine one; under ``lock``."""
        return self._transaction()

    def quarantine_found(self, found: Sequence[tuple[bytes, bytes, str]]) -> None:
        """Quarantine the records a scan outside ``_transaction`` found undecodable (``quarantine.decoded``): each
        that still holds the bytes it was found with (a seed may have replaced it meanwhile)."""
        if not found:
            return
        with self.lock, self._transaction() as txn:
            for key, raw, error in found:
                if txn.get("tasks", key) == raw:
                    self.quarantine.move(txn, key, raw, error)
        self.store.sync()

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

    def _run_group(self, calls: list[GroupCall]) -> None:
        """On the group runner's thread: expire leases, run ``calls`` in one transaction, then finish each after
        the commit. Each call still changes state all or nothing: a caller error comes before its call changed
        anything (a group of rejected calls is rolled back, so it changes nothing at all), and if the
        transaction fails, every call of the group is run again alone, so a failure is only its own caller's."""
        with self.lock:
            group = _Group(int(self.clocks.now() * 1000), self.clocks.wall())
            finishers: list[tuple[GroupCall, _Finish]] = []
            try:
                with self._transaction(group) as txn:
                    expired = self.moves.expire_leases(txn, group.now_ms, group.wall, self.config.batch_limit)
                    for call in calls:
                        try:
                            finishers.append((call, call.run(txn, group)))
                        except _CALLER_ERRORS as exc:
                            call.error = exc
                    if not finishers and not self.quarantine.pending:  # a record moved aside stays moved
                        raise _AllRejected
                    if group.learnt_before is not None and self.calibration is not None:
                        txn.put("meta", CALIBRATION_KEY, json.dumps(self.calibration.to_dict()).encode())
            except _AllRejected:
                return
            except Exception as exc:
                if len(calls) == 1:
                    calls[0].error = exc
                    return
                for call in calls:
                    call.error = None
                    self._run_group([call])
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
        task_ids = parse_target_ids(ids, kind, self.config, self.shard_map)
        return self._call(lambda txn, group: self._add_in(txn, group, task_ids, kind), durable=True)

    def _add_in(self, txn: Txn, group: _Group, task_ids: list[tuple[str, str, str]], kind: TaskKind) -> _Finish:
        added = self.moves.add_new(txn, task_ids, kind, group.now_ms, self.policy.initial_state)

        def finish() -> int:
            self._added(added)
            return len(added)

        return finish

    def _added(self, records: list[TaskRecord]) -> None:
        """After the commit: new tasks (added, or discovered by a listing report) are counted and cached."""
        self.records.keep(records)
        self.counts["tasks"] += len(records)
        self.counts["pending"] += len(records)

    # --- removing tasks -------------------------------------------------------------------------------------

    def remove(self, ids: Sequence[str], kind: TaskKind) -> int:
        """Remove ``"<source>:<target>"`` ids of one kind, pending or in flight: the operator stops crawling them.
        Unknown ids are ignored; returns how many were removed. All or nothing: one invalid id rejects the batch.
        Returns once the change is durable.

        A lease held on a removed task is over: a report or release of it, or of one of the task's last ended
        leases, is refused with LeaseLost (``TaskRemoved``), which a client takes as its answer (the records it
        wrote stay stored), also after a restart, for as long as the completion log keeps entries
        (``startup.REMOVED_KEY``). An older lease, or one a crash made the scheduler forget, names a task it no
        longer knows (InvalidArgument ``UnknownTask``), which a client drops the same way. The task's crawls stay in
        the completion log. A quarantined task's bytes are dropped, and it counts as removed (``quarantine``)."""
        return int(self._runner.wait(self.remove_async(ids, kind)))

    def remove_async(self, ids: Sequence[str], kind: TaskKind) -> Pending[int]:
        """``remove`` without waiting (bad arguments raise)."""
        task_ids = [task_id for task_id, _, _ in parse_target_ids(ids, kind, self.config, self.shard_map)]
        return self._call(lambda txn, group: self._remove_in(txn, group, task_ids), durable=True)

    def _remove_in(self, txn: Txn, group: _Group, task_ids: list[str]) -> _Finish:
        removed: list[TaskRecord] = []
        dropped = 0  # quarantined records given up: their bytes go (``Quarantine.release``)
        for task_id in dict.fromkeys(task_ids):
            if (record := self.moves.remove(txn, task_id, group.now_ms, group.wall)) is not None:
                removed.append(record)
            elif not self.quarantine.moved_now(task_id):  # one found damaged just now stays for a look
                dropped += self.quarantine.release(txn, task_id.encode(), "is removed")
        for record in removed:
            txn.delete("meta", GAP_KEY + record.id.encode())
            for token in _lease_tokens(record):
                txn.put("meta", removed_lease_key(record.id, token), b"")
                txn.put("meta", removed_at_key(group.now_ms, record.id, token), b"")

        def finish() -> int:
            leased = [record for record in removed if record.state == "inflight"]
            for record in leased:
                self.gate.ended(self.config.hosts[record.source], group.wall)
                self.accounts.ended(record.lease_token)
            for record in removed:
                # A lease or report earlier in this group put the record back in the cache after the commit: a
                # copy of a deleted record, which a late report of that lease would write back.
                self.records.take(record.id)
                self.open_gaps.discard(record.id)
            self.counts["tasks"] -= len(removed)
            self.counts["inflight"] -= len(leased)
            self.counts["pending"] -= len(removed) - len(leased)
            self.counts["done"] += len(leased)  # the completion log's Removed entries
            return len(removed) + dropped

        return finish

    # --- leasing --------------------------------------------------------------------------------------------

    def lease(self, worker_id: str, max_tasks: int = 1) -> list[Task]:
        """Lease up to ``max_tasks`` due tasks to ``worker_id``; NoWorkError if none may be handed out now."""
        tasks: list[Task] = self._runner.wait(self.lease_async(worker_id, max_tasks))
        return tasks

    def lease_async(self, worker_id: str, max_tasks: int = 1) -> Pending[list[Task]]:
        """``lease`` without waiting: the future completes with the tasks or the error (bad arguments raise)."""
        check_lease_args(worker_id, max_tasks, self.config.batch_limit)
        return self._call(lambda txn, group: self._lease_in(txn, group, worker_id, max_tasks), durable=False)

    def _lease_in(self, txn: Txn, group: _Group, worker_id: str, max_tasks: int) -> _Finish:
        if self.stopping:
            raise NoWorkError("the scheduler is shutting down", code="ShuttingDown")
        records: list[TaskRecord] = []
        tasks, waits, unskipped = self._lease_due(txn, group, worker_id, max_tasks, records)
        next_due_ms = -1 if tasks else self._next_due_ms(group.now_ms, waits, unskipped)

        def finish() -> list[Task]:
            if not tasks:
                raise NoWorkError(
                    "no task is due" if next_due_ms != 0 else "due tasks wait for politeness", next_due_ms
                )
            self.records.keep(records)
            for task in tasks:
                self.gate.leased(self.config.hosts[task.source], group.wall)
                self.accounts.lent(task.lease_token, task.source, task.account)
            self.counts["pending"] -= len(tasks)
            self.counts["inflight"] += len(tasks)
            self.lease_rate.add(group.wall, len(tasks))
            if self.observer is not None:
                self.observer.leased(tasks)
            return tasks

        return finish

    def _lease_due(
        self, txn: Txn, group: _Group, worker_id: str, max_tasks: int, records: list[TaskRecord]
    ) -> tuple[list[Task], list[float], list[str]]:
        """Lease due tasks in due-time order over all sources; a source whose host or accounts refuse its next
        task is skipped for the rest of the call (its wait is returned, and the sources not skipped). The leased
        records are appended to ``records``."""
        tasks: list[Task] = []
        waits: list[float] = []
        now_ms, wall = group.now_ms, group.wall
        deadline_ms = int((wall + self.config.lease_s) * 1000)
        # One read of the OS random source for the whole call, not one per lease token (same 64 bits each).
        tokens = secrets.token_hex(8 * max_tasks)
        sources = self.queues.sources()
        held_hosts = group.held_hosts
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
            wait = float("inf") if host in held_hosts else self.gate.ready_in(host, wall)
            account = self.accounts.pick(first_source, wall, group.frozen_accounts) if wait <= 0 else None
            if account is None:
                sources.remove(first_source)
                # A ready host whose accounts all refuse (frozen, budget spent, a visitor session being minted)
                # waits for an account: not "0 s", which sent idle clients back at once, a thousand calls a second.
                waits.append(wait if wait > 0 else _RETRY_HINT_MS / 1000)
                continue
            token = tokens[16 * len(tasks) : 16 * len(tasks) + 16]
            try:
                record = self.moves.start_lease(txn, first[1], token, worker_id, account, deadline_ms)
            except RecordQuarantined:
                continue  # out of the queue now: the source's next task is its head
            records.append(record)
            tasks.append(
                Task(
                    id=record.id,
                    kind=_TASK_KINDS[record.kind],
                    source=record.source,
                    target=record.target,
                    params=dict(record.params),
                    lease_token=token,
                    lease_deadline_ms=deadline_ms,
                    lease_s=self.config.lease_s,
                    period_s=record.period_s,
                    cursor=record.cursor,
                    attempts=record.attempts,
                    account=account,
                )
            )
            if self.config.host_spacing_s > 0:
                held_hosts.add(host)
        return tasks, waits, sources

    def _next_due_ms(self, now_ms: int, waits: list[float], unskipped: list[str]) -> int:
        """Wall milliseconds until something may be leased (-1: the pending queue is empty): the soonest of the
        skipped sources' ``waits`` (wall s) and the next due time of the sources not skipped. Not the waits alone: a
        task due in 1 s on another host was hinted "20 s" while one host waited out its spacing."""
        heads = [due[0] for due in map(self.queues.head, unskipped) if due is not None]
        first_ms = self.clocks.wall_delay(min(heads) - now_ms) if heads else None
        if waits:
            finite = [w * 1000 for w in waits if math.isfinite(w)]
            hint = min(finite) if finite else _RETRY_HINT_MS
            return max(1, int(hint if first_ms is None else min(hint, first_ms)))
        return -1 if first_ms is None else max(0, int(first_ms))

    # --- reports and releases ---------------------------------------------------------------------------------

    def report(self, reports: Sequence[Report]) -> None:
        """Apply crawl reports, all or nothing: each one releases its lease and re-queues its task. Returns once
        the change is durable."""
        self._runner.wait(self.report_async(reports))

    def report_async(self, reports: Sequence[Report]) -> Pending[None]:
        """``report`` without waiting: the future completes once the change is durable (bad arguments raise)."""
        check_reports(reports, self.config)
        return self._call(lambda txn, group: self._report_in(txn, group, reports), durable=True)

    def _report_in(self, txn: Txn, group: _Group, reports: Sequence[Report]) -> _Finish:
        # Every lease is checked before anything changes, so a LeaseLost leaves the transaction untouched.
        records = [
            self.moves.take_leased(txn, item.task_id, item.lease_token, index, "reports")
            for index, item in enumerate(reports)
        ]
        # When each lease was handed out (wall s), read before the reports change the records: a visitor session
        # reported ended counts only for a lease handed out since that session was minted (``VisitorSessions.renew``).
        leased_at = [record.lease_deadline_ms / 1000 - self.config.lease_s for record in records]
        if self.calibration is not None and group.learnt_before is None:
            group.learnt_before = self.calibration.to_dict()
        reports, found = add_discoveries(txn, self.moves, records, reports, group.now_ms, self.policy.initial_state)
        effects = [self._apply_report(txn, group, record, item) for record, item in zip(records, reports, strict=True)]
        verdicts = [self._refresh_in(txn, group, item) for item in reports]

        def finish() -> None:
            self._added(found)
            self.records.keep(records)
            wall = group.wall
            for record, item, effect, lease_start, verdict in zip(
                records, reports, effects, leased_at, verdicts, strict=True
            ):
                (self.open_gaps.add if is_gap(record.cursor) else self.open_gaps.discard)(record.id)
                self.gate.ended(self.config.hosts[record.source], wall)
                self.accounts.charge(record.account_id, max(1, item.fetches) - 1, wall)
                self.accounts.settle(item.lease_token, verdict)
                if effect.block_host is not None:
                    self.gate.block(effect.block_host.name, effect.block_host.until, effect.block_host.reason)
                if effect.freeze_account is not None:
                    hold = effect.freeze_account
                    self.accounts.freeze(hold.name, hold.until, hold.reason)
                if effect.renew_visitor:
                    self.accounts.visitors.renew(effect.renew_visitor, wall, leased_at=lease_start)
            self.counts["inflight"] -= len(reports)
            self.counts["pending"] += len(reports)
            self.counts["done"] += len(reports)
            self.report_rate.add(wall, len(reports))
            if self.observer is not None:
                self.observer.reported(records, reports)

        return finish

    def _refresh_in(self, txn: Txn, group: _Group, item: Report) -> RefreshVerdict:
        """Inside the transaction: what the report's login refresh does (``AccountPool.judge``); one taken is stored
        in ``meta`` (``refreshes``) by the report's own transaction, so a restart leases with it, and the pool takes
        it after the commit. A report of a failed login refreshes nothing, whatever the site set."""
        verdict = self.accounts.judge(
            item.lease_token, item.account_cookies if item.outcome not in _LOGIN_FAILED else "", group.refreshes
        )
        if verdict.cookies:
            stored = StoredRefresh(
                verdict.account_id, verdict.site, verdict.login, verdict.cookies, taken_ms=int(group.wall * 1000)
            )
            txn.put("meta", refresh_key(stored.account_id, stored.site), encode_refresh(stored))
            group.refreshes[(verdict.account_id, verdict.site)] = verdict.cookies
        return verdict

    def _apply_report(self, txn: Txn, group: _Group, record: TaskRecord, item: Report) -> OutcomeEffects:
        """Inside the transaction: the stored part of the report's effects (``outcomes``); the rest is applied by
        the finisher, after the commit."""
        now_ms, wall = group.now_ms, group.wall
        effects = outcome_effects(
            item,
            attempts=record.attempts,
            account_id=record.account_id,
            host=self.config.hosts[record.source],
            wall=wall,
            config=self.config,
        )
        if effects.freeze_account is not None and self.accounts.lent_replaced_login(item.lease_token):
            effects = replace(effects, freeze_account=None)  # a failure of the old login: the new one stays thawed
        record.last_outcome = item.outcome.value
        record.last_error = item.error_class
        record.last_crawl_ms = now_ms
        record.attempts = effects.attempts
        delay_s = self._observe(txn, record, item, now_ms) if effects.observe else effects.delay_s
        # Persisted here (a restart keeps them); the gate and the pool hear of them after the commit, the later
        # calls of this group at once.
        if effects.block_host is not None:
            _persist_hold(txn, "host", effects.block_host)
            group.held_hosts.add(effects.block_host.name)
        if effects.freeze_account is not None:
            hold = effects.freeze_account
            _persist_hold(txn, "account", hold, self.accounts.login_of(hold.name))
            group.frozen_accounts.add(effects.freeze_account.name)
        # Same JSON as json.dumps of {"outcome", "new", "period_s", "worker", "fetches", **lease_interval}.
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
        self.moves.end_lease(txn, record, now_ms + int(delay_s * 1000))
        return effects

    def _longest_period_s(self) -> float:
        """``scheduler.max_period_s``, or the rate policy's longer one under a budget too small for it
        (``budget.rebalance_budget``): clamped to the configured one, the periods spent several times the budget."""
        if isinstance(self.policy, BudgetedPolicy):
            return self.policy.longest_period_s  # never below max_period_s, which the policy was made with
        return self.config.max_period_s

    def _observe(self, txn: Txn, record: TaskRecord, item: Report, now_ms: int) -> float:
        """A successful crawl: the policy turns the change signals into the next period (clamped), which is
        returned. A page-cap gap opened or closed by the new cursor is kept in ``meta`` too, so a restart knows
        the open gaps without a scan."""
        decision = self.policy.next_period(
            self.resumed_state(record.policy_state),
            Observation(
                now_s=now_ms / 1000,
                fingerprint=item.fingerprint,
                new_items=item.new_items,
                window_items=item.window_items,
                newest_item_s=item.newest_item_ms / 1000,
                new_item_times_s=tuple(time_ms / 1000 for time_ms in item.new_item_times_ms),
            ),
        )
        period = min(self._longest_period_s(), max(self.config.min_period_s, decision.period_s))
        distance = decision.distance
        if distance < 0 and record.fingerprint and item.fingerprint:
            distance = (record.fingerprint ^ item.fingerprint).bit_count()
        had_gap = is_gap(record.cursor)
        record.policy_state = decision.state
        record.period_s = period
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
        if is_gap(record.cursor) != had_gap:
            if had_gap:
                txn.delete("meta", GAP_KEY + record.id.encode())
            else:
                txn.put("meta", GAP_KEY + record.id.encode(), GAP_VALUE)
        return period

    def release(self, leases: Sequence[tuple[str, str]]) -> None:
        """Give leases back unused (client shutdown): due at once, no attempt counted. All or nothing. Returns
        once the change is durable."""
        self._runner.wait(self.release_async(leases))

    def release_async(self, leases: Sequence[tuple[str, str]]) -> Pending[None]:
        """``release`` without waiting (bad arguments raise)."""
        check_release_args(leases, self.config.batch_limit)
        return self._call(lambda txn, group: self._release_in(txn, group, leases), durable=True)

    def _release_in(self, txn: Txn, group: _Group, leases: Sequence[tuple[str, str]]) -> _Finish:
        records = [
            self.moves.take_leased(txn, task_id, token, index, "leases")
            for index, (task_id, token) in enumerate(leases)
        ]
        for record in records:
            self.moves.end_lease(txn, record, group.now_ms)

        def finish() -> None:
            self.records.keep(records)
            for task_id, token in leases:
                self.gate.ended(self._host(task_id), group.wall)
                self.accounts.ended(token)
            self.counts["inflight"] -= len(leases)
            self.counts["pending"] += len(leases)

        return finish

    # --- holding a host ----------------------------------------------------------------------------------------

    def hold_host(self, host: str, seconds: float, reason: str = "") -> float:
        """The operator holds ``host`` for ``seconds`` from now: none of its tasks is leased meanwhile (0 lifts a
        hold or a ban's block early); kept across restarts like a ban's block. Returns how long the host is held
        now. Tasks already in flight finish. A ban reported later may hold it longer, never shorter."""
        return float(self._runner.wait(self.hold_host_async(host, seconds, reason)))

    def hold_host_async(self, host: str, seconds: float, reason: str = "") -> Pending[float]:
        """``hold_host`` without waiting (bad arguments raise)."""
        check_hold_args(host, seconds, reason, self.config)
        return self._call(lambda txn, group: self._hold_in(txn, group, host, seconds, reason), durable=True)

    def _hold_in(self, txn: Txn, group: _Group, host: str, seconds: float, reason: str) -> _Finish:
        hold = Hold(host, group.wall + seconds if seconds > 0 else 0.0, f"{HELD_BY_OPERATOR}: {reason or '-'}")
        if seconds > 0:
            _persist_hold(txn, "host", hold)
            group.held_hosts.add(host)
        else:
            txn.delete("meta", _hold_key("host", host))

        def finish() -> float:
            self.gate.hold(host, hold.until, hold.reason if seconds > 0 else "")
            return max(0.0, hold.until - group.wall)

        return finish

    # --- accounts ---------------------------------------------------------------------------------------------

    def reload_accounts(self, accounts: list[PooledAccount]) -> AccountChanges:
        """Serve ``accounts`` from now on (``AccountPool.replace``; the daemon reads them again on SIGHUP). First, in
        one transaction made durable before the new set is served: the persisted freezes of renewed and removed
        accounts are deleted, so that a restart does not freeze new cookies again, and the stored login refreshes
        are swept (``refreshes.sweep_refreshes``: a renewed account's are deleted, a removed account's kept
        unused). An account added again with the login its stored refreshes are of is leased with them, as a
        restart would: a file caught empty by one SIGHUP costs no live login. If the transaction or its flush
        fails (StorageUnavailableError) the accounts in use are served on as they were; what a transaction that
        committed before its flush failed deleted may stay deleted, which loses nothing the new files would have
        used (a start checks every stored freeze and refresh against the login the file holds)."""
        with self.lock:
            changes = account_changes(self.accounts.by_id, accounts)
            with self.store.transaction() as txn:
                for account_id in changes.renewed + changes.removed:
                    txn.delete("meta", _hold_key("account", account_id))
                usable = sweep_stored_refreshes(self, txn, {p.account.id: p for p in accounts})
            self.store.sync()
            changes = self.accounts.replace(accounts)
            lease_restored(self, [refresh for refresh in usable if refresh.account_id in changes.added])
            return changes

    # --- expiry and maintenance -------------------------------------------------------------------------------

    def reap(self, limit: int = 10_000) -> int:
        """Return expired leases to pending, counting an attempt each. Returns how many expired. Run by the
        maintenance thread every tick, it also runs the group queue if a handed-off call left it stalled."""
        self._runner.rescue()
        with self.lock:
            wall = self.clocks.wall()
            with self._transaction() as txn:
                expired = self.moves.expire_leases(txn, int(self.clocks.now() * 1000), wall, limit)
            self._expired(expired, wall)
        self.store.sync()
        return len(expired)

    def _expired(self, records: list[TaskRecord], wall: float) -> None:
        """After the commit: expired leases free their hosts (and are in the completion log)."""
        self.records.keep(records)
        for record in records:
            self.gate.ended(self.config.hosts[record.source], wall)
            self.accounts.ended(record.old_tokens[-1] if record.old_tokens else "")
        self.counts["inflight"] -= len(records)
        self.counts["pending"] += len(records)
        self.counts["done"] += len(records)
        if records and self.observer is not None:
            self.observer.expired(records)

    def rebalance_budget(self) -> float | None:
        """Spread ``scheduler.fetch_budget_per_s`` over all tasks (``budget.rebalance_budget``); returns the new
        constant, or None when no budget applies."""
        return rebalance_budget(self)

    def prune_done(self, chunk: int = 10_000, stop: threading.Event | None = None) -> int:
        """Drop every completion-log entry (and removed task's lease) older than ``scheduler.done_retention_s``;
        returns how many log entries went. It deletes ``chunk`` entries per transaction, taking the lock for each
        alone so that calls go on between them, until none older is left: a pass that stopped after one chunk kept
        up with at most ``chunk`` completions per ``scheduler.maintenance_interval_s``, and past that the log grew
        for good. It ends early, between chunks, once ``stop`` is set (the maintenance thread stopping): the first
        pass over a large log runs thousands of chunks, and the rest waits for the next pass or start."""
        with self.lock:
            cutoff = int((self.clocks.now() - self.config.done_retention_s) * 1000)
            # Entries are only ever added at ``now`` (past the cutoff), so this many chunks reach the end.
            chunks = self.counts.get("done", 0) // chunk + 2
        pruned = 0
        for _ in range(chunks):
            if stop is not None and stop.is_set():
                break
            dropped, tombstones = self._prune_chunk(cutoff, chunk)
            pruned += dropped
            if dropped < chunk and tombstones < chunk:
                break
        return pruned

    def _prune_chunk(self, cutoff: int, chunk: int) -> tuple[int, int]:
        """One transaction of ``prune_done``: (log entries, removed leases) dropped, each at most ``chunk``."""
        with self.lock:
            with self.store.transaction() as txn:
                old = txn.scan("done", b"", time_key(cutoff), chunk)
                for key, _ in old:
                    txn.delete("done", key)
                removed = txn.scan("meta", REMOVED_AT_KEY, REMOVED_AT_KEY + time_key(cutoff), chunk)
                for key, _ in removed:
                    # a removed task's lease goes with the log's entries of its age (``startup.REMOVED_KEY``)
                    task_id, token = removed_lease_of(key)
                    txn.delete("meta", key)
                    txn.delete("meta", removed_lease_key(task_id, token))
            self.counts["done"] -= len(old)
        self.store.sync()
        return len(old), len(removed)

    def checkpoint(self) -> None:
        with self.lock:
            self.store.checkpoint()

    def stop_leasing(self) -> None:
        """From now on getUser(s) raise NoWork(ShuttingDown); reports are still accepted."""
        with self.lock:
            self.stopping = True

    def close(self) -> None:
        """Run the calls already queued (leases now raise ShuttingDown), then close the store."""
        self.stop_leasing()
        self._runner.close()
        with self.lock:
            self.store.close()

    # --- introspection (``status``) ------------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Counts, rates over the last minute and per-host/account/listing detail (never cookies)."""
        return status.stats(self)

    def gauges(self) -> dict[str, Any]:
        """Cheap current values for the metrics (no B-tree read); see ``status.gauges``."""
        return status.gauges(self)

    def task_info(self, task_id: str) -> dict[str, Any]:
        """One task's metadata and recent period/distance history."""
        return status.task_info(self, task_id)
