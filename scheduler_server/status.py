"""What the scheduler core says about itself: ``stats`` (status and ``icecrawler status``), ``gauges`` (the
metrics, read at scrape time) and ``task_info`` (one task). ``SchedulerCore``'s methods of the same names call
these; they read the core's state under its lock and change nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from icecrawler.resume import describe as describe_gap
from scheduler_server.checks import check_task_id, invalid_field
from scheduler_server.codec import history_entries
from scheduler_server.config import BudgetedPolicy
from scheduler_server.politeness import HELD_BY_OPERATOR
from scheduler_server.quarantine import QUARANTINE, damage_of, decoded

if TYPE_CHECKING:
    from scheduler_server.core import SchedulerCore

__all__ = ["gauges", "own_sources", "stats", "task_info"]

#: Status counts due-soon tasks up to this many (the count is a scan; it must not stall the scheduler).
DUE_SOON_CAP = 100_000


def stats(core: SchedulerCore) -> dict[str, Any]:
    """Counts, rates over the last minute and per-host/account/listing detail (never cookies)."""
    with core.lock:
        wall = core.clocks.wall()
        now_ms = int(core.clocks.now() * 1000)
        due_soon, due_now = core.queues.due_before_each((now_ms + 60_000, now_ms + 1), DUE_SOON_CAP)
        found: list[tuple[bytes, bytes, str]] = []
        with core.store.transaction() as txn:
            listings = {
                record.id: record.discovered
                for record in decoded(txn.scan("tasks", b"listing:", b"listing;", 1000), found)
            }
        core.quarantine_found(found)
        return {
            **core.counts,
            "due_soon": due_soon,
            "leases_per_min": core.lease_rate.total(wall),
            "reports_per_min": core.report_rate.total(wall),
            "detail": {
                # Due now (not within the next minute): what a running client would have leased.
                "due_now": due_now,
                "hosts": core.gate.describe(wall),
                "accounts": core.accounts.describe(wall),
                # Per source crawled with accounts: how many are usable and frozen (none usable: not crawled).
                "source_accounts": own_sources(core, core.accounts.by_source(wall)),
                "listings": listings,
                "policy": core.policy.name,
                "lease_s": core.config.lease_s,
                "batch_limit": core.config.batch_limit,
                "shard": core.config.shard,
                "shards": core.config.shards,
                # Each source's host as this scheduler assigns tasks by (a client compares its own: hostcheck).
                "source_hosts": dict(core.config.hosts),
                "shutting_down": core.stopping,
                # Tasks with an open page-cap gap (icecrawler.resume): a gauge, 0 once the crawl caught up.
                "open_gaps": len(core.open_gaps),
                # Task records that did not decode, moved to the quarantine table (``quarantine``).
                "quarantined": core.quarantine.count,
                # The rate policy's budget constant, daily anchor and calibration; {} with another policy.
                "revisit": _revisit(core),
            },
        }


def own_sources[V](core: SchedulerCore, by_source: dict[str, V]) -> dict[str, V]:
    """The sources of ``by_source`` this shard schedules: every shard of a sharded scheduler loads the same accounts
    file and config, and one that schedules none of a source's tasks would say (and page) that it has no account
    for it, or that nothing of it waits."""
    return {
        source: counts for source, counts in by_source.items() if core.shard_map.of_source(source) == core.config.shard
    }


def _revisit(core: SchedulerCore) -> dict[str, Any]:
    """What the ``rate`` policy steers by (``RatePolicy.describe``); {} with another policy."""
    return core.policy.describe() if isinstance(core.policy, BudgetedPolicy) else {}


def gauges(core: SchedulerCore) -> dict[str, Any]:
    """Cheap current values for the metrics (no B-tree read): task counts, the due backlog (pending tasks due now, and
    how long the most overdue one has waited, simulated seconds, in all and per source), blocked hosts (and how long
    each source's host stays blocked by the site), accounts by state (and by source: ``AccountPool.by_source``), the
    sites' refreshes of their logins taken and ignored, open page-cap gaps, visitor sessions minted, renewed and failed
    per source, and what the ``rate`` policy steers by (``RatePolicy.describe``; {} with another policy)."""
    with core.lock:
        wall = core.clocks.wall()
        now_ms = int(core.clocks.now() * 1000)
        # A copy of the due times (one C-level copy) rather than a count under the lock: a scrape then holds the
        # core's lock for a fraction of a Python walk over every pending task, and counts after releasing it.
        due_times = list(core.queues.due.values())
        first_due = core.queues.first_due_each()
        first_ms = core.queues.first_due_ms()
        hosts = core.gate.describe(wall)
        accounts = core.accounts.describe(wall)
        source_accounts = own_sources(core, core.accounts.by_source(wall))
        refreshes = dict(core.accounts.refreshes)
        counts = dict(core.counts)
        open_gaps = len(core.open_gaps)
        quarantined = core.quarantine.count
        rate = _revisit(core)
    # Counted whole: a capped count stays flat once the backlog passes the cap, and IcecrawlerBacklogGrowing (a
    # derivative) would go quiet while it grows.
    due = sum(1 for due_ms in due_times if due_ms <= now_ms)
    # Per source, from its earliest pending task: a source whose accounts are all frozen has tasks that wait here
    # (IcecrawlerNoUsableAccount pages only then, not for a source nobody asked to crawl).
    source_due_age = own_sources(
        core,
        {
            source: max(0.0, (now_ms - first_due[source]) / 1000) if source in first_due else 0.0
            for source in sorted({*core.config.hosts, *first_due})
        },
    )
    block_reasons = [str(host["block"]["reason"]) for host in hosts.values() if host["block"]["reason"]]
    # A source stands still while the site keeps its host blocked (a ban, a long Retry-After): its tasks are not
    # leased, so no report says so. An operator's hold is the operator's own doing (held_hosts).
    blocks = {name: host["block"] for name, host in hosts.items()}
    source_blocked = {
        source: float(blocks[host]["held_for_s"])
        if host in blocks and blocks[host]["reason"] and not str(blocks[host]["reason"]).startswith(HELD_BY_OPERATOR)
        else 0.0
        for source, host in core.config.hosts.items()
    }
    visitors = core.accounts.visitors.describe(wall)
    states: dict[str, int] = {"ok": 0, "frozen": 0}
    for account in accounts.values():
        states[account["state"]] = states.get(account["state"], 0) + 1
    return {
        **counts,
        "due": due,
        "due_age_s": max(0.0, (now_ms - first_ms) / 1000) if due and first_ms is not None else 0.0,
        "blocked_hosts": sum(1 for reason in block_reasons if not reason.startswith(HELD_BY_OPERATOR)),
        "held_hosts": sum(1 for reason in block_reasons if reason.startswith(HELD_BY_OPERATOR)),
        "accounts": states,
        "source_accounts": source_accounts,
        "source_blocked_s": source_blocked,
        "source_due_age_s": source_due_age,
        "login_refreshes": refreshes,
        "open_gaps": open_gaps,
        "quarantined": quarantined,
        "visitor_renewals": {source: v["renewals"] for source, v in visitors.items()},
        "visitor_mints": {source: v["mints"] for source, v in visitors.items()},
        "visitor_mint_failures": {source: v["failures"] for source, v in visitors.items()},
        "rate": rate,
    }


def task_info(core: SchedulerCore, task_id: str) -> dict[str, Any]:
    """One task's metadata and recent period/distance history; for a task whose record did not decode (quarantined
    now or before), its state "quarantined", the size of its bytes and why they do not decode."""
    check_task_id(task_id, "taskId", -1)
    with core.lock:
        with core.transaction() as txn:
            record = core.moves.stored(txn, task_id)
            kept = txn.get(QUARANTINE, task_id.encode()) if record is None else None
        if kept is not None:
            return _quarantined_info(task_id, kept)
        if record is None:
            raise invalid_field(f"unknown task {task_id}", "taskId", code="UnknownTask")
        info = {key: value for key, value in vars(record).items() if key != "old_tokens"}
        info["lease_token"] = "<held>" if record.lease_token else ""
        info["due_in_s"] = round((record.due_ms / 1000 - core.clocks.now()), 3) if record.state == "pending" else None
        info["gap"] = describe_gap(record.cursor)
        info["history"] = [
            {"time_ms": int(t), "period_s": p, "distance": int(d), "new_items": int(n)}
            for t, p, d, n in history_entries(record.history)
        ]
        return info


def _quarantined_info(task_id: str, raw: bytes) -> dict[str, Any]:
    """What ``task_info`` says of a quarantined task (docs/DEPLOY.md, "Quarantined task records")."""
    why = damage_of(raw)  # not decoded again: at every status call, under the core's lock, that could cost gigabytes
    return {
        "id": task_id,
        "state": "quarantined",
        "quarantined_bytes": len(raw),
        "error": f"its record does not decode ({why}): it is in the quarantine table, out of every queue; "
        "`icecrawler seed` adds the target again with a fresh state",
    }
