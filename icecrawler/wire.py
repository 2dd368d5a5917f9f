"""What the Slice wire can carry, for the checks on both sides of it: a Slice ``long`` is signed 64-bit and a
Slice ``string`` is UTF-8, so text holding a lone surrogate (``json.loads`` lets a page's ``"\\ud800"`` through)
can never be sent or stored."""

from __future__ import annotations

__all__ = ["INT64_MAX", "INT64_MIN", "lone_surrogate_at"]

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1


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
