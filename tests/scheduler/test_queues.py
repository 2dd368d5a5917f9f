"""TaskQueues (pure): time order per source, lazy removal of moved entries, and rollback of a change."""

from __future__ import annotations

from scheduler_server.queues import TaskQueues


def queues_with(*pending: tuple[str, str, int]) -> TaskQueues:
    queues = TaskQueues()
    for task_id, source, due_ms in pending:
        queues.pending(task_id, source, due_ms)
    return queues


def test_heads_follow_due_time_then_id_per_source() -> None:
    queues = queues_with(("b", "jd", 5), ("a", "jd", 5), ("c", "jd", 1), ("x", "weibo_pc", 3))
    assert queues.head("jd") == (1, "c") and queues.head("weibo_pc") == (3, "x")
    assert queues.head("ecshop") is None
    assert queues.first_due_ms() == 1
    assert queues.first_due_each() == {"jd": 1, "weibo_pc": 3}
    queues.inflight("c", 900)
    assert queues.head("jd") == (5, "a")
    queues.pending("a", "jd", 7)  # re-queued later: its old entry no longer counts
    assert queues.head("jd") == (5, "b")
    assert queues.due_before(6, cap=10) == 2 and queues.due_before(100, cap=2) == 2
    assert queues.due_before_each((6, 100), cap=10) == (2, queues.due_before(100, cap=10))
    assert queues.due_before_each((6, 100), cap=2) == (2, 2)
    queues.inflight("x", 900)
    assert queues.first_due_each() == {"jd": 5}  # weibo_pc has nothing pending


def test_expired_takes_deadlines_up_to_now_in_order_and_at_most_limit() -> None:
    queues = queues_with(("a", "jd", 0), ("b", "jd", 0), ("c", "jd", 0))
    for task_id, deadline_ms in (("a", 30), ("b", 10), ("c", 20)):
        queues.inflight(task_id, deadline_ms)
    assert queues.expired(5, limit=10) == []
    assert queues.expired(25, limit=1) == ["b"]
    queues.pending("b", "jd", 40)
    assert queues.expired(25, limit=10) == ["c"]


def test_rollback_restores_both_queues_and_their_order() -> None:
    queues = queues_with(("a", "jd", 1), ("b", "jd", 2))
    queues.inflight("b", 50)
    before = (dict(queues.due), dict(queues.deadline))
    queues.begin()
    queues.inflight("a", 60)
    assert queues.head("jd") is None  # a's entry is popped as stale
    assert queues.expired(100, limit=10) == ["b", "a"]
    queues.pending("b", "jd", 9)
    queues.pending("new", "weibo_pc", 3)
    queues.rollback()
    assert (queues.due, queues.deadline) == before
    assert queues.head("jd") == (1, "a") and queues.head("weibo_pc") is None
    assert queues.expired(100, limit=10) == ["b"]  # pushed back once, taken once


def test_commit_keeps_the_changes() -> None:
    queues = queues_with(("a", "jd", 1))
    queues.begin()
    queues.inflight("a", 60)
    queues.commit()
    queues.rollback()  # nothing recorded any more
    assert queues.due == {} and queues.deadline == {"a": 60}


def test_stale_entries_are_compacted_so_memory_stays_bounded() -> None:
    tasks = [f"t{n}" for n in range(100)]
    queues = queues_with(*((task_id, "jd", 0) for task_id in tasks))
    for cycle in range(200):  # every lease ends (report) long before its deadline, as most do
        for task_id in tasks:
            queues.inflight(task_id, 1_000_000 + cycle)
            queues.pending(task_id, "jd", cycle + 1)
    assert queues.heap_entries() <= 2 * len(tasks) + 2 * 1024 + 2
    assert queues.expired(10**9, limit=1000) == []
    assert queues.head("jd") == (200, "t0") and len(queues.due) == 100


def test_remove_takes_a_task_out_of_either_queue_and_a_rollback_puts_it_back() -> None:
    queues = queues_with(("a", "jd", 1), ("b", "jd", 2), ("c", "weibo_pc", 3))
    queues.inflight("b", 50)
    before = (dict(queues.due), dict(queues.deadline))
    queues.begin()
    queues.remove("a")
    queues.remove("b")
    assert queues.head("jd") is None and queues.expired(100, limit=10) == []
    queues.rollback()
    assert (queues.due, queues.deadline) == before
    assert queues.head("jd") == (1, "a") and queues.expired(100, limit=10) == ["b"]


def test_a_committed_removal_forgets_the_task_and_a_later_add_starts_afresh() -> None:
    queues = queues_with(("a", "jd", 1), ("c", "weibo_pc", 3))
    queues.begin()
    queues.remove("a")
    queues.commit()
    assert queues.due == {"c": 3} and queues.head("jd") is None and queues.first_due_ms() == 3
    assert "a" not in queues._sources  # nothing of a removed task stays behind
    queues.pending("a", "ecshop", 7)
    assert queues.head("ecshop") == (7, "a") and queues.head("jd") is None
