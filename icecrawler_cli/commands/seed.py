"""``icecrawler seed``: add crawl targets to the scheduler (addUsers). ``icecrawler remove`` is the same command
with the other call (``icecrawler_cli.commands.remove``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import ClassVar

from icecrawler import rpc
from icecrawler.errors import ConfigError, InvalidArgumentError
from icecrawler.models import TaskKind
from icecrawler.settings import Settings
from icecrawler.sourcespec import KIND_NAMES, group_by_kind
from icecrawler_cli.commands import BaseCommand


def read_ids(values: list[str], file: str | None) -> list[str]:
    """Ids from the arguments, then from the file (``-``: standard input; one per line, blank lines and # comments
    skipped)."""
    ids = list(values)
    if file:
        try:
            text = sys.stdin.read() if file == "-" else Path(file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read {file}: {exc}") from exc
        lines = text.splitlines()
        ids += [line.split("#", 1)[0].strip() for line in lines if line.split("#", 1)[0].strip()]
    return ids


class Command(BaseCommand):
    summary = "add targets to the scheduler: weibo_mobile:1669879400 jd:100012043978 ..."
    description = (
        "Add crawl targets as <source>:<target> ids. The kind follows from the source (weibo_* = user "
        "timelines, jd/ecshop = product reviews) unless --kind is given or the id is a task id as icecrawler "
        "tasks prints it (<kind>:<source>:<target>); --listing SOURCE:CATEGORY "
        "adds listing pages that discover products. Known ids are ignored. The scheduler is found "
        "through the Scheduler.Proxy Ice property (default: the local scheduler), or its shards "
        "through Scheduler.Proxies; each id goes to the shard of its host."
    )
    takes_ice_args = True
    #: The gateway call (``TargetsGateway.add_targets``) and what its counts are, for the summary lines.
    call: ClassVar[str] = "add_targets"
    counted: ClassVar[str] = "new"
    #: What --listing does, for its help.
    listing_help: ClassVar[str] = "add a listing task (repeatable)"

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "ids",
            nargs="*",
            metavar="SOURCE:TARGET",
            help="target ids, e.g. weibo_web:1669879400 jd:100012043978, or task ids as icecrawler tasks prints them "
            "(reviews:jd:100012043978); `icecrawler sources` lists the sources",
        )
        parser.add_argument("--kind", choices=sorted(KIND_NAMES), help="task kind for every id")
        parser.add_argument("--file", help="read more ids from FILE (- for standard input), one per line")
        parser.add_argument("--listing", action="append", default=[], metavar="SOURCE:CATEGORY", help=self.listing_help)

    def run(self, args: argparse.Namespace, settings: Settings, ice_args: list[str]) -> int:
        groups = group_by_kind(read_ids(args.ids, args.file), KIND_NAMES[args.kind] if args.kind else None)
        if args.listing:
            groups.setdefault(TaskKind.Listing, []).extend(args.listing)
        if not groups:
            raise ConfigError(f"nothing to {args.command}: give ids, --file or --listing")
        from crawler_client.gateways import per_kind, scheduler_gateway

        with rpc.communicator(ice_args) as comm:
            call = getattr(scheduler_gateway(comm, settings), self.call)
            try:
                counts = per_kind(call, groups, settings.get_int("scheduler.batch_limit"))
            except InvalidArgumentError as exc:
                if not exc.field.startswith("ids["):
                    raise
                # Said by the scheduler's process, which may lack a source this one has (ICECRAWLER_SOURCE_MODULES).
                raise ConfigError(f"the scheduler refused the ids: {exc}") from exc
        for kind, ids in groups.items():
            print(f"{kind.value}: {counts[kind]} {self.counted} of {len(ids)}")
        return 0
