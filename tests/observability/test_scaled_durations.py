"""``scaled_durations`` (tests.observability.prom), which shortens one alert's durations for a real-crawl test:
every range window, subquery step and offset of the alert's expression, in any unit Prometheus reads but ``ms``;
what it cannot scale exactly is an error, never left at the deployed length (the test would then wait on a window
30 times longer than it believes)."""

from __future__ import annotations

import pytest

from tests.observability.prom import DEPLOY, scaled_durations

RULES = """groups:
  - name: g
    rules:
      - alert: Other
        # a comment naming [1h] is not an expression
        expr: rate(a[1h]) > 0
        for: 10m

      - alert: Scaled
        # the day before: [1d] offset 30m
        expr: |
          increase(a[30m]) > 0
            and increase(a[1d] offset 30m) > 0
            and avg_over_time((b > bool 0)[2w:1h]) > 0.5
            and sum(c offset -1y) > 0
        for: 10m
        annotations:
          summary: "{{ $value }} in [30m]"
"""


def test_every_duration_of_the_alerts_expression_is_scaled_in_its_unit_and_nothing_else() -> None:
    scaled = scaled_durations("Scaled", 30)(RULES)
    assert "increase(a[60s]) > 0" in scaled
    assert "increase(a[2880s] offset 60s) > 0" in scaled
    assert "(b > bool 0)[40320s:120s]" in scaled
    assert "sum(c offset -1051200s)" in scaled
    # its for:, its comment and annotation, and the other alert stay as they were
    assert scaled.count("for: 10m") == 2 and "[1d] offset 30m" in scaled and "in [30m]" in scaled
    assert "rate(a[1h])" in scaled and "naming [1h]" in scaled


@pytest.mark.parametrize(
    ("duration", "why"),
    [("1h30m", "compound"), ("500ms", "ms"), ("30m:", "empty subquery step"), ("7s", "whole number")],
)
def test_a_duration_it_cannot_scale_exactly_is_an_error(duration: str, why: str) -> None:
    rules = RULES.replace("increase(a[30m])", f"increase(a[{duration}])")
    with pytest.raises(ValueError, match=why):
        scaled_durations("Scaled", 30)(rules)


def test_an_alert_without_durations_or_absent_is_an_error() -> None:
    with pytest.raises(ValueError, match="no alert Missing"):
        scaled_durations("Missing", 30)(RULES)
    with pytest.raises(ValueError, match="no duration"):
        scaled_durations("Other", 30)(RULES.replace("rate(a[1h])", "a"))


def test_the_deployed_alert_the_real_crawl_test_scales_is_scaled_whole() -> None:
    """IcecrawlerSourceReadsNothing, as test_alert_conditions runs it: 30 times shorter, every duration in seconds."""
    deployed = (DEPLOY / "prometheus" / "icecrawler-rules.yml").read_text(encoding="utf-8")
    scaled = scaled_durations("IcecrawlerSourceReadsNothing", 30)(deployed)
    start = scaled.index("- alert: IcecrawlerSourceReadsNothing")
    expr = scaled[start : scaled.index("for:", start)]
    assert expr.count("[60s]") == 5 and expr.count("[2880s] offset 60s") == 2
    assert "[30m]" not in expr and "[1d]" not in expr
