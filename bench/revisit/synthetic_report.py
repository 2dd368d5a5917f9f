"""The synthetic run's report: markdown tables, headline keys for docs/bench/revisit.json, and the plots."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.revisit.contenders import REPORT_BASE, TUNING_BUDGET, TUNING_SEEDS, Config
from bench.revisit.publish import fmt, table
from bench.revisit.sim import mean_ci
from bench.revisit.synthetic import E0_VARIANTS, variants
from icecrawler import durable

__all__ = ["plots", "report"]


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
                fmt(*m["fetches"], 0),
                fmt(*m["hit_rate"]),
                fmt(*m["believed_hit_rate"]),
                fmt(*m["lag_mean_min"]),
                fmt(*m["lag_p95_min"]),
                fmt(*m["settled_period_min"]),
                fmt(*m["d_one_review_mean"], 1) if v.policy == "shhd" and v.detector == "simhash" else "",
                fmt(*m["p_shrink_one_review"]) if v.policy == "shhd" and v.detector == "simhash" else "",
            ]
        )
        key = "e0_" + v.label.split(",")[0].split(" ")[0] + "_" + str(E0_VARIANTS.index(v))
        head[f"{key}_settled_period_min"] = round(m["settled_period_min"][0], 3)
        head[f"{key}_lag_mean_min"] = round(m["lag_mean_min"][0], 3)
    md.append(
        table(
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
        table(["variant", "periods (min)", "distances"], trace_rows),
        "",
    ]
    for mult in cfg.budgets:
        per_b = [s[str(mult)] for s in e3]
        labels = [label for label, _, _ in variants(knobs)] + ["O2 sqrt bound (known rates)"]
        slugs = {label: c.slug + ("_tuned" if label != c.label else "") for label, c, _ in variants(knobs)}
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
                fmt(*_agg(per, "fetches"), 0) if "fetches" in per[0] else "",
                fmt(*_agg(per, "hit_rate")) if "hit_rate" in per[0] else "",
                fmt(*_agg(per, "believed_hit_rate")) if "hit_rate" in per[0] else "",
                fmt(*lag),
            ]
            for k in ("lag_p95_min", "lag_p99_min", "uncaught", "freshness", "harmonic_staleness"):
                cells.append(fmt(*_agg(per, k), 0 if k == "uncaught" else 2) if k in per[0] else "")
            cells += [f"{lag[0] / rate_lag:.2f}", f"{lag[0] / sqrt_lag:.2f}"]
            rows.append(cells)
            head[f"e3_b{mult:g}_{slugs[label]}_lag_mean_min"] = round(lag[0], 3)
        paired = []
        for label in [x for x in labels if slugs[x].startswith(("shhd_paper", "nutch", "sqrt_bound"))]:
            ratio = mean_ci([r["rate (ours)"]["lag_mean_min"] / r[label]["lag_mean_min"] for r in per_b])
            paired.append(f"{label} {fmt(*ratio, 3)}")
            head[f"e3_b{mult:g}_rate_over_{slugs[label]}_paired_ratio"] = round(ratio[0], 3)
            head[f"e3_b{mult:g}_rate_over_{slugs[label]}_paired_ratio_ci95"] = round(ratio[1], 3)
        md += [
            f"### E3: {cfg.pages}-page mixture, global budget B = {mult:g} × total item rate",
            "",
            table(
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
    labels = [label for label, _, _ in variants(knobs)] + ["O2 sqrt bound (known rates)"]
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
    durable.write_whole_with(outdir / "e3_lag_vs_budget.png", lambda out: fig.savefig(out, format="png", dpi=110))
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
    durable.write_whole_with(outdir / "e0_period_trajectory.png", lambda out: fig.savefig(out, format="png", dpi=110))
    plt.close(fig)
