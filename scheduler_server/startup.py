"""What a scheduler core restores when it opens its database (``restore_state``): counters, persisted host blocks,
account freezes (not those of cookies since replaced), the sites' refreshes of the logins (not those of cookies since
replaced: ``refreshes``), open page-cap gaps and the ``rate`` policy's calibration
(``meta``), the in-memory queues (from the queue tables) and the hosts occupied by
leases that survived a restart. It also checks that the database belongs to this shard layout."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from icecrawler.errors import ConfigError
from scheduler_server.codec import decode_time_key, time_key
from scheduler_server.refreshes import REFRESH_KEY, StoredRefresh, accounts_elsewhere, sweep_refreshes
from scheduler_server.store import HELD_KEY, Txn, entries

if TYPE_CHECKING:
    from scheduler_server.accounts import PooledAccount
    from scheduler_server.core import SchedulerCore

__all__ = [
    "CALIBRATION_KEY",
    "GAP_KEY",
    "GAP_VALUE",
    "LAYOUT_KEY",
    "REMOVED_AT_KEY",
    "REMOVED_KEY",
    "lease_restored",
    "removed_at_key",
    "removed_lease_key",
    "removed_lease_of",
    "restore_state",
    "sweep_stored_refreshes",
]

log = logging.getLogger(__name__)

#: The ``meta`` key of the shard layout (``check_layout``).
LAYOUT_KEY = b"layout"
#: ``meta`` keys of tasks with an open page-cap gap (``icecrawler.resume``), and their value: shaped like a host
#: block that ended long ago, which is what a scheduler without gaps makes of it.
GAP_KEY = b"gap:"
GAP_VALUE = b'[0, "page-cap gap"]'
#: The ``meta`` key of the ``rate`` policy's calibration (``shhd.calibration.RateCalibration.to_dict``, as JSON),
#: written once by the transaction of every group that applies a report (``SchedulerCore._run_group``).
CALIBRATION_KEY = b"rate-calibration"
#: A removed task's leases (``SchedulerCore.remove``), so that a late report of one is told TaskRemoved, after a
#: restart too: ``REMOVED_KEY`` + ``<task id>#<token>`` is looked up when a report names a task or token the
#: scheduler does not hold, and ``REMOVED_AT_KEY`` + ``time_key(removal ms, <task id>#<token>)`` orders the same
#: leases by time, so that ``prune_done`` drops them with the completion log's entries of that age (a bounded range
#: scan). Both values are empty; both prefixes sort apart from every other ``meta`` key.
REMOVED_KEY = b"removed:"
REMOVED_AT_KEY = b"removed-at:"


def removed_lease_key(task_id: str, token: str) -> bytes:
    """The lookup key of a removed task's lease (``REMOVED_KEY``)."""
    return REMOVED_KEY + f"{task_id}#{token}".encode()


def removed_at_key(ms: int, task_id: str, token: str) -> bytes:
    """The time-ordered key of a removed task's lease (``REMOVED_AT_KEY``)."""
    return REMOVED_AT_KEY + time_key(ms, f"{task_id}#{token}")


def removed_lease_of(key: bytes) -> tuple[str, str]:
    """(task id, lease token) of either key of a removed task's lease."""
    if key.startswith(REMOVED_AT_KEY):
        name = decode_time_key(key[len(REMOVED_AT_KEY) :])[1]
    else:
        name = key[len(REMOVED_KEY) :].decode()
    task_id, _, token = name.rpartition("#")
    return task_id, token


def restore_state(core: SchedulerCore) -> None:
    """Fill a new core's counters, politeness state, open gaps and in-memory queues from its store."""
    wall = core.clocks.wall()
    with core.store.transaction() as txn:
        core.counts = {name: txn.count(name) for name in ("tasks", "pending", "inflight", "done")}
        core.quarantine.count = txn.count("quarantine")
        check_layout(txn, core.config.shard, core.config.shards)
        for key, value in entries(txn, "meta"):
            if key == LAYOUT_KEY:
                continue
            if key == CALIBRATION_KEY:
                restore_calibration(core, value)
                continue
            if key.startswith(GAP_KEY):
                core.open_gaps.add(key[len(GAP_KEY) :].decode())
                continue
            if key.startswith((REMOVED_KEY, REMOVED_AT_KEY)):
                continue  # read where a report needs them (``moves.take_leased``)
            if key.startswith(HELD_KEY):
                continue  # read by the store when it opens
            if key.startswith(REFRESH_KEY):
                continue  # ``restore_refreshes``, below
            kind, _, name = key.decode().partition(":")
            until, reason, *login = json.loads(value)
            if kind == "host":
                core.gate.block(name, until, reason)
            elif kind == "account" and login and login[0] != core.accounts.login_of(name):
                log.info("account %s has other cookies than when it was frozen: it starts thawed", name)
                txn.delete("meta", key)
            elif kind == "account":
                core.accounts.freeze(name, until, reason)
        for table in ("pending", "inflight"):
            for key, _ in entries(txn, table):
                ms, task_id = decode_time_key(key)
                source = task_id.split(":", 2)[1]
                if table == "pending":
                    core.queues.pending(task_id, source, ms)
                else:
                    core.queues.inflight(task_id, ms)
                    core.gate.restore_inflight(core.config.hosts[source], wall)
        restore_refreshes(core, txn)


def restore_refreshes(core: SchedulerCore, txn: Txn) -> None:
    """Lease each account with the sites' refreshes of its login again, those of the login the accounts file holds
    now (``sweep_stored_refreshes``). A lease handed out before the restart still refreshes nothing: the pool does
    not know what it was handed, and taking its refresh unchecked could lay an older login over a newer one."""
    lease_restored(core, sweep_stored_refreshes(core, txn, core.accounts.by_id))


def lease_restored(core: SchedulerCore, restored: list[StoredRefresh]) -> None:
    """Lease the accounts with ``restored`` (stored refreshes a sweep let them use), and say so in one line."""
    for refresh in restored:
        core.accounts.restore(refresh.account_id, refresh.site, refresh.cookies)
    if restored:
        accounts = sorted({refresh.account_id for refresh in restored})
        log.info("%d login refreshes restored from the database, accounts: %s", len(restored), ", ".join(accounts))


def sweep_stored_refreshes(core: SchedulerCore, txn: Txn, accounts: Mapping[str, PooledAccount]) -> list[StoredRefresh]:
    """``refreshes.sweep_refreshes`` on this core's shard, sites and wall clock, for ``accounts`` (those of the
    files as read now): at start, and on SIGHUP (``SchedulerCore.reload_accounts``)."""
    elsewhere = accounts_elsewhere(accounts.values(), core.shard_map, core.config.shard)
    return sweep_refreshes(txn, accounts, core.accounts.site_names, core.clocks.wall(), elsewhere)


def restore_calibration(core: SchedulerCore, saved: bytes) -> None:
    """Take back what the calibration had learnt. A record this policy cannot use (another policy or calibration
    setting now, a damaged value) is logged and left for the next report to replace: the calibration starts again
    from no evidence, as it did before it was kept, and learns again within days."""
    if core.calibration is None:
        return
    try:
        core.calibration.load(json.loads(saved))
    except ValueError as exc:  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors too
        log.warning("the stored rate calibration is not used, it starts again from no evidence: %s", exc)


def check_layout(txn: Txn, shard: int, shards: int) -> None:
    """The database remembers which shard of how many it is: tasks are placed by ``crc32(host) % shards``,
    so opening it as another shard, or with another shard count, would strand tasks on the wrong shard."""
    layout = {"shard": shard, "shards": shards}
    stored = txn.get("meta", LAYOUT_KEY)
    if stored is None:
        txn.put("meta", LAYOUT_KEY, json.dumps(layout).encode())
    elif json.loads(stored) != layout:
        was = json.loads(stored)
        raise ConfigError(
            f"this scheduler database is shard {was['shard']} of {was['shards']}, but "
            f"scheduler.shard/scheduler.shards say {layout['shard']} of {layout['shards']}; "
            "use the shard's own scheduler.db_dir; to change the shard count, copy the databases with "
            '`icecrawler reshard` (docs/DEPLOY.md, "Scheduler shards")'
        )
