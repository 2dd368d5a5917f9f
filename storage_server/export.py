"""Streaming export of stored records (``icecrawler export``) for downstream analysis.

Reads straight from the backend (embedded SQLite or HBase), in row-key order, one row at a time: memory stays
flat however big the table is. ``since`` keeps records fetched at or after a time, so a nightly job can export
only what is new; ``owner`` reads one user's posts or one product's reviews, one prefix scan of the row keys
(``schema.owner_prefix``). Progress goes to a callback (the command draws it on stderr); records go to ``out``.

A row that holds no readable record for JSON lines (a post whose ``pictures`` is not a JSON list of URLs: written
by hand into the embedded store, which is a plain SQLite file) is skipped with a warning naming its key in hex, as
the HBase store skips a row without a readable cell, so one such row neither ends the export nor loses the rest.
"""

from __future__ import annotations

import csv
import json
import logging
from collections.abc import Callable, Iterator
from typing import TextIO

from icecrawler.errors import ConfigError
from storage_server.schema import COLUMNS, TABLES, WEIBO, Column, Row, owner_prefix, parse_time_ms
from storage_server.stores import RecordStore

__all__ = ["FORMATS", "export", "owner_key_prefix", "rows_since"]

log = logging.getLogger(__name__)

FORMATS = ("jsonl", "csv")
#: Unreadable rows named one by one in an export's warnings; the rest are only counted.
MAX_SKIP_WARNINGS = 10


def owner_key_prefix(table: str, owner: str) -> bytes:
    """The row-key prefix of ``owner``'s records (``--owner``: a user id for weibo, a product id for review)."""
    if table not in TABLES:
        raise ConfigError(f"--table must be one of {', '.join(TABLES)}, not {table!r}")
    if not owner:
        raise ConfigError("--owner is empty")
    if table == WEIBO and not (owner.isascii() and owner.isdigit() and int(owner) < 2**64):
        raise ConfigError(f"--owner {owner!r}: a weibo owner is a user id (digits)")
    if len(owner.encode()) > 255:
        raise ConfigError(f"--owner {owner[:40]!r}...: longer than a product id can be (255 bytes)")
    return owner_prefix(table, owner)


def rows_since(store: RecordStore, table: str, since: str = "", owner: str = "") -> Iterator[dict[str, Column]]:
    """The table's records as column dicts, keeping those with ``fetched_at >= since`` when ``since`` is set, and
    only those of ``owner`` (a user id for weibo, a product id for review) when it is set."""
    return (row.columns for row in _rows_since(store, table, since, owner))


def _rows_since(store: RecordStore, table: str, since: str, owner: str) -> Iterator[Row]:
    """``rows_since`` with the row keys (for the warnings about rows skipped)."""
    if table not in TABLES:
        raise ConfigError(f"--table must be one of {', '.join(TABLES)}, not {table!r}")
    prefix = owner_key_prefix(table, owner) if owner else b""
    since_ms = None
    if since:
        try:
            since_ms = parse_time_ms(since)
        except ValueError as exc:
            raise ConfigError(f"--since {since!r}: {exc}") from exc
    for row in store.scan(table, prefix):
        if since_ms is not None:
            fetched = str(row.columns.get("fetched_at", ""))
            try:
                if not fetched or parse_time_ms(fetched) < since_ms:
                    continue
            except ValueError:
                continue
        yield row


def export(
    store: RecordStore,
    table: str,
    out: TextIO,
    fmt: str = "jsonl",
    since: str = "",
    progress: Callable[[int], None] | None = None,
    owner: str = "",
) -> int:
    """Write the records to ``out`` as JSON lines or CSV (header first). Returns how many were written.

    In both formats ids stay exact integers (JSON numbers are written from Python ints, never floats); JSON keeps
    the ``pictures`` list as a list, CSV keeps it as its JSON text.
    """
    if fmt not in FORMATS:
        raise ConfigError(f"--format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    names = [name for name, _ in COLUMNS[table]]
    writer = csv.writer(out) if fmt == "csv" else None
    if writer is not None:
        writer.writerow(names)
    written = skipped = 0
    for row in _rows_since(store, table, since, owner):
        columns = row.columns
        if writer is not None:
            writer.writerow([columns[name] for name in names])
        else:
            record: dict[str, object] = dict(columns)
            if table == WEIBO:
                pictures = _pictures(columns["pictures"])
                if pictures is None:
                    skipped += 1
                    if skipped <= MAX_SKIP_WARNINGS:
                        log.warning(
                            "%s: row %s skipped: pictures is not a JSON list of URLs: %r",
                            table,
                            row.key.hex(),
                            str(columns["pictures"])[:60],
                        )
                    continue
                record["pictures"] = pictures
                record["pinned"] = bool(columns["pinned"])
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
        written += 1
        if progress is not None and written % 1000 == 0:
            progress(written)
    if skipped:
        log.warning("%s: %d unreadable row(s) skipped (left as they are in the store)", table, skipped)
    if progress is not None:
        progress(written)
    return written


def _pictures(text: Column) -> list[str] | None:
    """A post's ``pictures`` column as the list of URLs it holds (None when it holds none: not a JSON list of
    strings)."""
    try:
        pictures = json.loads(str(text) or "[]")
    except ValueError:  # JSONDecodeError
        return None
    if not isinstance(pictures, list) or not all(isinstance(url, str) for url in pictures):
        return None
    return pictures
