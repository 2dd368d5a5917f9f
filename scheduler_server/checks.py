"""Argument checks of the scheduler core's calls: each raises InvalidArgumentError naming the field (and batch
index) at fault, before the call is queued, so a bad call changes nothing and costs no transaction.

Pure functions of the arguments and the config; the report check has a fast path for the common case, since it
runs for every putUser."""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any

from icecrawler.errors import InvalidArgumentError, is_control, quote
from icecrawler.models import (
    MAX_ACCOUNT_COOKIES,
    MAX_DISCOVERED_IDS,
    MAX_ITEM_TIMES,
    Outcome,
    Report,
    TaskKind,
    account_cookies_fit,
    make_task_id,
    split_task_id,
)
from icecrawler.resume import GAP_PREFIX, decode_cursor, is_gap
from icecrawler.shards import ShardMap, shard_of_host
from scheduler_server.config import SchedulerConfig

__all__ = [
    "MAX_CURSOR",
    "MAX_HOLD_S",
    "MAX_TEXT",
    "check_batch",
    "check_discovered",
    "check_hold_args",
    "check_lease_args",
    "check_lease_token",
    "check_printable",
    "check_release_args",
    "check_reports",
    "check_task_id",
    "control_char_at",
    "invalid_field",
    "parse_target_ids",
]

MAX_COUNT = 10_000_000
MAX_TEXT = 256
#: A cursor may hold an open page-cap gap with its resume request (``icecrawler.resume``).
MAX_CURSOR = 4096

#: A report's numeric fields, picked in C (the fast path of ``check_report``).
_report_numbers = operator.attrgetter(
    "new_items", "window_items", "fetches", "http_status", "newest_item_ms", "fingerprint", "retry_after_s"
)


def invalid_field(message: str, field_name: str, index: int = -1, code: str = "InvalidField") -> InvalidArgumentError:
    return InvalidArgumentError(message, code=code, field=field_name, index=index)


def check_batch(items: Sequence[Any], name: str, limit: int) -> None:
    if not items:
        raise invalid_field(f"{name} is empty", name, code="EmptyBatch")
    if len(items) > limit:
        raise invalid_field(
            f"{name} has {len(items)} entries; the limit (scheduler.batch_limit) is {limit}", name, code="BatchTooLarge"
        )


def check_task_id(task_id: str, field_name: str, index: int) -> None:
    try:
        split_task_id(task_id)
    except InvalidArgumentError as exc:
        raise invalid_field(str(exc), field_name, index, code="InvalidId") from exc


def check_range(value: float, low: float, high: float, field_name: str, index: int) -> None:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and low <= value <= high):
        bounds = f"is not a finite number >= {low}" if high == math.inf else f"is outside [{low}, {high}]"
        raise invalid_field(f"{field_name}={value!r} {bounds}", field_name, index)


def parse_target_ids(
    ids: Sequence[str], kind: TaskKind, config: SchedulerConfig, shard_map: ShardMap
) -> list[tuple[str, str, str]]:
    """``"<source>:<target>"`` ids (of ``addUsers`` and ``removeUsers``) as ``(task id, source, target)``; every
    id must be valid and belong to this shard."""
    check_batch(ids, "ids", config.batch_limit)
    task_ids: list[tuple[str, str, str]] = []
    for index, text in enumerate(ids):
        source, sep, target = str(text).partition(":")
        try:
            if not sep:
                raise InvalidArgumentError(f"{quote(text)} is not <source>:<target>")
            task_ids.append((make_task_id(kind, source, target), source, target))
        except InvalidArgumentError as exc:
            raise invalid_field(str(exc), f"ids[{index}]", index, code="InvalidId") from exc
        if config.shards > 1 and shard_map.of_source(source) != config.shard:
            raise invalid_field(
                f"{quote(text)} belongs to scheduler shard {shard_map.of_source(source)} of "
                f"{config.shards} (its host {config.hosts[source]}), not to this shard "
                f"{config.shard}",
                f"ids[{index}]",
                index,
                code="WrongShard",
            )
    return task_ids


#: The longest hold an operator may put on a host (a year: longer is a removal, ``icecrawler remove``).
MAX_HOLD_S = 366 * 86400.0


def check_hold_args(host: str, seconds: float, reason: str, config: SchedulerConfig) -> None:
    """A host this scheduler (shard) crawls, a hold of 0 (lift) to MAX_HOLD_S seconds, a short reason."""
    hosts = sorted(set(config.hosts.values()))
    if host not in hosts:
        raise invalid_field(f"{quote(host)} is not a host of any source (known: {', '.join(hosts)})", "host")
    check_range(seconds, 0.0, MAX_HOLD_S, "seconds", -1)
    if len(reason) > MAX_TEXT:
        raise invalid_field(f"reason is longer than {MAX_TEXT} characters", "reason")
    check_printable(reason, "reason")
    if config.shards > 1 and shard_of_host(host, config.shards) != config.shard:
        raise invalid_field(
            f"{quote(host)} belongs to scheduler shard {shard_of_host(host, config.shards)} of {config.shards}, "
            f"not to this shard {config.shard}",
            "host",
            code="WrongShard",
        )


def control_char_at(text: str) -> int | None:
    """The offset of the first control character (Unicode category Cc: NUL, tab, newline, ESC, DEL, C1) in
    ``text``, or None. A name or reason with one would be stored, and printed by ``icecrawler status``, as it is."""
    if text.isprintable():  # in C; printable text has no control character
        return None
    return next((at for at, char in enumerate(text) if is_control(char)), None)


def check_printable(text: str, field_name: str) -> None:
    at = control_char_at(text)
    if at is not None:
        raise invalid_field(f"{field_name} holds a control character ({text[at]!r} at offset {at})", field_name)


def check_lease_args(worker_id: str, max_tasks: int, batch_limit: int) -> None:
    if not worker_id or len(worker_id) > MAX_TEXT:
        raise invalid_field(f"workerId must be 1-{MAX_TEXT} characters", "workerId")
    check_printable(worker_id, "workerId")
    if max_tasks < 1:
        raise invalid_field(f"max must be >= 1, got {max_tasks}", "max")
    if max_tasks > batch_limit:
        raise invalid_field(f"max={max_tasks} exceeds scheduler.batch_limit={batch_limit}", "max", code="BatchTooLarge")


def check_lease_token(token: str, where: str, index: int) -> None:
    """A report's or release's lease token: 1-256 characters (the scheduler's own are 16)."""
    if not token or len(token) > MAX_TEXT:
        raise invalid_field(f"leaseToken must be 1-{MAX_TEXT} characters", f"{where}.leaseToken", index)


def check_release_args(leases: Sequence[tuple[str, str]], batch_limit: int) -> None:
    """Checked as ``check_reports`` checks a batch of reports: each id and token, and no task named twice."""
    check_batch(leases, "leases", batch_limit)
    seen: set[str] = set()
    for index, (task_id, token) in enumerate(leases):
        check_task_id(task_id, f"leases[{index}].taskId", index)
        check_lease_token(token, f"leases[{index}]", index)
        if task_id in seen:
            raise invalid_field(f"task {task_id} is named twice in one batch", f"leases[{index}].taskId", index)
        seen.add(task_id)


def check_reports(reports: Sequence[Report], config: SchedulerConfig) -> None:
    check_batch(reports, "reports", config.batch_limit)
    seen: set[str] = set()
    for index, item in enumerate(reports):
        check_report(item, index)
        if item.task_id in seen:
            raise invalid_field(f"task {item.task_id} reported twice in one batch", f"reports[{index}].taskId", index)
        seen.add(item.task_id)


def check_report(item: Report, index: int) -> None:
    where = f"reports[{index}]"
    check_task_id(item.task_id, f"{where}.taskId", index)
    check_lease_token(item.lease_token, where, index)
    if not isinstance(item.outcome, Outcome):
        raise invalid_field(f"unknown outcome {item.outcome!r}", f"{where}.outcome", index)
    # A gap cursor is read back by status --task and by the client's walk: only one that reads is kept (an
    # over-long one is refused for its length below). Only an Ok report's cursor is kept; a failed crawl echoes the
    # task's stored one, which an older scheduler may have taken unread: refused, the failure would never count.
    if (
        item.outcome is Outcome.Ok
        and is_gap(item.cursor)
        and len(item.cursor) <= MAX_CURSOR
        and decode_cursor(item.cursor)[1] is None
    ):
        raise invalid_field(
            f"cursor {quote(item.cursor)} starts like a page-cap gap ({GAP_PREFIX}) but does not read as one",
            f"{where}.cursor",
            index,
        )
    # The common case in one expression (plain ints in range, no retry hint); anything else takes the
    # field-by-field checks below, which accept the same values and name the first bad field.
    new, window, fetches, status, newest, fingerprint, retry = _report_numbers(item)
    if (
        type(new) is int
        and type(window) is int
        and type(fetches) is int
        and type(status) is int
        and type(newest) is int
        and type(fingerprint) is int
        and 0 <= new <= MAX_COUNT
        and 0 <= window <= MAX_COUNT
        and 0 <= fetches <= MAX_COUNT
        and 0 <= status <= 999
        and 0 <= newest <= 2**62
        and 0 <= fingerprint <= 2**64 - 1
        and (type(retry) is float or type(retry) is int)
        and 0 <= retry < math.inf
        and len(item.cursor) <= MAX_CURSOR
        and len(item.error_class) <= MAX_TEXT
        and not item.new_item_times_ms
        and not item.discovered_ids
        and not item.account_cookies
    ):
        return
    for name, value, high in (
        ("newItems", item.new_items, MAX_COUNT),
        ("windowItems", item.window_items, MAX_COUNT),
        ("fetches", item.fetches, MAX_COUNT),
        ("httpStatus", item.http_status, 999),
        ("newestItemMs", item.newest_item_ms, 2**62),
        ("fingerprint", item.fingerprint, 2**64 - 1),
        # A site's wait, any finite number of seconds: the hold it sets is cut to scheduler.max_period_s
        # (``outcomes``), and refusing it would refuse every other report of the batch with it.
        ("retryAfterS", item.retry_after_s, math.inf),
    ):
        check_range(value, 0, high, f"{where}.{name}", index)
    for name, text, limit in (("cursor", item.cursor, MAX_CURSOR), ("errorClass", item.error_class, MAX_TEXT)):
        if len(text) > limit:
            raise invalid_field(f"{name} is longer than {limit} characters", f"{where}.{name}", index)
    times = item.new_item_times_ms
    if len(times) > min(MAX_ITEM_TIMES, max(item.new_items, 0)):
        raise invalid_field(
            f"{len(times)} item times for {item.new_items} new items (at most min(newItems, {MAX_ITEM_TIMES}))",
            f"{where}.newItemTimesMs",
            index,
        )
    for time_ms in times:
        check_range(time_ms, 1, 2**62, f"{where}.newItemTimesMs", index)
    check_discovered(item, where, index)
    cookies = item.account_cookies
    if not account_cookies_fit(cookies):
        # The value is never quoted back: it is a login.
        raise invalid_field(
            f"accountCookies: {len(cookies)} characters (at most {MAX_ACCOUNT_COOKIES}, no control characters)",
            f"{where}.accountCookies",
            index,
        )


def check_discovered(item: Report, where: str, index: int) -> None:
    """A report's discoveries (``scheduler_server.discoveries``): only a Listing task's, at most
    ``MAX_DISCOVERED_IDS``, each a bare target id its source could crawl as ProductReviews."""
    ids = item.discovered_ids
    if not ids:
        return
    field_name = f"{where}.discoveredIds"
    kind, source, _ = split_task_id(item.task_id)
    if kind is not TaskKind.Listing:
        raise invalid_field(
            f"discoveredIds come only with a Listing task's report, not a {kind.name} one", field_name, index
        )
    if len(ids) > MAX_DISCOVERED_IDS:
        raise invalid_field(
            f"{len(ids)} discovered ids; a report carries at most {MAX_DISCOVERED_IDS} (models.MAX_DISCOVERED_IDS)",
            field_name,
            index,
        )
    for number, target in enumerate(ids):
        try:
            if not isinstance(target, str):
                raise InvalidArgumentError(f"a discovered id must be a string, not {type(target).__name__}")
            if ":" in target:
                raise InvalidArgumentError(f"{quote(target)}: discovered ids are bare, without the <source>: prefix")
            make_task_id(TaskKind.ProductReviews, source, target)
        except InvalidArgumentError as exc:
            raise invalid_field(str(exc), f"{field_name}[{number}]", index, code="InvalidId") from exc
