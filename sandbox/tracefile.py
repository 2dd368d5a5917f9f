"""Publication trace files: one JSON object per line, ``{"target": "...", "source": "...", "times": [unix seconds]}``.

The one reader of the format (docs/REVISIT.md, "Real publication traces"): ``icecrawler bench revisit --traces``
replays such a file in its simulator (``bench.revisit.replay`` windows the traces read here), and the sandbox can
publish its items on the stand-in sites. It lives in the sandbox, the lower of the two layers (docs/ARCHITECTURE.md),
so that both read a file the same way and refuse the same faults.

Blank lines are allowed; the file may be gzip-compressed. Times out of order are sorted (with a warning: a feed
listed newest first is common, and the order of publication times carries nothing); any other fault stops the load
with the file and line (``TraceError``). Pure apart from ``load_traces`` reading the file.
"""

from __future__ import annotations

import gzip
import itertools
import json
import math
import sys
import unicodedata
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

__all__ = [
    "DAY_S",
    "EARLIEST_PLAUSIBLE_S",
    "LATEST_PLAUSIBLE_S",
    "LINE_FORMAT",
    "Trace",
    "TraceError",
    "finite",
    "is_weibo_trace",
    "load_traces",
    "warn_on_stderr",
]

#: One day in seconds, of every trace module (a time within a day of 0 is perhaps an export's missing date).
DAY_S = 86400.0


class TraceError(ValueError):
    """A trace file that cannot be used; the message names the file and line."""


@dataclass(frozen=True)
class Trace:
    target: str
    source: str
    #: Item publication times, unix seconds, ascending.
    times: tuple[float, ...]


#: A time from 2100 on (4 102 444 800) is taken for deciseconds, milliseconds or microseconds, not seconds: even
#: deciseconds of 1990 are past it, and a publication time cannot be in the future.
LATEST_PLAUSIBLE_S = 4_102_444_800.0
#: A time earlier than this (1990-01-01, before the web) is taken for minutes or hours since 1970, not seconds.
EARLIEST_PLAUSIBLE_S = 631_152_000.0


def finite(value: object) -> bool:
    """A number that is a finite float: a bool is not one, nor an int past a float's range (what a trace file and a
    scenario's trace schedule accept as a time)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def is_weibo_trace(source: str) -> bool:
    """A trace of a Weibo user: its source names Weibo (``weibo``, ``Weibo-mobile``). The sandbox makes it a Weibo
    user, and the benchmark's E0 plot prefers it."""
    return source.lower().startswith("weibo")


def _printable(name: str) -> bool:
    """A name the Markdown report can hold: no control character, no HTML comment mark."""
    return not any(unicodedata.category(c) == "Cc" for c in name) and "<!--" not in name and "-->" not in name


#: What a line must look like, for the error about a line that does not.
LINE_FORMAT = 'each line must be one JSON object {"target": "...", "source": "...", "times": [unix seconds]}'


class _Object(dict[str, Any]):
    """A JSON object's dict and the keys given more than once in it (``json`` keeps the last value silently)."""

    repeated: frozenset[str] = frozenset()


def _noting_repeats(pairs: list[tuple[str, Any]]) -> _Object:
    """The ``object_pairs_hook`` of a line: it runs for every object at every depth, so it only notes repeated keys,
    and ``_parse_line`` judges those of the line's own object."""
    obj = _Object(pairs)
    if len(obj) < len(pairs):
        keys = [k for k, _ in pairs]
        obj.repeated = frozenset(k for k in obj if keys.count(k) > 1)
    return obj


#: What a file that is one JSON array of traces is told: the commonest near-miss of JSONL.
_ARRAY_HINT = f"a JSON array, not one object per line: {LINE_FORMAT} (jq -c '.[]' FILE writes an array so)"


def _parse_line(text: str, where: str) -> tuple[Trace, bool]:
    """The trace on one line, and whether its times had to be sorted."""
    try:
        obj = json.loads(text, object_pairs_hook=_noting_repeats)
    except json.JSONDecodeError as exc:
        if text.strip() == "[":  # the opening bracket of a pretty-printed array
            raise TraceError(f"{where}: {_ARRAY_HINT}") from None
        raise TraceError(f"{where}: not JSON ({exc.msg}); {LINE_FORMAT}") from None
    except (ValueError, RecursionError) as exc:  # a number of thousands of digits, a line nested too deep
        raise TraceError(f"{where}: not JSON we can read ({str(exc)[:80]})") from None
    if isinstance(obj, list) and obj and isinstance(obj[0], dict):
        raise TraceError(f"{where}: {_ARRAY_HINT}")
    if not isinstance(obj, dict):
        raise TraceError(f"{where}: expected an object with target, source, times; {LINE_FORMAT}")
    # One of the three keys given twice: a line of two feeds pasted together (``"times": [...], "times": [...]``)
    # could mean either. Any other key is ignored, twice or not, and so is every key of a nested object.
    repeated = next((k for k in ("target", "source", "times") if k in getattr(obj, "repeated", ())), None)
    if repeated is not None:
        raise TraceError(f"{where}: key {repeated!r} twice in one object: which one is meant?")
    missing = [k for k in ("target", "source", "times") if k not in obj]
    if missing:
        raise TraceError(f"{where}: missing {', '.join(missing)}")
    target, source, times = obj["target"], obj["source"], obj["times"]
    if isinstance(target, int) and not isinstance(target, bool):
        target = str(target)  # a numeric user or product id is an id like any other
    if not isinstance(target, str) or not target.strip() or not isinstance(source, str) or not source.strip():
        raise TraceError(f"{where}: target and source must be non-empty strings")
    if any(unicodedata.category(c) == "Cs" for c in target + source):
        # JSON may escape half of a UTF-16 pair alone (\ud800); no UTF-8 text holds it, and the split's hash of the
        # id, and the report printed after the whole run, ended in a UnicodeEncodeError traceback.
        raise TraceError(
            f"{where}: target and source must be Unicode text, not hold a lone surrogate escape (\\ud800 to "
            "\\udfff without its pair)"
        )
    if not _printable(target) or not _printable(source):
        # A newline splits a row of the report's tables, and a comment mark ends the block a full run rewrites in
        # docs/REVISIT.md early, so the next run would leave the rest of the old block behind.
        raise TraceError(
            f"{where}: target and source must not hold control characters (a newline, a tab) or HTML comment "
            "marks (<!--, -->): the report that names them is Markdown"
        )
    if not isinstance(times, list) or not times:
        raise TraceError(f"{where}: times must be a non-empty list of unix seconds")
    bad = next((k for k, t in enumerate(times) if not finite(t)), None)
    if bad is not None:
        # Name the item: a time quoted as a string ("1700000000") and a NaN call for different fixes.
        shown = json.dumps(times[bad])
        raise TraceError(
            f"{where}: times must be finite numbers (unix seconds); item {bad + 1} of {len(times)} is "
            + (shown if len(shown) <= 40 else shown[:37] + "...")
        )
    unsorted = any(b < a for a, b in itertools.pairwise(times))
    if unsorted:
        times = sorted(times)
    if times[-1] >= LATEST_PLAUSIBLE_S:
        # Milliseconds read as seconds would put a 28-day window inside 40 minutes and run without a complaint, and
        # deciseconds would stretch it tenfold.
        raise TraceError(
            f"{where}: times reach {times[-1]:.0f}, after 2100: deciseconds, milliseconds or microseconds? "
            "give unix seconds"
        )
    if times[0] < EARLIEST_PLAUSIBLE_S:
        # Minutes or hours since 1970 read as seconds would squeeze a month into a day and print a "win" of 5x.
        # A 0 or a few seconds after it is a missing date written as the epoch (1970-01-01), common in exports.
        placeholder = ", or a missing date written as 0 (drop those items)" if times[0] < DAY_S else ""
        raise TraceError(
            f"{where}: times start at {times[0]:.0f}, before 1990 (no web page is that old): minutes or hours since "
            f"1970{placeholder}? give unix seconds"
        )
    return Trace(target, source, tuple(float(t) for t in times)), unsorted


def warn_on_stderr(message: str) -> None:
    """How the loader and the run warn about a file they can use but the user should know about."""
    print(f"warning: {message}", file=sys.stderr, flush=True)


@contextmanager
def _opened(path: Path) -> Iterator[Iterator[tuple[int, str]]]:
    """The file's numbered lines (``_numbered``), gunzipped on the way if the file starts with gzip's magic bytes (a
    .jsonl.gz, whatever its name). Read as a stream, so a file of gigabytes never sits in memory whole."""
    try:
        raw = path.open("rb")
    except OSError as exc:
        raise TraceError(f"{path}: cannot read it ({exc})") from None
    with raw:
        # Peeked, not read and sought back: a pipe (``--traces <(zcat ...)``, /dev/stdin) cannot seek.
        if raw.peek(2)[:2] == b"\x1f\x8b":
            with gzip.GzipFile(fileobj=raw) as unzipped:
                yield _numbered(path, unzipped)
        else:
            yield _numbered(path, raw)


def _numbered(path: Path, stream: IO[bytes] | gzip.GzipFile) -> Iterator[tuple[int, str]]:
    """(number, text) of each line: UTF-8, a byte order mark at its start dropped, split at line ends only (LF, CRLF,
    CR): ``str.splitlines`` also splits at U+2028, which JSON allows raw inside a string (a name). Each line is
    decoded on its own, so a byte that is not UTF-8 is an error naming its line."""
    number = 0
    while True:
        try:
            chunk = stream.readline()
        except (OSError, EOFError) as exc:  # gzip.BadGzipFile is an OSError; EOFError: a gzip stream cut short
            raise TraceError(f"{path}: cannot read {f'past line {number}' if number else 'it'} ({exc})") from None
        if not chunk:
            return
        try:
            text = chunk.decode("utf-8")
        except UnicodeDecodeError as exc:
            hint = "; a compressed file must be gzip" if number == 0 else ""
            raise TraceError(f"{path}:{number + 1}: not UTF-8 text ({exc.reason}){hint}") from None
        for line in text.removesuffix("\n").removesuffix("\r").split("\r"):
            number += 1
            # A byte order mark starts the file, or a line where `cat` joined two exports that each begin with one;
            # no line of JSON can start with it. Dropped per line: a file of CR line ends reads as one chunk.
            yield number, line.removeprefix("\ufeff")


def load_traces(path: Path, warn: Callable[[str], None] = warn_on_stderr) -> list[Trace]:
    """All traces of a JSONL file (gzip-compressed or not), in file order; the first bad line (or a target repeated
    within its source) raises TraceError. Two sources may use the same id for different targets (a user id and a
    product id). Times out of order are sorted, and ``warn`` is told once how many traces were."""
    traces: list[Trace] = []
    seen: dict[tuple[str, str], int] = {}
    sorted_lines: list[int] = []
    with _opened(path) as lines:
        for number, line in lines:
            if not line.strip():
                continue
            trace, unsorted = _parse_line(line, f"{path}:{number}")
            if unsorted:
                sorted_lines.append(number)
            key = (trace.source, trace.target)
            if key in seen:
                raise TraceError(f"{path}:{number}: target {trace.target!r} of {trace.source} repeats line {seen[key]}")
            seen[key] = number
            traces.append(trace)
    if not traces:
        raise TraceError(f"{path}: no traces")
    if sorted_lines:
        warn(
            f"{path}: the times of {len(sorted_lines)} of {len(traces)} traces were out of order (first on line "
            f"{sorted_lines[0]}); sorted them"
        )
    return traces
