"""A listing report's discoveries (``Report.discovered_ids``): the product ids its crawl found become
ProductReviews tasks of the listing's own source inside the report's transaction, so the report and its
discoveries commit together or not at all (a crash between them cannot keep one and lose the other), and the
report's ``new_items`` becomes how many of them were new.

The ids were checked with the report, before its call was queued (``checks.check_discovered``): a report with
one bad id is refused whole and adds nothing. They are bare target ids (no ``<source>:`` prefix): a report can
only add products of the source its leased listing belongs to, which is also on this scheduler's shard (shards
split by host, and a source has one host), so a listing report never needs another shard.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from icecrawler.models import Report, TaskKind
from scheduler_server.codec import TaskRecord
from scheduler_server.moves import TaskMoves
from scheduler_server.store import Txn

__all__ = ["add_discoveries", "product_task_ids"]

_LISTING = TaskKind.Listing.value
_PRODUCT = TaskKind.ProductReviews


def product_task_ids(source: str, ids: Sequence[str]) -> list[tuple[str, str, str]]:
    """The ``(task id, source, target)`` of each discovered product of ``source`` (ids already checked). Pure."""
    return [(f"{_PRODUCT.value}:{source}:{target}", source, target) for target in ids]


def add_discoveries(
    txn: Txn,
    moves: TaskMoves,
    records: Sequence[TaskRecord],
    reports: Sequence[Report],
    now_ms: int,
    initial_state: Callable[[], dict[str, Any]],
) -> tuple[Sequence[Report], list[TaskRecord]]:
    """Inside the reports' transaction: add the discoveries of each listing report (``records[i]`` is the leased
    task of ``reports[i]``). Returns the reports, each listing report's ``new_items`` set to how many of its
    products were new, and the new tasks' records (counted and cached by the core after the commit)."""
    if all(record.kind != _LISTING for record in records):
        return reports, []
    counted = list(reports)
    added: list[TaskRecord] = []
    for index, (record, item) in enumerate(zip(records, reports, strict=True)):
        if record.kind != _LISTING:
            continue
        new = moves.add_new(txn, product_task_ids(record.source, item.discovered_ids), _PRODUCT, now_ms, initial_state)
        added.extend(new)
        counted[index] = replace(item, new_items=len(new))
    return counted, added
