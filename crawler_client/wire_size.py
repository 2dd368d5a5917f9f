"""How much of a call a client's records and reports take, so that each storage write and each ``putUsers``
stays under the request limit the daemon derives from its batch limits (``icecrawler.limits``): a call over it
is refused whole. Estimates err high: text at 4 bytes a character unless it is all ASCII (UTF-8 takes up to 4: 3
for CJK, 4 for an emoji; counting 3 put writes of emoji a third over the limit), a length prefix each. That
is cheap enough to run over a growing chunk for every result, but far over for mostly-ASCII text with one accent,
so a record is dropped as too large only on its exact size (``record_exact_bytes``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from icecrawler.models import Post, Report, Review

__all__ = ["fitting", "record_exact_bytes", "record_wire_bytes", "report_wire_bytes", "text_wire_bytes"]

#: Room for a record's numbers (a Post's are 42 bytes with its pictures' sequence size), in both sizes.
RECORD_FIXED_BYTES = 64


def text_wire_bytes(texts: Iterable[str]) -> int:
    """An upper estimate of ``texts`` on the wire, each with its length prefix (O(1) a text: ``fitting`` runs
    over a growing chunk for every result added to it)."""
    return sum((len(text) if text.isascii() else 4 * len(text)) + 5 for text in texts)


def _record_texts(record: Post | Review) -> list[str]:
    texts = [value for value in vars(record).values() if isinstance(value, str)]
    if isinstance(record, Post):
        texts.extend(record.pictures)
    return texts


def record_wire_bytes(record: Post | Review) -> int:
    """An upper estimate of a record in a storage write: its text fields, plus its numbers."""
    return RECORD_FIXED_BYTES + text_wire_bytes(_record_texts(record))


def record_exact_bytes(record: Post | Review) -> int:
    """What a record takes in a storage write, its numbers counted as in ``record_wire_bytes``: each text's UTF-8
    bytes and its Ice size (1 byte under 255, else 5). Never more than the estimate; it encodes every text, so it
    is for the one decision that must be right (dropping a record), not for cutting writes."""
    total = RECORD_FIXED_BYTES
    for text in _record_texts(record):
        size = len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
        total += size + (1 if size < 255 else 5)
    return total


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
