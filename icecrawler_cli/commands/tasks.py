"""``icecrawler tasks``: list the scheduler's tasks (id, queue, when due, period, last outcome), a page at a time."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from typing import Any

from icecrawler import rpc
from icecrawler.errors import InvalidArgumentError, shown
from icecrawler.outcomes import Outcome
from icecrawler.settings import Settings
from icecrawler_cli.commands import BaseCommand

#: Tasks asked for per call (at most the scheduler's batch limit, 1000 by default).
PAGE = 500
#: What --outcome accepts: the names a report's outcome has in ``lastOutcome``.
OUTCOME_NAMES = [outcome.value for outcome in Outcome]


def pages(proxy: Any, prefix: str, limit: int, page: int = PAGE) -> Iterator[dict[str, Any]]:
    """Up to ``limit`` tasks of one scheduler (shard) with ids starting with ``prefix``, in id order. A scheduler
    whose ``scheduler.batch_limit`` is below ``page`` refuses the page (BatchTooLarge): it is halved until taken."""
    after = ""
    left = limit
    while left > 0:
        try:
            with rpc.remote_calls("scheduler", proxy):
                rows = json.loads(proxy.listTasks(prefix, after, min(page, left)))
        except InvalidArgumentError as exc:
            if exc.code != "BatchTooLarge" or min(page, left) == 1:
                raise
            page = min(page, left) // 2
            continue
        yield from rows
        if len(rows) < min(page, left):
            return
        left -= len(rows)
        after = rows[-1]["id"]


def render(row: dict[str, Any]) -> str:
    when = (
        f"due in {row['dueInS']:.0f}s"
        if row["state"] == "pending"
        else f"lease ends in {row.get('leaseLeftS', 0):.0f}s"
    )
    last = row.get("lastOutcome") or "never crawled"
    if row.get("lastError"):
        last += f" ({shown(row['lastError'])})"  # a report's error class: a client's text, maybe a site's
    return f"{row['id']}  {row['state']}  {when}  period {row['periodS']:.0f}s  attempts {row['attempts']}  last {last}"


class Command(BaseCommand):
    summary = "list tasks (id, pending or in flight, when due, period, last outcome), optionally by id prefix"
    description = (
        "Ask the scheduler (Scheduler.Proxy, or every shard in Scheduler.Proxies) for its tasks in id "
        "order. Examples:\n\n  icecrawler tasks\n  icecrawler tasks --prefix reviews:jd: --limit 50\n"
        "  icecrawler tasks --json > tasks.jsonl\n"
        "  icecrawler tasks --outcome NotFound --ids | icecrawler remove --file -   # targets that are gone"
    )
    takes_ice_args = True

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--prefix", default="", help="only ids starting with this, e.g. user:weibo_pc:")
        parser.add_argument("--limit", type=int, default=1000, help="most tasks to list (default 1000)")
        parser.add_argument(
            "--outcome",
            choices=OUTCOME_NAMES,
            help="only tasks whose last crawl ended so (NotFound: the target is gone, or never was)",
        )
        shape = parser.add_mutually_exclusive_group()
        shape.add_argument("--json", action="store_true", help="one JSON object per line")
        shape.add_argument(
            "--ids", action="store_true", help="task ids only, one per line (what icecrawler remove --file reads)"
        )

    def run(self, args: argparse.Namespace, settings: Settings, ice_args: list[str]) -> int:
        if args.limit < 1:
            print("icecrawler tasks: error: --limit must be at least 1", file=sys.stderr)
            return 2
        shown = 0
        more = False  # a task past --limit matches too: said on stderr (a pipe to remove would miss it silently)
        with rpc.communicator(ice_args) as comm:
            for proxy in rpc.scheduler_proxies(comm):
                # With --outcome every task is read (a page at a time) and only the matching ones count; one task
                # more than --limit is asked for, to know whether the list was cut.
                for row in pages(proxy, args.prefix, args.limit + 1 - shown if args.outcome is None else 2**62):
                    if args.outcome is not None and row.get("lastOutcome") != args.outcome:
                        continue
                    if shown >= args.limit:
                        more = True
                        break
                    print(row["id"] if args.ids else json.dumps(row, ensure_ascii=False) if args.json else render(row))
                    shown += 1
                if more:
                    break
        if not (args.json or args.ids):
            print(f"{shown} task(s)")
        if more:
            print(
                f"icecrawler tasks: stopped at --limit {args.limit}; more tasks match (raise --limit to list them)",
                file=sys.stderr,
            )
        return 0
