"""The one judge of a local crawl: what the sandbox published (its ground truth) against what storage holds.

The demo, the end-to-end tests, the scale-out tests and the benchmarks all compare the two with the same item
identity (``item_key``), so they cannot disagree on what "stored exactly once" means:

* a post is ``("weibo", user id, post id)`` whichever Weibo front end showed it: every Weibo source lands in the
  one ``weibo`` table, keyed by owner and id (``storage_server.schema``), so the same post crawled from two
  sites is one row;
* a review is ``(source, product id, review id)``;
* except for sources whose pages show no review ids (``SourceSpec.shows_item_ids`` false: ECSHOP): their stored id is a
  digest the parser makes from what the page shows, which the truth cannot reproduce, so both sides are
  identified by ``(source, product id, created-at ms, text with whitespace collapsed)``.

Truth comes either from ``/__sandbox/truth`` (``Stack.truth``) or from the sandbox's JSONL truth file
(``read_truth_file``: a harness that cannot reach the sandbox from its own network namespace); stored items are
read straight from the embedded store's SQLite file (read-only; storage keeps running).
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import json
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from icecrawler.clock import BEIJING
from icecrawler.sourcespec import registry

__all__ = [
    "ItemKey",
    "StoredItem",
    "item_key",
    "leases_by_task",
    "overlapping_leases",
    "problems",
    "read_stored",
    "read_truth_file",
    "stored_index",
    "truth_index",
    "truth_key",
]

#: One item's identity (see the module docstring).
ItemKey = tuple[Any, ...]


def _time_ms(text: str) -> int:
    """Epoch ms of an ISO time; a time without an offset is Beijing time (how the sandbox prints it)."""
    moment = datetime.fromisoformat(text.strip())
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=BEIJING)
    return int(moment.timestamp() * 1000)


def _norm(text: str) -> str:
    return " ".join(text.split())


def item_key(source: str, owner: Any, item_id: Any, created_at: str, text: str) -> ItemKey:
    """The identity of one item, from a truth record or a stored row alike."""
    spec = registry.get(source)  # looked up per call: a source registered later (a test's) is judged too
    if spec is not None and spec.table == "weibo":
        return ("weibo", str(owner), str(item_id))
    if spec is not None and not spec.shows_item_ids:
        return (source, str(owner), _time_ms(created_at), _norm(text))
    return (source, str(owner), str(item_id))


def truth_key(item: Mapping[str, Any]) -> ItemKey:
    """The identity of one truth item (``/__sandbox/truth`` or the truth file), comparable with stored keys."""
    return item_key(str(item["source"]), item["target"], item["id"], str(item["created_at"]), str(item["text"]))


@dataclass(frozen=True)
class StoredItem:
    """One stored post or review: its identity and when a client fetched it (simulated epoch ms)."""

    key: ItemKey
    fetched_ms: int


def read_truth_file(path: Path) -> list[dict[str, Any]]:
    """The items of the sandbox's JSONL truth file (a line still being written is skipped)."""
    items: list[dict[str, Any]] = []
    if not path.exists():
        return items
    for line in path.read_text(encoding="utf-8").splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict) and record.get("kind") == "item":
                items.append(record)
    return items


def read_stored(sqlite_path: Path) -> list[StoredItem]:
    """Every post and review in the embedded store's file (read-only; an absent file holds nothing)."""
    if not sqlite_path.exists():
        return []
    conn = sqlite3.connect(f"file:{sqlite_path}?mode=ro", uri=True, timeout=10)
    try:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        posts = (
            list(conn.execute("SELECT source, user_id, id, created_at, text, fetched_at FROM weibo"))
            if "weibo" in tables
            else []
        )
        reviews = (
            list(conn.execute("SELECT source, product_id, id, created_at, content, fetched_at FROM review"))
            if "review" in tables
            else []
        )
    finally:
        conn.close()
    return [
        StoredItem(item_key(source, owner, item, created, text), _time_ms(fetched))
        for source, owner, item, created, text, fetched in itertools.chain(posts, reviews)
    ]


def truth_index(
    items: Sequence[Mapping[str, Any]], published_before_wall_ms: int | None = None
) -> dict[tuple[str, ItemKey], Mapping[str, Any]]:
    """Truth items by (source, key), only those published (wall clock) up to ``published_before_wall_ms`` if
    given. A post shown on both Weibo sites appears once per source, with the same key."""
    return {
        (str(item["source"]), truth_key(item)): item
        for item in items
        if published_before_wall_ms is None or int(item["published_wall_ms"]) <= published_before_wall_ms
    }


def stored_index(rows: Iterable[StoredItem]) -> collections.Counter[ItemKey]:
    """How many times each key is stored (more than once would be a duplicate)."""
    return collections.Counter(row.key for row in rows)


def _table(key: ItemKey) -> str:
    return "weibo" if key[0] == "weibo" else "review"


def problems(truth: Sequence[Mapping[str, Any]], stored: Iterable[StoredItem]) -> list[str]:
    """What is wrong, per table; empty when every truth item is stored exactly once and nothing else is."""
    expected = {truth_key(item) for item in truth}
    counts = stored_index(stored)
    found: list[str] = []
    for table in ("weibo", "review"):
        keys = {key for key in expected if _table(key) == table}
        here = {key: n for key, n in counts.items() if _table(key) == table}
        missing, extra = keys - set(here), set(here) - keys
        dupes = {key: n for key, n in here.items() if n > 1}
        if missing:
            found.append(f"{table}: {len(missing)} of {len(keys)} items never stored, e.g. {sorted(missing)[:3]}")
        if extra:
            found.append(f"{table}: {len(extra)} stored items not in the truth, e.g. {sorted(extra)[:3]}")
        if dupes:
            found.append(f"{table}: {len(dupes)} items stored more than once, e.g. {list(dupes.items())[:3]}")
    return found


def leases_by_task(done: Sequence[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """Completion-log entries (``Stack.done_log``) per task, in lease order."""
    per_task: dict[str, list[Mapping[str, Any]]] = collections.defaultdict(list)
    for entry in done:
        per_task[str(entry["task_id"])].append(entry)
    for leases in per_task.values():
        leases.sort(key=lambda e: (e["leased_wall_ms"], e["ended_wall_ms"]))
    return dict(per_task)


def overlapping_leases(done: Sequence[Mapping[str, Any]]) -> list[tuple[Mapping[str, Any], Mapping[str, Any]]]:
    """Pairs of leases of one task that overlap in time: the audit behind "no task is ever leased twice at
    once". Every report and every expired lease is in the completion log with its interval (leased, ended; wall
    ms, each rounded to the millisecond, hence the 1 ms tolerance)."""
    return [
        (before, after)
        for leases in leases_by_task(done).values()
        for before, after in itertools.pairwise(leases)
        if after["leased_wall_ms"] < before["ended_wall_ms"] - 1
    ]
