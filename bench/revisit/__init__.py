"""``icecrawler bench revisit [--quick]``: the revisit-policy benchmark (docs/REVISIT.md).

E0 replays the SHHD paper's ECSHOP test (one review every 10 min, first period 1 min) on one page, with the real
simhash detector on several page layouts and with an ideal detector. E3 runs a many-page mixture under a global
fetch budget B (every policy spends exactly the same fetches) against the known-rate square-root bound (O2) and the
clairvoyant offline oracle (O1). Knobs are tuned on TUNING_SEEDS; tables report REPORT seeds only.

The full run writes docs/bench/revisit.json, docs/revisit/*.png and the results block of docs/REVISIT.md;
``--quick`` (fewer seeds and pages) only prints, unless ``--write`` is given; ``--ablation`` prints what each forecast
of the rate policy is worth, on the development seeds ABLATION_SEEDS (never the reported ones).
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from bench.revisit.content import ContentModel
from bench.revisit.oracle import offline_lag, sqrt_bound
from bench.revisit.publish import merge_json, write_block
from bench.revisit.sim import Detector, Horizon, mean_ci, run_budget, run_single
from bench.revisit.traces import DAY, HOUR, Page, mixture, periodic
from shhd.fingerprint import tokenize
from shhd.policies import ChoPolicy, FixedPolicy, NutchPolicy, RatePolicy, RevisitPolicy, SartPolicy, ShhdPolicy

__all__ = ["Config", "main"]

MIN = 60.0
ROOT = Path(__file__).resolve().parents[2]
#: Seeds used only to pick each policy's knob; never reported.
TUNING_SEEDS = (0, 1)
#: Budget (x total item rate) at which knobs are tuned.
TUNING_BUDGET = 0.5
#: First seed of the reported set (seeds REPORT_BASE .. REPORT_BASE + seeds - 1).
REPORT_BASE = 1000


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
    workers: int = 2


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


def _variants(knobs: dict[str, dict[str, Any]]) -> list[tuple[str, Contender, dict[str, Any]]]:
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
        for label, c, knob in _variants(knobs):
            res = run_budget(
                pages,
                c.factory(knob),
                Detector(c.detector, content),
                horizon,
                budget,
                E3_MIN_S,
                E3_MAX_S,
                np.random.default_rng([seed, 4, int(mult * 1000)]),
            )
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


def _tune(cfg: Config, pool: Any) -> dict[str, dict[str, Any]]:
    """Pick each contender's knob by mean lag at B = 0.5x on TUNING_SEEDS (2-3 choices for every knobbed policy)."""
    chosen: dict[str, dict[str, Any]] = {}
    tune_cfg = replace(cfg, budgets=(TUNING_BUDGET,))
    jobs = [(c, i, k) for c in CONTENDERS for i, k in enumerate(c.knobs) if len(c.knobs) > 1]
    results = pool.starmap(_tune_job, [(c.label, i, s, tune_cfg) for c, i, _ in jobs for s in TUNING_SEEDS])
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
    budget = TUNING_BUDGET * sum(p.rate for p in pages)
    res = run_budget(
        pages,
        c.factory(c.knobs[knob_index]),
        Detector(c.detector, ContentModel(seed)),
        horizon,
        budget,
        E3_MIN_S,
        E3_MAX_S,
        np.random.default_rng([seed, 5]),
    )
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
    budget = mult * sum(p.rate for p in pages)
    res = run_budget(
        pages,
        RatePolicy(*_bounds(), **ABLATION[index][1]),
        Detector("exact"),
        horizon,
        budget,
        E3_MIN_S,
        E3_MAX_S,
        np.random.default_rng([seed, 4, int(mult * 1000)]),
    )
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
            cells += [f"{mean:.2f}", _fmt(*ratio, 3)]
        rows.append(cells)
    return (
        f"Ablation of the rate policy on development seeds {ABLATION_SEEDS[0]}..{ABLATION_SEEDS[-1]} "
        f"({cfg.pages} pages; mean lag in minutes, paired ratio to the default ± 95% CI):\n\n"
        + _table(["variant", "knobs", "B = 0.5×: lag", "÷ default", "B = 1×: lag", "÷ default"], rows)
    )


# ----------------------------------------------------------------------------------------------------------------
# reporting


def _fmt(mean: float, hw: float, digits: int = 2) -> str:
    return f"{mean:.{digits}f}" if hw != hw else f"{mean:.{digits}f} ± {hw:.{digits}f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _agg(per_seed: Sequence[dict[str, Any]], key: str) -> tuple[float, float]:
    return mean_ci([s[key] for s in per_seed if key in s])


def report(
    cfg: Config,
    e0: list[dict[str, Any]],
    e3: list[dict[str, Any]],
    knobs: dict[str, dict[str, Any]],
    seconds: float,
    command: str,
) -> tuple[str, dict[str, float]]:
    """Markdown tables and flat headline numbers."""
    head: dict[str, float] = {}
    md = [
        f"Command: `{command}`; {cfg.seeds} report seeds ({REPORT_BASE}..{REPORT_BASE + cfg.seeds - 1}), "
        f"tuning seeds {list(TUNING_SEEDS) if cfg.tune else 'none (defaults)'}; run time {seconds:.0f} s. "
        "Means ± 95% CI over seeds; lags in minutes.",
        "",
        f"### E0: one review every 10 min, first period 1 min ({cfg.e0_days:g} days, one page)",
        "",
    ]
    rows = []
    for v in E0_VARIANTS:
        per = [s[v.label]["summary"] for s in e0]
        m = {
            k: _agg(per, k)
            for k in (
                "fetches",
                "hit_rate",
                "believed_hit_rate",
                "lag_mean_min",
                "lag_p95_min",
                "settled_period_min",
                "d_one_review_mean",
                "p_shrink_one_review",
            )
        }
        rows.append(
            [
                v.label,
                _fmt(*m["fetches"], 0),
                _fmt(*m["hit_rate"]),
                _fmt(*m["believed_hit_rate"]),
                _fmt(*m["lag_mean_min"]),
                _fmt(*m["lag_p95_min"]),
                _fmt(*m["settled_period_min"]),
                _fmt(*m["d_one_review_mean"], 1) if v.policy == "shhd" and v.detector == "simhash" else "",
                _fmt(*m["p_shrink_one_review"]) if v.policy == "shhd" and v.detector == "simhash" else "",
            ]
        )
        key = "e0_" + v.label.split(",")[0].split(" ")[0] + "_" + str(E0_VARIANTS.index(v))
        head[f"{key}_settled_period_min"] = round(m["settled_period_min"][0], 3)
        head[f"{key}_lag_mean_min"] = round(m["lag_mean_min"][0], 3)
    md.append(
        _table(
            [
                "variant",
                "fetches",
                "hit rate",
                "believed hit",
                "mean lag",
                "p95 lag",
                "settled period",
                "mean d (1 review)",
                "P(d≥25 | 1 review)",
            ],
            rows,
        )
    )
    trace_rows = []
    first = e0[0]
    for v in (E0_VARIANTS[0], E0_VARIANTS[1], E0_VARIANTS[3], E0_VARIANTS[4]):
        tr = first[v.label]["trace"][:16]
        trace_rows.append([v.label, " ".join(f"{p / 60:g}" for _, p, _ in tr), " ".join(str(d) for _, _, d in tr)])
    md += [
        "",
        f"Period sequence of seed {REPORT_BASE} (minutes after each of the first 16 fetches) and the Hamming "
        "distance each fetch saw:",
        "",
        _table(["variant", "periods (min)", "distances"], trace_rows),
        "",
    ]
    for mult in cfg.budgets:
        per_b = [s[str(mult)] for s in e3]
        labels = [label for label, _, _ in _variants(knobs)] + ["O2 sqrt bound (known rates)"]
        slugs = {label: c.slug + ("_tuned" if label != c.label else "") for label, c, _ in _variants(knobs)}
        slugs.update({"O2 sqrt bound (known rates)": "sqrt_bound", "O1 offline oracle": "offline_oracle"})
        if "O1 offline oracle" in per_b[0]:
            labels.append("O1 offline oracle")
        sqrt_lag = _agg([r["O2 sqrt bound (known rates)"] for r in per_b], "lag_mean_min")[0]
        rate_lag = _agg([r["rate (ours)"] for r in per_b], "lag_mean_min")[0]
        rows = []
        for label in labels:
            per = [r[label] for r in per_b if label in r]
            lag = _agg(per, "lag_mean_min")
            cells = [
                label,
                _fmt(*_agg(per, "fetches"), 0) if "fetches" in per[0] else "",
                _fmt(*_agg(per, "hit_rate")) if "hit_rate" in per[0] else "",
                _fmt(*_agg(per, "believed_hit_rate")) if "hit_rate" in per[0] else "",
                _fmt(*lag),
            ]
            for k in ("lag_p95_min", "lag_p99_min", "uncaught", "freshness", "harmonic_staleness"):
                cells.append(_fmt(*_agg(per, k), 0 if k == "uncaught" else 2) if k in per[0] else "")
            cells += [f"{lag[0] / rate_lag:.2f}", f"{lag[0] / sqrt_lag:.2f}"]
            rows.append(cells)
            head[f"e3_b{mult:g}_{slugs[label]}_lag_mean_min"] = round(lag[0], 3)
        paired = []
        for label in [x for x in labels if slugs[x].startswith(("shhd_paper", "nutch", "sqrt_bound"))]:
            ratio = mean_ci([r["rate (ours)"]["lag_mean_min"] / r[label]["lag_mean_min"] for r in per_b])
            paired.append(f"{label} {_fmt(*ratio, 3)}")
            head[f"e3_b{mult:g}_rate_over_{slugs[label]}_paired_ratio"] = round(ratio[0], 3)
            head[f"e3_b{mult:g}_rate_over_{slugs[label]}_paired_ratio_ci95"] = round(ratio[1], 3)
        md += [
            f"### E3: {cfg.pages}-page mixture, global budget B = {mult:g} × total item rate",
            "",
            _table(
                [
                    "policy",
                    "fetches",
                    "hit rate",
                    "believed hit",
                    "mean lag",
                    "p95",
                    "p99",
                    "uncaught",
                    "freshness",
                    "harmonic staleness",
                    "× rate (ours)",
                    "× sqrt bound",
                ],
                rows,
            ),
            "",
            "Per-seed (paired) ratio of rate's mean lag to: " + "; ".join(paired) + ".",
            "",
        ]
        for base in [x for x in slugs.values() if x.startswith(("shhd_paper", "nutch"))]:
            head[f"e3_b{mult:g}_rate_over_{base}_ratio"] = round(
                rate_lag / head[f"e3_b{mult:g}_{base}_lag_mean_min"], 3
            )
        head[f"e3_b{mult:g}_rate_over_sqrt_bound_ratio"] = round(rate_lag / sqrt_lag, 3)
    if knobs:
        md += [
            f"Knobs chosen on the tuning seeds (B = {TUNING_BUDGET:g}×, mean lag; each policy with a knob got 2–3 "
            "choices, the first being the default): " + "; ".join(f"{k}: {v or 'defaults'}" for k, v in knobs.items()),
            "",
        ]
    head["run_seconds_s"] = round(seconds, 1)
    return "\n".join(md), head


def plots(
    cfg: Config, e0: list[dict[str, Any]], e3: list[dict[str, Any]], knobs: dict[str, dict[str, Any]], outdir: Path
) -> None:
    """Lag vs fetch rate per policy (E3) and the E0 period trajectory."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    outdir.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    labels = [label for label, _, _ in _variants(knobs)] + ["O2 sqrt bound (known rates)"]
    for label in labels:
        ys = [mean_ci([s[str(b)][label]["lag_mean_min"] for s in e3])[0] for b in cfg.budgets]
        ax.plot(cfg.budgets, ys, marker="o", label=label, linestyle="--" if label.startswith("O") else "-")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("fetch budget B / total item rate")
    ax.set_ylabel("mean capture lag (min)")
    ax.set_title(f"E3: {cfg.pages}-page mixture, {cfg.seeds} seeds")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(outdir / "e3_lag_vs_budget.png", dpi=110)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for v in E0_VARIANTS[:5]:
        tr = e0[0][v.label]["trace"]
        ax.step([t / 60 for t, _, _ in tr], [p / 60 for _, p, _ in tr], where="post", label=v.label)
    ax.axhline(10, color="grey", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_xlabel("time (min)")
    ax.set_ylabel("period after the fetch (min)")
    ax.set_title("E0: SHHD period trajectory, one review every 10 min")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(outdir / "e0_period_trajectory.png", dpi=110)
    plt.close(fig)


def _warm_up() -> None:
    tokenize("预热")  # initialise jieba once in the parent, so forked workers share it


def _main_traces(args: argparse.Namespace, command: str) -> int:
    from bench.revisit.real import RealConfig, run_traces
    from bench.revisit.replay import TraceError

    cfg = RealConfig(
        args.traces,
        seeds=args.seeds or (2 if args.quick else 5),
        half=args.half,
        targets=args.targets,
        tune=not args.quick,
        oracle=not args.quick,
        workers=args.workers or 2,
    )
    _warm_up()
    try:
        with multiprocessing.get_context("fork").Pool(cfg.workers) as pool:
            print(run_traces(cfg, pool, command.strip(), write=not args.quick or args.write))
    except TraceError as exc:
        print(f"icecrawler bench revisit: {exc}", file=sys.stderr)
        return 2
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="icecrawler bench revisit", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small config (< 2 min on 2 cores), prints only")
    parser.add_argument("--write", action="store_true", help="with --quick: write docs and json anyway")
    parser.add_argument("--seeds", type=int, help="override the number of report seeds")
    parser.add_argument("--pages", type=int, help="override the E3 page count")
    parser.add_argument("--workers", type=int, help="worker processes (default 2)")
    parser.add_argument("--e0-days", type=float, help="override the E0 horizon (days)")
    parser.add_argument("--end-days", type=float, help="override the E3 end of item arrivals (days)")
    parser.add_argument(
        "--ablation",
        action="store_true",
        help="only the rate policy's ablation on the development seeds (prints a table)",
    )
    parser.add_argument("--traces", type=Path, help="E3 on real traces instead (JSONL; see bench/revisit/real.py)")
    parser.add_argument("--half", choices=("report", "dev", "all"), default="report", help="with --traces")
    parser.add_argument("--targets", type=int, help="with --traces: targets per seed (default: all of the half)")
    args = parser.parse_args(argv)
    if args.traces is not None:
        return _main_traces(args, "icecrawler bench revisit " + " ".join(argv))
    cfg = QUICK if args.quick else FULL
    overrides = {
        "seeds": args.seeds,
        "pages": args.pages,
        "workers": args.workers,
        "e0_days": args.e0_days,
        "end_days": args.end_days,
    }
    cfg = replace(cfg, **{k: v for k, v in overrides.items() if v is not None})
    command = "icecrawler bench revisit " + " ".join(argv)
    started = time.monotonic()
    _warm_up()
    ctx = multiprocessing.get_context("fork")
    if args.ablation:
        with ctx.Pool(cfg.workers) as pool:
            print(ablation(cfg, pool))
        return 0
    with ctx.Pool(cfg.workers) as pool:
        knobs = _tune(cfg, pool) if cfg.tune else {}
        seeds = [REPORT_BASE + k for k in range(cfg.seeds)]
        e0 = pool.starmap(e0_seed, [(s, cfg) for s in seeds])
        e3 = pool.starmap(e3_seed, [(s, cfg, knobs, k < cfg.oracle_seeds) for k, s in enumerate(seeds)])
    seconds = time.monotonic() - started
    md, head = report(cfg, e0, e3, knobs, seconds, command.strip())
    print(md)
    if not args.quick or args.write:
        merge_json(ROOT / "docs" / "bench" / "revisit.json", head, lambda k: not k.startswith("real_"))
        plots(cfg, e0, e3, knobs, ROOT / "docs" / "revisit")
        write_block(ROOT / "docs" / "REVISIT.md", md)
    sys.stdout.flush()
    return 0
