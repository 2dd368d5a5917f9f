"""The synthetic experiments of the revisit benchmark: E0 (the SHHD paper's test on one page), E3 (the many-page
mixture under a global budget, with knob tuning) and the ablation of the rate policy's forecasts."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from bench.revisit.contenders import (
    CONTENDERS,
    E0_INITIAL_S,
    E0_ITEM_PERIOD_S,
    E0_MAX_S,
    REPORT_BASE,
    TUNING_BUDGET,
    TUNING_SEEDS,
    Config,
    Contender,
    contender,
    run_contender,
)
from bench.revisit.content import ContentModel
from bench.revisit.oracle import offline_lag, sqrt_bound
from bench.revisit.progress import Progress, starmap_with_progress
from bench.revisit.publish import fmt, table
from bench.revisit.sim import Detector, Horizon, mean_ci, run_single
from bench.revisit.traces import DAY, HOUR, Page, mixture, periodic
from shhd.policies import FixedPolicy, NutchPolicy, RatePolicy, RevisitPolicy, ShhdPolicy

__all__ = ["ABLATION", "E0_VARIANTS", "ablation", "e0_seed", "e3_seed", "tune", "variants"]

# ----------------------------------------------------------------------------------------------------------------
# E0: the paper's ECSHOP test


@dataclass(frozen=True)
class E0Variant:
    label: str
    detector: str
    window: int = 10
    chrome_words: int = 0
    noise_block: bool = False
    policy: str = "shhd"


E0_VARIANTS: tuple[E0Variant, ...] = (
    E0Variant("shhd, simhash of the 10-review window", "simhash"),
    E0Variant("shhd, simhash of the full page (300-word chrome + counter + 10 reviews)", "simhash", 10, 300, True),
    E0Variant("shhd, simhash of an append-only review list", "simhash", 10_000),
    E0Variant("shhd, simhash of the newest review only (fix A)", "simhash", 1),
    E0Variant("shhd, ideal detector d = 64*[new items] (fix B)", "count"),
    E0Variant("nutch, exact digest", "exact", policy="nutch"),
    E0Variant("rate (ours)", "exact", policy="rate"),
    E0Variant("fixed 10 min", "exact", policy="fixed"),
)


def _e0_policy(v: E0Variant) -> RevisitPolicy:
    b = (E0_INITIAL_S, E0_MAX_S, E0_INITIAL_S)
    if v.policy == "shhd":
        return ShhdPolicy(*b, detector="count" if v.detector == "count" else "simhash")
    if v.policy == "nutch":
        return NutchPolicy(*b)
    if v.policy == "rate":
        return RatePolicy(*b)
    return FixedPolicy(E0_INITIAL_S, E0_MAX_S, E0_ITEM_PERIOD_S)


def e0_seed(seed: int, cfg: Config) -> dict[str, Any]:
    """All E0 variants on one seed's page; returns per-variant summaries, distances and period traces."""
    rng = np.random.default_rng([seed, 0])
    horizon = Horizon(0.0, cfg.e0_days * DAY, 0.25 * DAY)
    page = Page("periodic", 1 / E0_ITEM_PERIOD_S, periodic(rng, E0_ITEM_PERIOD_S, horizon.end_s, jitter=0.0))
    out: dict[str, Any] = {}
    for v in E0_VARIANTS:
        content = ContentModel(seed, window=v.window, chrome_words=v.chrome_words, noise_block=v.noise_block)
        det = Detector(v.detector, content)
        res = run_single(page, _e0_policy(v), det, horizon, trace=True)
        last = [p for t, p, _ in res.periods if t > horizon.end_s - 0.5 * DAY and t <= horizon.end_s]
        summary = res.summary()
        summary["settled_period_min"] = float(np.median(last)) / 60 if last else float("nan")
        one_review = [
            d for (t, _, d), prev in zip(res.periods[1:], res.periods, strict=False) if _count(page, prev[0], t) == 1
        ]
        summary["d_one_review_mean"] = float(np.mean(one_review)) if one_review else float("nan")
        summary["p_shrink_one_review"] = float(np.mean([d >= 25 for d in one_review])) if one_review else 0.0
        out[v.label] = {"summary": summary, "trace": res.periods[:40] if seed == REPORT_BASE else []}
    return out


def _count(page: Page, t0: float, t1: float) -> int:
    return int(np.searchsorted(page.arrivals, t1, side="right") - np.searchsorted(page.arrivals, t0, side="right"))


# ----------------------------------------------------------------------------------------------------------------
# E3: many pages, global budget


def variants(knobs: dict[str, dict[str, Any]]) -> list[tuple[str, Contender, dict[str, Any]]]:
    """Every contender with its defaults, plus a "tuned" row where tuning chose a non-default knob."""
    out: list[tuple[str, Contender, dict[str, Any]]] = []
    for c in CONTENDERS:
        out.append((c.label, c, {}))
        if knobs.get(c.label):
            out.append((_tuned(c.label), c, knobs[c.label]))
    return out


def _tuned(label: str) -> str:
    return f"{label}, tuned"


def _e3_world(seed: int, cfg: Config) -> tuple[list[Page], Horizon]:
    horizon = Horizon(cfg.warmup_days * DAY, cfg.end_days * DAY, cfg.drain_days * DAY)
    return mixture(np.random.default_rng([seed, 3]), cfg.pages, horizon.end_s), horizon


def e3_seed(seed: int, cfg: Config, knobs: dict[str, dict[str, Any]], oracle: bool) -> dict[str, Any]:
    """Every contender at every budget on one seed's page population (common random numbers)."""
    pages, horizon = _e3_world(seed, cfg)
    total_rate = sum(p.rate for p in pages)
    content = ContentModel(seed, window=10)
    out: dict[str, Any] = {}
    for mult in cfg.budgets:
        budget = mult * total_rate
        row: dict[str, Any] = {}
        for label, c, knob in variants(knobs):
            res = run_contender(c, knob, pages, horizon, mult, content, [seed, 4, int(mult * 1000)])
            row[label] = res.summary()
        row["O2 sqrt bound (known rates)"] = {"lag_mean_min": sqrt_bound([p.rate for p in pages], budget) / 60}
        if oracle:
            scored = [p.arrivals[p.arrivals >= horizon.warmup_s] for p in pages]
            k = int(budget * (horizon.end_s + horizon.drain_s - horizon.warmup_s))
            n_items = sum(s.size for s in scored)
            total = offline_lag([s.tolist() for s in scored], k, horizon.end_s + horizon.drain_s, iterations=30)
            row["O1 offline oracle"] = {"lag_mean_min": total / max(n_items, 1) / 60}
        out[str(mult)] = row
    return out


def tune(cfg: Config, pool: Any, progress: Progress | None = None) -> dict[str, dict[str, Any]]:
    """Pick each contender's knob by mean lag at B = 0.5x on TUNING_SEEDS (2-3 choices for every knobbed policy)."""
    chosen: dict[str, dict[str, Any]] = {}
    tune_cfg = replace(cfg, budgets=(TUNING_BUDGET,))
    jobs = [(c, i, k) for c in CONTENDERS for i, k in enumerate(c.knobs) if len(c.knobs) > 1]
    runs = [(c.label, i, s, tune_cfg) for c, i, _ in jobs for s in TUNING_SEEDS]
    results = starmap_with_progress(pool, _tune_job, runs, progress or Progress(), "tuning runs")
    scores: dict[tuple[str, int], list[float]] = {}
    for (label, i), lag in results:
        scores.setdefault((label, i), []).append(lag)
    for c in CONTENDERS:
        if len(c.knobs) > 1:
            best = min(range(len(c.knobs)), key=lambda i: float(np.mean(scores[(c.label, i)])))
            chosen[c.label] = c.knobs[best]
    return chosen


def _tune_job(label: str, knob_index: int, seed: int, cfg: Config) -> tuple[tuple[str, int], float]:
    c = next(x for x in CONTENDERS if x.label == label)
    pages, horizon = _e3_world(seed, cfg)
    res = run_contender(c, c.knobs[knob_index], pages, horizon, TUNING_BUDGET, ContentModel(seed), [seed, 5])
    return (label, knob_index), res.summary()["lag_mean_min"]


# ----------------------------------------------------------------------------------------------------------------
# ablation of the rate policy's forecasts (development seeds only)

#: Seeds the forecasts of the rate policy were developed on (never the reported ones).
ABLATION_SEEDS = tuple(range(20, 40))
#: Rate-policy variants of the ablation: the default, then one forecast off (or one knob changed) at a time.
ABLATION: tuple[tuple[str, dict[str, Any]], ...] = (
    ("rate (default)", {}),
    ("without the clock forecast", {"periodic": False}),
    ("without the daily profile", {"diurnal": False}),
    ("without the burst forecast", {"burst_fade_s": None}),
    ("half-life 48 h instead of 24 h", {"half_life_s": 48 * HOUR}),
    ("Poisson only (the default before #7)", {"periodic": False, "diurnal": False, "burst_fade_s": None}),
)


def _ablation_job(index: int, seed: int, mult: float, cfg: Config) -> tuple[int, int, float, float]:
    pages, horizon = _e3_world(seed, cfg)
    res = run_contender(contender("rate"), ABLATION[index][1], pages, horizon, mult, None, [seed, 4, int(mult * 1000)])
    return index, seed, mult, res.summary()["lag_mean_min"]


def ablation(cfg: Config, pool: Any) -> str:
    """Mean lag of each ABLATION variant on ABLATION_SEEDS at B = 0.5x and 1x, and its paired ratio to the
    default: what each forecast is worth, measured away from the reported seeds."""
    jobs = [(i, s, m, cfg) for i in range(len(ABLATION)) for s in ABLATION_SEEDS for m in (0.5, 1.0)]
    lags = {(i, s, m): lag for i, s, m, lag in pool.starmap(_ablation_job, jobs)}
    rows = []
    for i, (label, knob) in enumerate(ABLATION):
        cells = [label, str(knob or "defaults")]
        for m in (0.5, 1.0):
            mean = float(np.mean([lags[(i, s, m)] for s in ABLATION_SEEDS]))
            ratio = mean_ci([lags[(i, s, m)] / lags[(0, s, m)] for s in ABLATION_SEEDS])
            cells += [f"{mean:.2f}", fmt(*ratio, 3)]
        rows.append(cells)
    return (
        f"Ablation of the rate policy on development seeds {ABLATION_SEEDS[0]}..{ABLATION_SEEDS[-1]} "
        f"({cfg.pages} pages; mean lag in minutes, paired ratio to the default ± 95% CI):\n\n"
        + table(["variant", "knobs", "B = 0.5×: lag", "÷ default", "B = 1×: lag", "÷ default"], rows)
    )
