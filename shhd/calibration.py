"""Population calibration of rate estimates: does a target whose rate we estimate at λ̂ go on to publish λ̂ items per
second? Pure: no clock, no I/O.

A target's own estimate (decayed count ÷ exposure) answers for its past. Its future regresses towards the rest of
the population: on real publication traces a target that has been quiet publishes more than its estimate says,
and a busy one less (docs/REVISIT.md, "#21, third round"). The calibration learns by how much, per class of
estimated rate (``bins_per_decade`` classes per factor of ten), from every crawl of every target: it adds the
items the estimate predicted for the interval since the last crawl and the items the crawl found, both decayed
with ``half_life_s``. The factor (found + k) ÷ (predicted + k), k = ``prior_items``, is 1 until a class has seen
items, and stays 1 where estimates are right: on stationary targets (the synthetic mixture) it does not move.

A factor cannot lift an estimate of (nearly) zero: a target silent for weeks would keep the longest period
however often silent targets of this population wake up. So every estimate below ``silent_below_per_day`` items a
day is one class, the near-silent one, and its calibrated rate is what its targets were seen to publish: found
items ÷ the time they were watched, both decayed alike, with a prior of ``silent_prior_days`` at that threshold
rate (docs/REVISIT.md, "#21, twelfth round").

What it has learnt is a few numbers per class (``to_dict``); the scheduler keeps them in its database and takes
them back at start-up (``load``), so a restart does not throw away days of learning.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from shhd.forecast import DAY_S

__all__ = ["RateCalibration"]


@dataclass
class RateCalibration:
    """Decayed (predicted, found, watched) item counts per class of estimated rate, shared by all targets of a
    policy."""

    prior_items: float = 5.0
    half_life_s: float = 7 * DAY_S
    bins_per_decade: float = 2.0
    #: Estimates below this many items a day form the near-silent class; None: no such class.
    silent_below_per_day: float | None = 0.1
    #: The near-silent class's prior: this many days watched at ``silent_below_per_day``.
    silent_prior_days: float = 7.0
    #: class -> [predicted items, found items, time of the last update (s), time watched (s)]
    _rows: dict[int, list[float]] = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """What has been learnt, as JSON-ready data: each class's row, with the two settings that define the
        classes (rows learnt under other classes would correct the wrong estimates)."""
        return {
            "bins_per_decade": self.bins_per_decade,
            "silent_below_per_day": self.silent_below_per_day,
            "rows": [[k, *row] for k, row in sorted(self._rows.items())],
        }

    def load(self, saved: Mapping[str, Any]) -> None:
        """Take the rows of a ``to_dict`` in place of the current ones. Raises ValueError, and takes nothing, when
        ``saved`` is malformed or was learnt with other classes."""
        if not isinstance(saved, Mapping):
            raise ValueError(f"a saved calibration is a mapping, not {type(saved).__name__}")
        defines = (saved.get("bins_per_decade"), saved.get("silent_below_per_day"))
        if defines != (self.bins_per_decade, self.silent_below_per_day):
            raise ValueError(
                f"the saved calibration's classes (bins_per_decade, silent_below_per_day) = {defines} differ from "
                f"this policy's {(self.bins_per_decade, self.silent_below_per_day)}"
            )
        entries = saved.get("rows")
        if not isinstance(entries, list):
            raise ValueError(f"a saved calibration's rows are a list, not {type(entries).__name__}")
        rows: dict[int, list[float]] = {}
        for entry in entries:
            if not (
                isinstance(entry, list)
                and len(entry) == 5
                and isinstance(entry[0], int)
                and all(isinstance(x, int | float) and math.isfinite(x) and x >= 0 for x in entry[1:])
            ):
                raise ValueError(f"a saved calibration row is [class, predicted, found, time, watched], not {entry!r}")
            rows[entry[0]] = [float(x) for x in entry[1:]]
        self._rows = rows

    def describe(self) -> list[dict[str, Any]]:
        """Each class as an operator reads it: the estimates it holds (items a day, from and below), its decayed
        predicted and found items, and what it does to them: a factor, or near silent, the rate it gives."""
        silent = self._class(0.0) if self.silent_below_per_day is not None else None
        out: list[dict[str, Any]] = []
        for k, row in sorted(self._rows.items()):
            entry: dict[str, Any] = {"predicted": row[0], "found": row[1]}
            if k == silent:
                entry.update(per_day_from=0.0, per_day_below=self.silent_below_per_day)
                entry["near_silent_per_day"] = self.calibrated(0.0) * DAY_S
            else:
                entry.update(
                    per_day_from=10 ** (k / self.bins_per_decade), per_day_below=10 ** ((k + 1) / self.bins_per_decade)
                )
                entry["factor"] = self._factor(row)
            out.append(entry)
        return out

    def is_silent(self, rate_per_s: float) -> bool:
        """Whether an estimate falls in the near-silent class."""
        return self.silent_below_per_day is not None and rate_per_s * DAY_S < self.silent_below_per_day

    def _class(self, rate_per_s: float) -> int:
        per_day, threshold = rate_per_s * DAY_S, self.silent_below_per_day
        if threshold is not None and per_day < threshold:  # near silent: one class, just below the threshold's
            return math.floor(math.log10(threshold) * self.bins_per_decade) - 1
        return math.floor(math.log10(per_day) * self.bins_per_decade)

    def observe(self, rate_per_s: float, interval_s: float, found_items: int, now_s: float) -> None:
        """One crawl: the target's estimate before it was ``rate_per_s``; ``found_items`` came in ``interval_s``."""
        if rate_per_s <= 0 or interval_s <= 0:
            return
        row = self._rows.setdefault(self._class(rate_per_s), [0.0, 0.0, now_s, 0.0])
        decay = 2.0 ** (-max(now_s - row[2], 0.0) / self.half_life_s)
        row[0] = row[0] * decay + rate_per_s * interval_s
        row[1] = row[1] * decay + found_items
        row[2] = now_s
        row[3] = row[3] * decay + interval_s

    def factor(self, rate_per_s: float) -> float:
        """Found ÷ predicted for the class of an estimate of ``rate_per_s``, with the prior: what ``calibrated``
        multiplies an estimate by at or above the near-silent threshold (below it ``calibrated`` uses the time
        watched instead)."""
        if rate_per_s <= 0:
            return 1.0
        row = self._rows.get(self._class(rate_per_s))
        if row is None:
            return 1.0
        return self._factor(row)

    def _factor(self, row: list[float]) -> float:
        return (row[1] + self.prior_items) / (row[0] + self.prior_items)

    def calibrated(self, rate_per_s: float) -> float:
        """The calibrated rate (items/s) for an estimate of ``rate_per_s``: times its class's factor, or, near
        silent, what the near-silent targets published (never below the estimate itself)."""
        threshold = self.silent_below_per_day
        if threshold is None or rate_per_s * DAY_S >= threshold:
            return rate_per_s * self.factor(rate_per_s)
        row = self._rows.get(self._class(rate_per_s))
        if row is None:
            return rate_per_s
        prior_items = self.silent_prior_days * threshold
        return max(rate_per_s, (row[1] + prior_items) / (row[3] + self.silent_prior_days * DAY_S))
