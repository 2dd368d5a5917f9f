"""``icecrawler status``: queue depths, rates, per-host/account/listing state; ``--task ID`` for one task.

The report is a dict of sections. ``scheduler`` is required; ``storage`` is added when the storage server
answers (its stats), so the storage server's spool depth shows up without changing this command.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import Ice

from icecrawler import rpc
from icecrawler.errors import shown
from icecrawler.settings import Settings
from icecrawler.shards import ShardMap
from icecrawler_cli.commands import BaseCommand

#: How long status waits for a server before calling it unreachable (milliseconds).
STATUS_TIMEOUT_MS = 3000


#: Counts that add up over the shards of a sharded scheduler.
_SUMMED = ("tasks", "pending", "inflight", "done", "due_soon", "due_now", "leases_per_min", "reports_per_min")
#: Per-host, per-account and per-listing detail: each host (and its accounts and listings) lives on one shard.
_MERGED = ("hosts", "accounts", "listings")


def shard_stats(proxy: Any, what: str = "scheduler") -> dict[str, Any]:
    with rpc.remote_calls(what, proxy):
        stats = proxy.ice_invocationTimeout(STATUS_TIMEOUT_MS).stats()
    return {
        "tasks": stats.tasks,
        "pending": stats.pending,
        "inflight": stats.inflight,
        "done": stats.done,
        "due_soon": stats.dueSoon,
        "leases_per_min": stats.leasesPerMin,
        "reports_per_min": stats.reportsPerMin,
        **json.loads(stats.detailJson or "{}"),
    }


def scheduler_section(comm: Ice.Communicator) -> dict[str, Any]:
    """The scheduler's stats; for a sharded one (``Scheduler.Proxies``), the shards' counts added up, their
    hosts, accounts and listings together, and each shard's own stats under ``by_shard``."""
    proxies = rpc.scheduler_proxies(comm)
    shards = [
        shard_stats(proxy, "scheduler" if len(proxies) == 1 else f"scheduler shard {shard}")
        for shard, proxy in enumerate(proxies)
    ]
    return merged(shards)


def _count(stats: dict[str, Any], key: str) -> int:
    """A summed count of one shard's stats; ``due_now`` read as ``due_soon`` from a scheduler too old to say it."""
    return int(stats.get(key, stats.get("due_soon", 0) if key == "due_now" else 0))


def merged(shards: list[dict[str, Any]]) -> dict[str, Any]:
    """One section for the stats of every shard (one shard: its own)."""
    if len(shards) == 1:
        return shards[0]
    section = {**shards[0], **{key: sum(_count(shard, key) for shard in shards) for key in _SUMMED}}
    for key in _MERGED:
        section[key] = {name: value for shard in shards for name, value in shard.get(key, {}).items()}
    section["shutting_down"] = any(shard.get("shutting_down") for shard in shards)
    section["open_gaps"] = sum(shard.get("open_gaps", 0) for shard in shards)
    section["quarantined"] = sum(shard.get("quarantined", 0) for shard in shards)
    # Each shard has its own pool (a freeze comes from its own reports): a source's accounts are said per shard.
    section["source_accounts"] = {
        f"{source} on shard {number}": counts
        for number, shard in enumerate(shards)
        for source, counts in shard.get("source_accounts", {}).items()
    }
    section.pop("revisit", None)  # each shard's own policy state: under ``by_shard`` only
    section["by_shard"] = shards
    return section


def storage_section(comm: Ice.Communicator) -> dict[str, Any]:
    """The storage server's stats, or ``{"reachable": False}`` with the proxy tried: status works with the
    scheduler alone (a Storage.Proxy that does not parse is one not reached, named as written)."""
    tried = rpc.storage_proxy_text(comm)
    try:
        proxy = rpc.storage_proxy(comm)
        tried = str(proxy)
        stats = proxy.ice_invocationTimeout(STATUS_TIMEOUT_MS).stats()
    except (Ice.DispatchException, Ice.UserException) as exc:  # it answered, with an error
        return {"reachable": True, "failed": rpc.one_line(exc), "proxy": tried}
    except Ice.Exception as exc:
        return {"reachable": False, "error": type(exc).__name__, "proxy": tried}
    return {
        "reachable": True,
        "backend": stats.backend,
        "posts": stats.posts,
        "reviews": stats.reviews,
        "spool_depth": stats.spoolDepth,
        "writes_accepted": stats.writesAccepted,
        "records_rejected": stats.recordsRejected,
        **json.loads(stats.detailJson or "{}"),
    }


def render_text(report: dict[str, Any]) -> str:
    s = report["scheduler"]
    lines = [
        f"scheduler: {s['tasks']} tasks, {s['pending']} pending ({s['due_soon']} due within a minute), "
        f"{s['inflight']} in flight, {s['done']} in the completion log",
        f"  last minute: {s['leases_per_min']:.0f} leases, {s['reports_per_min']:.0f} reports; policy "
        f"{s.get('policy', '?')}{'; SHUTTING DOWN' if s.get('shutting_down') else ''}",
    ]
    due_now = _count(s, "due_now")
    if due_now and not s["leases_per_min"] and not s["inflight"]:
        # What IcecrawlerNoProgress pages for, in words: due work that nobody takes (due now: a task due within
        # the next minute is no sign of anything on a quiet crawl).
        lines.append(
            f"  nothing was leased in the last minute although {due_now} task(s) are due: no client is running "
            "or reaching the scheduler, or every due task waits for its host or an account (see below)"
        )
    if s.get("open_gaps"):
        lines.append(
            f"  {s['open_gaps']} task(s) with an open page-cap gap: items not fetched yet, the next visits "
            "fetch them (status --task ID shows one)"
        )
    if s.get("quarantined"):
        lines.append(
            f"  {s['quarantined']} task record(s) quarantined: they did not decode and their targets are not crawled; "
            'the scheduler\'s log names them (docs/DEPLOY.md, "Quarantined task records")'
        )
    revisit = s.get("revisit") or {}
    if revisit:  # the rate policy (``RatePolicy.describe``)
        scale = revisit["budget_scale"]
        anchor = "on" if revisit["daily_anchor"] else "off"
        if revisit["targets_keep_one_clock"]:
            anchor += " (the tasks keep one daily clock)"
        lines.append(
            f"  rate policy: {'no budget constant yet' if scale is None else f'budget constant {scale:.4g}'}, "
            f"longest period {revisit['longest_period_s'] / 3600:.1f} h, daily anchor {anchor}, "
            f"calibration over {len(revisit['calibration'] or [])} class(es) of estimated rate"
        )
    if s.get("shards", 1) > 1:
        lines.append(
            f"  {s['shards']} shards: "
            + ", ".join(f"#{shard['shard']} {shard['tasks']} tasks" for shard in s.get("by_shard", []))
        )
    for host, h in s.get("hosts", {}).items():
        block = f", blocked {h['block']['held_for_s']:.0f}s ({h['block']['reason']})" if h["block"]["reason"] else ""
        lines.append(f"  host {host}: {h['inflight']} in flight, {h['leases_last_min']:.0f} leases/min{block}")
    for account, a in s.get("accounts", {}).items():
        if "mints" in a:  # a visitor session (scheduler_server.visitors)
            # a failed mint's message may quote the passport's own text (a site's)
            error = f", last error: {shown(a['last_error'])}" if a.get("last_error") else ""
            session = " ".join(part for part in (a["state"], a["account"]) if part)  # no account before a mint
            lines.append(f"  {account}: {session}, {a['mints']} minted, {a['renewals']} renewed{error}")
            continue
        frozen = f" for {a['frozen']['held_for_s']:.0f}s ({a['frozen']['reason']})" if a["state"] == "frozen" else ""
        refreshed = f", login refreshed by the site {a['login_refreshes']}x" if a.get("login_refreshes") else ""
        if a.get("login_refreshes_refused"):  # unreadable, or of another login (scheduler_server.accounts)
            refreshed += f", {a['login_refreshes_refused']} refreshed logins ignored"
        if a.get("login_refreshes_restored"):  # kept in the database: a restart, an account back at SIGHUP
            refreshed += f", {a['login_refreshes_restored']} refreshed logins restored from the database"
        lines.append(
            f"  account {account}: {a['state']}{frozen}, {a['used_last_min']:.0f}/{a['budget_per_min']} "
            f"requests this minute{refreshed}"
        )
    for source, counts in s.get("source_accounts", {}).items():
        if not counts["ok"]:  # its tasks are not leased, so no report (and no crawl alert) says it
            why = f"no usable account ({counts['frozen']} frozen)" if counts["frozen"] else "no account can crawl it"
            lines.append(
                f"  source {source}: {why}: its tasks wait (renew the logins in scheduler.accounts_dir, then SIGHUP)"
            )
    for listing, discovered in s.get("listings", {}).items():
        lines.append(f"  {listing}: {discovered} products discovered")
    lines.extend(render_storage(report.get("storage", {})))
    return "\n".join(lines)


def render_storage(storage: dict[str, Any]) -> list[str]:
    """The storage section of ``render_text``."""
    lines: list[str] = []
    if storage.get("failed"):
        lines.append(f"storage at {storage.get('proxy', '?')}: reachable but failed: {storage['failed']}")
    elif storage.get("reachable"):
        backend = storage["backend"]
        # -1: the backend did not answer its row counts in time (down, or slow)
        counts = (
            f"{storage['posts']} posts, {storage['reviews']} reviews"
            if storage["posts"] >= 0 and storage["reviews"] >= 0
            else "row counts unknown (the backend did not answer them)"
        )
        lines.append(f"storage ({backend}): {counts}, spool depth {storage['spool_depth']}")
        if storage.get("entries_set_aside", 0) > 0:  # -1: the spool file could not be counted
            lines.append(
                f"  {storage['entries_set_aside']} spool entries ({storage.get('records_set_aside', '?')} records) "
                "set aside as unreadable in the spool file's table unreadable: repair or drop them (docs/STORAGE.md, "
                '"Entries set aside")'
            )
        if storage.get("backend_up") is False:
            error = f" ({shown(storage['last_backend_error'])})" if storage.get("last_backend_error") else ""
            lines.append(
                f"  backend {backend} DOWN: its writes fail{error}, or it is back and the spool is still draining "
                "into it; records are kept in the spool and written once it is back (docs/DEPLOY.md: "
                "IcecrawlerStorageBackendDown)"
            )
    else:
        tried = f" at {storage['proxy']} ({storage.get('error', 'no answer')})" if storage.get("proxy") else ""
        lines.append(f"storage: not reachable{tried}")
    return lines


class Command(BaseCommand):
    summary = "show queue depths, rates, hosts, accounts and listings (or one task with --task)"
    description = (
        "Ask the scheduler (Scheduler.Proxy, default the local one; or every shard listed in "
        "Scheduler.Proxies, added up) and, if it answers, the storage "
        "server (Storage.Proxy) for their state. --task ID prints one task's metadata and its recent "
        "period/distance history. --json prints machine-readable output."
    )
    takes_ice_args = True

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--json", action="store_true", help="print JSON")
        parser.add_argument("--task", metavar="ID", help="show one task, e.g. reviews:jd:100012043978")

    def run(self, args: argparse.Namespace, settings: Settings, ice_args: list[str]) -> int:
        with rpc.communicator(ice_args) as comm:
            if args.task:
                proxies = rpc.scheduler_proxies(comm)
                owner = ShardMap.from_settings(settings, len(proxies)).of_task(args.task)
                with rpc.remote_calls("scheduler", proxies[owner]):
                    info = json.loads(proxies[owner].taskInfo(args.task))
                print(json.dumps(info, indent=2 if not args.json else None, ensure_ascii=False))
                return 0
            report = {"scheduler": scheduler_section(comm), "storage": storage_section(comm)}
        print(json.dumps(report, ensure_ascii=False) if args.json else render_text(report))
        return 0
