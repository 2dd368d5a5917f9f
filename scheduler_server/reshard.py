"""Changing the number of scheduler shards (``icecrawler reshard``): every entry of the old shards' databases is
copied, unchanged, to the shard that owns it under the new count. Pure logic over ``QueueStore``: the command
opens the Berkeley DB environments, this module moves the entries.

A shard holds the tasks of the hosts that hash to it (``icecrawler.shards``), and every entry of its database
belongs to one task, to one host, or to the shard as a whole, which its key says. So the copy needs to know the
keys, not what the values mean:

* a task's entries (its record or its quarantined bytes, its queue key, its completion-log entries, its open
  page-cap gap, its removed leases) go to the task's new shard. A lease in flight moves with its task, so the
  client's report reaches the new shard and is taken;
* a host's ban block or operator hold goes to the host's new shard;
* an account's freeze, and the sites' refreshes of its login, go to every new shard: every shard loads every
  account, and only the shard of the hosts the account serves leases it, so they hold there and change nothing
  elsewhere. Which shard that is, the accounts files say, and a reshard does not read them: so each refresh goes
  to every new shard, and each shard's start deletes those of the accounts it does not serve
  (``refreshes.accounts_elsewhere``). Two old shards may hold one refresh (an old copy kept by a shard whose start
  found its account missing from the files): the one the site set last is copied (``refreshes.newer_copy``);
* the layout (which shard of how many) is written anew, and the ``rate`` calibration, learnt from a shard's own
  population of targets, goes to each new shard from the old shard that most of its tasks come from.

An entry it does not know (a key a later version added) stops the copy with an error, never a guess.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from icecrawler.errors import ConfigError, ServiceError
from icecrawler.shards import ShardMap, shard_of_host, task_source
from scheduler_server.codec import decode_time_key
from scheduler_server.refreshes import REFRESH_KEY, newer_copy
from scheduler_server.startup import (
    CALIBRATION_KEY,
    GAP_KEY,
    LAYOUT_KEY,
    REMOVED_AT_KEY,
    REMOVED_KEY,
    check_layout,
    removed_lease_of,
)
from scheduler_server.store import ADDED_TABLES, HELD_KEY, HELD_VALUE, TABLES, QueueStore, chunks, held_key

__all__ = ["EVERY_SHARD", "ReshardResult", "entry_owner", "plan", "read_layout", "reshard"]

#: ``entry_owner``'s answer for an entry every new shard gets.
EVERY_SHARD = -1
#: Entries read, and written to each new shard, per transaction.
_CHUNK = 1000
#: A progress line every this many entries copied.
_PROGRESS_EVERY = 200_000
#: ``meta`` keys of the politeness and account state (``SchedulerCore``'s ``_hold_key``): ``host:<netloc>`` and
#: ``account:<id>``.
_HOST_HOLD = b"host:"
_ACCOUNT_HOLD = b"account:"


@dataclass
class ReshardResult:
    """What was copied: per new shard, the entries of each table, and where its calibration came from."""

    shards: int
    was_shards: int
    entries: list[Counter[str]] = field(default_factory=list)
    calibration_from: list[int | None] = field(default_factory=list)


def read_layout(store: QueueStore) -> tuple[int, int]:
    """(shard, shards) as the database remembers them; a database that never ran sharded is shard 0 of 1."""
    with store.transaction() as txn:
        stored = txn.get("meta", LAYOUT_KEY)
    if stored is None:
        return 0, 1
    layout = json.loads(stored)
    return int(layout["shard"]), int(layout["shards"])


def task_of(table: str, key: bytes) -> str | None:
    """The task an entry belongs to, or None for a host's, an account's or the whole shard's entry."""
    if table in ("tasks", "quarantine"):  # a quarantined record goes with its task
        return key.decode()
    if table in ("pending", "inflight"):
        return decode_time_key(key)[1]
    if table == "done":  # time_key(ms, "<task id>#<lease token>")
        return decode_time_key(key)[1].rpartition("#")[0]
    if key.startswith(GAP_KEY):
        return key[len(GAP_KEY) :].decode()
    if key.startswith((REMOVED_KEY, REMOVED_AT_KEY)):
        return removed_lease_of(key)[0]
    return None


def entry_owner(table: str, key: bytes, shard_map: ShardMap) -> int:
    """The new shard of one entry (``EVERY_SHARD`` for an account's freeze or login refresh). The layout and the
    calibration are the caller's; an unknown ``meta`` key is a ConfigError."""
    task_id = task_of(table, key)
    if task_id is not None:
        return shard_map.of_task(task_id)
    if key.startswith(_HOST_HOLD):
        return shard_of_host(key[len(_HOST_HOLD) :].decode(), shard_map.shards)
    if key.startswith((_ACCOUNT_HOLD, REFRESH_KEY)):
        return EVERY_SHARD
    raise ConfigError(
        f"the {table} table holds an entry this version cannot place ({key[:60]!r}): reshard with the icecrawler "
        "version that wrote the database"
    )


def reshard(
    old: Sequence[QueueStore],
    new: Sequence[QueueStore],
    hosts: dict[str, str],
    progress: Callable[[str], None] = lambda line: None,
) -> ReshardResult:
    """Copy every entry of ``old`` (all the shards of one layout, in any order) into ``new`` (empty databases, new
    shard K at index K). ``hosts`` maps each source to its host, as the shards ran with (``shards.source_hosts``).
    Raises ConfigError, before writing anything, when ``old`` is not one complete layout, a ``new`` database is
    not empty, or a task sits on another shard than ``hosts`` say (the settings differ from the shards'); and
    ServiceError when the new shards' counts do not add up after the copy."""
    ordered = _complete_layout(old)
    for index, store in enumerate(new):
        with store.transaction() as txn:
            if any(txn.count(table) for table in TABLES):
                raise ConfigError(f"new shard {index}'s database is not empty: reshard writes only into new ones")
    _check_placement(ordered, ShardMap(hosts, len(ordered)))
    shard_map = ShardMap(hosts, len(new))
    result = ReshardResult(len(new), len(ordered), [Counter() for _ in new], [None] * len(new))
    calibrations: dict[int, bytes] = {}
    #: key -> the newest copy of each login refresh, written to every new shard at the end (a few per account).
    refreshes: dict[bytes, bytes] = {}
    tasks_from: list[Counter[int]] = [Counter() for _ in new]
    for was, store in enumerate(ordered):
        copied = 0
        for table in TABLES:
            for chunk in _chunks(store, table):
                parts: list[list[tuple[bytes, bytes]]] = [[] for _ in new]
                for key, value in chunk:
                    if table == "meta" and key == LAYOUT_KEY:
                        continue
                    if table == "meta" and key == CALIBRATION_KEY:
                        calibrations[was] = value
                        continue
                    if table == "meta" and key.startswith(HELD_KEY):
                        continue  # written below on each new shard that its table's entries reach
                    if table == "meta" and key.startswith(REFRESH_KEY):
                        refreshes[key] = newer_copy(key, refreshes.get(key), value)
                        continue
                    owner = entry_owner(table, key, shard_map)
                    for shard in range(len(new)) if owner == EVERY_SHARD else (owner,):
                        parts[shard].append((key, value))
                        if table == "tasks":
                            tasks_from[shard][was] += 1
                for shard, items in enumerate(parts):
                    if items:
                        _put(new[shard], table, items)
                        result.entries[shard][table] += len(items)
                copied += len(chunk)
                if copied % _PROGRESS_EVERY < len(chunk):
                    progress(f"old shard {was} of {len(ordered)}: {copied} entries copied ({table} table)")
        progress(f"old shard {was} of {len(ordered)}: {copied} entries copied, done")
    for shard, store in enumerate(new):
        source = _calibration_source(tasks_from[shard], calibrations)
        with store.transaction() as txn:
            check_layout(txn, shard, len(new))
            if source is not None:
                txn.put("meta", CALIBRATION_KEY, calibrations[source])
            for key, value in refreshes.items():
                txn.put("meta", key, value)
            held = [table for table in ADDED_TABLES if result.entries[shard][table]]
            for table in held:
                txn.put("meta", held_key(table), HELD_VALUE)
        result.entries[shard]["meta"] += len(refreshes) + len(held)
        result.calibration_from[shard] = source
    _check_counts(ordered, new)
    return result


def plan(old: Sequence[QueueStore], shards: int, hosts: dict[str, str]) -> list[Counter[str]]:
    """Per new shard, its tasks counted by host, as ``reshard`` would place them (nothing is written): shards
    split hosts, not tasks, so a few busy hosts may leave a shard with little to do."""
    ordered = _complete_layout(old)
    shard_map = ShardMap(hosts, shards)
    placed: list[Counter[str]] = [Counter() for _ in range(shards)]
    for store in ordered:
        for chunk in _chunks(store, "tasks"):
            for key, _ in chunk:
                task_id = key.decode()
                source = task_source(task_id)
                placed[shard_map.of_task(task_id)][hosts.get(source, f"(unknown source {source!r})")] += 1
    return placed


def _check_counts(old: Sequence[QueueStore], new: Sequence[QueueStore]) -> None:
    """Each table's entries add up to the old ones' (the account freezes, copied to every shard, apart), and on
    every new shard each task is in one queue. Counts, not ``check_consistency``: that audit holds every record in
    memory, and a reshard must not need the memory of the whole crawl."""

    def counts(store: QueueStore) -> Counter[str]:
        with store.transaction() as txn:
            return Counter(
                {table: txn.count(table) for table in ("tasks", "pending", "inflight", "done", "quarantine")}
            )

    was = sum((counts(store) for store in old), Counter())
    now = Counter[str]()
    for shard, store in enumerate(new):
        got = counts(store)
        if got["tasks"] != got["pending"] + got["inflight"]:
            raise ServiceError(
                f"new shard {shard} holds {got['tasks']} tasks but {got['pending']} pending and {got['inflight']} in "
                "flight: the old databases were not consistent (start each old scheduler once, or with --recover)"
            )
        now += got
    if now != was:
        raise ServiceError(f"the new shards hold {dict(now)} entries, the old ones {dict(was)}: the copy is incomplete")


def _complete_layout(old: Sequence[QueueStore]) -> list[QueueStore]:
    """``old`` ordered by shard, if it is every shard of one layout, each once."""
    if not old:
        raise ConfigError("no old shard given")
    layouts = [read_layout(store) for store in old]
    counts = {shards for _, shards in layouts}
    if len(counts) != 1:
        raise ConfigError(f"the old databases come from different layouts: {sorted(layouts)} (shard, shards)")
    (shards,) = counts
    found = sorted(shard for shard, _ in layouts)
    if found != list(range(shards)):
        missing = sorted(set(range(shards)) - set(found))
        raise ConfigError(
            f"the old databases are shards {found} of {shards}: every shard is needed, once"
            + (f" (missing: {missing})" if missing else "")
        )
    return [store for _, store in sorted(zip((shard for shard, _ in layouts), old, strict=True))]


def _check_placement(ordered: Sequence[QueueStore], shard_map: ShardMap) -> None:
    """Every task is on the shard ``shard_map`` names: else the hosts given are not the ones the shards ran with,
    and the copy would place the tasks (and their hosts' politeness) wrongly. And every ``meta`` entry has a
    place (``entry_owner``), so an unknown one is found before anything is written."""
    for was, store in enumerate(ordered):
        for chunk in _chunks(store, "meta"):
            for key, _ in chunk:
                if key not in (LAYOUT_KEY, CALIBRATION_KEY) and not key.startswith(HELD_KEY):
                    entry_owner("meta", key, shard_map)
        for chunk in _chunks(store, "tasks"):
            for key, _ in chunk:
                task_id = key.decode()
                if shard_map.of_task(task_id) != was:
                    raise ConfigError(
                        f"task {task_id} is on old shard {was}, but the sources' base_url settings put it on shard "
                        f"{shard_map.of_task(task_id)}: reshard with the settings the shards ran with"
                    )


def _calibration_source(tasks_from: Counter[int], calibrations: dict[int, bytes]) -> int | None:
    """The old shard whose calibration a new shard takes: the one most of its tasks come from (then the lowest)."""
    ranked = sorted(calibrations, key=lambda was: (-tasks_from[was], was))
    return ranked[0] if ranked else None


def _chunks(store: QueueStore, table: str) -> Iterator[list[tuple[bytes, bytes]]]:
    """A table's entries in key order, ``_CHUNK`` at a time, each read in a transaction of its own (none is held
    while the caller writes), so a database of millions of tasks is never in memory at once."""

    def scan(start: bytes) -> list[tuple[bytes, bytes]]:
        with store.transaction() as txn:
            return txn.scan(table, start, limit=_CHUNK)

    return chunks(scan)


def _put(store: QueueStore, table: str, items: list[tuple[bytes, bytes]]) -> None:
    with store.transaction() as txn:
        for key, value in items:
            txn.put(table, key, value)
