"""How much of a call a client's records and reports take, so that each storage write and each ``putUsers``
stays under the request limit the daemon derives from its batch limits (``icecrawler.limits``): a call over it
is refused whole. Estimates err high: text at 4 bytes a character unless it is all ASCII (UTF-8 takes up to 4: 3
for CJK, 4 for an emoji; counting 3 put writes of emoji a third over the limit), a length prefix each.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from icecrawler.models import Post, Report, Review

__all__ = ["fitting", "record_wire_bytes", "report_wire_bytes", "text_wire_bytes"]


def text_wire_bytes(texts: Iterable[str]) -> int:
    """An upper estimate of ``texts`` on the wire, each with its length prefix (O(1) a text: ``fitting`` runs
    over a growing chunk for every result added to it)."""
    return sum((len(text) if text.isascii() else 4 * len(text)) + 5 for text in texts)


def record_wire_bytes(record: Post | Review) -> int:
    """An upper estimate of a record in a storage write: its text fields, plus its numbers."""
    texts = [value for value in vars(record).values() if isinstance(value, str)]
    if isinstance(record, Post):
        texts.extend(record.pictures)
    return 64 + text_wire_bytes(texts)


def report_wire_bytes(report: Report) -> int:
    """An upper estimate of a report in a ``putUsers``: its texts, 8 bytes an item time, its discovered ids."""
    texts = (report.task_id, report.lease_token, report.error_class, report.cursor, report.account_cookies)
    return 76 + text_wire_bytes(texts) + 8 * len(report.new_item_times_ms) + text_wire_bytes(report.discovered_ids)


def fitting[T](items: Sequence[T], most: int, most_bytes: int, size: Callable[[T], int]) -> int:
    """How many of ``items`` from the first make the next call: at most ``most`` and, with ``most_bytes`` (0: no
    limit), no more estimated bytes than that; always at least one, so an oversized item is sent alone and
    refused alone."""
    end = min(len(items), most)
    if not most_bytes:
        return end
    total = 0
    for count in range(end):
        total += size(items[count])
        if total > most_bytes:
            return max(1, count)
    return end
