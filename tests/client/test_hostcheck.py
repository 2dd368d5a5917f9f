"""A client started with other sites than the scheduler's says so: the pure comparison, and the check against a real
scheduler daemon over Ice (its ``stats`` name each source's host), logging one warning and never failing."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest

from crawler_client.hostcheck import check_once, differing_hosts, start_host_check
from icecrawler.settings import Settings
from icecrawler.shards import source_hosts
from tests.scheduler.daemon import ICE_TEST_SETTINGS, scheduler_daemon, scheduler_proxy

pytestmark = [pytest.mark.ice, pytest.mark.bdb]


def test_only_hosts_both_sides_know_and_that_differ_are_named() -> None:
    theirs = {"jd": "club.jd.com", "weibo_web": "weibo.com", "gone": "x.example"}
    ours = {"jd": "127.0.0.1:8800", "weibo_web": "weibo.com", "new": "y.example"}
    assert differing_hosts(theirs, ours) == ["jd: the scheduler's 'club.jd.com', this client's '127.0.0.1:8800'"]
    assert differing_hosts(ours, ours) == []


def test_a_client_on_other_sites_than_the_scheduler_is_warned_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    jd_elsewhere = {"sources__jd__base_url": "https://club.jd.com", **ICE_TEST_SETTINGS}
    with scheduler_daemon(tmp_path, **jd_elsewhere) as daemon, scheduler_proxy(daemon) as proxy:
        ours = source_hosts(Settings())  # the defaults: every source on the sandbox
        assert check_once(proxy, ours) == ["jd: the scheduler's 'club.jd.com', this client's '127.0.0.1:8800'"]
        assert check_once(proxy, {**ours, "jd": "club.jd.com"}) == []
        with caplog.at_level(logging.WARNING, logger="crawler_client.hostcheck"):
            start_host_check([proxy], Settings(), threading.Event()).join(30)
    warnings = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert len(warnings) == 1 and "jd: the scheduler's 'club.jd.com'" in warnings[0]


def test_a_scheduler_that_does_not_answer_is_no_reason_to_stop(tmp_path: Path) -> None:
    with scheduler_daemon(tmp_path, **ICE_TEST_SETTINGS) as daemon, scheduler_proxy(daemon) as proxy:
        daemon.stop()
        assert check_once(proxy, source_hosts(Settings())) is None
        stop = threading.Event()
        thread = start_host_check([proxy], Settings(), stop)
        stop.set()
        thread.join(30)
        assert not thread.is_alive()
