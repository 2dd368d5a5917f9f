"""The record schema: validation, row keys, and the column encoding shared by every backend.

Serialization lives here, apart from the stores (CONTRIBUTING.md, code layout): a store only sees ``Row`` values,
i.e. a row key plus a dict of plain columns (``int`` or ``str``), and decides itself how to put them on disk.

Row key layout (both tables; all integers big-endian)::

    weibo   salt(1) | user_id(8, unsigned) | reversed_created_ms(8) | post_id(8, unsigned)
    review  salt(1) | len(product_id)(1) | product_id(utf-8) | reversed_created_ms(8) | review_id(utf-8)

* ``salt`` is ``crc32(owner id) % 256`` of the owner (the user, or the product): writes spread over 256 key
  ranges, while one owner's rows stay contiguous, so one owner is one prefix scan.
* ``reversed_created_ms`` is ``2**63 - 1 - created_ms``: inside an owner's range the newest item sorts first.
* The item id ends the key, so two items created in the same millisecond never collide.

The key depends only on the record's natural identity (owner, creation time, id), never on when or how often
it was delivered, so a re-delivered batch overwrites its own rows and a write is idempotent. Clients must send a
stable ``createdAt`` for an item (they normalise relative times such as "5分钟前" to an absolute time once).

Ids are Slice ``long``: signed 64-bit on the wire, kept as exact Python ints (never floats) everywhere, so ids
above 2**53 round-trip exactly.
"""

from __future__ import annotations

import json
import operator
import re
import struct
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from icecrawler.errors import InvalidArgumentError
from icecrawler.models import Post, Review
from icecrawler.wire import INT64_MAX, INT64_MIN, lone_surrogate_at

__all__ = [
    "COLUMNS",
    "CORE_POSTS",
    "REVIEW",
    "TABLES",
    "WEIBO",
    "Column",
    "PostFormat",
    "Row",
    "build_rows",
    "checked_post_row",
    "checked_review_row",
    "decode_rows",
    "encode_rows",
    "owner_prefix",
    "parse_time_ms",
    "post_from_row",
    "post_row",
    "review_from_row",
    "review_row",
    "validate_post",
    "validate_review",
]

WEIBO = "weibo"
REVIEW = "review"
TABLES = (WEIBO, REVIEW)

#: A column value as stores see it: exact ints or text (booleans are 0/1, lists are JSON text).
Column = int | str


class Row(NamedTuple):
    """One record as stored: its row key and its columns (a named tuple: built per record on the write path)."""

    key: bytes
    columns: dict[str, Column]


#: Column names and types per table, in a fixed order (SQLite column order, CSV header order).
COLUMNS: dict[str, tuple[tuple[str, type], ...]] = {
    WEIBO: (
        ("id", int),
        ("user_id", int),
        ("user_name", str),
        ("text", str),
        ("html", str),
        ("created_at", str),
        ("reposts", int),
        ("comments", int),
        ("likes", int),
        ("pinned", int),
        ("retweeted_id", int),
        ("pictures", str),
        ("permalink", str),
        ("fetched_at", str),
        ("source", str),
    ),
    REVIEW: (
        ("id", str),
        ("product_id", str),
        ("source", str),
        ("user", str),
        ("content", str),
        ("score", int),
        ("created_at", str),
        ("fetched_at", str),
    ),
}

_MAX_REVERSED = (1 << 63) - 1
#: One encoder for the hot path (json.dumps with options builds a new encoder per call).
_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
_PRODUCT_RE = re.compile(r"[0-9A-Za-z_.-]{1,64}")  # fullmatch only

_MAX_REVIEW_ID = 128
_INT64 = (INT64_MIN, INT64_MAX)
_INT31 = (1 << 31) - 1
_U64 = 0xFFFFFFFFFFFFFFFF
#: json's own string encoder for ensure_ascii=False, in C.
_json_str = json.encoder.encode_basestring  # type: ignore[attr-defined]
#: A weibo row key: salt, user id, reversed creation time, post id (see the module docstring).
_POST_KEY = struct.Struct(">BQQQ")


# --- time ---------------------------------------------------------------------------------------------------


def _iso_time(text: str) -> datetime:
    """``datetime.fromisoformat``, except that a NUL is never part of a time: CPython's parser takes one NUL at the
    end as the end of the text, so "...+08:00\\x00" would be stored as a time that is not ISO 8601."""
    if "\x00" in text:
        raise ValueError(f"Invalid isoformat string: {text[:40]!r}")
    return datetime.fromisoformat(text)


def parse_time_ms(text: str) -> int:
    """Epoch milliseconds of an ISO 8601 time with an explicit offset; ValueError otherwise.

    An offset is required: a naive time would put the same item at a different key on machines in other zones.
    """
    moment = _iso_time(text)
    if moment.tzinfo is None:
        raise ValueError(f"time {text[:40]!r} has no UTC offset (expected e.g. 2024-05-01T12:00:00+08:00)")
    return int(moment.timestamp() * 1000)


# --- validation -----------------------------------------------------------------------------------------------


def _check_int(errors: list[str], name: str, value: Any, minimum: int = 0, maximum: int = _INT64[1]) -> None:
    if type(value) is not int:
        errors.append(f"{name} must be an integer, got {type(value).__name__}")
    elif not minimum <= value <= maximum:
        errors.append(f"{name}={value} outside [{minimum}, {maximum}]")


def _not_utf8(text: str) -> bool:
    return lone_surrogate_at(text) is not None


def _check_text(errors: list[str], name: str, value: Any, max_chars: int) -> None:
    if not isinstance(value, str):
        errors.append(f"{name} must be text, got {type(value).__name__}")
    elif len(value) > max_chars:
        errors.append(f"{name} has {len(value)} chars, over storage.max_text_chars={max_chars}")
    elif _not_utf8(value):
        errors.append(f"{name} holds a lone surrogate (not valid UTF-8)")


def _check_time(errors: list[str], name: str, value: Any, required: bool) -> None:
    if not isinstance(value, str):
        errors.append(f"{name} must be an ISO 8601 string, got {type(value).__name__}")
        return
    if not value and not required:
        return
    try:
        moment = _iso_time(value)
    except ValueError:
        errors.append(f"{name}={value[:40]!r} is not ISO 8601")
        return
    if moment.tzinfo is None:
        errors.append(f"{name}: time {value[:40]!r} has no UTC offset (expected e.g. 2024-05-01T12:00:00+08:00)")


def validate_post(post: Any, max_text_chars: int) -> list[str]:
    """Every reason ``post`` cannot be stored (empty when it is fine)."""
    if not isinstance(post, Post):
        return [f"expected a Post, got {type(post).__name__}"]
    errors: list[str] = []
    _check_int(errors, "id", post.id, minimum=1)
    _check_int(errors, "userId", post.user_id, minimum=1)
    for name, value in (("reposts", post.reposts), ("comments", post.comments), ("likes", post.likes)):
        _check_int(errors, name, value, maximum=(1 << 31) - 1)
    _check_int(errors, "retweetedId", post.retweeted_id)
    if type(post.pinned) is not bool:
        errors.append(f"pinned must be a bool, got {type(post.pinned).__name__}")
    for name, text in (
        ("userName", post.user_name),
        ("text", post.text),
        ("html", post.html),
        ("permalink", post.permalink),
        ("source", post.source),
    ):
        _check_text(errors, name, text, max_chars=max_text_chars)
    if not isinstance(post.pictures, list) or not all(isinstance(url, str) for url in post.pictures):
        errors.append("pictures must be a list of URL strings")
    elif any(map(_not_utf8, post.pictures)):
        errors.append("pictures: a URL holds a lone surrogate (not valid UTF-8)")
    elif sum(len(url) for url in post.pictures) > max_text_chars:
        errors.append(f"pictures total over storage.max_text_chars={max_text_chars}")
    _check_time(errors, "createdAt", post.created_at, required=True)
    _check_time(errors, "fetchedAt", post.fetched_at, required=False)
    return errors


def validate_review(review: Any, max_text_chars: int) -> list[str]:
    """Every reason ``review`` cannot be stored (empty when it is fine)."""
    if not isinstance(review, Review):
        return [f"expected a Review, got {type(review).__name__}"]
    errors: list[str] = []
    if not isinstance(review.id, str) or not review.id:
        errors.append("id is missing")
    elif len(review.id) > _MAX_REVIEW_ID:
        errors.append(f"id longer than {_MAX_REVIEW_ID} chars")
    elif _not_utf8(review.id):
        errors.append("id holds a lone surrogate (not valid UTF-8)")
    if not isinstance(review.product_id, str) or not _PRODUCT_RE.fullmatch(review.product_id):
        errors.append(f"productId {str(review.product_id)[:70]!r} is not 1-64 chars of [0-9A-Za-z_.-]")
    _check_int(errors, "score", review.score, maximum=5)
    for name, text in (("source", review.source), ("user", review.user), ("content", review.content)):
        _check_text(errors, name, text, max_chars=max_text_chars)
    _check_time(errors, "createdAt", review.created_at, required=True)
    _check_time(errors, "fetchedAt", review.fetched_at, required=False)
    return errors


def check_batch_size(records: Sequence[Any], batch_limit: int) -> None:
    """An empty or oversized batch is refused whole, before any record is looked at."""
    if not records:
        raise InvalidArgumentError("empty batch: send at least one record", code="EmptyBatch", field="records")
    if len(records) > batch_limit:
        raise InvalidArgumentError(
            f"batch of {len(records)} records is over storage.batch_limit={batch_limit}; split it",
            code="BatchTooLarge",
            field="records",
        )


def build_rows(
    records: Sequence[Any],
    batch_limit: int,
    build: Callable[[Any], Row | list[str]],
) -> tuple[list[Row], list[tuple[int, str]]]:
    """Split a batch into the rows of its valid records and [(index, reason)] for the others, in one pass:
    ``build`` returns a record's row or the reasons it cannot be stored (``checked_post_row``,
    ``checked_review_row``). An empty or oversized batch raises outright."""
    check_batch_size(records, batch_limit)
    rows: list[Row] = []
    rejected: list[tuple[int, str]] = []
    for index, record in enumerate(records):
        row = build(record)
        if isinstance(row, Row):
            rows.append(row)
        else:
            rejected.append((index, "; ".join(row)))
    return rows, rejected


# --- row keys ---------------------------------------------------------------------------------------------------


def _salt(owner: bytes) -> bytes:
    return bytes([zlib.crc32(owner) & 0xFF])


def _u64(value: int) -> bytes:
    return (value & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "big")


def _owner_bytes(table: str, owner: int | str) -> bytes:
    if table == WEIBO:
        return _u64(int(owner))
    encoded = str(owner).encode()
    return bytes([len(encoded)]) + encoded


def owner_prefix(table: str, owner: int | str) -> bytes:
    """The key prefix of all rows of one owner (a user id for weibo, a product id for review)."""
    owner_bytes = _owner_bytes(table, owner)
    return _salt(owner_bytes) + owner_bytes


def _reversed_ms(created_at: str) -> bytes:
    return (_MAX_REVERSED - parse_time_ms(created_at)).to_bytes(8, "big")


# --- records <-> rows -------------------------------------------------------------------------------------------


def post_row(post: Post) -> Row:
    """The stored form of a validated post."""
    return _post_row(_core_post_values(post), parse_time_ms(post.created_at))


def _post_row(values: tuple[Any, ...], created_ms: int) -> Row:
    (
        pid,
        user,
        user_name,
        text,
        html,
        created,
        reposts,
        comments,
        likes,
        pinned,
        retweeted,
        pictures,
        permalink,
        fetched,
        source,
    ) = values
    owner = (user & _U64).to_bytes(8, "big")
    key = _POST_KEY.pack(zlib.crc32(owner) & 0xFF, user & _U64, _MAX_REVERSED - created_ms, pid & _U64)
    return Row(
        key,
        {
            "id": pid,
            "user_id": user,
            "user_name": user_name,
            "text": text,
            "html": html,
            "created_at": created,
            "reposts": reposts,
            "comments": comments,
            "likes": likes,
            "pinned": int(pinned),
            "retweeted_id": retweeted,
            # Same text as _JSON.encode(pictures) for a list of strings (the only thing validation lets through).
            "pictures": "[" + ",".join(map(_json_str, pictures)) + "]",
            "permalink": permalink,
            "fetched_at": fetched,
            "source": source,
        },
    )


@dataclass(frozen=True)
class PostFormat:
    """How to read the posts of one Python type: the core ``Post``, or the Slice struct as Ice hands it to the
    servant, so that a batch becomes rows without a core object built per record first.

    Records of exactly ``kind`` take the fast path of ``checked_post_row``. A record of ``kind`` that misses it is
    converted with ``to_post`` and judged by ``validate_post``, and a record of any other type goes to
    ``validate_post`` as it is, so what is accepted and the reasons given do not depend on the format.
    """

    kind: type
    #: The 15 fields in ``COLUMNS[WEIBO]`` order (an ``operator.attrgetter``: one C call per record).
    values: Callable[[Any], tuple[Any, ...]]
    #: The core ``Post`` of a record of ``kind``.
    to_post: Callable[[Any], Post]


_core_post_values = operator.attrgetter(*(name for name, _ in COLUMNS[WEIBO]))
#: Posts as core ``Post`` objects (the fields are named like the columns).
CORE_POSTS = PostFormat(Post, _core_post_values, lambda post: post)
#: The exact type of every field of a post the fast path takes, in column order (bool is not an int here).
_POST_TYPES = tuple(bool if name == "pinned" else list if name == "pictures" else kind for name, kind in COLUMNS[WEIBO])


def checked_post_row(post: Any, max_text_chars: int, fmt: PostFormat = CORE_POSTS) -> Row | list[str]:
    """``post_row(post)`` if ``validate_post`` accepts it, else ``validate_post``'s reasons.

    One pass for the common case (exact types, everything in range): the fields read in one C call, their types
    compared as one tuple, plain comparisons, and ``createdAt`` parsed once for both the check and the row key.
    Anything that misses it, valid or not, takes ``validate_post``, so what is accepted and the reasons given are
    exactly ``validate_post``'s.
    """
    if type(post) is not fmt.kind:
        return validate_post(post, max_text_chars) or post_row(post)
    values = fmt.values(post)
    (
        pid,
        user,
        user_name,
        text,
        html,
        created,
        reposts,
        comments,
        likes,
        _pinned,
        retweeted,
        pictures,
        permalink,
        fetched,
        source,
    ) = values
    if (
        tuple(map(type, values)) == _POST_TYPES
        and 1 <= pid <= _INT64[1]
        and 1 <= user <= _INT64[1]
        and 0 <= reposts <= _INT31
        and 0 <= comments <= _INT31
        and 0 <= likes <= _INT31
        and 0 <= retweeted <= _INT64[1]
        and len(user_name) <= max_text_chars
        and len(text) <= max_text_chars
        and len(html) <= max_text_chars
        and len(permalink) <= max_text_chars
        and len(source) <= max_text_chars
        and all(type(url) is str for url in pictures)
        and sum(map(len, pictures)) <= max_text_chars
        # Text that came through Ice was decoded from UTF-8, so only in-process callers can hold a surrogate.
        and (fmt is not CORE_POSTS or not any(map(_not_utf8, (user_name, text, html, permalink, source, *pictures))))
    ):
        try:
            moment = _iso_time(created)
            fetched_ok = not fetched or _iso_time(fetched).tzinfo is not None
        except ValueError:
            fetched_ok = False
        else:
            if moment.tzinfo is not None and fetched_ok:
                return _post_row(values, int(moment.timestamp() * 1000))
    core = fmt.to_post(post)
    return validate_post(core, max_text_chars) or post_row(core)


def post_from_row(row: Row) -> Post:
    c = row.columns
    return Post(
        id=int(c["id"]),
        user_id=int(c["user_id"]),
        user_name=str(c["user_name"]),
        text=str(c["text"]),
        html=str(c["html"]),
        created_at=str(c["created_at"]),
        reposts=int(c["reposts"]),
        comments=int(c["comments"]),
        likes=int(c["likes"]),
        pinned=bool(c["pinned"]),
        retweeted_id=int(c["retweeted_id"]),
        pictures=list(json.loads(str(c["pictures"]) or "[]")),
        permalink=str(c["permalink"]),
        fetched_at=str(c["fetched_at"]),
        source=str(c["source"]),
    )


def review_row(review: Review) -> Row:
    """The stored form of a validated review."""
    key = owner_prefix(REVIEW, review.product_id) + _reversed_ms(review.created_at) + review.id.encode()
    return Row(
        key,
        {
            "id": review.id,
            "product_id": review.product_id,
            "source": review.source,
            "user": review.user,
            "content": review.content,
            "score": review.score,
            "created_at": review.created_at,
            "fetched_at": review.fetched_at,
        },
    )


def checked_review_row(review: Any, max_text_chars: int) -> Row | list[str]:
    """``review_row(review)`` if ``validate_review`` accepts it, else its reasons."""
    errors = validate_review(review, max_text_chars)
    return errors or review_row(review)


def review_from_row(row: Row) -> Review:
    c = row.columns
    return Review(
        id=str(c["id"]),
        product_id=str(c["product_id"]),
        source=str(c["source"]),
        user=str(c["user"]),
        content=str(c["content"]),
        score=int(c["score"]),
        created_at=str(c["created_at"]),
        fetched_at=str(c["fetched_at"]),
    )


# --- spool encoding -------------------------------------------------------------------------------------------


def encode_rows(table: str, rows: Sequence[Row]) -> bytes:
    """One spool entry: the table and its rows as UTF-8 JSON (ints stay exact: JSON ints are arbitrary size)."""
    return _JSON.encode({"table": table, "rows": [[row.key.hex(), row.columns] for row in rows]}).encode()


#: Each table's field names and types, for checking a decoded spool entry.
_FIELD_TYPES = {table: dict(columns) for table, columns in COLUMNS.items()}


def decode_rows(blob: bytes) -> tuple[str, list[Row]]:
    """Inverse of ``encode_rows``. ValueError, naming what is wrong, for a blob that is not such an entry (damaged on
    disk): a table this schema lacks, a key that is not hex or empty, a field missing or not of its column's type, so
    that what it returns any store can take."""
    try:
        data = json.loads(blob)
        table = data["table"]
        rows = [Row(bytes.fromhex(key), dict(columns)) for key, columns in data["rows"]]
    except (ValueError, KeyError, TypeError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ValueError(f"not a spool entry ({type(exc).__name__}: {str(exc)[:100]})") from exc
    types = _FIELD_TYPES.get(table) if isinstance(table, str) else None
    if types is None:
        raise ValueError(f"unknown table {str(table)[:40]!r}")
    for row in rows:
        if not row.key:
            raise ValueError("a row with an empty key")
        for name, kind in types.items():
            if type(row.columns.get(name)) is not kind:
                raise ValueError(f"row {row.key.hex()[:80]}: field {name!r} missing or not {kind.__name__}")
    return table, rows
