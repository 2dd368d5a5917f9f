"""Real publication traces for the revisit benchmark: load a JSONL file, window each trace onto the simulated
clock, split targets into a development and a report half. Pure apart from ``load_traces`` reading the file.

File format, one JSON object per line (blank lines are allowed; the file may be gzip-compressed)::

    {"target": "<opaque id>", "source": "<label>", "times": [unix seconds]}

Times out of order are sorted (with a warning: a feed listed newest first is common, and the order of publication
times carries nothing); any other fault stops the load with the file and line (``TraceError``).

Windowing (docs/REVISIT.md, "Real traces"): the window is as long as the traces are (``fit_windowing``: the median
span they cover, at most a year, less for busy traces). Each trace keeps the items of its last ``window_days``
(ending at its last item) and is shifted by a whole number of days so that this window starts within the first
simulated day: times of day are kept (daily patterns survive), the windows of all targets overlap but for less than
a day. The first ``warmup_days`` of the simulated clock are warm-up (policies learn, items are not scored); items
stop at ``window_days + 1`` days and fetching goes on for ``drain_days`` more.
"""

from __future__ import annotations

import codecs
import gzip
import hashlib
import itertools
import json
import math
import sys
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np

from bench.revisit.sim import Horizon
from bench.revisit.traces import DAY, Page

__all__ = [
    "FITTED_WINDOW_RULE",
    "Trace",
    "TraceError",
    "Windowing",
    "fit_windowing",
    "load_traces",
    "split_halves",
    "warn_on_stderr",
    "window_pages",
]


class TraceError(ValueError):
    """A trace file that cannot be used; the message names the file and line."""


@dataclass(frozen=True)
class Trace:
    target: str
    source: str
    #: Item publication times, unix seconds, ascending.
    times: tuple[float, ...]


@dataclass(frozen=True)
class Windowing:
    """How traces are put on the simulated clock (see the module docstring)."""

    window_days: float = 28.0
    warmup_days: float = 7.0
    drain_days: float = 1.0

    def horizon(self) -> Horizon:
        return Horizon(self.warmup_days * DAY, (self.window_days + 1) * DAY, self.drain_days * DAY)


#: The longest window a trace run uses (``fit_windowing``): a year ...
LONGEST_WINDOW_DAYS = 365.0
#: ... and a window longer than SHORT_WINDOW_DAYS ends where the median trace holds WINDOW_MEDIAN_ITEMS items: a long
#: window is there to give sparse targets a history to learn from, and a year of a busy file would only multiply the
#: run time (it grows with the items replayed).
SHORT_WINDOW_DAYS = 28.0
WINDOW_MEDIAN_ITEMS = 150.0
#: The warm-up: at least WARMUP_DAYS, a quarter of a longer window (a target with an item a week needs weeks before
#: any policy knows its rate), never more than half the window.
WARMUP_DAYS = 7.0
WARMUP_SHARE = 0.25
#: How ``fit_windowing`` chooses the window, in words (the report line and ``--help`` quote it).
FITTED_WINDOW_RULE = (
    f"the median span the traces cover, at most {LONGEST_WINDOW_DAYS:g} days or, past {SHORT_WINDOW_DAYS:g} days, "
    f"{WINDOW_MEDIAN_ITEMS:g} items of the median trace"
)


def fit_windowing(
    traces: Sequence[Trace], window_days: float | None = None, warmup_days: float | None = None
) -> Windowing:
    """The window the traces fill, unless ``window_days`` is given: the median of the spans they cover, to the
    nearest whole day, at most LONGEST_WINDOW_DAYS, and past SHORT_WINDOW_DAYS at most the span in which the median
    trace holds WINDOW_MEDIAN_ITEMS items. The warm-up is ``warmup_days``, else WARMUP_DAYS or
    WARMUP_SHARE of a longer window, at most half the window.

    n items spread evenly over a span L have a range of L (n - 1) / (n + 1) on average, so a trace covers about
    range (n + 1) / (n - 1): our 28-day windows have a median range of 27.4 days, a copy dated by day 27.0.
    A trace shorter than the window sits at its end, silent before its first item. With a fixed 28-day window a
    file of two-week traces was half silence: every target woke up on day 14, and the run measured how fast a
    policy notices a wake-up instead of how it follows a target (docs/REVISIT.md, "eighth round"). The window was
    also at most 28 days, which kept a sixth of a six-month trace: its quiet targets had an item or two in the
    window, too few for any policy to learn from (docs/REVISIT.md, "ninth round")."""
    if window_days is None:
        covered = [(t.times[-1] - t.times[0]) / DAY * (len(t.times) + 1) / max(len(t.times) - 1, 1) for t in traces]
        per_day = [len(t.times) / c for t, c in zip(traces, covered, strict=True) if c > 0]
        enough = WINDOW_MEDIAN_ITEMS / float(np.median(per_day)) if per_day else LONGEST_WINDOW_DAYS
        longest = min(LONGEST_WINDOW_DAYS, max(SHORT_WINDOW_DAYS, enough))
        window_days = min(float(round(longest)), max(1.0, float(round(float(np.median(covered))))))
    if warmup_days is None:
        warmup_days = min(max(WARMUP_DAYS, WARMUP_SHARE * window_days), window_days / 2)
    if not 0 <= warmup_days < window_days:
        raise TraceError(f"the warm-up ({warmup_days:g} days) must be shorter than the window ({window_days:g} days)")
    return Windowing(window_days, warmup_days)


#: A time from 2100 on (4 102 444 800) is taken for deciseconds, milliseconds or microseconds, not seconds: even
#: deciseconds of 1990 are past it, and a publication time cannot be in the future.
LATEST_PLAUSIBLE_S = 4_102_444_800.0
#: A time earlier than this (1990-01-01, before the web) is taken for minutes or hours since 1970, not seconds.
EARLIEST_PLAUSIBLE_S = 631_152_000.0


def _finite(value: object) -> bool:
    """A JSON number that is a finite float (a bool is not one; an int past a float's range is not finite)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _printable(name: str) -> bool:
    """A name the Markdown report can hold: no control character, no HTML comment mark."""
    return not any(unicodedata.category(c) == "Cc" for c in name) and "<!--" not in name and "-->" not in name


#: What a line must look like, for the error about a line that does not.
LINE_FORMAT = 'each line must be one JSON object {"target": "...", "source": "...", "times": [unix seconds]}'


def _parse_line(text: str, where: str) -> tuple[Trace, bool]:
    """The trace on one line, and whether its times had to be sorted."""
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceError(f"{where}: not JSON ({exc.msg}); {LINE_FORMAT}") from None
    except (ValueError, RecursionError) as exc:  # a number of thousands of digits, a line nested too deep
        raise TraceError(f"{where}: not JSON we can read ({str(exc)[:80]})") from None
    if not isinstance(obj, dict):
        raise TraceError(f"{where}: expected an object with target, source, times; {LINE_FORMAT}")
    missing = [k for k in ("target", "source", "times") if k not in obj]
    if missing:
        raise TraceError(f"{where}: missing {', '.join(missing)}")
    target, source, times = obj["target"], obj["source"], obj["times"]
    if isinstance(target, int) and not isinstance(target, bool):
        target = str(target)  # a numeric user or product id is an id like any other
    if not isinstance(target, str) or not target.strip() or not isinstance(source, str) or not source.strip():
        raise TraceError(f"{where}: target and source must be non-empty strings")
    if not _printable(target) or not _printable(source):
        # A newline splits a row of the report's tables, and a comment mark ends the block a full run rewrites in
        # docs/REVISIT.md early, so the next run would leave the rest of the old block behind.
        raise TraceError(
            f"{where}: target and source must not hold control characters (a newline, a tab) or HTML comment "
            "marks (<!--, -->): the report that names them is Markdown"
        )
    if not isinstance(times, list) or not times:
        raise TraceError(f"{where}: times must be a non-empty list of unix seconds")
    bad = next((k for k, t in enumerate(times) if not _finite(t)), None)
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
        placeholder = ", or a missing date written as 0 (drop those items)" if times[0] < DAY else ""
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
    """(number, text) of each line: UTF-8, a byte order mark dropped, split at line ends only (LF, CRLF, CR):
    ``str.splitlines`` also splits at U+2028, which JSON allows raw inside a string (a name). Each line is decoded
    on its own, so a byte that is not UTF-8 is an error naming its line."""
    number = 0
    while True:
        try:
            chunk = stream.readline()
        except (OSError, EOFError) as exc:  # gzip.BadGzipFile is an OSError; EOFError: a gzip stream cut short
            raise TraceError(f"{path}: cannot read {f'past line {number}' if number else 'it'} ({exc})") from None
        if not chunk:
            return
        try:
            text = chunk.removeprefix(codecs.BOM_UTF8 if number == 0 else b"").decode("utf-8")
        except UnicodeDecodeError as exc:
            hint = "; a compressed file must be gzip" if number == 0 else ""
            raise TraceError(f"{path}:{number + 1}: not UTF-8 text ({exc.reason}){hint}") from None
        for line in text.removesuffix("\n").removesuffix("\r").split("\r"):
            number += 1
            yield number, line


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


def window_pages(traces: Sequence[Trace], windowing: Windowing) -> list[Page]:
    """One simulated page per trace: the items of its last ``window_days``, shifted by whole days so that the
    window starts in [0, 1 day). ``Page.rate`` is the trace's mean item rate over the scored span [warm-up, end),
    the rate the known-rate square-root bound is given."""
    h = windowing.horizon()
    span = windowing.window_days * DAY
    pages = []
    for trace in traces:
        times = np.asarray(trace.times, dtype=float)
        start = times[-1] - span
        times = times[times > start]
        shifted = times - math.floor(start / DAY) * DAY
        scored = np.count_nonzero((shifted >= h.warmup_s) & (shifted < h.end_s))
        pages.append(Page(trace.source, scored / (h.end_s - h.warmup_s), shifted))
    return pages


def _rank_key(target: str) -> str:
    return hashlib.sha256(target.encode("utf-8")).hexdigest()


def split_halves(traces: Sequence[Trace]) -> tuple[list[Trace], list[Trace]]:
    """(development, report): within each source, targets ordered by SHA-256 of their id go alternately to the
    development and the report half, so both halves have every source in the same proportion."""
    dev: list[Trace] = []
    report: list[Trace] = []
    for source in sorted({t.source for t in traces}):
        ranked = sorted((t for t in traces if t.source == source), key=lambda t: _rank_key(t.target))
        dev += ranked[0::2]
        report += ranked[1::2]
    return dev, report
