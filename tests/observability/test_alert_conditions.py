"""The deployed alert expressions, whole (only each ``for:`` shortened), evaluated by a real Prometheus that
scrapes a real loopback crawl, fire on the failures they are written for:

* IcecrawlerNoProgress: tasks are due and no client runs; it resolves once a client reports;
* IcecrawlerLeaseExpiries: every crawl of one source outlives ``scheduler.lease_s`` (a site slower than the lease),
  in a crawl too small for a fixed number of expiries per second ever to be reached; the healthy source stays
  quiet;
* IcecrawlerSiteFailing: a site answers every crawl with its "busy" page (HTTP 200, the client reports Busy),
  which no other alert counts.

The rule windows stay the deployed ones (15 minutes), so rates are read from a Prometheus only minutes old, as
after a fresh deploy.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from icecrawler.processes import wait_for_port
from icecrawler_local.stack import running_stack
from sandbox.scenario import Product, Scenario, WeiboUser
from sandbox.schedules import Schedule
from tests.helpers import wait_for
from tests.observability.prom import Prometheus, prometheus_config, static_targets

pytestmark = [pytest.mark.e2e, pytest.mark.ice, pytest.mark.bdb, pytest.mark.slow]

HEALTHY = "weibo_mobile:1907518591"
SLOW = "jd:100012043978"
BUSY = "weibo_pc:2803301701"


def scenario() -> Scenario:
    static = Schedule("static")
    return Scenario(
        seed=7,
        users=(
            WeiboUser(uid=1907518591, sites=("m",), backlog=5, schedule=static),
            WeiboUser(uid=2803301701, sites=("pc",), backlog=5, schedule=static),
        ),
        products=(Product("jd", "100012043978", backlog=5, schedule=static),),
    )


def firing_sources(prometheus: Prometheus, alert: str) -> set[str]:
    """The ``source`` labels of ``alert``'s firing instances."""
    return {
        item["labels"].get("source", "")
        for item in prometheus.api("alerts")["alerts"]
        if item["labels"]["alertname"] == alert and item["state"] == "firing"
    }


def wait_until_firing(prometheus: Prometheus, alert: str, source: str, series: str, timeout_s: float) -> None:
    """Wait (bounded) for ``alert`` to fire for ``source``; on a timeout the message shows ``series`` too."""
    wait_for(
        lambda: source in firing_sources(prometheus, alert),
        lambda: f"{alert} never fired for {source}: {prometheus.alert_states()}, {prometheus.query(series)}",
        timeout_s=timeout_s,
    )


def test_no_progress_lease_expiries_and_site_failing_fire_on_their_real_conditions(tmp_path: Path) -> None:
    with running_stack(
        tmp_path / "stack",
        scenario(),
        speed=60,
        scheduler_settings={
            "scheduler.lease_s": 3,
            "scheduler.initial_period_s": 600,
            "scheduler.min_period_s": 600,
            "scheduler.max_period_s": 1200,
        },
        client_settings={"client.workers": 2, "client.batch": 1, "client.idle_sleep_s": 0.3},
    ) as stack:
        config = prometheus_config(tmp_path / "prom", window_s=None)
        static_targets(config.parent, "scheduler", [stack.metrics_ports["scheduler"]])
        static_targets(config.parent, "storage", [stack.metrics_ports["storage"]])
        prometheus = Prometheus(stack.group, config, tmp_path / "prom" / "data")

        # Tasks are due and no client runs.
        stack.seed([HEALTHY, SLOW, BUSY])
        wait_for(
            lambda: "firing" in prometheus.alert_states().get("IcecrawlerNoProgress", set()),
            lambda: f"IcecrawlerNoProgress never fired: {prometheus.alert_states()}",
            timeout_s=90,
        )

        # Every jd page now takes longer than a lease: each jd crawl's lease runs out before its report.
        stack.misbehave({"site": "jd", "set": {"slow_rate": 1.0, "slow_ms": 6000}})
        # Every Weibo PC page is the site's busy interstitial.
        stack.misbehave({"site": "pc", "set": {"ban_rate": 1.0, "ban_page": "busy"}})
        stack.start_client("client-a")
        wait_for_port("127.0.0.1", stack.metrics_ports["client-a"], 60, alive=stack.clients["client-a"].alive)
        static_targets(config.parent, "client", [stack.metrics_ports["client-a"]])
        wait_for(
            lambda: "IcecrawlerNoProgress" not in prometheus.alert_states(),
            lambda: f"IcecrawlerNoProgress never resolved: {prometheus.alert_states()}",
            timeout_s=90,
        )
        wait_until_firing(
            prometheus, "IcecrawlerLeaseExpiries", "jd", "icecrawler_scheduler_lease_expiries_total > 0", 120
        )
        assert "weibo_mobile" not in firing_sources(prometheus, "IcecrawlerLeaseExpiries")
        wait_until_firing(prometheus, "IcecrawlerSiteFailing", "weibo_pc", "icecrawler_scheduler_reports_total > 0", 90)
        assert firing_sources(prometheus, "IcecrawlerSiteFailing") == {"weibo_pc"}
        healthy_ok = 'sum(icecrawler_scheduler_reports_total{source="weibo_mobile",outcome="Ok"})'
        assert (prometheus.value(healthy_ok) or 0) > 0
