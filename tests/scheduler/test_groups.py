"""GroupRunner (group commit) as pure threading logic: who runs a call, how calls are grouped, when durable calls
complete, and what a failing group or sync does. No storage: ``run_group`` and ``sync`` are recorded."""

from __future__ import annotations

import functools
import threading
from typing import Any

import pytest

from scheduler_server.groups import GroupCall, GroupRunner, Pending

WAIT_S = 10.0


class Recorder:
    """A ``run_group`` that sets each call's result to ``call.run()`` (or its error), logging every step."""

    def __init__(self) -> None:
        self.events: list[Any] = []
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()
        self.sync_error: Exception | None = None

    def run_group(self, calls: list[GroupCall]) -> None:
        self.events.append(("group", [call.run.__name__ for call in calls], threading.current_thread().name))
        self.entered.set()
        assert self.gate.wait(WAIT_S)
        for call in calls:
            try:
                call.result = call.run()
            except ValueError as exc:
                call.error = exc

    def sync(self) -> None:
        self.events.append(("sync",))
        if self.sync_error is not None:
            raise self.sync_error


def completed(recorder: Recorder, name: str, _: object) -> None:
    recorder.events.append(("done", name))


def named(name: str, value: Any = None, error: Exception | None = None) -> Any:
    def run() -> Any:
        if error is not None:
            raise error
        return value

    run.__name__ = name
    return run


def held_runner(recorder: Recorder, first: GroupCall, name: str = "first") -> tuple[GroupRunner, threading.Thread]:
    """A runner whose first group (``first``, submitted from the returned thread) is held inside ``run_group``
    until ``recorder.gate`` is set, so that the calls submitted meanwhile queue up."""
    runner = GroupRunner(recorder.run_group, recorder.sync)
    recorder.gate.clear()
    thread = threading.Thread(target=runner.submit, args=(first,), name=name)
    thread.start()
    assert recorder.entered.wait(WAIT_S)
    return runner, thread


def test_a_lone_call_runs_at_once_in_the_callers_thread() -> None:
    recorder = Recorder()
    runner = GroupRunner(recorder.run_group, recorder.sync)
    future = runner.submit(GroupCall(named("a", 1), durable=False))
    assert future.done() and future.result() == 1
    assert recorder.events == [("group", ["a"], threading.current_thread().name)]


def test_calls_queued_while_a_group_runs_form_the_next_group() -> None:
    recorder = Recorder()
    runner, first = held_runner(recorder, GroupCall(named("a", "A"), durable=False))
    # Submitted while "a" runs: each returns at once with a pending future.
    futures = [runner.submit(GroupCall(named(name, name.upper()), durable=False)) for name in ("b", "c", "d")]
    assert not any(future.done() for future in futures)
    recorder.gate.set()
    first.join(WAIT_S)
    assert [future.result(WAIT_S) for future in futures] == ["B", "C", "D"]
    # The thread that ran "a" also ran the queued calls, as one group.
    assert recorder.events == [("group", ["a"], "first"), ("group", ["b", "c", "d"], "first")]


def test_durable_calls_complete_after_one_shared_sync_and_others_before_it() -> None:
    recorder = Recorder()
    runner, blocker = held_runner(recorder, GroupCall(named("first"), durable=False))
    calls = [
        GroupCall(named("lease", "L"), durable=False),
        GroupCall(named("report1", "R1"), durable=True),
        GroupCall(named("report2", "R2"), durable=True),
    ]
    for call in calls:
        runner.submit(call).add_done_callback(functools.partial(completed, recorder, call.run.__name__))
    recorder.gate.set()
    blocker.join(WAIT_S)
    assert [call.future.result(WAIT_S) for call in calls] == ["L", "R1", "R2"]
    assert recorder.events[1:] == [
        ("group", ["lease", "report1", "report2"], blocker.name),
        ("done", "lease"),
        ("sync",),
        ("done", "report1"),
        ("done", "report2"),
    ]


def test_a_failed_sync_fails_only_the_durable_calls_of_the_group() -> None:
    recorder = Recorder()
    recorder.sync_error = OSError("disk gone")
    runner = GroupRunner(recorder.run_group, recorder.sync)
    lease = runner.submit(GroupCall(named("lease", "L"), durable=False))
    report = runner.submit(GroupCall(named("report", "R"), durable=True))
    assert lease.result() == "L"
    with pytest.raises(OSError, match="disk gone"):
        report.result()


def test_a_call_error_is_its_callers_and_a_failing_group_fails_its_calls() -> None:
    recorder = Recorder()
    runner = GroupRunner(recorder.run_group, recorder.sync)
    with pytest.raises(ValueError, match="bad"):
        runner.submit(GroupCall(named("bad", error=ValueError("bad")), durable=True)).result()
    assert ("sync",) not in recorder.events  # nothing to make durable

    def broken(calls: list[GroupCall]) -> None:
        raise RuntimeError("bug")

    failing = GroupRunner(broken, recorder.sync)
    with pytest.raises(RuntimeError, match="bug"):
        failing.submit(GroupCall(named("x"), durable=False)).result()
    assert failing.submit(GroupCall(named("y"), durable=False)).exception() is not None  # still usable


def test_close_runs_what_is_queued_then_refuses_new_calls() -> None:
    recorder = Recorder()
    runner, first = held_runner(recorder, GroupCall(named("a"), durable=False))
    queued = runner.submit(GroupCall(named("b", "B"), durable=True))
    closer = threading.Thread(target=runner.close)
    closer.start()
    closer.join(0.2)
    assert closer.is_alive()  # waits for the queued call
    recorder.gate.set()
    closer.join(WAIT_S)
    assert not closer.is_alive() and queued.result(WAIT_S) == "B"
    with pytest.raises(RuntimeError, match="closed"):
        runner.submit(GroupCall(named("c"), durable=False))
    first.join(WAIT_S)
    assert not first.is_alive()


def test_pending_completes_once_for_waiters_and_callbacks() -> None:
    pending: Pending[int] = Pending()
    seen: list[int] = []
    pending.add_done_callback(lambda p: seen.append(p.result()))
    with pytest.raises(TimeoutError):
        pending.result(0.01)
    waiter = threading.Thread(target=lambda: seen.append(pending.result(WAIT_S) * 10))
    waiter.start()
    pending.set_result(4)
    waiter.join(WAIT_S)
    pending.add_done_callback(lambda p: seen.append(p.result() + 1))  # already done: runs at once
    assert sorted(seen) == [4, 5, 40] and pending.done()

    failed: Pending[int] = Pending()
    failed.set_exception(KeyError("gone"))
    assert isinstance(failed.exception(), KeyError)
    with pytest.raises(KeyError):
        failed.result()


def test_a_deferred_call_runs_when_consumed_and_is_answered_before_the_groups_behind_it() -> None:
    recorder = Recorder()
    runner = GroupRunner(recorder.run_group, recorder.sync)
    recorder.gate.clear()
    first = GroupCall(named("a", "A"), durable=False)
    future = runner.submit(first, deferred=True)
    assert recorder.events == [] and not future.done()  # nothing ran yet: the consumer runs the queue

    # What Ice's dispatch does with the returned future: add its reply callback, which runs the queue here.
    consumer = threading.Thread(
        target=future.add_done_callback, args=(functools.partial(completed, recorder, "a"),), name="consumer"
    )
    consumer.start()
    assert recorder.entered.wait(WAIT_S)
    behind = runner.submit(GroupCall(named("b", "B"), durable=False))  # queued while "a" runs
    recorder.gate.set()
    consumer.join(WAIT_S)
    assert behind.result(WAIT_S) == "B"
    # "a" was answered as soon as its own group was done, before the group queued behind it ran.
    assert recorder.events == [("group", ["a"], "consumer"), ("done", "a"), ("group", ["b"], "consumer")]


def test_a_deferred_call_also_runs_when_its_caller_waits_for_it() -> None:
    recorder = Recorder()
    runner = GroupRunner(recorder.run_group, recorder.sync)
    future = runner.submit(GroupCall(named("a", "A"), durable=True), deferred=True)
    assert recorder.events == []
    assert future.result(WAIT_S) == "A"
    assert recorder.events == [("group", ["a"], threading.current_thread().name), ("sync",)]


def test_a_handed_off_future_that_is_never_consumed_does_not_stall_the_queue() -> None:
    """A deferred call whose consumer never comes (its dispatch was dropped) holds the queue only until the stall
    time: the next submitter after that, a blocking waiter or ``rescue`` runs it."""
    recorder = Recorder()
    runner = GroupRunner(recorder.run_group, recorder.sync, stall_s=0.05)
    orphan = runner.submit(GroupCall(named("orphan", "O"), durable=False), deferred=True)
    assert not orphan.done() and recorder.events == []
    assert not runner.rescue()  # not stalled yet
    waiter = runner.submit(GroupCall(named("waiter", "W"), durable=True), deferred=True)
    # A caller that blocks on its own call rescues the queue once the stall time has passed.
    assert runner.wait(waiter) == "W"
    assert orphan.done() and orphan.result() == "O"
    assert recorder.events[0][1] == ["orphan", "waiter"]
    # The orphan's consumer may still come late: it finds the queue already run and does nothing.
    orphan.add_done_callback(functools.partial(completed, recorder, "late"))
    assert recorder.events[-1] == ("done", "late")


def test_rescue_and_close_run_a_stalled_queue() -> None:
    recorder = Recorder()
    runner = GroupRunner(recorder.run_group, recorder.sync, stall_s=60.0)
    orphan = runner.submit(GroupCall(named("orphan", 1), durable=False), deferred=True)
    assert not runner.rescue()
    assert runner.rescue(0.0) and orphan.result() == 1
    second = runner.submit(GroupCall(named("second", 2), durable=False), deferred=True)
    runner.close()  # would wait for ever on the unconsumed future without the rescue
    assert second.done() and second.result() == 2
