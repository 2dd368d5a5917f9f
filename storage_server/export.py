"""Streaming export of stored records (``icecrawler export``) for downstream analysis.

Reads straight from the backend (embedded SQLite or HBase), in row-key order, one row at a time: memory stays
flat however big the table is. ``since`` keeps records fetched at or after a time, so a nightly job can export
only what is new; ``owner`` reads one user's posts or one product's reviews, one prefix scan of the row keys
(``schema.owner_prefix``). Progress goes to a callback (the command draws it on stderr); records go to ``out``.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterator
from typing import TextIO

from icecrawler.errors import ConfigError
from storage_server.schema import COLUMNS, TABLES, WEIBO, Column, owner_prefix, parse_time_ms
from storage_server.stores import RecordStore

__all__ = ["FORMATS", "export", "owner_key_prefix", "rows_since"]

FORMATS = ("jsonl", "csv")


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
        yield row.columns


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
    written = 0
    for columns in rows_since(store, table, since, owner):
        if writer is not None:
            writer.writerow([columns[name] for name in names])
        else:
            record: dict[str, object] = dict(columns)
            if table == "weibo":
                record["pictures"] = json.loads(str(columns["pictures"]) or "[]")
                record["pinned"] = bool(columns["pinned"])
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
        written += 1
        if progress is not None and written % 1000 == 0:
            progress(written)
    if progress is not None:
        progress(written)
    return written
