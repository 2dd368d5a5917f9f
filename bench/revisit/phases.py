"""``icecrawler bench revisit --traces FILE --phases N``: the development harness of the real-trace run.

Every round of docs/REVISIT.md's lab notebook measured a change the same way before it went near a report half:
every target of the development half at once (no bootstrap resample, so the population is fixed and only the
policies vary), N fetch phases (the seed of the fetch slots' phase and the item texts), and the default policy's
mean lag divided by the best of *every* baseline setting in that phase (each knob of SHHD, Nutch and Cho, so no
tuning is needed: on the half being measured, the best setting is what tuning would pick). The spread over phases
says how much of a difference is noise (about ± 1 point per phase on 200 targets).

The report half is for the recorded run (``real``); this harness prints only and never writes the docs, so a
scratch change can be measured without touching them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from bench.revisit.contenders import Contender, contender
from bench.revisit.content import ContentModel
from bench.revisit.oracle import sqrt_bound
from bench.revisit.progress import Progress, starmap_with_progress
from bench.revisit.publish import table
from bench.revisit.real import (
    BASELINES,
    RealConfig,
    check_half,
    most_often,
    open_traces,
    run_one,
    sample_targets,
    window_items,
)
from bench.revisit.replay import Trace, fit_windowing, window_pages

__all__ = ["baseline_settings", "phase_job", "run_phases"]


def baseline_settings() -> list[tuple[str, Contender, dict[str, Any]]]:
    """(label, contender, knob) for every knob of every baseline: the settings the default policy must beat."""
    out = []
    for slug in BASELINES:
        c = contender(slug)
        for knob in c.knobs:
            out.append((c.label + (f" {knob}" if knob else ""), c, knob))
    return out


def phase_job(traces: Sequence[Trace], cfg: RealConfig, phase: int, mult: float) -> dict[str, float]:
    """Mean lag (minutes) of the default policy and of every baseline setting, one phase, one budget."""
    windowing = fit_windowing(traces, cfg.window_days, cfg.warmup_days)
    pages = window_pages(traces, windowing)
    horizon = windowing.horizon()
    content = ContentModel(phase, window=10)
    out = {}
    for label, c, knob in [("rate", contender("rate"), dict(cfg.rate_knobs)), *baseline_settings()]:
        out[label] = run_one(pages, horizon, c, knob, phase, mult, content)[0]["lag_mean_min"]
    budget = mult * sum(p.rate for p in pages)
    out["sqrt bound"] = sqrt_bound([p.rate for p in pages], budget) / 60
    return out


def _spread(values: Sequence[float]) -> str:
    x = np.asarray(values, dtype=float)
    sd = float(x.std(ddof=1)) if x.size > 1 else 0.0
    return f"{x.mean():.3f} (sd {sd:.3f}; {x.min():.3f} .. {x.max():.3f})"


def run_phases(cfg: RealConfig, pool: Any, phases: int, command: str) -> str:
    """The harness; returns the markdown report (and says how far it is on stderr)."""
    started = time.monotonic()
    progress = Progress()
    progress.say(f"reading {cfg.path}")  # a file of gigabytes takes a minute or more
    *_, chosen, windowing, cfg = open_traces(cfg)
    check_half(cfg, chosen)
    whole = len(chosen)
    if cfg.targets is not None:
        chosen = sample_targets(chosen, 0, cfg.targets, bootstrap=False)
    population = (
        f"every target ({whole})" if len(chosen) == whole else f"one subsample of {len(chosen)} of its {whole} targets"
    )
    items = window_items(cfg, chosen, windowing)
    cut = ": --targets N cuts it" if cfg.targets is None else ""
    progress.say(
        f"{len(chosen)} targets of the {cfg.half} half, {phases} phases, {len(cfg.budgets)} budgets ({items} items "
        f"in their windows; the run time grows with them{cut}); window {windowing.window_days:g} days, warm-up "
        f"{windowing.warmup_days:g}"
    )
    jobs = [(chosen, cfg, p, m) for p in range(phases) for m in cfg.budgets]
    lags = starmap_with_progress(pool, phase_job, jobs, progress, "phase runs")
    by_budget: dict[float, list[dict[str, float]]] = {m: [] for m in cfg.budgets}
    for (_, _, _, m), lag in zip(jobs, lags, strict=True):
        by_budget[m].append(lag)
    settings = [label for label, _, _ in baseline_settings()]
    rows = []
    for m, per_phase in by_budget.items():
        best = [min(settings, key=r.__getitem__) for r in per_phase]
        rows.append(
            [
                f"{m:g}",
                f"{np.mean([r['rate'] for r in per_phase]):.1f}",
                _spread([r["rate"] / min(r[s] for s in settings) for r in per_phase]),
                _spread([r["rate"] / r["sqrt bound"] for r in per_phase]),
                most_often(best, settings),
            ]
        )
    header = ["budget (× item rate)", "rate mean lag (min)", "rate ÷ best baseline setting", "rate ÷ sqrt bound"]
    knobs = ", ".join(f"{key}={json.dumps(value)}" for key, value in cfg.rate_knobs.items())
    changed = f"the default policy with {knobs}; " if knobs else ""
    return "\n".join(
        [
            f"Command: `{command}`; {cfg.half} half, {population}, no resampling; phases "
            f"0..{phases - 1}; best of {len(settings)} baseline settings per phase; window "
            f"{windowing.window_days:g} days, warm-up {windowing.warmup_days:g}; {changed}"
            f"{time.monotonic() - started:.0f} s. Ratios: mean over phases (sd; min .. max).",
            "",
            table([*header, "best setting (most phases)"], rows),
            "",
        ]
    )
