"""The population calibration of rate estimates (pure: no servers)."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from shhd.calibration import RateCalibration
from shhd.observation import Observation
from shhd.rate import RATE_PRIOR_ITEMS, RatePolicy

DAY = 86400.0


def test_no_evidence_and_right_estimates_leave_rates_alone() -> None:
    calibration = RateCalibration()
    assert calibration.factor(1 / DAY) == 1.0
    for k in range(200):  # estimates that come true: 2 items a day, 2 found each day
        calibration.observe(2 / DAY, DAY, 2, k * DAY)
    assert calibration.factor(2 / DAY) == pytest.approx(1.0)


def test_a_class_that_publishes_more_than_estimated_is_raised_and_others_are_not() -> None:
    calibration = RateCalibration(prior_items=5.0)
    for k in range(60):  # estimated 0.1 a day, found 1 a day
        calibration.observe(0.1 / DAY, DAY, 1, k * DAY)
        calibration.observe(20 / DAY, DAY, 10, k * DAY)  # estimated 20 a day, found 10
    assert calibration.factor(0.1 / DAY) > 2.0  # about 10.6 found against 1.1 predicted, with the 5-item prior
    assert 0.45 < calibration.factor(20 / DAY) < 0.6
    assert calibration.factor(2 / DAY) == 1.0  # a class nobody taught


def test_old_evidence_fades_with_the_half_life() -> None:
    calibration = RateCalibration(prior_items=0.5, half_life_s=DAY)
    for k in range(30):
        calibration.observe(1 / DAY, DAY, 5, k * DAY)
    assert calibration.factor(1 / DAY) > 4.0
    for k in range(30, 60):  # the class now publishes as estimated
        calibration.observe(1 / DAY, DAY, 1, k * DAY)
    assert calibration.factor(1 / DAY) == pytest.approx(1.0, abs=0.01)


def test_empty_intervals_and_zero_rates_teach_nothing() -> None:
    calibration = RateCalibration()
    calibration.observe(0.0, DAY, 3, 0.0)
    calibration.observe(1 / DAY, 0.0, 3, 0.0)
    calibration.observe(1 / DAY, -5.0, 3, 0.0)
    assert calibration.factor(1 / DAY) == 1.0
    assert calibration.factor(0.0) == 1.0


def _crawl(policy: RatePolicy, state: dict[str, Any], now: float, found: int) -> dict[str, Any]:
    return policy.next_period(state, Observation(now_s=now, fingerprint=0, new_items=found)).state


def test_rate_policy_rates_are_its_own_estimates_times_the_calibration() -> None:
    policy = RatePolicy(60.0, DAY, 600.0, diurnal=False, periodic=False, burst_fade_s=None)
    assert policy.calibration is not None
    quiet = _crawl(policy, policy.initial_state(), 0.0, 0)
    assert policy.calibration.factor(policy.own_rate(quiet)) == 1.0
    # A new target's prior (one item per first period) outweighs its items: its crawls teach nothing.
    quiet = _crawl(policy, quiet, 600.0, 0)
    assert not policy.calibration._rows
    busy = policy.initial_state()
    for k in range(1, 40):  # 3 items per crawl every 2 hours: its own items soon outweigh the prior
        busy = _crawl(policy, busy, k * 7200.0, 3)
    assert float(busy["items"]) > RATE_PRIOR_ITEMS and policy.calibration._rows
    own = policy.own_rate(busy)
    assert policy.rate_of(busy) == pytest.approx(own * policy.calibration.factor(own))
    plain = RatePolicy(60.0, DAY, 600.0, calibration=None)
    assert plain.rate_of(busy) == pytest.approx(own)


def test_near_silent_estimates_get_what_near_silent_targets_published() -> None:
    calibration = RateCalibration(silent_below_per_day=0.1, silent_prior_days=7.0)
    silent = 1e-4 / DAY  # an estimate of (nearly) zero: no factor could lift it
    assert calibration.is_silent(silent) and not calibration.is_silent(0.2 / DAY)
    assert calibration.calibrated(silent) == silent  # nothing learnt yet
    for k in range(100):  # 100 near-silent targets watched for a day each; 20 of them found 3 items
        calibration.observe(silent * (1 + k), DAY, 3 if k % 5 == 0 else 0, 10 * DAY)
    # 60 items over 100 days watched, with the prior of 7 days at 0.1 a day: 60.7 / 107 items a day
    assert calibration.calibrated(silent) * DAY == pytest.approx(60.7 / 107)
    assert calibration.calibrated(0.05 / DAY) == calibration.calibrated(silent)  # one class below the threshold
    assert calibration.calibrated(2 / DAY) == 2 / DAY  # classes above it keep their factors (none taught here)


def test_the_near_silent_rate_never_lowers_an_estimate_and_can_be_switched_off() -> None:
    calibration = RateCalibration(silent_below_per_day=0.1)
    for k in range(50):  # near-silent targets that stay silent
        calibration.observe(0.08 / DAY, DAY, 0, k * DAY)
    assert calibration.calibrated(0.08 / DAY) == 0.08 / DAY
    assert calibration.calibrated(1e-6 / DAY) > 1e-6 / DAY  # the prior alone lifts an estimate of nearly zero
    off = RateCalibration(silent_below_per_day=None)
    off.observe(1e-6 / DAY, DAY, 5, 0.0)
    assert not off.is_silent(1e-6 / DAY)
    assert off.calibrated(1e-6 / DAY) == pytest.approx(1e-6 / DAY * off.factor(1e-6 / DAY))


def test_a_silent_target_teaches_the_calibration_and_gets_a_shorter_period_when_silent_targets_wake() -> None:
    """A target that never published is taught from (its prior outweighs its zero items), and its period falls
    once other silent targets of the population are seen to wake up (a file of each target's latest items)."""
    policy = RatePolicy(60.0, 30 * DAY, 3600.0, diurnal=False, periodic=False, burst_fade_s=None)
    assert policy.calibration is not None
    quiet = policy.initial_state()
    for k in range(1, 60):  # a day apart, nothing found: its estimate falls below 0.1 a day
        quiet = _crawl(policy, quiet, k * DAY, 0)
    own = policy.own_rate(quiet)
    assert policy.calibration.is_silent(own)
    assert policy.calibration._rows  # its empty crawls were taught
    before = policy.period_for(policy.rate_of(quiet))
    for k in range(60, 80):  # other near-silent targets, now crawled, find 2 items a day each
        policy.calibration.observe(own, DAY, 2, k * DAY)
    assert policy.rate_of(quiet) > 10 * own
    assert policy.period_for(policy.rate_of(quiet)) < before / 3


def test_what_it_learnt_goes_through_json_and_back_unchanged() -> None:
    learnt = RateCalibration()
    for k in range(30):
        learnt.observe(0.05 / DAY, DAY, k % 3, k * DAY)  # the near-silent class
        learnt.observe(4 / DAY, DAY, 3, k * DAY)
    again = RateCalibration()
    again.load(json.loads(json.dumps(learnt.to_dict())))
    assert again.to_dict() == learnt.to_dict()
    for rate in (0.01 / DAY, 0.05 / DAY, 4 / DAY, 50 / DAY):
        assert again.calibrated(rate) == learnt.calibrated(rate)


@pytest.mark.parametrize(
    ("saved", "message"),
    [
        ([1, 2], "is a mapping"),
        ({"bins_per_decade": 3.0, "silent_below_per_day": 0.1, "rows": []}, "classes"),
        ({"bins_per_decade": 2.0, "silent_below_per_day": None, "rows": []}, "classes"),
        ({"bins_per_decade": 2.0, "silent_below_per_day": 0.1}, "rows are a list"),
        ({"bins_per_decade": 2.0, "silent_below_per_day": 0.1, "rows": [[0, 1.0, 2.0]]}, "saved calibration row"),
        ({"bins_per_decade": 2.0, "silent_below_per_day": 0.1, "rows": [["0", 1, 1, 1, 1]]}, "saved calibration row"),
        ({"bins_per_decade": 2.0, "silent_below_per_day": 0.1, "rows": [[0, 1, -1, 1, 1]]}, "saved calibration row"),
        ({"bins_per_decade": 2.0, "silent_below_per_day": 0.1, "rows": [[0, 1, math.inf, 1, 1]]}, "saved calibration"),
    ],
)
def test_a_saved_calibration_it_cannot_use_is_refused_and_changes_nothing(saved: Any, message: str) -> None:
    calibration = RateCalibration()
    calibration.observe(4 / DAY, DAY, 8, 0.0)
    kept = calibration.to_dict()
    with pytest.raises(ValueError, match=message):
        calibration.load(saved)
    assert calibration.to_dict() == kept
