"""Counts as the sites display them: ints, digit strings, "1,234", "100万+", "1.2亿", and the label
("转发", "评论", "赞") Weibo PC shows instead of a zero."""

from __future__ import annotations

import re

__all__ = ["parse_count"]

_COUNT_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*(万|亿|[kKwW])?\+?$")
_UNITS = {None: 1, "万": 10_000, "w": 10_000, "W": 10_000, "亿": 100_000_000, "k": 1_000, "K": 1_000}


def parse_count(value: object) -> int:
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
