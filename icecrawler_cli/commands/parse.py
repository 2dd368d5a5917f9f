"""``icecrawler parse``: run one source's parser over a saved response and print what it found.

Prints one JSON line per item, then a summary line
``{"summary": true, "items": N, "next": URL|null, "total_pages": M|null, "outcome": "Ok"|class, ...}``.
A classified page (ban, login wall, busy, not found) is a valid answer: exit 0. A body the parser cannot
make sense of (``ParseError``) prints the summary and exits 1; unknown sources and unreadable files exit 2.

What the file was fetched for is sniffed where the bytes tell (m.weibo.cn's containerid carries the uid, a
post's ``user.id`` names the timeline's owner, a getIndex answer with ``userInfo`` is a profile, the mbloglist
chunk with the pager is the last of its page, ECSHOP JSON is a ``comment.php`` page, a goods list is a
listing: each source reads its own answers, ``saved_kind``/``saved_target``/``saved_request`` in
``crawler_client.sources``); ``--kind``, ``--target``, ``--page`` and ``--chunk`` override the guesses. Source
options come from the settings (``--set sources.jd.endpoint=api``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from datetime import datetime
from pathlib import Path
from urllib.parse import urlencode

from crawler_client.sources import (
    SOURCES,
    DeclaredSource,
    FetchedPage,
    PageRequest,
    ParsedPage,
    get_source,
    source_options,
)
from icecrawler.clock import BEIJING
from icecrawler.errors import ConfigError, FetchError, ParseError
from icecrawler.models import Task, TaskKind, make_task_id
from icecrawler.settings import Settings
from icecrawler_cli.commands import BaseCommand

#: Base URL used for the request the file is assumed to answer (only the path and query matter).
SNIFF_BASE = "http://saved.invalid"


class Command(BaseCommand):
    summary = "parse a saved response with one source's parser; print items and paging as JSON lines"

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("file", help="the saved response body (raw bytes)")
        parser.add_argument("--source", required=True, help=f"one of: {', '.join(sorted(SOURCES))}")
        parser.add_argument(
            "--kind",
            choices=[kind.value for kind in TaskKind],
            help="task kind (default: sniffed; ecshop is 'reviews' or 'listing')",
        )
        parser.add_argument("--target", help="uid / product id / category id (default: sniffed, else 0)")
        parser.add_argument("--now", help="fetch time, ISO 8601 (naive = +08:00); default: the current time")
        parser.add_argument("--page", type=int, help="which page the file is (1-based; default: sniffed, else 1)")
        parser.add_argument("--chunk", type=int, choices=(0, 1, 2), help="weibo_pc: which chunk of the page")
        parser.add_argument("--status", type=int, default=200, help="HTTP status it came with (default 200)")
        parser.add_argument("--final-url", default="", help="final URL after redirects, if it differed")
        parser.add_argument("--retry-after", default="", help="the Retry-After header it came with, if any")
        parser.add_argument(
            "--header",
            action="append",
            default=[],
            metavar="'NAME: VALUE'",
            help="a response header it came with (repeatable), e.g. 'x-rp-content: ...'",
        )
        parser.add_argument(
            "--param",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="a task parameter the crawl would carry (repeatable), e.g. domain=100206 for a weibo_pc company "
            "page (its next requests use it), score=3 for jd",
        )

    def run(self, args: argparse.Namespace, settings: Settings, ice_args: list[str]) -> int:
        # A ConfigError or OSError (a missing file) goes to the CLI's one error line, as in every command.
        source = get_source(args.source, source_options(settings, args.source))
        body = Path(args.file).read_bytes()
        now_ms = _now_ms(args.now)
        params = _pairs(args.param, "=", "--param", "KEY=VALUE")
        headers = {"Retry-After": args.retry_after} if args.retry_after else {}
        headers.update(_pairs(args.header, ":", "--header", "'NAME: VALUE'"))
        task = _task(source, args, body)
        task.params.update(params)
        request = _request(source, task, args, body)
        fetched = FetchedPage(url=request.url, status=args.status, headers=headers, body=body, final_url=args.final_url)
        try:
            parsed = source.parse(task, request, fetched, now_ms)
        except FetchError as exc:
            _print(
                {
                    "summary": True,
                    "items": 0,
                    "next": None,
                    "total_pages": None,
                    "outcome": exc.outcome.value,
                    "error_class": exc.error_class,
                    "http_status": exc.http_status,
                    "retry_after_s": exc.retry_after_s,
                    "message": str(exc),
                    "task": task.id,
                }
            )
            return 1 if isinstance(exc, ParseError) else 0
        for item in parsed.items:
            _print(dataclasses.asdict(item) if dataclasses.is_dataclass(item) else {"product_id": item})
        _print(_summary(parsed, task, source))
        return 0


def _print(obj: dict[str, object]) -> None:
    print(json.dumps(obj, ensure_ascii=False, sort_keys=False))


def _pairs(texts: list[str], separator: str, flag: str, form: str) -> dict[str, str]:
    """Repeated ``NAME<separator>VALUE`` flags as a dict; a ValueError names the first malformed one."""
    pairs: dict[str, str] = {}
    for text in texts:
        name, sep, value = text.partition(separator)
        if not sep or not name.strip():
            raise ConfigError(f"{flag} {text!r}: expected {form}")
        pairs[name.strip()] = value.strip()
    return pairs


def _now_ms(text: str | None) -> int:
    if not text:
        return int(time.time() * 1000)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise ConfigError(f"--now {text!r}: expected ISO 8601, e.g. 2024-12-03T08:00:00+08:00 ({exc})") from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=BEIJING)
    return int(moment.timestamp() * 1000)


def _task(source: DeclaredSource, args: argparse.Namespace, body: bytes) -> Task:
    """The task the file is assumed to answer: flags first, then what the bytes say (the source sniffs)."""
    kind = TaskKind(args.kind) if args.kind else source.saved_kind(body)
    target = args.target or source.saved_target(kind, body) or "0"
    try:
        task_id = make_task_id(kind, source.name, target)
    except ValueError:
        task_id = f"{kind.value}:{source.name}:{target}"
    return Task(id=task_id, kind=kind, source=source.name, target=target)


def _request(source: DeclaredSource, task: Task, args: argparse.Namespace, body: bytes) -> PageRequest:
    """The request the file answers: the source shapes it from ``--page``/``--chunk`` or what the bytes say."""
    return source.saved_request(task, SNIFF_BASE, body, args.page or 0, args.chunk)


def _summary(parsed: ParsedPage, task: Task, source: DeclaredSource) -> dict[str, object]:
    nxt = parsed.next_request
    next_url = None
    if nxt is not None:
        query = urlencode(nxt.params)
        next_url = nxt.url + ("&" if "?" in nxt.url else "?") + query if query else nxt.url
    return {
        "summary": True,
        "items": len(parsed.items),
        "next": next_url,
        "total_pages": parsed.total_pages,
        "outcome": "Ok",
        "info": parsed.info,
        "task": task.id,
        "cursor": source.newest_cursor(parsed.items, ""),
    }
