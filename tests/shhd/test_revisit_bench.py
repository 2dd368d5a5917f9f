"""bench/revisit: the offline oracle against brute force, the square-root bound, and a tiny quick run."""

from __future__ import annotations

import numpy as np
import pytest

import bench.revisit as revisit
import bench.revisit.synthetic as synthetic
from bench.revisit.oracle import brute_force_lag, offline_lag, sqrt_bound
from bench.revisit.publish import fmt, table
from bench.revisit.sim import Detector, Horizon, run_budget, run_single
from bench.revisit.traces import Page
from shhd.policies import FixedPolicy, RatePolicy


def test_items_left_uncaught_count_in_the_mean_lag_censored_at_the_end() -> None:
    """A policy must not lower its mean lag by leaving a page's last items uncaught: they count, with their lag
    censored at the end of the drain (a lower bound)."""
    horizon = Horizon(warmup_s=0.0, end_s=1000.0, drain_s=100.0)
    page = Page("t", 0.01, np.array([50.0, 150.0, 950.0]))
    res = run_single(page, FixedPolicy(400.0, 400.0, 400.0), Detector("exact"), horizon)
    # fetches at 400 and 800 (1200 is past the end, 1100): the item at 950 is never caught
    summary = res.summary()
    assert summary["uncaught"] == 1 and summary["items"] == 3
    assert summary["lag_mean_min"] == pytest.approx(((400 - 50) + (400 - 150) + (1100 - 950)) / 3 / 60)
    assert res.page_items == [3] and res.page_lag_s == [pytest.approx(350 + 250 + 150)]


def test_one_fetch_may_catch_any_number_of_items() -> None:
    """A bulk import dated at one instant (a product's 250 000 reviews stamped with one day) is caught by one fetch;
    the harmonic staleness used a table of 200 000 entries and crashed the run."""
    horizon = Horizon(warmup_s=0.0, end_s=1000.0, drain_s=100.0)
    page = Page("t", 250.0, np.full(250_000, 500.0))
    summary = run_single(page, FixedPolicy(600.0, 600.0, 600.0), Detector("exact"), horizon).summary()
    assert summary["items"] == 250_000 and summary["lag_mean_min"] == pytest.approx(100 / 60)


def test_a_budgeted_run_reads_each_daily_profile_again_only_after_a_fetch() -> None:
    """The hourly rebalance needs every page's daily profile, which depends on the page's state alone; the simulator
    reads it again only when a fetch has replaced that state, so a long run does not spend its time re-reading
    profiles of pages that were not fetched."""
    day = 86400.0
    rng = np.random.default_rng(3)
    pages = []
    for k in range(6):  # a few items a day, in the evening of each page's own time zone
        times = np.sort(
            [d * day + (k * 4 + 18) % 24 * 3600.0 + rng.uniform(0, 7200) for d in range(10) for _ in range(3)]
        )
        pages.append(Page("diurnal", 3 / day, times))

    class CountingPolicy(RatePolicy):
        reads = 0

        def daily_profile(self, state: dict[str, object]) -> complex:
            CountingPolicy.reads += 1
            return super().daily_profile(state)

    policy = CountingPolicy(60.0, day, 600.0)
    horizon = Horizon(warmup_s=day, end_s=9 * day, drain_s=day)
    budget = 0.25 * sum(p.rate for p in pages)
    res = run_budget(pages, policy, Detector("exact"), horizon, budget, 60.0, day, rng)
    refreshes = int((horizon.end_s + horizon.drain_s) // 3600.0) + 1
    assert res.fetches > 0 and res.summary()["items"] > 0
    # reads by the policy itself (its own period) plus one per state a refresh had not seen
    assert CountingPolicy.reads <= 2 * (res.fetches + len(pages)) + len(pages)
    assert CountingPolicy.reads < refreshes * len(pages) / 4


def test_offline_oracle_matches_brute_force_on_small_instances() -> None:
    rng = np.random.default_rng(7)
    for _ in range(120):
        pages = [sorted(rng.uniform(0, 10, rng.integers(0, 4)).round(2).tolist()) for _ in range(rng.integers(1, 3))]
        k = int(rng.integers(0, 5))
        assert offline_lag(pages, k, 12.0, iterations=60) == pytest.approx(brute_force_lag(pages, k, 12.0), abs=1e-6)


def test_sqrt_bound_formula_and_against_uniform() -> None:
    rates = [1.0, 0.1, 0.01]  # per minute; docs/REVISIT.md §D5 worked example: B = 0.3/min gives 3.012 min
    assert sqrt_bound(rates, 0.3) == pytest.approx(sum(r**0.5 for r in rates) ** 2 / (2 * 0.3 * sum(rates)))
    assert sqrt_bound(rates, 0.3) == pytest.approx(3.012, abs=1e-3)
    assert sqrt_bound(rates, 0.3) <= len(rates) / (2 * 0.3)  # never worse than uniform (Cauchy-Schwarz)
    assert sqrt_bound([0.0, 2.0], 1.0) == pytest.approx(0.5)


def test_quick_mode_on_a_tiny_config_prints_the_headline_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        revisit.main(
            ["--quick", "--seeds", "2", "--pages", "10", "--workers", "1", "--e0-days", "0.2", "--end-days", "1.5"]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "### E0" in out and "global budget B = 0.5" in out
    for label in ("shhd (paper, simhash)", "nutch (xml defaults)", "rate (ours)", "O2 sqrt bound"):
        assert label in out


def test_ablation_prints_one_row_per_variant(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(synthetic, "ABLATION_SEEDS", (20, 21))
    assert revisit.main(["--ablation", "--pages", "8", "--workers", "1", "--end-days", "1.5"]) == 0
    out = capsys.readouterr().out
    assert "development seeds 20..21" in out
    for label, _ in synthetic.ABLATION:
        assert label in out
    assert "| rate (default) | defaults |" in out and "1.000 ± 0.000" in out  # the default against itself


def test_markdown_helpers_format_means_and_tables() -> None:
    assert fmt(1.234, 0.0567) == "1.23 ± 0.06"
    assert fmt(1.234, float("nan"), 1) == "1.2"  # one seed: no interval
    assert table(["a", "b"], [["1", "2"]]).splitlines() == ["| a | b |", "|---|---|", "| 1 | 2 |"]
