"""Every ``created_at`` form the sites show, resolved to ISO 8601 in China Standard Time (+08:00).

Weibo renders relative times ("刚刚", "5分钟前", "昨天 12:25", "06-27") against its server's clock; they are resolved
against ``now_ms``, the fetch time the runtime passes in, which is the client's clock: a client clock that is off
shifts them by as much (the client warns when its clock and the scheduler's differ by over 5 s). Today's sites mostly
send absolute times (weibo.com and m.weibo.cn an RFC 2822 form, the legacy feed a ``date`` attribute in ms, JD a
``YYYY-MM-DD HH:MM:SS`` text or epoch seconds or ms as a JSON number or a digit string), so the relative forms are a
fallback. ``created_at_of`` takes whatever JSON value a site sends, so every source reads every form the same way.
China has had no daylight saving since 1991, so a fixed +08:00 offset is exact and needs no tz database.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta, timezone

from icecrawler.clock import BEIJING

__all__ = ["created_at_of", "iso_of", "iso_of_ms", "resolve_created_at"]


_RFC_FORMAT = "%a %b %d %H:%M:%S %z %Y"
_MONTHS = {
    name: i
    for i, name in enumerate(
        ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), start=1
    )
}
_RFC_RE = re.compile(r"^[A-Za-z]{3} ([A-Za-z]{3}) (\d{1,2}) (\d{1,2}):(\d{2}):(\d{2}) ([+-])(\d{2})(\d{2}) (\d{4})$")
_AGO_RE = re.compile(r"^(\d+)\s*(秒|分钟|小时|天)前$")
_DAY_RE = re.compile(r"^(今天|昨天|前天)\s*(\d{1,2}):(\d{2})$")
_FULL_RE = re.compile(r"^(\d{4})[-/年](\d{1,2})[-/月](\d{1,2})日?(?:[ T]+(\d{1,2}):(\d{2})(?::(\d{2}))?)?$")
#: ISO 8601 with an offset (``2026-07-25T10:00:00+08:00``, ``...Z``), as some JSON answers carry a time.
_ISO_OFFSET_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(?::\d{2}(?:\.\d{1,6})?)?(?:Z|[+-]\d{2}:?\d{2})$")
_MONTH_DAY_RE = re.compile(r"^(\d{1,2})[-月](\d{1,2})日?(?:\s*(\d{1,2}):(\d{2}))?$")
#: Epoch times by their size: seconds from 2001-09 (10 digits), milliseconds from 2001-09 (13 digits). Anything else
#: (a 5-digit number, a 20-digit one) is not a time we know, rather than a date in 1970 or in the year 50000.
_EPOCH_S = range(10**9, 10**10)
_EPOCH_MS = range(10**12, 10**13)
_EPOCH_TEXT_RE = re.compile(r"^\d{10}(?:\d{3})?(?:\.\d{1,6})?$")
_AGO_UNITS = {"秒": 1, "分钟": 60, "小时": 3600, "天": 86400}
_DAY_OFFSETS = {"今天": 0, "昨天": 1, "前天": 2}


def iso_of(moment: datetime) -> str:
    """ISO 8601 at second precision in +08:00: the one textual time form every record carries."""
    return moment.astimezone(BEIJING).replace(microsecond=0).isoformat()


def iso_of_ms(ms: int) -> str:
    """Epoch ms (Weibo PC's ``date`` attribute, the fetch time ``now_ms``) as ISO 8601 +08:00."""
    try:
        return iso_of(datetime.fromtimestamp(ms / 1000, tz=UTC))
    except (OverflowError, ValueError, OSError):
        return ""


def created_at_of(value: object, now_ms: int) -> str:
    """A creation time as a JSON answer carries it: text (``resolve_created_at``), or epoch seconds or milliseconds as
    a number or a digit string (told apart by their size); "" for anything else (``None``, a bool, an object, a number
    no time of this century has), so callers keep the item undated rather than failing it."""
    if isinstance(value, str):
        text = value.strip()
        if not _EPOCH_TEXT_RE.match(text):
            return resolve_created_at(text, now_ms)
        value = int(text.partition(".")[0])
    if isinstance(value, float) and math.isfinite(value):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        return ""
    if value in _EPOCH_MS:
        return iso_of_ms(value)
    if value in _EPOCH_S:
        return iso_of_ms(value * 1000)
    return ""


def resolve_created_at(text: str, now_ms: int) -> str:
    """Resolve any displayed creation time against ``now_ms``; returns ISO 8601 +08:00, or "" when the text
    is not a time form we know (callers keep the item: a missing time is not a reason to drop a post)."""
    text = " ".join(text.replace("\xa0", " ").split())
    if not text:
        return ""
    try:
        if match := _FULL_RE.match(text):  # absolute (JD, ECSHOP, old Weibo posts): no clock needed
            hour, minute, second = (int(match[i] or 0) for i in (4, 5, 6))
            # Already in +08:00 at whole seconds, so isoformat() is what iso_of would return.
            moment = datetime(int(match[1]), int(match[2]), int(match[3]), hour, minute, second, tzinfo=BEIJING)
            return moment.isoformat()
        return _resolve(text, datetime.fromtimestamp(now_ms / 1000, tz=UTC).astimezone(BEIJING))
    except (ValueError, OverflowError):
        return ""


def _resolve(text: str, now: datetime) -> str:
    """Try each relative or RFC form, most common first; ValueError for impossible dates."""
    if text == "刚刚":
        return iso_of(now)
    if match := _RFC_RE.match(text):
        return _rfc(match)
    if _ISO_OFFSET_RE.match(text):
        return iso_of(datetime.fromisoformat(text))
    if match := _AGO_RE.match(text):
        return iso_of(now - timedelta(seconds=int(match[1]) * _AGO_UNITS[match[2]]))
    if match := _DAY_RE.match(text):
        day = now - timedelta(days=_DAY_OFFSETS[match[1]])
        return iso_of(day.replace(hour=int(match[2]), minute=int(match[3]), second=0))
    if match := _MONTH_DAY_RE.match(text):
        # "MM-DD" / "M月D日 HH:MM": the current year (a date "in the future" belongs to last year).
        hour, minute = int(match[3] or 0), int(match[4] or 0)
        moment = datetime(now.year, int(match[1]), int(match[2]), hour, minute, tzinfo=BEIJING)
        if moment > now + timedelta(days=1):
            moment = moment.replace(year=now.year - 1)
        return iso_of(moment)
    return ""


def _rfc(match: re.Match[str]) -> str:
    """``Tue Jun 08 09:35:04 +0800 2021`` parsed by hand: strptime's %a/%b depend on the process locale."""
    month = _MONTHS.get(match[1].title())
    if month is None:
        raise ValueError(f"unknown month {match[1]!r}")
    offset = timedelta(hours=int(match[7]), minutes=int(match[8]))
    tz = timezone(-offset if match[6] == "-" else offset)
    moment = datetime(int(match[9]), month, int(match[2]), int(match[3]), int(match[4]), int(match[5]), tzinfo=tz)
    return iso_of(moment)
