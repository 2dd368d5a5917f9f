"""Random sequences of scheduler calls (hypothesis state machine) against a tiny model: whatever happens,
every task is in exactly one queue, no id is leased twice at once, and a lease is honoured exactly until it
is reported, released or expired."""

from __future__ import annotations

from typing import Any

import hypothesis.strategies as st
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from icecrawler.errors import InvalidArgumentError, LeaseLostError, NoWorkError
from icecrawler.models import Outcome, Report, Task, TaskKind
from scheduler_server.core import SchedulerCore, check_consistency
from scheduler_server.store import MemoryQueueStore
from tests.scheduler.conftest import ManualClocks, make_settings

TARGETS = [f"jd:{n}" for n in range(6)]
TOKENS_REMEMBERED = 3
OUTCOMES = [Outcome.Ok, Outcome.Timeout, Outcome.NotFound, Outcome.RateLimited, Outcome.ParseError]


class SchedulerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clocks = ManualClocks()
        self.store = MemoryQueueStore()
        # A record cache smaller than the task set, so that records are evicted as well as kept.
        self.core = SchedulerCore.from_settings(
            make_settings(scheduler__host_block_s=5.0, scheduler__record_cache=3), self.store, self.clocks
        )
        self.known: set[str] = set()
        #: Leases the model believes are live: task id -> Task (with its deadline).
        self.held: dict[str, Task] = {}
        #: Leases that ended (reported, released, expired): must be refused from now on.
        self.dead: list[Task] = []

    def _expire_model(self) -> None:
        now_ms = self.clocks.wall() * 1000
        for task_id, task in list(self.held.items()):
            if task.lease_deadline_ms <= now_ms:
                self.dead.append(self.held.pop(task_id))

    @rule(ids=st.lists(st.sampled_from(TARGETS), min_size=1, max_size=4))
    def add(self, ids: list[str]) -> None:
        new = {f"reviews:{t}" for t in ids} - self.known
        assert self.core.add(ids, TaskKind.ProductReviews) == len(new)
        self.known |= new

    @rule(n=st.integers(1, 4))
    def lease(self, n: int) -> None:
        self._expire_model()
        try:
            tasks = self.core.lease("w", n)
        except NoWorkError:
            return
        for task in tasks:
            assert task.id not in self.held, f"{task.id} leased twice at once"
            self.held[task.id] = task

    @precondition(lambda self: self.held)
    @rule(data=st.data(), outcome=st.sampled_from(OUTCOMES))
    def report(self, data: Any, outcome: Outcome) -> None:
        self._expire_model()
        if not self.held:
            return
        task = self.held.pop(data.draw(st.sampled_from(sorted(self.held))))
        self.core.report([Report(task.id, task.lease_token, outcome=outcome, new_items=1)])
        self.dead.append(task)

    @precondition(lambda self: self.held)
    @rule()
    def release_all(self) -> None:
        self._expire_model()
        if self.held:
            self.core.release([(t.id, t.lease_token) for t in self.held.values()])
            self.dead += self.held.values()
            self.held.clear()

    @precondition(lambda self: self.dead)
    @rule(data=st.data())
    def stale_report_is_refused(self, data: Any) -> None:
        self._expire_model()
        task = data.draw(st.sampled_from(self.dead))
        # the scheduler remembers the last few ended tokens of a task: those are stale, older ones unknown
        recent = [t.lease_token for t in self.dead if t.id == task.id][-TOKENS_REMEMBERED:]
        try:
            self.core.report([Report(task.id, task.lease_token)])
        except LeaseLostError as exc:
            assert exc.code == ("StaleLease" if task.lease_token in recent else "UnknownLease")
        else:
            raise AssertionError(f"a dead lease of {task.id} was accepted")

    @rule(seconds=st.sampled_from([0.5, 5.0, 31.0, 120.0]))
    def advance(self, seconds: float) -> None:
        self.clocks.advance(seconds)

    @rule()
    def bad_batch_changes_nothing(self) -> None:
        before = check_consistency(self.store)
        try:
            self.core.report([])
        except InvalidArgumentError as exc:
            assert exc.code == "EmptyBatch"
        assert check_consistency(self.store) == before

    @invariant()
    def every_task_in_exactly_one_queue(self) -> None:
        counts, problems = check_consistency(self.store, queues=self.core.queues, records=self.core.records)
        assert problems == []
        assert counts["tasks"] == len(self.known) == counts["pending"] + counts["inflight"]
        stats = self.core.stats()
        assert (stats["tasks"], stats["pending"], stats["inflight"]) == (
            counts["tasks"],
            counts["pending"],
            counts["inflight"],
        )


SchedulerMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
TestSchedulerModel = SchedulerMachine.TestCase
