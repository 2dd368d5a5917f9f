"""Counts (and ids) as the sites display them: ints, digit strings, "1,234", "100万+", "1.2亿", and the label
("转发", "评论", "赞") Weibo PC shows instead of a zero."""

from __future__ import annotations

import re

__all__ = ["MAX_COUNT", "MAX_ID", "parse_count", "parse_id"]

_COUNT_RE = re.compile(r"^(\d{1,15}(?:\.\d{1,6})?)\s*(万|亿|[kKwW])?\+?$")
#: Counts travel as Slice ``int`` (32-bit): larger displays are clamped rather than failing a whole batch.
MAX_COUNT = 2**31 - 1
#: Ids travel as Slice ``long``.
MAX_ID = 2**63
_UNITS = {None: 1, "万": 10_000, "w": 10_000, "W": 10_000, "亿": 100_000_000, "k": 1_000, "K": 1_000}


def parse_count(value: object) -> int:
    """Best-effort count in ``0..MAX_COUNT``: see ``_parse_count``."""
    return min(_parse_count(value), MAX_COUNT)


def parse_id(value: object) -> int:
    """A Weibo id (int or decimal string) as int; 0 when absent, not a number, or beyond Slice ``long``."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, str):
        value = value.strip()
        value = int(value) if value.isdigit() and value.isascii() and len(value) <= 19 else 0
    return value if isinstance(value, int) and 0 <= value < MAX_ID else 0


def _parse_count(value: object) -> int:
    """Best-effort non-negative count; anything that is not a number (a label, None, junk) counts as 0,
    because a count is decoration on an item, never a reason to reject it."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return max(value, 0)
    if isinstance(value, float):
        return max(int(value), 0) if value == value and abs(value) < 1e18 else 0
    if not isinstance(value, str):
        return 0
    match = _COUNT_RE.match(value.strip().replace(",", ""))
    if match is None:
        return 0
    return int(float(match[1]) * _UNITS[match[2]])
