"""Real publication traces for the revisit benchmark: load a JSONL file, window each trace onto the simulated
clock, split targets into a development and a report half. Pure; the file itself is read by ``sandbox.tracefile``
(``load_traces``, re-exported here), the one reader of the format, which the sandbox's ``--traces`` shares.

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

import bisect
import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from bench.revisit.sim import Horizon
from bench.revisit.traces import DAY, Page
from sandbox.tracefile import Trace, TraceError, load_traces, warn_on_stderr

__all__ = [
    "FITTED_WINDOW_RULE",
    "Trace",
    "TraceError",
    "Windowing",
    "fit_windowing",
    "load_traces",
    "median_covered_days",
    "split_halves",
    "warn_on_stderr",
    "window_pages",
    "window_traces",
]


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


def _spread(traces: Sequence[Trace]) -> list[Trace]:
    """The traces with a span: one item (or every item in one second) says nothing about how long a target publishes,
    and counted as covering 0 days, a file of mostly one-item targets got a window of a day."""
    return [t for t in traces if t.times[-1] > t.times[0]]


def _covered_days(trace: Trace) -> float:
    """The days a trace of n items covers: its range x (n + 1) / (n - 1) (``fit_windowing``); a trace with a span."""
    return (trace.times[-1] - trace.times[0]) / DAY * (len(trace.times) + 1) / (len(trace.times) - 1)


def median_covered_days(traces: Sequence[Trace]) -> float:
    """The median of the days the traces with a span cover (``_covered_days``); 0 when none has one."""
    covered = [_covered_days(t) for t in _spread(traces)]
    return float(np.median(covered)) if covered else 0.0


def fit_windowing(
    traces: Sequence[Trace], window_days: float | None = None, warmup_days: float | None = None
) -> Windowing:
    """The window the traces fill, unless ``window_days`` is given: the median of the spans they cover, to the
    nearest whole day, at most LONGEST_WINDOW_DAYS, and past SHORT_WINDOW_DAYS at most the span in which the median
    trace holds WINDOW_MEDIAN_ITEMS items; traces of one instant have no span and do not count (none with a span:
    1 day). The warm-up is ``warmup_days``, else WARMUP_DAYS or
    WARMUP_SHARE of a longer window, at most half the window.

    n items spread evenly over a span L have a range of L (n - 1) / (n + 1) on average, so a trace covers about
    range (n + 1) / (n - 1): our 28-day windows have a median range of 27.4 days, a copy dated by day 27.0.
    A trace shorter than the window sits at its end, silent before its first item. With a fixed 28-day window a
    file of two-week traces was half silence: every target woke up on day 14, and the run measured how fast a
    policy notices a wake-up instead of how it follows a target (docs/REVISIT.md, "eighth round"). The window was
    also at most 28 days, which kept a sixth of a six-month trace: its quiet targets had an item or two in the
    window, too few for any policy to learn from (docs/REVISIT.md, "ninth round")."""
    if window_days is None:
        spread = _spread(traces)
        per_day = [len(t.times) / _covered_days(t) for t in spread]
        enough = WINDOW_MEDIAN_ITEMS / float(np.median(per_day)) if per_day else LONGEST_WINDOW_DAYS
        longest = min(LONGEST_WINDOW_DAYS, max(SHORT_WINDOW_DAYS, enough))
        window_days = min(float(round(longest)), max(1.0, float(round(median_covered_days(traces)))))
    if warmup_days is None:
        warmup_days = min(max(WARMUP_DAYS, WARMUP_SHARE * window_days), window_days / 2)
    if not 0 <= warmup_days < window_days:
        raise TraceError(f"the warm-up ({warmup_days:g} days) must be shorter than the window ({window_days:g} days)")
    return Windowing(window_days, warmup_days)


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


def window_traces(traces: Sequence[Trace], windowing: Windowing) -> list[Trace]:
    """Each trace with only the items ``window_pages`` replays (those of its last ``window_days``), so a run hands its
    jobs the windows, not the file: every job gets its targets' times pickled, and a year of a 200 MB file made each
    job unpickle half of it to replay four weeks (docs/REVISIT.md, "Run time")."""
    span = windowing.window_days * DAY
    out = []
    for trace in traces:
        start = bisect.bisect_right(trace.times, trace.times[-1] - span)
        out.append(trace if start == 0 else Trace(trace.target, trace.source, trace.times[start:]))
    return out


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
