"""``icecrawler bench revisit --traces FILE.jsonl``: E3 (global fetch budget) on real publication times.

Each trace becomes one simulated page (``bench.revisit.replay``: its last window of days, as long as the median trace,
shifted by whole days, at least 7 days of warm-up, 1 day of drain). Item text for the simhash detector is synthesised
per arrival by the same content model as the synthetic mixture (``bench.revisit.content``: seeded Chinese review-like
texts, the page shows the latest 10 items), so no real text is needed. Every policy spends the same fetches
(``sim.run_budget``: one fetch every 1/B seconds), B = multiple x the total mean item rate of the population; the
square-root bound (O2) is given each trace's mean rate over the scored span. Targets are split into a development half
(knob tuning, per budget) and a report half; each report seed is a bootstrap resample of the report half's targets (and
its own fetch phase and item texts), so the 95 % intervals over seeds include which targets happened to be collected.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from bench.revisit.contenders import (
    CONTENDERS,
    E3_INITIAL_S,
    E3_MAX_S,
    E3_MIN_S,
    ROOT,
    Contender,
    run_contender,
    usable_cpus,
)
from bench.revisit.content import ContentModel
from bench.revisit.oracle import offline_lag, sqrt_bound
from bench.revisit.progress import Progress, starmap_with_progress
from bench.revisit.publish import code_span, fmt, merge_json, table, write_block
from bench.revisit.replay import (
    FITTED_WINDOW_RULE,
    Trace,
    TraceError,
    Windowing,
    fit_windowing,
    load_traces,
    median_covered_days,
    split_halves,
    warn_on_stderr,
    window_pages,
    window_traces,
)
from bench.revisit.sim import Detector, Horizon, mean_ci, run_single
from bench.revisit.traces import DAY, Page
from icecrawler import durable
from sandbox.tracefile import is_weibo_trace
from shhd.policies import ChoPolicy, NutchPolicy, RatePolicy, RevisitPolicy, ShhdPolicy

__all__ = [
    "BASELINES",
    "OpenedTraces",
    "RealConfig",
    "check_half",
    "most_often",
    "open_traces",
    "run_one",
    "run_traces",
    "sample_targets",
    "window_items",
]

MIN = 60.0
BUDGETS = (0.25, 0.5, 1.0, 2.0)
#: Seeds of the tuning runs (development half) and the first report seed.
TUNING_SEEDS = (0, 1)
REPORT_BASE = 1000
#: The contenders of the real-trace run (slugs of bench.revisit.CONTENDERS), the default policy first.
SLUGS = ("rate", "fixed", "shhd_paper", "nutch", "cho")
#: The baselines the default policy is compared with ("best of"), by slug; tuned rows count too.
BASELINES = ("shhd_paper", "nutch", "cho")
DEFAULT_LABEL = "rate (ours)"
SQRT_LABEL = "O2 sqrt bound (known mean rates)"
ORACLE_LABEL = "O1 offline oracle"
#: The period bounds every policy gets (the E3 defaults: 1 min .. 1 day, first period 10 min).
_MIN_S, _MAX_S, _INITIAL_S = E3_MIN_S, E3_MAX_S, E3_INITIAL_S


@dataclass(frozen=True)
class RealConfig:
    path: Path
    seeds: int = 5
    half: str = "report"
    targets: int | None = None
    budgets: tuple[float, ...] = BUDGETS
    tune: bool = True
    oracle: bool = True
    workers: int = field(default_factory=usable_cpus)
    #: The window and warm-up; None: fitted to the traces (``fit_windowing``). ``open_traces`` fits them to the
    #: whole file once, and both runs hand them to their jobs.
    window_days: float | None = None
    warmup_days: float | None = None
    #: The default policy's knobs changed for the development harness (``--rate KEY=VALUE``); the recorded run
    #: always runs the defaults.
    rate_knobs: dict[str, Any] = field(default_factory=dict)


def _windowing(cfg: RealConfig, traces: Sequence[Trace]) -> Windowing:
    return fit_windowing(traces, cfg.window_days, cfg.warmup_days)


def _contenders() -> list[Contender]:
    by_slug = {c.slug: c for c in CONTENDERS}
    return [by_slug[s] for s in SLUGS]


def sample_targets(traces: Sequence[Trace], seed: int, count: int | None, bootstrap: bool) -> list[Trace]:
    """The targets of one seed: a bootstrap resample (report seeds) or a plain subsample (``count`` < all)."""
    rng = np.random.default_rng([seed, 21])
    n = len(traces) if count is None else min(count, len(traces))
    if bootstrap:
        return [traces[int(k)] for k in rng.integers(0, len(traces), n)]
    return (
        [traces[int(k)] for k in sorted(rng.choice(len(traces), n, replace=False))] if n < len(traces) else list(traces)
    )


def run_one(
    pages: Sequence[Page],
    horizon: Horizon,
    c: Contender,
    knob: dict[str, Any],
    seed: int,
    mult: float,
    content: ContentModel,
) -> tuple[dict[str, float], list[float], list[int]]:
    """One contender on one population at one budget: its summary, and per page its lag and scored items. The fetch
    slots' phase follows from (seed, budget) alone, so every run with the same seed and budget, here or in the
    development harness, puts its fetches at the same times."""
    res = run_contender(c, knob, pages, horizon, mult, content, [seed, 4, int(mult * 1000)])
    return res.summary(), res.page_lag_s, res.page_items


def _tune_job(
    traces: Sequence[Trace], cfg: RealConfig, slug: str, index: int, seed: int, mult: float
) -> tuple[str, int, float, float]:
    c = next(x for x in _contenders() if x.slug == slug)
    windowing = _windowing(cfg, traces)
    pages = window_pages(sample_targets(traces, seed, cfg.targets, bootstrap=False), windowing)
    summary, _, _ = run_one(pages, windowing.horizon(), c, c.knobs[index], seed, mult, ContentModel(seed))
    return slug, index, mult, summary["lag_mean_min"]


def _tune_jobs(dev: Sequence[Trace], cfg: RealConfig) -> list[tuple[Any, ...]]:
    """The runs of ``tune``: every knob of every knobbed baseline, per tuning seed and budget."""
    return [
        (dev, cfg, c.slug, i, s, m)
        for c in _contenders()
        if len(c.knobs) > 1 and c.slug in BASELINES
        for i in range(len(c.knobs))
        for s in TUNING_SEEDS
        for m in cfg.budgets
    ]


def tune(
    dev: Sequence[Trace], cfg: RealConfig, pool: Any, progress: Progress | None = None
) -> dict[tuple[str, float], dict[str, Any]]:
    """Each knobbed baseline's knob per budget, by mean lag on the development half (TUNING_SEEDS)."""
    jobs = _tune_jobs(dev, cfg)
    scores: dict[tuple[str, int, float], list[float]] = {}
    done = starmap_with_progress(pool, _tune_job, jobs, progress or Progress(), "tuning runs (development half)")
    for slug, i, m, lag in done:
        scores.setdefault((slug, i, m), []).append(lag)
    chosen: dict[tuple[str, float], dict[str, Any]] = {}
    for c in _contenders():
        for m in cfg.budgets:
            options = [i for i in range(len(c.knobs)) if (c.slug, i, m) in scores]
            if options:
                best = min(options, key=lambda i: float(np.mean(scores[(c.slug, i, m)])))
                if best:
                    chosen[(c.slug, m)] = c.knobs[best]
    return chosen


def budget_job(
    traces: Sequence[Trace], cfg: RealConfig, knobs: dict[tuple[str, float], dict[str, Any]], seed: int, mult: float
) -> dict[str, Any]:
    """Every contender at one budget on seed ``seed``'s bootstrap population: one job of the run, so that a long run
    reports its progress budget by budget (the population, fetch phase and item texts follow from the seed alone)."""
    population = sample_targets(traces, seed, cfg.targets, bootstrap=True)
    windowing = _windowing(cfg, traces)
    pages = window_pages(population, windowing)
    horizon = windowing.horizon()
    sources = [t.source for t in population]
    content = ContentModel(seed, window=10)
    row: dict[str, Any] = {}
    for c in _contenders():
        variants: list[tuple[str, dict[str, Any]]] = [(c.label, {})]
        if (c.slug, mult) in knobs:
            variants.append((f"{c.label}, tuned", knobs[(c.slug, mult)]))
        for label, knob in variants:
            summary, lag_s, caught = run_one(pages, horizon, c, knob, seed, mult, content)
            cell: dict[str, Any] = dict(summary)
            cell["by_source"] = {
                s: [
                    sum(x for x, z in zip(lag_s, sources, strict=True) if z == s),
                    sum(x for x, z in zip(caught, sources, strict=True) if z == s),
                ]
                for s in sorted(set(sources))
            }
            row[label] = cell
    budget = mult * sum(p.rate for p in pages)
    row[SQRT_LABEL] = {"lag_mean_min": sqrt_bound([p.rate for p in pages], budget) / 60}
    if cfg.oracle:
        scored = [p.arrivals[(p.arrivals >= horizon.warmup_s) & (p.arrivals < horizon.end_s)] for p in pages]
        k = int(budget * (horizon.end_s + horizon.drain_s - horizon.warmup_s))
        end = horizon.end_s + horizon.drain_s
        total = offline_lag([s.tolist() for s in scored], k, end, iterations=30)
        row[ORACLE_LABEL] = {"lag_mean_min": total / max(sum(s.size for s in scored), 1) / 60}
    return row


def _labels(knobs: dict[tuple[str, float], dict[str, Any]], mult: float) -> list[tuple[str, str]]:
    """(label, slug) of every row at one budget, default policy first, tuned rows after their default."""
    out = []
    for c in _contenders():
        out.append((c.label, c.slug))
        if (c.slug, mult) in knobs:
            out.append((f"{c.label}, tuned", c.slug + "_tuned"))
    return out


def _by_name(counts: dict[str, int]) -> str:
    """``120 targets (git-author 44, weibo 6)``: a count of targets and its split by source."""
    return f"{sum(counts.values())} targets ({', '.join(f'{k} {v}' for k, v in sorted(counts.items()))})"


def _best_baseline(row: dict[str, Any], labels: Sequence[tuple[str, str]]) -> float:
    return min(row[label]["lag_mean_min"] for label, slug in labels if slug.removesuffix("_tuned") in BASELINES)


def report(
    cfg: RealConfig,
    w: Windowing,
    window_given: bool,
    n_targets: dict[str, int],
    per_seed: list[dict[str, Any]],
    knobs: dict[tuple[str, float], dict[str, Any]],
    seconds: float,
    command: str,
    in_half: dict[str, int],
) -> tuple[str, dict[str, float]]:
    """Markdown tables and flat headline numbers (keys ``real_...``). ``n_targets``: the targets of the first report
    seed per source; ``in_half``: those of the half it resamples."""
    head: dict[str, float] = {
        "real_targets_count": float(sum(n_targets.values())),
        "real_seeds_count": cfg.seeds,
        "real_window_days": w.window_days,
        "real_warmup_days": w.warmup_days,
    }
    how = "given" if window_given else FITTED_WINDOW_RULE
    md = [
        f"Command: `{command}`; {cfg.half} half: {_by_name(in_half)}; {cfg.seeds} report seeds "
        f"({REPORT_BASE}..{REPORT_BASE + cfg.seeds - 1}), each a bootstrap resample of "
        + (
            "the targets; "
            if n_targets == in_half
            # A resample smaller than the half: its makeup is the first seed's, not the half's (a --quick run of 60
            # of 2 500 targets said "report half: 60 targets").
            else f"{sum(n_targets.values())} of them (seed {REPORT_BASE}: {_by_name(n_targets)}); "
        )
        + (
            f"baselines' knobs tuned per budget on the development half (seeds {list(TUNING_SEEDS)})"
            if cfg.tune
            else "baselines at their default knobs (no tuning)"
        )
        + ("; no offline oracle" if not cfg.oracle else "")
        + f"; window "
        f"{w.window_days:g} days ({how}), warm-up {w.warmup_days:g} days, drain {w.drain_days:g} day; period bounds "
        f"{_MIN_S / 60:g} min .. {_MAX_S / 3600:g} h; run time {seconds:.0f} s. Means ± 95% CI over seeds; lags "
        "in minutes.",
        "",
    ]
    summary_rows = []
    for mult in cfg.budgets:
        rows_b = [s[str(mult)] for s in per_seed]
        labels = _labels(knobs, mult)
        extra = [(SQRT_LABEL, "sqrt_bound")] + ([(ORACLE_LABEL, "offline_oracle")] if cfg.oracle else [])
        rate_lag = float(np.mean([r[DEFAULT_LABEL]["lag_mean_min"] for r in rows_b]))
        sqrt_lag = float(np.mean([r[SQRT_LABEL]["lag_mean_min"] for r in rows_b]))
        rows = []
        for label, slug in labels + extra:
            per = [r[label] for r in rows_b]
            lag = mean_ci([p["lag_mean_min"] for p in per])
            cells = [label]
            for key, digits in (("fetches", 0), ("hit_rate", 2)):
                cells.append(fmt(*mean_ci([p[key] for p in per]), digits) if key in per[0] else "")
            cells.append(fmt(*lag))
            for key, digits in (("lag_p95_min", 1), ("uncaught", 0)):
                cells.append(fmt(*mean_ci([p[key] for p in per]), digits) if key in per[0] else "")
            cells += [f"{lag[0] / rate_lag:.2f}", f"{lag[0] / sqrt_lag:.2f}"]
            rows.append(cells)
            head[f"real_b{mult:g}_{slug}_lag_mean_min"] = round(lag[0], 3)
        paired = []
        for name, key, pick in [("best baseline", "best_baseline", lambda r, lb=labels: _best_baseline(r, lb))] + [
            (label, slug, lambda r, lb=label: r[lb]["lag_mean_min"]) for label, slug in labels[1:] + extra[:1]
        ]:
            ratio = mean_ci([r[DEFAULT_LABEL]["lag_mean_min"] / pick(r) for r in rows_b])
            paired.append(f"{name} {fmt(*ratio, 3)}")
            head[f"real_b{mult:g}_rate_over_{key}_paired_ratio"] = round(ratio[0], 3)
            head[f"real_b{mult:g}_rate_over_{key}_paired_ratio_ci95"] = round(ratio[1], 3)
        summary_rows.append(
            [
                f"{mult:g}",
                fmt(
                    head[f"real_b{mult:g}_rate_over_best_baseline_paired_ratio"],
                    head[f"real_b{mult:g}_rate_over_best_baseline_paired_ratio_ci95"],
                    3,
                ),
                fmt(
                    head[f"real_b{mult:g}_rate_over_sqrt_bound_paired_ratio"],
                    head[f"real_b{mult:g}_rate_over_sqrt_bound_paired_ratio_ci95"],
                    3,
                ),
                _best_name(rows_b, labels),
            ]
        )
        md += [
            f"#### Real traces, global budget B = {mult:g} × total item rate",
            "",
            table(
                ["policy", "fetches", "hit rate", "mean lag", "p95", "uncaught", "× rate (ours)", "× sqrt bound"], rows
            ),
            "",
            "Per-seed (paired) ratio of rate's mean lag to: " + "; ".join(paired) + ".",
            "",
        ]
    md[2:2] = [
        "#### Summary: the default policy against the best baseline and the bound (paired, ± 95% CI)",
        "",
        table(
            [
                "budget (× item rate)",
                "rate ÷ best of SHHD/Nutch/Cho",
                "rate ÷ sqrt bound",
                "best baseline (most seeds)",
            ],
            summary_rows,
        ),
        "",
    ]
    md += _by_source(cfg, per_seed, knobs), ""
    md += _sources_fewer_seeds_drew(cfg, per_seed, in_half)
    if knobs:
        md += [
            "Knobs tuning chose on the development half (where not the default): "
            + "; ".join(f"{slug} at {m:g}×: {k}" for (slug, m), k in sorted(knobs.items())),
            "",
        ]
    head["real_run_seconds_s"] = round(seconds, 1)
    return "\n".join(md), head


def _best_name(rows_b: Sequence[dict[str, Any]], labels: Sequence[tuple[str, str]]) -> str:
    """The baseline that was best in most seeds; a tie goes to the one listed first in the table (``most_often``)."""
    baselines = [lb for lb, slug in labels if slug.removesuffix("_tuned") in BASELINES]
    return most_often([min(baselines, key=lambda lb: r[lb]["lag_mean_min"]) for r in rows_b], baselines)


def most_often(picks: Sequence[str], order: Sequence[str]) -> str:
    """The name in ``picks`` that occurs most often, a tie broken by ``order``. The tie-break is what makes two runs
    of the same file print the same table: ``max(set(picks), key=picks.count)`` broke it by the set's order, which
    follows the string hashes Python seeds anew in each process, so two seeds with different best baselines named
    either one, run by run."""
    return max((name for name in order if name in picks), key=picks.count)


def _by_source(cfg: RealConfig, per_seed: list[dict[str, Any]], knobs: dict[tuple[str, float], dict[str, Any]]) -> str:
    """Mean lag per source (that source's items only) of every policy (a baseline: the better of its default and
    tuned rows, per seed), and the default policy's paired ratio to the best baseline."""
    sources = sorted({s for seed in per_seed for s in seed[str(cfg.budgets[0])][DEFAULT_LABEL]["by_source"]})
    rows = []
    for source in sources:
        for mult in cfg.budgets:
            by_slug: dict[str, list[float]] = {}
            for label, slug in _labels(knobs, mult):
                cells = [seed[str(mult)][label]["by_source"].get(source, [0.0, 0]) for seed in per_seed]
                lags = [lag / n / 60 if n else float("nan") for lag, n in cells]
                key = slug.removesuffix("_tuned")
                by_slug[key] = (
                    lags if key not in by_slug else [min(a, b) for a, b in zip(by_slug[key], lags, strict=True)]
                )
            base = [min(v) for v in zip(*[by_slug[s] for s in BASELINES], strict=True)]
            ratio = mean_ci([a / b for a, b in zip(by_slug["rate"], base, strict=True) if a == a and b == b])
            rows.append([source, f"{mult:g}"] + [f"{np.nanmean(by_slug[s]):.1f}" for s in SLUGS] + [fmt(*ratio, 3)])
    names = {c.slug: c.label for c in _contenders()}
    header = ["source", "budget"] + [names[s] for s in SLUGS] + ["rate ÷ best baseline"]
    return (
        "#### Per source (mean lag in minutes of that source's items; a baseline shows the better of its default "
        "and tuned rows)\n\n" + table(header, rows)
    )


def _sources_fewer_seeds_drew(cfg: RealConfig, per_seed: list[dict[str, Any]], in_half: dict[str, int]) -> list[str]:
    """A note under the per-source table naming the sources of the half that some seeds' resamples left out: a row
    is the mean over the seeds that drew its source (one seed's ratio has no ± to say so), and a source no seed drew
    has no row. No lines when every seed drew every source."""
    drawn = {s: sum(s in seed[str(cfg.budgets[0])][DEFAULT_LABEL]["by_source"] for seed in per_seed) for s in in_half}
    fewer = ", ".join(f"{s} by {n}" for s, n in sorted(drawn.items()) if 0 < n < len(per_seed))
    never = ", ".join(s for s, n in sorted(drawn.items()) if n == 0)
    parts = ([fewer] if fewer else []) + ([f"drawn by none, so not in the table: {never}"] if never else [])
    if not parts:
        return []
    return [
        f"Sources drawn by fewer than the run's {len(per_seed)} seeds (each row is the mean over the seeds that drew "
        f"its source): {'; '.join(parts)}.",
        "",
    ]


#: The policies of the single-target (E0) run on one real trace, each fetching whenever it asks.
E0_POLICIES: tuple[tuple[str, str], ...] = (
    ("rate (ours)", "exact"),
    ("shhd (paper, simhash)", "simhash"),
    ("nutch (xml defaults)", "exact"),
    ("cho (irregular MLE)", "exact"),
)


def _e0_policy(label: str) -> RevisitPolicy:
    bounds = (_MIN_S, _MAX_S, _INITIAL_S)
    if label.startswith("rate"):
        return RatePolicy(*bounds)
    if label.startswith("shhd"):
        return ShhdPolicy(*bounds)
    if label.startswith("nutch"):
        return NutchPolicy(*bounds)
    return ChoPolicy(*bounds)


def e0_real(
    traces: Sequence[Trace], windowing: Windowing, progress: Progress | None = None
) -> tuple[Trace, Page, dict[str, Any]]:
    """Every E0 policy alone on one real target (the report half's busiest Weibo user, else its busiest target):
    summaries and period trajectories. It comes after the last report run and says so on ``progress``: its time grows
    with the target's items (about 15 s for 280 000 in a 28-day window on 2 cores), and the run looked finished but
    silent."""
    pages = window_pages(traces, windowing)
    weibo = [k for k, t in enumerate(traces) if is_weibo_trace(t.source)] or list(range(len(traces)))
    k = max(weibo, key=lambda j: (pages[j].arrivals.size, traces[j].target))
    if progress is not None:
        target = traces[k].target if len(traces[k].target) <= 40 else traces[k].target[:37] + "..."
        progress.say(
            f"E0: {len(E0_POLICIES)} policies, each alone on {traces[k].source} target {target!r} "
            f"({pages[k].arrivals.size} items)"
        )
    out: dict[str, Any] = {}
    for label, detector in E0_POLICIES:
        res = run_single(
            pages[k], _e0_policy(label), Detector(detector, ContentModel(REPORT_BASE)), windowing.horizon(), trace=True
        )
        out[label] = {"summary": res.summary(), "trace": res.periods}
    return traces[k], pages[k], out


def e0_table(trace: Trace, page: Page, e0: dict[str, Any], windowing: Windowing) -> str:
    h = windowing.horizon()
    scored = int(np.count_nonzero((page.arrivals >= h.warmup_s) & (page.arrivals < h.end_s)))
    rows = [
        [
            label,
            f"{r['summary']['fetches']:.0f}",
            f"{r['summary']['hit_rate']:.2f}",
            f"{r['summary']['lag_mean_min']:.1f}",
            f"{r['summary']['lag_p95_min']:.1f}",
        ]
        for label, r in e0.items()
    ]
    return (
        f"#### E0 on one real target ({trace.source} {code_span(trace.target)}, {scored} scored items; each policy "
        "fetches whenever it asks, no budget, so fetch counts differ)\n\n"
        + table(["policy", "fetches", "hit rate", "mean lag", "p95 lag"], rows)
        + "\n\n![E0 on a real target](revisit/real_e0_period_trajectory.png)"
    )


def plot_e0(page: Page, e0: dict[str, Any], path: Path) -> None:
    """Period after each fetch against time (days), item arrivals as ticks along the bottom."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for label, r in e0.items():
        tr = r["trace"]
        ax.step([t / DAY for t, _, _ in tr], [p / 3600 for _, p, _ in tr], where="post", label=label, linewidth=0.9)
    ax.plot(
        page.arrivals / DAY,
        np.full(page.arrivals.size, 1 / 60),
        "|",
        color="black",
        markersize=12,
        label="item arrivals",
    )
    ax.set_yscale("log")
    ax.set_xlabel("simulated time (days)")
    ax.set_ylabel("period after the fetch (h)")
    ax.set_title("E0 on a real target: period trajectories")
    ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    durable.write_whole_with(path, lambda out: fig.savefig(out, format="png", dpi=110))
    plt.close(fig)


#: The fewest targets a run compares policies on: under a global budget one target is fetched at every slot,
#: whatever the policy, and every row of the tables would be the same.
MIN_TARGETS = 2


def check_half(cfg: RealConfig, chosen: Sequence[Trace]) -> None:
    """An empty half, or one a global budget cannot tell policies apart on, is a TraceError that says how to get a
    usable one. (Every trace has at least one scored item: its window ends at its last item, inside the scored
    span.)"""
    if not chosen:
        raise TraceError(
            f"{cfg.path}: the {cfg.half} half is empty (a source with one trace puts it in the development half): "
            "give at least two traces per source, or --half all"
        )
    if len(chosen) < MIN_TARGETS or (cfg.targets is not None and cfg.targets < MIN_TARGETS):
        raise TraceError(
            f"{cfg.path}: the {cfg.half} half runs {min(len(chosen), cfg.targets or len(chosen))} target: under a "
            "global budget one target is fetched at every slot whatever the policy, so there is nothing to compare; "
            f"give at least {MIN_TARGETS} (more traces, --half all, or a larger --targets)"
        )


#: One target holding more than this share of the items a run replays gets a warning (``window_items``).
DOMINANT_SHARE = 0.5


def window_items(cfg: RealConfig, chosen: Sequence[Trace], windowing: Windowing) -> int:
    """The items a run replays (its first progress line counts them), with a warning when one target holds over
    DOMINANT_SHARE of them: every lag is a mean over items, so the tables then say how that one target was crawled,
    and a burst of it (a thousand items in a minute) is one fetch's luck in every figure."""
    sizes = [page.arrivals.size for page in window_pages(chosen, windowing)]
    total = sum(sizes)
    top = max(range(len(sizes)), key=sizes.__getitem__)
    if sizes[top] > DOMINANT_SHARE * total:
        warn_on_stderr(
            f"{cfg.path}: target {chosen[top].target!r} of {chosen[top].source} holds {sizes[top]} of the {total} "
            f"items in the windows of the {cfg.half} half ({sizes[top] / total:.0%}): every mean lag is mostly its "
            "items' lag"
        )
    return total


class OpenedTraces(NamedTuple):
    """A trace file as the recorded run and the development harness read it (``open_traces``)."""

    #: Every trace of the file, cut to its window (``window_traces``) and sorted by (source, target).
    traces: list[Trace]
    #: The two halves (``split_halves``), each ordered by source, then the SHA-256 of the target: never by the file.
    dev: list[Trace]
    report: list[Trace]
    #: The targets of ``cfg.half``: one of the three above.
    chosen: list[Trace]
    windowing: Windowing
    #: The config with the window and warm-up fitted to the whole file, for every job.
    cfg: RealConfig


#: A window given with ``--window-days`` more than this many times the median span the traces cover gets a warning
#: (``open_traces``).
LONG_GIVEN_WINDOW = 2.0
#: A fitted window shorter than this (traces of a few days or hours) gets a warning (``open_traces``).
SHORT_FILE_WINDOW_DAYS = 7.0
#: Windows that keep less than this share of the file's items get a warning (``open_traces``): a year of a busy feed
#: replayed as its last four weeks is the fitted rule at work, but its user should hear it before reading the tables.
KEPT_SHARE_TO_WARN = 0.5


def open_traces(cfg: RealConfig) -> OpenedTraces:
    """Load ``cfg.path``, split it into halves and pick ``cfg.half``. The window and warm-up are fitted to the whole
    file, not to the half that runs, and handed to every job through the returned config; every trace keeps only the
    items of its window (``window_traces``: what the jobs replay), with a warning when that leaves out over half of
    the file. A file of traces shorter than a week runs, with a warning: its window leaves a policy a few days at
    most to learn in."""
    traces = load_traces(cfg.path)
    window_given = cfg.window_days is not None
    windowing = fit_windowing(traces, cfg.window_days, cfg.warmup_days)
    covered = median_covered_days(traces)
    if not window_given and windowing.window_days < SHORT_FILE_WINDOW_DAYS:
        span = (
            f"the traces cover a median of under {windowing.window_days + 0.5:g} days"
            if covered > 0
            # Every trace one item (or one instant): there is no span to measure, and "a median of under 1.5 days"
            # sent its user looking for short traces.
            else "no trace has items at two different times (each is one item, or one instant), so no span to fit"
        )
        warn_on_stderr(
            f"{cfg.path}: {span}, so the window is "
            f"{windowing.window_days:g} days with {windowing.warmup_days:g} of warm-up: a policy whose longest period "
            f"is {_MAX_S / 3600:g} h fetches a quiet target a few times in it, and the figures say little about "
            "crawling for weeks"
        )
    if window_given and windowing.window_days > max(1.0, LONG_GIVEN_WINDOW * covered):
        # Each trace sits at the window's end, silent before it, and B (a multiple of the item rate over the scored
        # span) spreads the fetches over the silence: 4-week traces in a 3 000-day window had every item uncaught.
        warn_on_stderr(
            f"{cfg.path}: the traces cover a median of {covered:.1f} days, under half the "
            f"{windowing.window_days:g}-day window given: each sits at the window's end, silent before it, and the "
            "budget (a multiple of the item rate over the scored span) leaves its busy days a share of the fetches, "
            "so the figures measure mostly censored lags (see 'uncaught'); a window as long as the traces is the "
            "default"
        )
    cfg = replace(cfg, window_days=windowing.window_days, warmup_days=windowing.warmup_days)
    in_file = sum(len(t.times) for t in traces)
    traces = window_traces(traces, windowing)
    kept = sum(len(t.times) for t in traces)
    if kept < in_file * KEPT_SHARE_TO_WARN:
        warn_on_stderr(
            f"{cfg.path}: the {windowing.window_days:g}-day window keeps {kept} of the file's {in_file} items (each "
            f"trace's last {windowing.window_days:g} days; "
            + ("given" if window_given else FITTED_WINDOW_RULE)
            + "): the run replays those only; --window-days sets a longer window, and the run time grows with it"
        )
    # Every half in an order of its own, not the file's: the resamples pick targets by position, so the lines of one
    # file in another order gave --half all other figures. --half all runs them sorted by (source, target), as
    # build_traces writes them; the dev and report halves are ordered by source, then the SHA-256 of the target
    # (split_halves), which never depended on the file's order.
    traces = sorted(traces, key=lambda t: (t.source, t.target))
    dev, rep = split_halves(traces)
    chosen = {"report": rep, "dev": dev, "all": traces}[cfg.half]
    return OpenedTraces(traces, dev, rep, chosen, windowing, cfg)


def run_traces(cfg: RealConfig, pool: Any, command: str, write: bool) -> str:
    """The whole real-trace run; returns the markdown (and writes docs when ``write``)."""
    started = time.monotonic()
    progress = Progress()
    window_given = cfg.window_days is not None
    progress.say(f"reading {cfg.path}")  # a file of gigabytes takes a minute or more
    traces, dev, rep, chosen, windowing, cfg = open_traces(cfg)
    check_half(cfg, chosen)
    items = window_items(cfg, chosen, windowing)
    cut = "" if cfg.targets is not None else ": --targets N or --quick cut it"
    runs = (f"{len(_tune_jobs(dev, cfg))} tuning runs, then " if cfg.tune else "") + (
        f"{cfg.seeds * len(cfg.budgets)} report runs"
    )
    progress.say(
        f"{len(traces)} traces: {len(dev)} development, {len(rep)} report; running the {cfg.half} half ({items} items "
        f"in the windows of its targets; the run time grows with them{cut}); {runs}; window "
        f"{windowing.window_days:g} days, warm-up {windowing.warmup_days:g}"
    )
    knobs = tune(dev, cfg, pool, progress) if cfg.tune else {}
    jobs = [(chosen, cfg, knobs, REPORT_BASE + k, mult) for k in range(cfg.seeds) for mult in cfg.budgets]
    rows = iter(starmap_with_progress(pool, budget_job, jobs, progress, "report runs (seeds × budgets)"))
    per_seed = [{str(mult): next(rows) for mult in cfg.budgets} for _ in range(cfg.seeds)]
    counts: dict[str, int] = {}
    for t in chosen if cfg.targets is None else sample_targets(chosen, REPORT_BASE, cfg.targets, bootstrap=True):
        counts[t.source] = counts.get(t.source, 0) + 1
    trace, page, e0 = e0_real(chosen, windowing, progress)
    in_half: dict[str, int] = {}
    for t in chosen:
        in_half[t.source] = in_half.get(t.source, 0) + 1
    seconds = time.monotonic() - started
    md, head = report(cfg, windowing, window_given, counts, per_seed, knobs, seconds, command, in_half)
    md += "\n" + e0_table(trace, page, e0, windowing) + "\n"
    if write:
        merge_json(ROOT / "docs" / "bench" / "revisit.json", head, lambda k: k.startswith("real_"))
        plot_e0(page, e0, ROOT / "docs" / "revisit" / "real_e0_period_trajectory.png")
        write_block(ROOT / "docs" / "REVISIT.md", md, "revisit-real")
    return md
