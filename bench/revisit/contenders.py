"""The policies under test in the revisit benchmark (synthetic and real-trace runs alike), the run sizes, and the
one way a contender is run under a global fetch budget (``run_contender``)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bench.revisit.content import ContentModel
from bench.revisit.sim import Detector, Horizon, Result, run_budget
from bench.revisit.traces import DAY, HOUR, Page
from shhd.policies import ChoPolicy, FixedPolicy, NutchPolicy, RatePolicy, RevisitPolicy, SartPolicy, ShhdPolicy

__all__ = ["CONTENDERS", "Config", "Contender", "contender", "run_contender"]

MIN = 60.0
ROOT = Path(__file__).resolve().parents[2]
#: Seeds used only to pick each policy's knob; never reported.
TUNING_SEEDS = (0, 1)
#: Budget (x total item rate) at which knobs are tuned.
TUNING_BUDGET = 0.5
#: First seed of the reported set (seeds REPORT_BASE .. REPORT_BASE + seeds - 1).
REPORT_BASE = 1000


#: The most worker processes a run starts unless told: each job holds its population's pages and item texts (about
#: 0.2 GiB for 500 targets), so dozens at once would want more memory than a big machine's cores come with.
MAX_DEFAULT_WORKERS = 16


def usable_cpus() -> int:
    """Worker processes a run starts unless told (``--workers``): the CPUs this process may use, which a container's
    or ``taskset``'s affinity narrows below the machine's count, at most MAX_DEFAULT_WORKERS. Runs are seeded per
    job, so the figures do not depend on it, only the run time does."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity call on this platform
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, MAX_DEFAULT_WORKERS))


@dataclass(frozen=True)
class Config:
    """Sizes of one benchmark run."""

    seeds: int = 20
    e0_days: float = 1.0
    pages: int = 64
    warmup_days: float = 1.0
    end_days: float = 2.5
    drain_days: float = 0.5
    budgets: tuple[float, ...] = (0.25, 0.5, 1.0)
    oracle_seeds: int = 5
    tune: bool = True
    workers: int = field(default_factory=usable_cpus)


FULL = Config()
QUICK = Config(seeds=3, pages=40, budgets=(0.5, 1.0), oracle_seeds=1, tune=False)
#: Bounds shared by every policy in E3: 1 min .. 1 day; first period 10 min (the scheduler defaults' spirit).
E3_MIN_S, E3_MAX_S, E3_INITIAL_S = 1 * MIN, DAY, 10 * MIN
#: E0: the paper's test.
E0_ITEM_PERIOD_S, E0_INITIAL_S, E0_MAX_S = 10 * MIN, 1 * MIN, DAY

PolicyFactory = Callable[[dict[str, Any]], RevisitPolicy]


@dataclass(frozen=True)
class Contender:
    """A policy under test: its factory, its detector and the knob values tuning may choose from (first = default)."""

    label: str
    #: Short name for the headline keys in docs/bench/revisit.json.
    slug: str
    factory: PolicyFactory
    detector: str
    knobs: tuple[dict[str, Any], ...] = ({},)


def _bounds() -> tuple[float, float, float]:
    """(min, max, first) period shared by every E3 policy."""
    return E3_MIN_S, E3_MAX_S, E3_INITIAL_S


CONTENDERS: tuple[Contender, ...] = (
    Contender("fixed (uniform)", "fixed", lambda k: FixedPolicy(*_bounds()), "exact"),
    Contender(
        "shhd (paper, simhash)",
        "shhd_paper",
        lambda k: ShhdPolicy(*_bounds(), **k),
        "simhash",
        ({}, {"slow_start": False}),
    ),
    Contender(
        "shhd (ideal detector)",
        "shhd_ideal",
        lambda k: ShhdPolicy(*_bounds(), detector="count", **k),
        "count",
        ({}, {"slow_start": False}),
    ),
    Contender(
        "nutch (xml defaults)",
        "nutch",
        lambda k: NutchPolicy(*_bounds(), **k),
        "exact",
        ({}, {"inc_rate": 0.2, "dec_rate": 0.2, "sync_delta_rate": 0.2}, {"sync_delta": False}),
    ),
    Contender(
        "cho (irregular MLE)",
        "cho",
        lambda k: ChoPolicy(*_bounds(), **k),
        "exact",
        ({}, {"target_p": 0.3}, {"target_p": 0.7}),
    ),
    Contender("sart (our reading)", "sart", lambda k: SartPolicy(*_bounds()), "exact"),
    Contender(
        "rate (ours)",
        "rate",
        lambda k: RatePolicy(*_bounds(), **k),
        "exact",
        ({}, {"half_life_s": 48 * HOUR}, {"burst_fade_s": None}),
    ),
    Contender("rate, newest item time only", "rate_newest", lambda k: RatePolicy(*_bounds()), "newest"),
    Contender(
        "rate, Poisson only (before #7)",
        "rate_poisson",
        lambda k: RatePolicy(*_bounds(), periodic=False, diurnal=False, burst_fade_s=None),
        "exact",
    ),
)


def contender(slug: str) -> Contender:
    """The contender with this slug."""
    return next(c for c in CONTENDERS if c.slug == slug)


def run_contender(
    c: Contender,
    knob: dict[str, Any],
    pages: Sequence[Page],
    horizon: Horizon,
    mult: float,
    content: ContentModel | None,
    rng_seed: Sequence[int],
) -> Result:
    """E3: contender ``c`` with ``knob`` on ``pages`` under a global budget of ``mult`` x their total item rate,
    within the shared period bounds; ``rng_seed`` seeds the phase of the fetch slots."""
    return run_budget(
        pages,
        c.factory(knob),
        Detector(c.detector, content),
        horizon,
        mult * sum(p.rate for p in pages),
        E3_MIN_S,
        E3_MAX_S,
        np.random.default_rng(list(rng_seed)),
    )
