"""A real Prometheus scrapes a running local crawl (sandbox, scheduler, storage, two clients) found through
``icecrawler targets`` (file-based discovery), and what it holds is checked against the ground truth:

* every endpoint's output passes ``promtool check metrics``;
* the storage's records-written counter equals the items the sandbox published for the seeded targets, and the
  clients' crawl and fetch counters add up to the scheduler's reports;
* the embedded store's write lock is taken away (a backend outage): the spool metrics grow, the spool and
  backend alerts become pending/firing (rules with test-sized durations), and after the outage the spool drains
  and the counter again equals the truth;
* every panel of the Grafana dashboard returns data.

Content is static (each target's backlog only) and periods are long, so the counters settle and can be compared
exactly.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path

import pytest

from icecrawler.processes import icecrawler_argv, wait_for_port
from icecrawler_local.oracle import truth_index
from icecrawler_local.stack import Stack, running_stack
from sandbox.scenario import Product, Scenario, WeiboUser
from sandbox.schedules import Schedule
from tests.helpers import truncated_posts, wait_for
from tests.observability.prom import (
    DEPLOY,
    Prometheus,
    consecutive_free_ports,
    documented,
    prometheus_config,
    promtool_check,
    scrape,
)

pytestmark = [pytest.mark.e2e, pytest.mark.ice, pytest.mark.bdb, pytest.mark.slow]

FIRST = ("weibo_mobile:1907518591", "weibo_pc:2803301701", "jd:100012043978")
DURING_OUTAGE = ("weibo_mobile:1163218074", "jd:100008348542")


def scenario() -> Scenario:
    static = Schedule("static")
    return Scenario(
        seed=5,
        users=(
            WeiboUser(uid=1907518591, sites=("m",), backlog=25, schedule=static),
            WeiboUser(uid=1163218074, sites=("m",), backlog=30, pinned=False, schedule=static),
            WeiboUser(uid=2803301701, sites=("pc",), backlog=20, schedule=static),
        ),
        products=(
            Product("jd", "100012043978", backlog=25, schedule=static),
            Product("jd", "100008348542", backlog=15, schedule=static),
        ),
    )


def published(stack: Stack, seeded: tuple[str, ...]) -> int:
    """Items the sandbox published for the seeded targets (one per source and item)."""
    targets = {tuple(task.split(":", 1)) for task in seeded}
    return sum(1 for source, key in truth_index(stack.truth()["items"]) if (source, str(key[1])) in targets)


def check_metrics_text(url: str) -> str:
    text = scrape(url)
    promtool_check(text)
    return text


def test_prometheus_sees_the_crawl_the_outage_and_every_dashboard_panel(tmp_path: Path) -> None:
    # Weibo PC crawled with an account, so that the dashboard's accounts-per-source panel has data.
    accounts = tmp_path / "accounts"
    accounts.mkdir(mode=0o700)
    (accounts / "pool.toml").write_text('[[account]]\nid = "a1"\ncookies = "SUB=pasted"\nsources = ["weibo_pc"]\n')
    (accounts / "pool.toml").chmod(0o600)
    scheduler_settings = {
        "scheduler.accounts_dir": str(accounts),
        "scheduler.initial_period_s": 7200,
        "scheduler.min_period_s": 7200,
        "scheduler.max_period_s": 86400,
        # Backups on, so that the dashboard's backup panels have data.
        "scheduler.backup_dir": str(tmp_path / "backups" / "scheduler"),
    }
    client_settings = {
        "client.workers": 2,
        "client.batch": 2,
        "client.max_pages": 30,
        "client.idle_sleep_s": 0.3,
        "client.shutdown_grace_s": 5,
    }
    storage_settings = {"storage.write_timeout_s": 1, "storage.backup_dir": str(tmp_path / "backups" / "storage")}
    client_port = consecutive_free_ports(2)
    with running_stack(
        tmp_path / "stack",
        scenario(),
        speed=60,
        scheduler_settings=scheduler_settings,
        client_settings=client_settings,
        storage_settings=storage_settings,
    ) as stack:
        for index, name in enumerate(("client-a", "client-b")):
            client = stack.start_client(name, {"metrics.client.port": client_port + index})
            wait_for_port("127.0.0.1", client_port + index, 60, alive=client.alive)
        # File-based discovery: the helper probes what the settings allow and finds all four daemons.
        config = prometheus_config(tmp_path / "prom")

        def targets(*extra: str) -> subprocess.CompletedProcess[str]:
            """``icecrawler targets`` over the ports these daemons may use, writing the lists Prometheus reads."""
            argv = icecrawler_argv(
                "targets",
                "--hosts",
                "127.0.0.1",
                "--dir",
                str(tmp_path / "prom" / "targets"),
                f"--set=metrics.scheduler.port={stack.metrics_ports['scheduler']}",
                f"--set=metrics.storage.port={stack.metrics_ports['storage']}",
                "--set=metrics.storage.port_span=1",
                f"--set=metrics.client.port={client_port}",
                "--set=metrics.client.port_span=2",
                *extra,
            )
            return subprocess.run(argv, capture_output=True, text=True, timeout=60)

        found = targets()
        assert found.returncode == 0, found.stderr
        assert "scheduler=1 storage=1 client=2" in found.stdout, found.stdout + found.stderr
        prometheus = Prometheus(stack.group, config, tmp_path / "prom" / "data")
        wait_for(
            lambda: (
                prometheus.healthy_targets()
                == {"icecrawler-scheduler": 1, "icecrawler-storage": 1, "icecrawler-client": 2}
            ),
            "Prometheus never scraped all four daemons",
        )

        stack.seed(list(FIRST))
        expected = published(stack, FIRST)
        assert expected == 25 + 20 + 25
        written = "sum(icecrawler_storage_records_written_total)"
        wait_for(lambda: prometheus.value(written) == expected, f"records written never reached {expected}")
        assert len(stack.stored()) == expected

        reports = "sum(icecrawler_scheduler_reports_total)"
        wait_for(
            lambda: prometheus.value(reports) == prometheus.value("sum(icecrawler_client_crawls_total)") == len(FIRST),
            "client crawls and scheduler reports disagree",
        )
        fetches = prometheus.value("sum(icecrawler_scheduler_fetches_total)")
        assert fetches is not None and fetches >= len(FIRST)
        assert prometheus.value("sum(icecrawler_client_fetches_total)") == fetches
        assert prometheus.value('sum(icecrawler_client_fetches_total{status_class="2xx"})') == fetches
        assert prometheus.value("sum(icecrawler_scheduler_new_items_total)") == expected
        assert prometheus.value("sum(icecrawler_client_new_items_total)") == expected
        assert prometheus.value("sum(icecrawler_storage_spool_records)") == 0

        for url in stack.metrics_urls().values():
            check_metrics_text(url)

        # Every series the daemons export is named in DEPLOY.md's list ("What is exported").
        deploy_doc = (DEPLOY.parent / "docs" / "DEPLOY.md").read_text(encoding="utf-8")
        exported = [name for name in prometheus.api("label/__name__/values") if name.startswith("icecrawler_")]
        undocumented = sorted(name for name in exported if not documented(name, deploy_doc))
        assert not undocumented, f"metrics DEPLOY.md does not list: {undocumented}"

        # A backend outage: the store's write lock is held; writes are spooled, the spool alerts fire.
        lock = sqlite3.connect(stack.sqlite_path, timeout=30, isolation_level=None)
        try:
            lock.execute("BEGIN EXCLUSIVE")
            stack.seed(list(DURING_OUTAGE))
            wait_for(
                lambda: (prometheus.value("sum(icecrawler_storage_spool_records)") or 0) > 0,
                "the spool never grew during the outage",
            )
            wait_for(lambda: prometheus.value("min(icecrawler_storage_backend_up)") == 0, "backend_up never dropped")
            wait_for(
                lambda: bool(prometheus.alert_states().get("IcecrawlerSpoolGrowing", set()) & {"pending", "firing"}),
                "the spool alert never became pending/firing",
            )
            wait_for(
                lambda: "firing" in prometheus.alert_states().get("IcecrawlerStorageBackendDown", set()),
                "the backend alert never fired",
            )
            assert (prometheus.value("max(icecrawler_storage_spool_age_seconds)") or 0) > 0
            assert (prometheus.value("sum(icecrawler_storage_backend_outages_total)") or 0) >= 1
        finally:
            lock.execute("ROLLBACK")
            lock.close()
        everything = expected + published(stack, DURING_OUTAGE)
        wait_for(
            lambda: prometheus.value(written) == everything,
            f"records written never reached {everything}",
            timeout_s=120,
        )
        wait_for(lambda: prometheus.value("sum(icecrawler_storage_spool_records)") == 0, "the spool never drained")
        assert len(stack.stored()) == everything
        assert not truncated_posts(stack), "long posts stored truncated: the metrics hooks broke the long-text fetch"
        wait_for(
            lambda: (
                prometheus.value(reports)
                == prometheus.value("sum(icecrawler_client_crawls_total)")
                == len(FIRST) + len(DURING_OUTAGE)
            ),
            "client crawls and scheduler reports disagree after",
        )

        # Every panel of the dashboard has data in this Prometheus.
        dashboard = json.loads((DEPLOY / "grafana" / "icecrawler.json").read_text())
        empty = [
            panel["title"]
            for panel in dashboard["panels"]
            for target in panel["targets"]
            if not prometheus.query(target["expr"])
        ]
        assert not empty, f"panels without data: {empty}"
        assert len(dashboard["panels"]) >= 20

        # A storage server killed with -9 stays a target (icecrawler targets keeps the schedulers and storage servers
        # it has seen): Prometheus sees it down and IcecrawlerTargetDown fires. A killed client is dropped.
        stack.storage.kill9()
        stack.kill_client("client-b")
        again = targets("--timeout=2")
        assert again.returncode == 0, again.stderr
        assert "scheduler=1 storage=0 client=1; listed but not answering: storage 127.0.0.1:" in again.stdout
        wait_for(
            lambda: "firing" in prometheus.alert_states().get("IcecrawlerTargetDown", set()),
            "IcecrawlerTargetDown never fired for the killed storage server",
        )
        assert prometheus.value('up{job="icecrawler-storage"}') == 0
