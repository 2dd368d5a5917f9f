"""The metrics building blocks and each role's metric set, without daemons: counters, histograms and gauges
render in the Prometheus text format that ``promtool check metrics`` accepts, the endpoint's settings reject bad
values, a taken port falls through to the next one (or to no endpoint, never to a failed daemon), and the
observers count what the scheduler core, the storage service and the client's fetcher did."""

from __future__ import annotations

import logging
import re
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric

from crawler_client.http import Fetcher, FetchPolicy
from crawler_client.sources.base import PageRequest
from crawler_client.transport import RawResponse
from icecrawler.clock import ClockJumpWatch
from icecrawler.errors import ConfigError, NoWorkError
from icecrawler.metrics import FOLD_AT, Buckets, MetricsConfig, ScrapeCollector, Tally, serve, status_class
from icecrawler.models import Outcome, Report, Task, TaskKind
from icecrawler.processes import free_port
from icecrawler.settings import Settings
from icecrawler.targets import PROBE_TIMEOUT_S, candidate_ports, discover, keep_listed, listed, write_targets
from icecrawler_cli.commands.status import merged, render_text
from scheduler_server.codec import TaskRecord
from scheduler_server.core import SchedulerCore
from scheduler_server.metrics import SMALL_BATCH, SchedulerMetrics
from scheduler_server.server import Maintenance
from scheduler_server.store import MemoryQueueStore
from storage_server.metrics import StorageMetrics
from storage_server.service import StorageService
from storage_server.spool import MemorySpool
from storage_server.stores import MemoryStore
from tests.helpers import wait_for
from tests.observability.prom import DEPLOY, consecutive_free_ports, documented, promtool_check
from tests.scheduler.conftest import ManualClocks, make_settings
from tests.scheduler.test_account_reload import accounts_dir
from tests.storage.conftest import make_post


def render(registry: CollectorRegistry) -> str:
    return generate_latest(registry).decode()


def undocumented(text: str) -> list[str]:
    """The series of an exposition that docs/DEPLOY.md's list ("What is exported") does not name: a new metric is
    documented in the same change, whichever role exports it."""
    deploy_doc = (DEPLOY.parent / "docs" / "DEPLOY.md").read_text(encoding="utf-8")
    names = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line.startswith("icecrawler_")}
    return sorted(name for name in names if not documented(name, deploy_doc))


def smallest_finite_bucket(metrics: Any, histogram: str) -> float:
    """The smallest finite ``le`` of ``histogram`` (source jd) holding the one value ``metrics`` observed; the
    exposition passes promtool's check. Fails when only +Inf holds it."""
    registry = CollectorRegistry()
    metrics.register(registry)
    text = render(registry)
    promtool_check(text)
    buckets = re.findall(histogram + r'_bucket\{le="([^"]+)",source="jd"\} (\S+)', text)
    holding = [float(le) for le, count in buckets if float(count) == 1.0 and le != "+Inf"]
    assert holding, f"{histogram}: the value is counted in +Inf only"
    return min(holding)


def observed_core(clocks: ManualClocks) -> tuple[SchedulerCore, CollectorRegistry]:
    """A core on the memory store whose observer is the scheduler's metrics, registered in the returned registry."""
    core = SchedulerCore.from_settings(make_settings(), MemoryQueueStore(), clocks)
    metrics = SchedulerMetrics(core)
    core.observer = metrics
    registry = CollectorRegistry()
    metrics.register(registry)
    return core, registry


def test_tally_and_buckets_render_valid_counters_and_histograms() -> None:
    tally = Tally("demo_events", "Events by kind.", ["kind"])
    tally.add(("a",))
    tally.add_all([("b",), ("a",)])
    tally.add_amounts([(("c",), 2.5)])
    tally.ensure([("d",)])
    buckets = Buckets("demo_duration_seconds", "Durations.", ["kind"], (0.1, 1.0))
    buckets.observe(("a",), 0.05)
    buckets.observe_all([(("a",), 0.5), (("a",), 5.0)])
    row = buckets.row(("b",))  # a kept row: exported at once, then counted without a label lookup
    assert buckets.row(("a",)) is not row
    zero = buckets.family()
    row.observe(0.5)
    registry = CollectorRegistry()
    registry.register(ScrapeCollector(lambda: [tally.family(), buckets.family()]))
    text = render(registry)
    assert 'demo_events_total{kind="a"} 2.0' in text and 'demo_events_total{kind="d"} 0.0' in text
    assert 'demo_duration_seconds_bucket{kind="a",le="0.1"} 1.0' in text
    assert 'demo_duration_seconds_bucket{kind="a",le="1.0"} 2.0' in text
    assert 'demo_duration_seconds_bucket{kind="a",le="+Inf"} 3.0' in text
    assert 'demo_duration_seconds_count{kind="a"} 3.0' in text and 'demo_duration_seconds_sum{kind="a"} 5.55' in text
    assert 'demo_duration_seconds_bucket{kind="b",le="1.0"} 1.0' in text
    assert 'demo_duration_seconds_bucket{kind="b",le="0.1"} 0.0' in text
    assert [sample.value for sample in zero.samples if sample.labels.get("kind") == "b"] == [0.0] * 5
    promtool_check(text)


def test_a_kept_row_folds_its_waiting_values_in_bounded_steps_and_at_every_scrape() -> None:
    """A kept row only queues what it observes: the queue is counted when ``FOLD_AT`` values wait (so memory
    stays bounded without scrapes) and whenever the histogram is read, and no value is lost or counted twice."""
    buckets = Buckets("demo_wait_seconds", "Waits.", [], (1.0,))
    row = buckets.row(())
    for n in range(2 * FOLD_AT + 3):
        row.observe(0.5 if n % 2 else 2.0)
        assert row.waiting < FOLD_AT
    assert row.waiting == 3
    samples = {(sample.name, sample.labels.get("le")): sample.value for sample in buckets.family().samples}
    assert row.waiting == 0
    assert samples[("demo_wait_seconds_bucket", "1.0")] == FOLD_AT + 1
    assert samples[("demo_wait_seconds_count", None)] == 2 * FOLD_AT + 3
    assert samples[("demo_wait_seconds_sum", None)] == 0.5 * (FOLD_AT + 1) + 2.0 * (FOLD_AT + 2)


def test_a_tally_name_with_total_is_refused() -> None:
    with pytest.raises(ValueError, match="_total"):
        Tally("demo_total", "x", [])


def test_a_failing_collector_leaves_the_rest_of_the_scrape() -> None:
    def broken() -> list[object]:
        raise RuntimeError("boom")

    tally = Tally("demo_ok", "Still here.", [])
    tally.add(())
    registry = CollectorRegistry()
    registry.register(ScrapeCollector(broken))  # type: ignore[arg-type]
    registry.register(ScrapeCollector(lambda: [tally.family()]))
    assert "demo_ok_total 1.0" in render(registry)


@pytest.mark.parametrize(
    "status, label", [(200, "2xx"), (302, "3xx"), (418, "4xx"), (503, "5xx"), (0, "none"), (999, "none")]
)
def test_status_classes(status: int, label: str) -> None:
    assert status_class(status) == label


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("metrics.client.port", -1, "port"),
        ("metrics.client.port", 70000, "port"),
        ("metrics.client.port_span", 0, "port_span"),
    ],
)
def test_bad_metrics_settings_are_refused(key: str, value: int, message: str) -> None:
    settings = Settings().copy_with(**{key.replace(".", "__"): value})
    with pytest.raises(ConfigError, match=message):
        MetricsConfig.from_settings(settings, "client")


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port this test holds, whose next port was free a moment ago. A port the kernel picks (bind to 0) comes from
    the range it also gives outgoing connections, so its neighbour is often someone's (the local HBase's, say)."""
    first = consecutive_free_ports(2)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", first))
        sock.listen()
        yield first


def test_port_zero_is_off() -> None:
    assert serve(MetricsConfig("client", "127.0.0.1", 0, 4), CollectorRegistry()) is None


def test_a_taken_port_falls_through_to_the_next_one_of_the_span(taken_port: int) -> None:
    registry = CollectorRegistry()
    tally = Tally("icecrawler_client_demo", "Demo.", [])
    registry.register(ScrapeCollector(lambda: [tally.family()]))
    endpoint = serve(MetricsConfig("client", "127.0.0.1", taken_port, 2), registry)
    assert endpoint is not None and endpoint.port == taken_port + 1
    try:
        with urllib.request.urlopen(endpoint.url, timeout=5) as answer:
            assert "icecrawler_client_demo_total" in answer.read().decode()
    finally:
        endpoint.close()


def test_every_endpoint_serves_the_process_series_the_restart_alert_reads(taken_port: int) -> None:
    endpoint = serve(MetricsConfig("scheduler", "127.0.0.1", taken_port, 2), CollectorRegistry())
    assert endpoint is not None
    try:
        with urllib.request.urlopen(endpoint.url, timeout=5) as answer:
            text = answer.read().decode()
    finally:
        endpoint.close()
    start = next(line for line in text.splitlines() if line.startswith("process_start_time_seconds "))
    assert abs(float(start.split()[1]) - time.time()) < 24 * 3600, start  # this test process's start, in unix seconds
    assert "process_resident_memory_bytes " in text and "process_open_fds " in text
    promtool_check(text)


def test_all_ports_taken_means_no_endpoint_and_a_log_line(taken_port: int, caplog: pytest.LogCaptureFixture) -> None:
    assert serve(MetricsConfig("storage", "127.0.0.1", taken_port, 1), CollectorRegistry()) is None
    assert "all taken" in caplog.text and "metrics.storage" in caplog.text


def test_targets_finds_only_answering_daemons_of_each_role(tmp_path: Path, taken_port: int) -> None:
    registry = CollectorRegistry()
    tally = Tally("icecrawler_client_demo", "Demo.", [])
    registry.register(ScrapeCollector(lambda: [tally.family()]))
    endpoint = serve(MetricsConfig("client", "127.0.0.1", taken_port, 4), registry)
    assert endpoint is not None
    try:
        settings = Settings().copy_with(
            metrics__client__port=taken_port,
            metrics__client__port_span=4,
            metrics__scheduler__port=endpoint.port,
            metrics__storage__port=0,
        )
        assert candidate_ports(settings, "client") == list(range(taken_port, taken_port + 4))
        assert candidate_ports(settings, "storage") == []
        found = discover(settings, ["127.0.0.1"], timeout_s=2)
    finally:
        endpoint.close()
    # The listening socket that is not an endpoint, and the client endpoint probed as a scheduler, are not targets.
    assert found == {"scheduler": [], "storage": [], "client": [f"127.0.0.1:{endpoint.port}"]}
    paths = write_targets(tmp_path / "targets", found)
    assert sorted(path.name for path in paths) == ["client.json", "scheduler.json", "storage.json"]
    assert '"127.0.0.1:' in (tmp_path / "targets" / "client.json").read_text()
    assert not list((tmp_path / "targets").glob("*.partial"))


def test_targets_keep_a_silent_scheduler_or_storage_listed_until_forgotten(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A dead scheduler or storage server must stay a target, or Prometheus stops scraping it and no alert says it
    died; a client that stops answering is dropped (clients come and go with the work)."""
    directory = tmp_path / "targets"
    write_targets(directory, {"scheduler": ["h:9410"], "storage": ["h:9420", "h:9421"], "client": ["h:9430"]})
    assert listed(directory, "storage") == ["h:9420", "h:9421"]
    lists, silent, unprobed = keep_listed(
        directory, {"scheduler": [], "storage": ["h:9421"], "client": ["h:9431"]}, ["h"]
    )
    assert lists == {"scheduler": ["h:9410"], "storage": ["h:9421", "h:9420"], "client": ["h:9431"]}
    assert silent == {"scheduler": ["h:9410"], "storage": ["h:9420"], "client": []}
    assert unprobed == {"scheduler": [], "storage": [], "client": []}
    lists, silent, _ = keep_listed(directory, {"scheduler": [], "storage": [], "client": []}, ["h"], forget=["h:9420"])
    assert lists["storage"] == ["h:9421"] and silent["storage"] == ["h:9421"]
    # A run over other hosts keeps these as they are, and does not call them silent: it did not probe them.
    lists, silent, unprobed = keep_listed(directory, {"scheduler": [], "storage": [], "client": []}, ["other"])
    assert lists["storage"] == ["h:9420", "h:9421"] and silent["storage"] == []
    assert unprobed["storage"] == ["h:9420", "h:9421"]
    (directory / "client.json").write_text("not json", encoding="utf-8")
    assert listed(directory, "client") == [] and listed(tmp_path / "nowhere", "storage") == []

    from icecrawler_cli.cli import main

    nothing = ["--set=metrics.scheduler.port=0", "--set=metrics.storage.port=0", "--set=metrics.client.port=0"]
    assert main(["targets", "--dir", str(directory), "--hosts", "h", "--forget", "h:9421", *nothing]) == 0
    out = capsys.readouterr().out
    assert "scheduler=0 storage=0 client=0; listed but not answering: scheduler h:9410, storage h:9420" in out
    assert listed(directory, "storage") == ["h:9420"] and listed(directory, "client") == []
    assert main(["targets", "--dir", str(directory), "--hosts", "h", "--forget", "h:1", *nothing]) == 0
    assert "--forget h:1: not in the lists" in capsys.readouterr().err


def test_targets_waits_for_a_slow_daemon_and_says_how_long(tmp_path: Path, taken_port: int) -> None:
    """A daemon busy for a moment (a client loading its tokenizer) answers its scrape late; discovery must still list
    it, or Prometheus stops scraping it and its alerts go quiet. How long a probe waits is ``--timeout``."""
    registry = CollectorRegistry()
    tally = Tally("icecrawler_client_demo", "Demo.", [])

    def slow_scrape() -> list[Metric]:
        time.sleep(1.5)
        return [tally.family()]

    registry.register(ScrapeCollector(slow_scrape))
    endpoint = serve(MetricsConfig("client", "127.0.0.1", taken_port, 2), registry)
    assert endpoint is not None
    settings = Settings().copy_with(
        metrics__client__port=endpoint.port,
        metrics__client__port_span=1,
        metrics__scheduler__port=0,
        metrics__storage__port=0,
    )
    try:
        assert PROBE_TIMEOUT_S >= 5
        assert discover(settings, ["127.0.0.1"])["client"] == [f"127.0.0.1:{endpoint.port}"]
        assert discover(settings, ["127.0.0.1"], timeout_s=0.2)["client"] == []
    finally:
        endpoint.close()


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--timeout", "0", "0 seconds: give a finite time above 0"),
        ("--timeout", "nan", "nan seconds: give a finite time above 0"),
        ("--timeout", "soon", "not a number of seconds"),
        # A negative --every probed once and exited as if it were 0; nan or inf never came back.
        ("--every", "-1", "-1 seconds: give 0 (once) or a finite time"),
        ("--every", "nan", "nan seconds: give 0 (once) or a finite time above 0"),
    ],
)
def test_targets_refuses_a_bad_timeout_or_interval(
    flag: str, value: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from icecrawler_cli.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["targets", flag, value, "--dir", str(tmp_path / "t")])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "t").exists()


def test_scheduler_metrics_count_leases_reports_expiries_and_groups() -> None:
    clocks = ManualClocks()
    core = SchedulerCore.from_settings(make_settings(), MemoryQueueStore(), clocks)
    metrics = SchedulerMetrics(core)
    core.observer = metrics
    core.add(["jd:1", "jd:2"], TaskKind.ProductReviews)
    core.add(["weibo_pc:3"], TaskKind.WeiboUser)
    tasks = core.lease("w", 3)
    by_source = {task.source: task for task in tasks}
    core.report(
        [
            Report(
                task_id=by_source["jd"].id,
                lease_token=by_source["jd"].lease_token,
                outcome=Outcome.Ok,
                new_items=4,
                fetches=3,
                http_status=200,
            )
        ]
    )
    clocks.advance(3600)  # the other two leases run out
    core.reap()
    registry = CollectorRegistry()
    metrics.register(registry)
    text = render(registry)
    assert 'icecrawler_scheduler_leases_total{source="jd"} 2.0' in text
    assert 'icecrawler_scheduler_reports_total{outcome="Ok",source="jd"} 1.0' in text
    assert 'icecrawler_scheduler_fetches_total{source="jd"} 3.0' in text
    assert 'icecrawler_scheduler_new_items_total{source="jd"} 4.0' in text
    assert 'icecrawler_scheduler_lease_expiries_total{source="weibo_pc"} 1.0' in text
    assert 'icecrawler_scheduler_recrawl_period_seconds_count{source="jd"} 1.0' in text
    assert 'icecrawler_scheduler_tasks{state="pending"} 3.0' in text
    assert "icecrawler_scheduler_group_commit_calls_count 4.0" in text  # two adds, a lease, a report
    assert "icecrawler_scheduler_fsync_duration_seconds_count" in text
    # All three are due: the reported one after its 60 s period (59 minutes overdue), the expired two at once.
    assert "icecrawler_scheduler_due_backlog_tasks 3.0" in text
    assert "icecrawler_scheduler_due_backlog_age_seconds 3540.0" in text
    assert undocumented(text) == []
    promtool_check(text)


def test_scheduler_metrics_show_a_source_whose_every_account_is_frozen(tmp_path: Path) -> None:
    """Once every account of a source is frozen its tasks are no longer leased, so no report counts anything
    (IcecrawlerBannedOrLoginRequired reads reports): the usable accounts per source say it, and count one that
    needs an account and has none; a source crawled without one has no series. How long each source's tasks have
    waited says whether anything of it waits at all."""
    clocks = ManualClocks()
    only_pc = 'sources = ["weibo_pc"]\n'
    accounts = accounts_dir(
        tmp_path,
        f'[[account]]\nid = "a1"\ncookies = "SUB=one"\n{only_pc}\n'
        f'[[account]]\nid = "a2"\ncookies = "SUB=two"\n{only_pc}',
    )
    settings = make_settings(
        scheduler__accounts_dir=str(accounts),
        scheduler__account_sources="weibo_pc,weibo_mobile",
        scheduler__account_freeze_s=3600.0,
    )
    core = SchedulerCore.from_settings(settings, MemoryQueueStore(), clocks)
    registry = CollectorRegistry()
    SchedulerMetrics(core).register(registry)
    core.add(["weibo_pc:1", "weibo_pc:2"], TaskKind.WeiboUser)
    core.add(["jd:3"], TaskKind.ProductReviews)
    text = render(registry)
    assert 'icecrawler_scheduler_source_accounts{source="weibo_pc",state="ok"} 2.0' in text
    assert 'icecrawler_scheduler_source_accounts{source="weibo_mobile",state="ok"} 0.0' in text  # none configured
    assert not [
        line for line in text.splitlines() if line.startswith('icecrawler_scheduler_source_accounts{source="jd"')
    ]
    for task in core.lease("w", 3):
        if task.source == "weibo_pc":
            core.report([Report(task.id, task.lease_token, outcome=Outcome.LoginRequired)])
    clocks.advance(120)  # both due again, both accounts still frozen: nothing of weibo_pc is leased
    assert [task.source for task in core.lease("w", 3)] == ["jd"]  # jd reported nothing and expired: due again
    text = render(registry)
    assert 'icecrawler_scheduler_source_accounts{source="weibo_pc",state="ok"} 0.0' in text
    assert 'icecrawler_scheduler_source_accounts{source="weibo_pc",state="frozen"} 2.0' in text
    # weibo_pc's tasks wait for an account (due since the reports); nobody seeded weibo_mobile, so nothing of it
    # waits, and IcecrawlerNoUsableAccount, which reads both, pages for weibo_pc alone.
    assert 'icecrawler_scheduler_source_due_age_seconds{source="weibo_pc"} 120.0' in text
    assert 'icecrawler_scheduler_source_due_age_seconds{source="weibo_mobile"} 0.0' in text
    assert 'icecrawler_scheduler_source_due_age_seconds{source="jd"} 0.0' in text  # leased
    assert undocumented(text) == []
    promtool_check(text)
    said = render_text({"scheduler": {**core.stats(), **core.stats()["detail"]}})
    assert "source weibo_pc: no usable account (2 frozen)" in said
    assert "source weibo_mobile: no account can crawl it" in said
    # Two shards, each with its own pool: the source is said per shard, of the one whose accounts are frozen.
    healthy = SchedulerCore.from_settings(settings, MemoryQueueStore(), clocks)
    two = merged([{**core.stats(), **core.stats()["detail"]}, {**healthy.stats(), **healthy.stats()["detail"]}])
    said = render_text({"scheduler": two})
    assert "source weibo_pc on shard 0: no usable account (2 frozen)" in said
    assert "weibo_pc on shard 1" not in said
    clocks.advance(3600)  # thawed
    assert 'icecrawler_scheduler_source_accounts{source="weibo_pc",state="ok"} 2.0' in render(registry)


def test_scheduler_metrics_show_how_long_a_site_keeps_each_sources_host_blocked() -> None:
    """A rate limit with a long Retry-After blocks the source's host: none of its tasks is leased, so no report says
    anything after the one that blocked it. The block per source says it; an operator's hold is not the site's."""
    clocks = ManualClocks()
    hosts = {
        "sources__jd__base_url": "http://127.0.0.2:8800/jd",
        "sources__ecshop__base_url": "http://127.0.0.3:8800/ecshop",
    }
    settings = make_settings(scheduler__max_period_s=86400.0, **hosts)
    core = SchedulerCore.from_settings(settings, MemoryQueueStore(), clocks)
    registry = CollectorRegistry()
    SchedulerMetrics(core).register(registry)
    core.add(["jd:1", "ecshop:2"], TaskKind.ProductReviews)
    text = render(registry)
    assert 'icecrawler_scheduler_source_blocked_seconds{source="jd"} 0.0' in text
    jd = next(task for task in core.lease("w", 2) if task.source == "jd")
    core.report([Report(jd.id, jd.lease_token, outcome=Outcome.RateLimited, retry_after_s=3600.0)])
    core.hold_host(core.config.hosts["ecshop"], 900.0, "maintenance")
    clocks.advance(600)
    with pytest.raises(NoWorkError):  # jd blocked by the site, ecshop (its lease expired) held by the operator
        core.lease("w", 2)
    text = render(registry)
    assert 'icecrawler_scheduler_source_blocked_seconds{source="jd"} 3000.0' in text
    assert 'icecrawler_scheduler_source_blocked_seconds{source="ecshop"} 0.0' in text  # the operator's hold
    assert 'icecrawler_scheduler_source_blocked_seconds{source="weibo_pc"} 0.0' in text
    assert "icecrawler_scheduler_held_hosts 1.0" in text
    assert undocumented(text) == []
    promtool_check(text)
    clocks.advance(3000)
    assert 'icecrawler_scheduler_source_blocked_seconds{source="jd"} 0.0' in render(registry)


def test_scheduler_metrics_show_what_the_rate_policy_steers_by() -> None:
    clocks = ManualClocks()
    settings = make_settings(
        scheduler__policy="rate", scheduler__max_period_s=86400.0, scheduler__fetch_budget_per_s=1e-5
    )
    core = SchedulerCore.from_settings(settings, MemoryQueueStore(), clocks)
    registry = CollectorRegistry()
    SchedulerMetrics(core).register(registry)
    core.add(["jd:1", "jd:2"], TaskKind.ProductReviews)
    text = render(registry)
    assert "icecrawler_scheduler_rate_budget_constant" not in text  # not computed yet
    assert "icecrawler_scheduler_rate_longest_period_seconds 86400.0" in text
    assert "icecrawler_scheduler_rate_daily_anchor 1.0" in text
    scale = core.rebalance_budget()
    assert scale is not None
    text = render(registry)
    assert f"icecrawler_scheduler_rate_budget_constant {scale!r}" in text
    assert "icecrawler_scheduler_rate_longest_period_seconds 350000.0" in text  # 1.75 x 2 tasks / 1e-5
    assert undocumented(text) == []
    promtool_check(text)
    fixed = CollectorRegistry()
    SchedulerMetrics(SchedulerCore.from_settings(make_settings(), MemoryQueueStore(), clocks)).register(fixed)
    assert "icecrawler_scheduler_rate_" not in render(fixed)


@pytest.mark.parametrize("period_days", [2.0, 5.0, 30.0])
def test_the_recrawl_period_histogram_holds_periods_of_days_in_a_finite_bucket(period_days: float) -> None:
    """Periods past a day are common on a long run (``scheduler.max_period_s`` set to a week or a month for quiet
    targets, or the rate policy's longest period stretched by a small fetch budget): with a last bound of one day
    they all fell in +Inf, and the dashboard's median period (``histogram_quantile``) read "one day" whatever they
    were. Each lands in a finite bucket at most twice its size."""
    period_s = period_days * 86400.0
    settings = make_settings(scheduler__initial_period_s=period_s, scheduler__max_period_s=30 * 86400.0)
    core = SchedulerCore.from_settings(settings, MemoryQueueStore(), ManualClocks())
    metrics = SchedulerMetrics(core)
    core.observer = metrics
    core.add(["jd:1"], TaskKind.ProductReviews)
    (task,) = core.lease("w", 1)
    core.report([Report(task_id=task.id, lease_token=task.lease_token, outcome=Outcome.Ok, new_items=1)])
    assert core.task_info(task.id)["period_s"] == period_s
    assert period_s <= smallest_finite_bucket(metrics, "icecrawler_scheduler_recrawl_period_seconds") <= 2 * period_s


def test_a_jump_of_the_wall_clock_is_logged_and_counted_by_the_maintenance_thread(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The scheduler's maintenance thread watches the wall clock against the monotonic one (here both are the
    test's): a jump back and one forward are each logged with what they do, and counted by direction."""
    clocks = ManualClocks()
    core, registry = observed_core(clocks)
    # The monotonic clock stands still, so each change of the wall is a jump (one value changes per jump: no
    # check can see half of one).
    maintenance = Maintenance(core, 0.01, 3600.0, ClockJumpWatch(wall=clocks.wall, monotonic=lambda: 1000.0))
    with caplog.at_level(logging.WARNING, logger="scheduler_server.server"):
        maintenance.start()
        try:
            clocks.wall_s -= 3600
            wait_for(lambda: 'direction="back"} 1.0' in render(registry), "the jump back not counted", 5, 0.01)
            clocks.wall_s += 7200
            wait_for(lambda: 'direction="forward"} 1.0' in render(registry), "the jump forward not counted", 5, 0.01)
        finally:
            maintenance.stop()
    text = render(registry)
    assert 'icecrawler_scheduler_clock_jumps_total{direction="back"} 1.0' in text
    assert 'icecrawler_scheduler_clock_jumps_total{direction="forward"} 1.0' in text
    warnings = [record.getMessage() for record in caplog.records]
    assert any("jumped back 3600 s" in line and "wait that much longer" in line for line in warnings)
    assert any("jumped forward 7200 s" in line and "StaleLease" in line for line in warnings)
    assert len(warnings) == 2
    promtool_check(text)


def test_a_maintenance_step_failing_is_counted_by_step(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A bug that fails one step of every maintenance pass (the others run on) shows in
    ``maintenance_failures_total{step}``: the log says it once a minute, and only a counter says it goes on."""
    clocks = ManualClocks()
    core, registry = observed_core(clocks)

    def broken() -> None:
        raise KeyError("a bug")

    monkeypatch.setattr(core, "rebalance_budget", broken)
    monotonic = [1000.0]
    maintenance = Maintenance(
        core, 1.0, 3600.0, ClockJumpWatch(wall=clocks.wall, monotonic=lambda: monotonic[0]), lambda: monotonic[0]
    )
    with caplog.at_level(logging.CRITICAL, logger="scheduler_server.server"):
        for _ in range(3):
            maintenance.tick()
            monotonic[0] += 1.0
            clocks.advance(1.0)
    text = render(registry)
    assert 'icecrawler_scheduler_maintenance_failures_total{step="budget"} 3.0' in text
    for step in ("clock", "reap", "prune", "checkpoint"):
        assert f'icecrawler_scheduler_maintenance_failures_total{{step="{step}"}} 0.0' in text
    assert undocumented(text) == []
    promtool_check(text)


class _Tee:
    """Passes every observation on to ``metrics`` and keeps the leases and reports it saw."""

    def __init__(self, metrics: SchedulerMetrics) -> None:
        self.metrics = metrics
        self.tasks: list[Task] = []
        self.reports: list[tuple[TaskRecord, Report]] = []

    def leased(self, tasks: Sequence[Task]) -> None:
        self.metrics.leased(tasks)
        self.tasks.extend(tasks)

    def reported(self, records: Sequence[TaskRecord], reports: Sequence[Report]) -> None:
        self.metrics.reported(records, reports)
        self.reports.extend(zip(records, reports, strict=True))

    def expired(self, records: Sequence[TaskRecord]) -> None:
        self.metrics.expired(records)

    def group(self, calls: int) -> None:
        self.metrics.group(calls)

    def synced(self, seconds: float) -> None:
        self.metrics.synced(seconds)

    def clock_jumped(self, seconds: float) -> None:
        self.metrics.clock_jumped(seconds)

    def maintenance_failed(self, step: str) -> None:
        self.metrics.maintenance_failed(step)


def test_a_large_batch_of_mixed_sources_and_outcomes_counts_as_its_tasks_one_by_one() -> None:
    """The observer counts a batch larger than ``SMALL_BATCH`` with batch helpers (per source, per outcome) and a
    small one task by task: both must give the same counts, periods and fetches."""
    core = SchedulerCore.from_settings(make_settings(), MemoryQueueStore(), ManualClocks())
    batched = SchedulerMetrics(core)
    tee = _Tee(batched)
    core.observer = tee
    core.add([f"jd:{n}" for n in range(7)], TaskKind.ProductReviews)
    core.add([f"weibo_pc:{n}" for n in range(5)], TaskKind.WeiboUser)
    tasks = core.lease("w", 12)
    assert len(tasks) == 12 > SMALL_BATCH
    outcomes = [Outcome.Ok, Outcome.Ok, Outcome.NotFound, Outcome.Ok, Outcome.Timeout]
    core.report(
        [
            Report(
                task_id=task.id,
                lease_token=task.lease_token,
                outcome=outcomes[n % len(outcomes)],
                new_items=n,
                fetches=n + 1,
                http_status=200,
            )
            for n, task in enumerate(tasks)
        ]
    )
    one_by_one = SchedulerMetrics(core)
    for task in tee.tasks:
        one_by_one.leased([task])
    for record, item in tee.reports:
        one_by_one.reported([record], [item])
    texts = []
    for metrics in (batched, one_by_one):
        registry = CollectorRegistry()
        metrics.register(registry)
        texts.append(
            "\n".join(
                line
                for line in render(registry).splitlines()
                if "_leases_" in line
                or "_reports_" in line
                or "_fetches_" in line
                or "recrawl_period" in line
                or "_new_items_" in line
            )
        )
    assert texts[0] == texts[1]
    ok_jd = sum(1 for task, n in zip(tasks, range(12), strict=True) if task.source == "jd" and n % 5 in (0, 1, 3))
    assert f'icecrawler_scheduler_reports_total{{outcome="Ok",source="jd"}} {float(ok_jd)}' in texts[0]
    assert f'icecrawler_scheduler_recrawl_period_seconds_count{{source="jd"}} {float(ok_jd)}' in texts[0]
    assert 'icecrawler_scheduler_leases_total{source="weibo_pc"} 5.0' in texts[0]
    jd_fetches = sum(n + 1 for n, task in enumerate(tasks) if task.source == "jd")
    assert f'icecrawler_scheduler_fetches_total{{source="jd"}} {float(jd_fetches)}' in texts[0]
    with pytest.raises(ValueError, match="records for"):
        batched.reported([record for record, _ in tee.reports], [])


def test_the_scheduler_hot_path_histograms_stay_bounded_without_scrapes_and_count_every_value() -> None:
    """Group sizes and fsync times are only queued on the hot path; ``group`` counts them every ``FOLD_AT``
    groups, so a scheduler nobody scrapes keeps a bounded queue, and a scrape counts every value once."""
    core = SchedulerCore.from_settings(make_settings(), MemoryQueueStore(), ManualClocks())
    metrics = SchedulerMetrics(core)
    for _ in range(3 * FOLD_AT + 7):
        metrics.group(2)
        metrics.synced(0.004)
        assert metrics.queued <= 2 * FOLD_AT
    assert metrics.queued == 7 + 8  # the sync of the group that folded comes after its fold
    registry = CollectorRegistry()
    metrics.register(registry)
    text = render(registry)
    assert metrics.queued == 0
    count = float(3 * FOLD_AT + 7)
    assert f"icecrawler_scheduler_group_commit_calls_count {count}" in text
    assert f"icecrawler_scheduler_group_commit_calls_sum {2 * count}" in text
    assert f'icecrawler_scheduler_fsync_duration_seconds_bucket{{le="0.005"}} {count}' in text
    assert 'icecrawler_scheduler_fsync_duration_seconds_bucket{le="0.0025"} 0.0' in text


def test_storage_metrics_count_writes_spooling_and_outages() -> None:
    store = MemoryStore()
    service = StorageService(store, MemorySpool(), max_text_chars=1000, batch_limit=100, write_timeout_s=5)
    metrics = StorageMetrics(service)
    service.observer = metrics
    try:
        service.write_posts([make_post(1), make_post(2)])
        metrics.backend_failed(outage_began=True)  # as the service does when a backend write fails
        registry = CollectorRegistry()
        metrics.register(registry)
        text = render(registry)
    finally:
        service.close()
    assert 'icecrawler_storage_records_written_total{backend="memory",table="weibo"} 2.0' in text
    assert 'icecrawler_storage_backend_outages_total{backend="memory"} 1.0' in text
    assert 'icecrawler_storage_write_duration_seconds_count{table="weibo"} 1.0' in text
    assert "icecrawler_storage_spool_records 0.0" in text
    assert undocumented(text) == []
    promtool_check(text)


def test_the_spool_age_does_not_move_with_a_step_of_the_wall_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """``spool_age_seconds`` is how long the backend has been kept waiting, a span the daemon measures itself: on
    the wall clock an NTP step a day forward added a day to it, and one back read as a spool just begun (0)."""
    store = MemoryStore()
    store.down = True
    service = StorageService(store, MemorySpool(), max_text_chars=1000, batch_limit=100, write_timeout_s=5)
    try:
        assert service.write_posts([make_post(1)]).spooled == 1
        wall = time.time()
        monkeypatch.setattr(time, "time", lambda: wall + 86400.0)
        forward = service.spool_age_s()
        monkeypatch.setattr(time, "time", lambda: wall - 86400.0)
        back = service.spool_age_s()
    finally:
        monkeypatch.undo()
        service.close()
    assert 0 < forward < 3600 and 0 < back < 3600


def test_storage_metrics_follow_an_outage_the_spool_and_the_replay() -> None:
    store = MemoryStore()
    store.down = True  # an HBase outage
    service = StorageService(store, MemorySpool(), max_text_chars=1000, batch_limit=100, write_timeout_s=5)
    metrics = StorageMetrics(service)
    service.observer = metrics
    registry = CollectorRegistry()
    metrics.register(registry)
    try:
        assert service.write_posts([make_post(1), make_post(2), make_post(3)]).spooled == 3
        time.sleep(0.05)
        text = render(registry)
        assert "icecrawler_storage_spool_records 3.0" in text
        assert 'icecrawler_storage_backend_up{backend="memory"} 0.0' in text
        assert 'icecrawler_storage_records_spooled_total{table="weibo"} 3.0' in text
        assert 'icecrawler_storage_backend_outages_total{backend="memory"} 1.0' in text
        assert service.spool_age_s() > 0
        store.down = False
        assert service.wait_drained(10)
        deadline = time.monotonic() + 10
        while not service.backend_up() and time.monotonic() < deadline:
            time.sleep(0.05)
        text = render(registry)
    finally:
        service.close()
    assert "icecrawler_storage_spool_records 0.0" in text and "icecrawler_storage_spool_age_seconds 0.0" in text
    assert 'icecrawler_storage_backend_up{backend="memory"} 1.0' in text
    assert 'icecrawler_storage_records_written_total{backend="memory",table="weibo"} 3.0' in text  # replayed once
    promtool_check(text)


def test_the_fetcher_reports_every_request_to_its_hook() -> None:
    seen: list[tuple[int, int]] = []

    class Answer:
        status = 200
        headers: Mapping[str, str] = {}
        url = "http://x/"

        def iter_chunks(self) -> Iterator[bytes]:
            yield b"hello"

        def close(self) -> None:
            pass

    class Transport:
        def send(
            self, request: PageRequest, headers: Mapping[str, str], timeout_s: float, total_timeout_s: float
        ) -> RawResponse:
            return Answer()

    policy = FetchPolicy.from_settings(Settings())
    fetcher = Fetcher(Transport(), policy, on_response=lambda status, size, seconds: seen.append((status, size)))
    fetcher.fetch(PageRequest(url="http://x/"))
    assert seen == [(200, 5)]


def test_client_metrics_count_the_daemons_crawls_and_state() -> None:
    from crawler_client import observer
    from crawler_client.metrics import ClientMetrics
    from icecrawler.processes import poll_until
    from tests.client.test_runtime_daemon import Scheduler, Storage, config, make

    scheduler, storage = Scheduler(tasks=10), Storage()
    daemon, _ = make(scheduler, storage, config(), threading.Event())
    metrics = ClientMetrics(daemon)
    observer.install(metrics)
    try:
        daemon.start()
        try:
            assert poll_until(lambda: len(scheduler.reports) == 10, 20, 0.02)
            observer.current().session_renewed("ecshop")
            observer.current().cookie_refused("jd")
            observer.current().records_clamped("weibo_web")
            observer.current().fetched("jd", 0, 0, 0.2)
            observer.current().parsed("jd", 0.01, 7)
            observer.current().parsed("jd", 0.01, 0)  # a page the parser refused
        finally:
            daemon.stop()
    finally:
        observer.install(observer.NullObserver())
    registry = CollectorRegistry()
    metrics.register(registry)
    text = render(registry)
    assert 'icecrawler_client_crawls_total{outcome="Ok",source="weibo_mobile"} 10.0' in text
    assert 'icecrawler_client_new_items_total{source="weibo_mobile"} 10.0' in text
    assert 'icecrawler_client_session_renewals_total{source="ecshop"} 1.0' in text
    assert 'icecrawler_client_cookies_refused_total{source="jd"} 1.0' in text
    assert 'icecrawler_client_cookies_refused_total{source="ecshop"} 0.0' in text  # every source shown from the start
    assert 'icecrawler_client_records_clamped_total{source="weibo_web"} 1.0' in text
    assert 'icecrawler_client_records_clamped_total{source="jd"} 0.0' in text
    assert 'icecrawler_client_fetches_total{source="jd",status_class="none"} 1.0' in text
    assert 'icecrawler_client_items_read_total{source="jd"} 7.0' in text
    assert 'icecrawler_client_items_read_total{source="ecshop"} 0.0' in text
    assert 'icecrawler_client_pages_read_nothing_total{source="jd"} 1.0' in text  # the refused page, not the other
    assert 'icecrawler_client_pages_read_nothing_total{source="ecshop"} 0.0' in text
    assert 'icecrawler_client_pages_parsed_total{source="jd"} 2.0' in text
    assert 'icecrawler_client_pages_parsed_total{source="ecshop"} 0.0' in text  # from the start, as its companion
    assert "icecrawler_client_tasks_reported_total 10.0" in text
    assert "icecrawler_client_busy_workers 0.0" in text and "icecrawler_client_workers 2.0" in text
    assert "icecrawler_client_cache_entries" not in text  # no caches given: none shown
    assert undocumented(text) == []
    promtool_check(text)


@pytest.mark.parametrize("seconds", [45.0, 100.0, 140.0, 290.0])
def test_a_crawl_of_minutes_lands_in_a_finite_bucket_of_crawl_duration(seconds: float) -> None:
    """A crawl reads up to ``client.max_pages`` pages (5), each up to ``client.total_timeout_s`` (30 s), so crawls of
    one to a few minutes, up to and past the lease (``scheduler.lease_s``, 120 s), are in the real range; the
    latency buckets end at 30 s, and every such crawl read as 30 s."""
    from crawler_client.metrics import ClientMetrics
    from tests.client.test_runtime_daemon import Scheduler, Storage, config, make

    daemon, _ = make(Scheduler(tasks=0), Storage(), config(), threading.Event())
    metrics = ClientMetrics(daemon)
    metrics.crawled("jd", "Ok", 0, seconds)
    assert seconds <= smallest_finite_bucket(metrics, "icecrawler_client_crawl_duration_seconds") <= 2.5 * seconds


def test_client_metrics_show_the_fingerprint_caches() -> None:
    from crawler_client.metrics import ClientMetrics
    from shhd.fingerprint import CacheUsage
    from tests.client.test_runtime_daemon import Scheduler, Storage, config, make

    daemon, _ = make(Scheduler(tasks=0), Storage(), config(), threading.Event())
    caches = {"fingerprint_texts": CacheUsage(7, 16, hits=5, misses=7), "feature_words": CacheUsage(40, 128)}
    registry = CollectorRegistry()
    ClientMetrics(daemon, caches=lambda: caches).register(registry)
    text = render(registry)
    assert 'icecrawler_client_cache_entries{cache="fingerprint_texts"} 7.0' in text
    assert 'icecrawler_client_cache_capacity_entries{cache="feature_words"} 128.0' in text
    assert 'icecrawler_client_cache_lookups_total{cache="fingerprint_texts",result="hit"} 5.0' in text
    assert 'icecrawler_client_cache_lookups_total{cache="fingerprint_texts",result="miss"} 7.0' in text
    assert 'cache="feature_words",result=' not in text  # it does not count its lookups
    promtool_check(text)


def test_scheduler_shard_k_listens_at_port_plus_k_and_targets_probe_every_shard() -> None:
    endpoint, base = None, 0
    for _ in range(20):  # port + 1 may belong to another process: then try another base
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            base = sock.getsockname()[1]
        endpoint = serve(MetricsConfig("scheduler", "127.0.0.1", base, 1), CollectorRegistry(), offset=1)
        if endpoint is not None:
            break
    assert endpoint is not None
    endpoint.close()
    assert endpoint.port == base + 1
    settings = Settings().copy_with(metrics__scheduler__port=base, scheduler__shards=3)
    assert candidate_ports(settings, "scheduler") == [base, base + 1, base + 2]


@pytest.mark.parametrize("role", ["scheduler", "storage", "client"])
def test_a_daemon_with_a_bad_metrics_port_stops_with_a_clear_error_before_starting(
    role: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from icecrawler_cli.cli import main

    code = main(
        [
            role,
            f"--set=metrics.{role}.port=99999",
            f"--set=scheduler.db_dir={tmp_path / 'db'}",
            f"--set=storage.spool_dir={tmp_path / 'spool'}",
            f"--set=storage.embedded.path={tmp_path / 'store.sqlite3'}",
        ]
    )
    assert code == 2
    assert f"metrics.{role}.port must be 0 (off) or a TCP port, got 99999" in capsys.readouterr().err
    assert not (tmp_path / "db").exists() and not (tmp_path / "spool").exists()


def test_targets_refuses_an_empty_host_list(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from icecrawler_cli.cli import main

    assert main(["targets", "--hosts", " , ", "--dir", str(tmp_path / "t")]) == 2
    assert "--hosts names no host" in capsys.readouterr().err
    assert not (tmp_path / "t").exists()


def test_crawl_task_times_every_parse_for_the_metrics_and_keeps_long_texts() -> None:
    from crawler_client.crawl import crawl_task
    from crawler_client.sources.base import ParsedPage
    from icecrawler.errors import FetchError
    from tests.client.test_runtime_crawl import LongTextPostSource, ScriptedFetch, post, task

    timings: list[tuple[float, int]] = []
    page1 = ParsedPage(
        items=[post(30), post(29)],
        next_request=PageRequest(url="http://site/list", page=2),
        info={"long_text_ids": "30"},
    )
    source = LongTextPostSource([page1, [post(28)], FetchError("broken page", outcome=Outcome.ParseError)])
    result = crawl_task(
        task(),
        source,
        ScriptedFetch(),
        base_url="http://site",
        max_pages=10,
        now_ms=lambda: 0,
        on_parse=lambda seconds, items: timings.append((seconds, items)),
    )
    assert len(timings) == 3 and all(seconds >= 0 for seconds, _ in timings)  # the page that raised is timed too
    assert [items for _, items in timings] == [2, 1, 0]  # the items each page gave; none from the page that raised
    assert result.report.outcome is Outcome.ParseError
    assert result.posts[0].text == "the whole long text"  # the hook does not hide the source's long-text support


def test_disk_space_shows_each_directory_and_leaves_out_one_it_cannot_read(tmp_path: Path) -> None:
    import shutil

    from icecrawler.metrics import disk_space_families
    from tests.helpers import disk_space

    registry = CollectorRegistry()
    dirs = {"db": tmp_path, "backup": tmp_path / "not-made-yet"}
    registry.register(ScrapeCollector(lambda: disk_space_families("icecrawler_scheduler", dirs)))
    text = render(registry)
    shown = disk_space(text, "icecrawler_scheduler")
    assert set(shown) == {"db"}
    free, size = shown["db"]
    assert size == shutil.disk_usage(tmp_path).total and 0 < free <= size
    promtool_check(text)


def test_targets_forget_leaves_a_daemon_that_still_answers_listed_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--forget`` is for a retired scheduler or storage server. Given one that still answers (the wrong address, or
    a server started again there), the run used to write it out of the lists while printing ``storage=1``: Prometheus
    stopped scraping a live server, and with no other storage target ``IcecrawlerDaemonAbsent`` fired 10 minutes
    later (an operator run did exactly that)."""
    registry = CollectorRegistry()
    tally = Tally("icecrawler_storage_demo", "Demo.", [])
    registry.register(ScrapeCollector(lambda: [tally.family()]))
    endpoint = serve(MetricsConfig("storage", "127.0.0.1", free_port(), 1), registry)
    assert endpoint is not None
    live = f"127.0.0.1:{endpoint.port}"
    directory = tmp_path / "targets"
    write_targets(directory, {"scheduler": [], "storage": [live], "client": []})
    from icecrawler_cli.cli import main

    only_storage = [
        "--set=metrics.scheduler.port=0",
        "--set=metrics.client.port=0",
        f"--set=metrics.storage.port={endpoint.port}",
        "--set=metrics.storage.port_span=1",
    ]
    try:
        code = main(["targets", "--dir", str(directory), "--hosts", "127.0.0.1", "--forget", live, *only_storage])
    finally:
        endpoint.close()
    assert code == 0
    assert listed(directory, "storage") == [live]
    captured = capsys.readouterr()
    assert "storage=1" in captured.out
    assert f"--forget {live}: it answers /metrics, so it stays listed" in captured.err


def test_the_due_backlog_is_counted_whole_so_a_backlog_past_100_000_still_grows() -> None:
    """``due_backlog_tasks`` stopped at 100 000 (the cap of status's due-soon scan), so a large crawl whose backlog
    passed it showed a flat line: ``deriv`` went to 0 and ``IcecrawlerBacklogGrowing`` resolved while the backlog kept
    growing, the moment it mattered most."""
    clocks = ManualClocks()
    settings = make_settings(scheduler__batch_limit=1000)
    core = SchedulerCore.from_settings(settings, MemoryQueueStore(), clocks)
    registry = CollectorRegistry()
    SchedulerMetrics(core).register(registry)
    ids = [f"jd:{100_000_000 + n}" for n in range(100_010)]
    for start in range(0, len(ids), 1000):
        core.add(ids[start : start + 1000], TaskKind.ProductReviews)
    clocks.advance(3600)  # every task due
    assert "icecrawler_scheduler_due_backlog_tasks 100010.0" in render(registry)


def test_a_shard_says_nothing_of_accounts_for_a_source_another_shard_schedules(tmp_path: Path) -> None:
    """Every shard loads the same accounts file: a source named in scheduler.account_sources that another shard
    schedules showed as "no usable account" on this one (a page, and a status line, once per shard). How long a
    source's tasks wait is said by its own shard alone too (every shard said 0 for every configured source)."""
    from icecrawler.shards import shard_of_host

    hosts = {"sources__weibo_pc__base_url": "https://weibo.com", "sources__jd__base_url": "https://club.jd.com"}
    accounts = accounts_dir(tmp_path, '[[account]]\nid = "a1"\ncookies = "SUB=one"\nsources = ["weibo_pc"]\n')
    shard_of = {"weibo_pc": shard_of_host("weibo.com", 2), "jd": shard_of_host("club.jd.com", 2)}
    for shard in (0, 1):
        settings = make_settings(
            **hosts,
            scheduler__accounts_dir=str(accounts),
            scheduler__account_sources="weibo_pc,jd",
            scheduler__shards=2,
            scheduler__shard=shard,
        )
        core = SchedulerCore.from_settings(settings, MemoryQueueStore(), ManualClocks())
        registry = CollectorRegistry()
        SchedulerMetrics(core).register(registry)
        text = render(registry)
        said = core.stats()["detail"]["source_accounts"]
        for source, owner in shard_of.items():
            series = f'icecrawler_scheduler_source_accounts{{source="{source}",state="ok"}}'
            assert (series in text) == (owner == shard), (shard, source)
            assert (source in said) == (owner == shard), (shard, source)
        assert shard_of["weibo_pc"] != shard_of["jd"]
        waiting = set(re.findall(r'^icecrawler_scheduler_source_due_age_seconds\{source="(\w+)"\}', text, re.M))
        owned = {source for source in core.config.hosts if core.shard_map.of_source(source) == shard}
        assert waiting == owned and {*shard_of} & owned == {s for s, owner in shard_of.items() if owner == shard}


def test_targets_every_reports_a_write_another_run_holds_and_writes_at_its_next_round(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``targets --every`` is the long-running loop beside one-off ``--forget`` runs on the same folder. A round whose
    write met another run's (its ``.partial`` locked) ended the loop with exit 2, and the client targets silently
    stopped following the clients. The round says so on stderr and the next one writes; a one-off run still exits 2."""
    import fcntl
    import os
    import signal

    import icecrawler_cli.commands.targets as command
    from icecrawler_cli.cli import main

    directory = tmp_path / "targets"
    directory.mkdir()
    nothing = ["--set=metrics.scheduler.port=0", "--set=metrics.storage.port=0", "--set=metrics.client.port=0"]
    holder = os.open(directory / "scheduler.json.partial", os.O_WRONLY | os.O_CREAT)
    fcntl.flock(holder, fcntl.LOCK_EX)  # the other run, writing scheduler.json
    held = [holder]
    try:
        assert main(["targets", "--dir", str(directory), "--hosts", "h", *nothing]) == 2
        assert "scheduler.json is being written by another run" in capsys.readouterr().err
        # The other roles' files were written all the same; the one held was not.
        assert (directory / "storage.json").exists() and (directory / "client.json").exists()
        assert not (directory / "scheduler.json").exists()
        rounds: list[int] = []

        def discover_then_step(*args: Any) -> dict[str, list[str]]:
            rounds.append(len(rounds) + 1)
            if len(rounds) == 2:  # the other run is done; and this is the loop's last round
                os.close(held.pop())
                os.kill(os.getpid(), signal.SIGTERM)
            return discover(*args)

        monkeypatch.setattr(command, "discover", discover_then_step)
        assert main(["targets", "--dir", str(directory), "--hosts", "h", "--every", "0.01", *nothing]) == 0
    finally:
        for fd in held:
            os.close(fd)
    assert rounds == [1, 2]
    captured = capsys.readouterr()
    assert captured.err.count("scheduler.json is being written by another run") == 1, captured.err
    assert "writing again in 0.01s" in captured.err
    assert captured.out.count("scheduler=0 storage=0 client=0") == 2
    assert listed(directory, "scheduler") == [] and (directory / "scheduler.json").exists()
    assert sorted(path.name for path in directory.iterdir()) == ["client.json", "scheduler.json", "storage.json"]


def test_targets_every_on_a_file_system_without_locks_exits_2_not_loops_writing_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The loop retries only a write another run holds. A file system that takes no locks refuses every write, every
    round: the loop printed a retry line and the counts each round, wrote nothing, and exited 0 on SIGTERM, so the
    targets went stale with no supervisor seeing a failure. It exits 2 at once, saying why."""
    import errno
    import fcntl
    import os

    from icecrawler_cli.cli import main

    def no_locks(fd: int, operation: int) -> None:
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(fcntl, "flock", no_locks)
    directory = tmp_path / "targets"
    nothing = ["--set=metrics.scheduler.port=0", "--set=metrics.storage.port=0", "--set=metrics.client.port=0"]
    assert main(["targets", "--dir", str(directory), "--hosts", "h", "--every", "0.01", *nothing]) == 2
    captured = capsys.readouterr()
    assert "does not support file locks" in captured.err and "writing again" not in captured.err
    assert list(directory.iterdir()) == []


def test_client_records_rejected_counts_and_says_the_records_the_client_dropped_itself() -> None:
    """A record the client drops before sending (one the wire cannot carry, one over the storage request limit) is
    counted in ``records_rejected`` like one storage rejected; its help text, and docs/DEPLOY.md, said only "storage
    rejected as invalid", so a rising count with nothing rejected on the server read as a contradiction."""
    from crawler_client.metrics import ClientMetrics
    from tests.client.test_runtime_daemon import Scheduler, Storage, config, make
    from tests.client.test_runtime_sink import result

    daemon, _ = make(Scheduler(tasks=0), Storage(), config(), threading.Event())
    crawled = result("x", reviews=2)
    crawled.reviews[0].content = "bad \ud800"
    daemon.sink.add(crawled)
    registry = CollectorRegistry()
    ClientMetrics(daemon).register(registry)
    text = render(registry)
    assert "icecrawler_client_records_rejected_total 1.0" in text
    help_line = next(line for line in text.splitlines() if line.startswith("# HELP icecrawler_client_records_rejected"))
    assert "storage rejected" in help_line and "dropped" in help_line
    deploy = " ".join((Path(__file__).parents[2] / "docs" / "DEPLOY.md").read_text(encoding="utf-8").split())
    said = deploy.split("`records_rejected_total`:", 1)[1].split(", `reports_lost_total`", 1)[0]
    assert "dropped" in said
