"""What the Slice wire can carry, for the checks on both sides of it: a Slice ``long`` is signed 64-bit, an ``int``
signed 32-bit (a post's counts, a review's score: ``INT32_FIELDS``) and a Slice ``string`` is UTF-8, so text
holding a lone surrogate (``json.loads`` lets a page's ``"\\ud800"`` through) can never be sent or stored."""

from __future__ import annotations

__all__ = ["INT32_FIELDS", "INT32_MAX", "INT32_MIN", "INT64_MAX", "INT64_MIN", "lone_surrogate_at"]

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1
#: The fields of ``Post`` and ``Review`` that are a Slice ``int`` (slice/crawler.ice); every other integer is a
#: ``long``.
INT32_FIELDS = frozenset({"reposts", "comments", "likes", "score"})


def lone_surrogate_at(text: str) -> int | None:
    """The offset of the first lone surrogate in ``text``, or None when it is valid UTF-8. Encoding is several
    times faster than a regular expression over CJK text, and ASCII text needs no look at all."""
    if text.isascii():
        return None
    try:
        text.encode()
    except UnicodeEncodeError as exc:
        return exc.start
    return None
