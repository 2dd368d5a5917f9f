"""``icecrawler export``: stream stored posts or reviews as JSON lines or CSV, with progress on stderr."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from icecrawler.durable import replaced_whole
from icecrawler.errors import ConfigError, ServiceError
from icecrawler.settings import Settings
from icecrawler_cli.commands import BaseCommand

if TYPE_CHECKING:
    from storage_server.stores import RecordStore


class Command(BaseCommand):
    summary = "export stored posts or reviews (JSON lines or CSV) from the embedded store or HBase"
    description = (
        "Reads the backend named by storage.backend directly (no storage server needed), in row-key order\n"
        "(one user's / product's records together, newest first), and streams to stdout or --output.\n\n"
        "  icecrawler export --table weibo > weibo.jsonl\n"
        "  icecrawler export --table review --format csv --since 2024-05-01T00:00:00+08:00 -o reviews.csv\n"
        "  icecrawler export --table weibo --owner 1669879400   # one user's posts\n"
        "  icecrawler export --table weibo --set storage.backend=hbase"
    )

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        add_table_and_owner(parser, "only one user's posts (weibo: the uid) or one product's reviews (review: the id)")
        parser.add_argument(
            "--format",
            default="jsonl",
            choices=["jsonl", "csv"],
            dest="fmt",
            help="jsonl: one JSON object per record; csv: a header row, then one row per record (default: %(default)s)",
        )
        parser.add_argument(
            "--since", default="", metavar="TIME", help="only records fetched at or after TIME (ISO 8601 with offset)"
        )
        parser.add_argument(
            "-o",
            "--output",
            default="-",
            help="output file (default: stdout); written as FILE.partial and renamed over FILE when complete, so "
            "FILE never holds part of an export",
        )
        parser.add_argument("--no-progress", action="store_true", help="no progress line on stderr")

    def run(self, args: argparse.Namespace, settings: Settings, ice_args: list[str]) -> int:
        from storage_server.export import export

        store = open_existing_store(settings, "export")
        progress = Progress(f"export {args.table}", sys.stderr, enabled=not args.no_progress)
        try:
            if args.output == "-":
                count = export(store, args.table, sys.stdout, args.fmt, args.since, progress.update, args.owner)
            else:
                with replaced_whole(Path(args.output)) as out:
                    count = export(store, args.table, out, args.fmt, args.since, progress.update, args.owner)
        except OSError as exc:
            if exc.filename or isinstance(exc, BrokenPipeError):  # named already; `| head` ends as a pipe's writer does
                raise
            # A failed write (a full disk) names no file: say which one, and what became of the previous export.
            where = "standard output" if args.output == "-" else f"{args.output} (left as it was)"
            raise ServiceError(f"cannot write the export to {where}: {exc.strerror or exc}") from exc
        finally:
            store.close()
        progress.done(count)
        return 0


def add_table_and_owner(parser: argparse.ArgumentParser, owner_help: str, owner_required: bool = False) -> None:
    """``--table`` and ``--owner``, as ``export`` and ``purge`` take them."""
    parser.add_argument(
        "--table",
        required=True,
        type=_table_name,
        choices=["weibo", "review"],
        help="weibo (posts of every Weibo source) or review (reviews of every shop); "
        "the task kinds' names user/reviews are taken too",
    )
    parser.add_argument("--owner", default="", required=owner_required, metavar="ID", help=owner_help)


#: Task-kind names (what seed, tasks and status print) and the plural "posts", for the table their items go to.
_TABLE_OF_KIND = {"reviews": "review", "user": "weibo", "posts": "weibo"}


def _table_name(text: str) -> str:
    return _TABLE_OF_KIND.get(text, text)


def open_existing_store(settings: Settings, doing: str) -> RecordStore:
    """The backend named by ``storage.backend``, read and written directly. An embedded store that is not there is
    an error: opening it would create an empty one, and an export of nothing looks like success."""
    from storage_server.service import build_store

    path = Path(settings.get_str("storage.embedded.path"))
    if settings.get_str("storage.backend") == "embedded" and not path.is_file():
        raise ConfigError(f"no store at {path} (storage.embedded.path); nothing to {doing}")
    return build_store(settings)


class Progress:
    """A progress line on ``stream``: redrawn in place (carriage return) on a terminal; in a log or a pipe, a
    plain line at most every ``every_s`` seconds, so a log holds no carriage returns and no flood."""

    def __init__(self, label: str, stream: TextIO, *, enabled: bool = True, every_s: float = 10.0) -> None:
        self.label = label
        self.stream = stream
        self.enabled = enabled
        self.tty = stream.isatty()
        self.every_s = every_s
        self.started = self.last = time.monotonic()

    def update(self, count: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        rate = count / max(now - self.started, 1e-6)
        if self.tty:
            print(f"\r{self.label}: {count:,} records ({rate:,.0f}/s)", end="", file=self.stream, flush=True)
        elif now - self.last >= self.every_s:
            print(f"{self.label}: {count:,} records ({rate:,.0f}/s)", file=self.stream, flush=True)
            self.last = now

    def done(self, count: int) -> None:
        if self.enabled:
            print(f"{chr(13) if self.tty else ''}{self.label}: {count:,} records, done", file=self.stream)
