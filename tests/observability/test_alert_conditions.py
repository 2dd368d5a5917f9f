"""The deployed alert expressions, evaluated by a real Prometheus that scrapes a real loopback crawl, fire on the
failures they are written for (each ``for:`` is shortened; the few windows shortened too are named at the end):

* IcecrawlerNoProgress: tasks are due and no client runs; it resolves once a client reports;
* IcecrawlerLeaseExpiries: every crawl of one source outlives ``scheduler.lease_s`` (a site slower than the lease),
  in a crawl too small for a fixed number of expiries per second ever to be reached; the healthy source stays
  quiet;
* IcecrawlerSiteFailing: a site answers every crawl with its "busy" page (HTTP 200, the client reports Busy),
  which no other alert counts;
* IcecrawlerDiskFilling: the scheduler's database sits on a small real file system (a tmpfs) that a filler file
  takes past 95 %; it fires for that daemon and directory only, and resolves once the filler is gone;
* IcecrawlerNoUsableAccount: the only account of weibo_pc is turned away by the login wall and frozen; it
  fires for that source only, and ends once a new login in the accounts file and SIGHUP thaw it;
* IcecrawlerSourceBlocked: JD answers HTTP 429 with a Retry-After of an hour, which blocks its host; it fires for
  jd, and ends once the block is lifted (``icecrawler hold --lift``) and the site answers again;
* IcecrawlerClockJumped: the scheduler's wall clock is stepped forward, then back, from outside the process
  (libfaketime, ``tests.faketime``); it fires for each direction, and not before;
* IcecrawlerBackupFailing: the scheduler's and the storage server's backup directory is on a small real file system
  that is full; it fires for each, and ends at each one's first backup once there is room;
* IcecrawlerVisitorSessionsFailing: the sandbox's visitor passport refuses every mint (HTTP 429) while weibo_web's
  tasks wait; it fires for weibo_web, and ends once the passport mints again and the source is crawled;
* IcecrawlerLoginRefreshesRefused: a client of another release reports, with each crawl of a logged-in source, a
  refreshed login that names a cookie the accounts file does not; it fires for that scheduler, and stays quiet
  through five refreshes the pool takes first (more than the four refused ones that fire it);
* IcecrawlerSourceReadsNothing: JD's pages change so that the parser reads no review off them (the sandbox's
  ``new_layout``); it fires for jd only, and ends once the pages read again;
* IcecrawlerMaintenanceFailing: an entry of the scheduler's database that the prune step cannot read fails that step
  on every pass; it fires for ``step="prune"`` only, while calls are served, and ends once the daemon runs without
  the entry.

Most rule windows stay the deployed ones (15 minutes), so rates are read from a Prometheus only minutes old, as
after a fresh deploy. Two tests shorten windows, each saying so: IcecrawlerLoginRefreshesRefused's hour becomes a
minute (every window, ``window_s``), so that it is seen to end; IcecrawlerSourceReadsNothing's half hour against the
day before becomes a minute against 48 minutes (``scaled_durations``: every duration of that one expression 30 times
shorter, their ratios kept); IcecrawlerMaintenanceFailing's three 5-minute spans become three of 10 seconds (the same).
"""

from __future__ import annotations

import shutil
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from icecrawler import rpc
from icecrawler.processes import free_port, wait_for_port
from icecrawler_local.stack import Stack, running_stack
from sandbox.scenario import Product, Scenario, WeiboUser
from sandbox.schedules import Schedule
from scheduler_server.codec import time_key
from scheduler_server.startup import REMOVED_AT_KEY
from scheduler_server.store import BdbQueueStore
from tests.faketime import FakedWallClock
from tests.helpers import wait_for
from tests.observability.prom import Prometheus, prometheus_config, scaled_durations, scrape, static_targets
from tests.scheduler.daemon import scheduler_daemon, scheduler_proxy
from tests.tmpfs import fill, fill_to, small_tmpfs

pytestmark = [pytest.mark.e2e, pytest.mark.ice, pytest.mark.bdb, pytest.mark.slow]

HEALTHY = "weibo_mobile:1907518591"
SLOW = "jd:100012043978"
BUSY = "weibo_pc:2803301701"
VISITOR = "weibo_web:1669879400"


def scenario() -> Scenario:
    static = Schedule("static")
    return Scenario(
        seed=7,
        users=(
            WeiboUser(uid=1907518591, sites=("m",), backlog=5, schedule=static),
            WeiboUser(uid=2803301701, sites=("pc",), backlog=5, schedule=static),
            WeiboUser(uid=1669879400, sites=("web",), backlog=5, schedule=static),
        ),
        products=(Product("jd", "100012043978", backlog=5, schedule=static),),
    )


@contextmanager
def watched_stack(
    tmp_path: Path, window_s: int | None = None, rules: Callable[[str], str] | None = None, **options: Any
) -> Iterator[tuple[Stack, Prometheus]]:
    """A loopback crawl of ``scenario()`` (``options`` as ``running_stack``'s) and a Prometheus watching it
    (``watch``), started after it."""
    with running_stack(tmp_path / "stack", scenario(), speed=60, **options) as stack:
        yield stack, watch(stack, tmp_path / "prom", window_s, rules)


def watch(
    stack: Stack, directory: Path, window_s: int | None = None, rules: Callable[[str], str] | None = None
) -> Prometheus:
    """A Prometheus, stopped with ``stack``, that scrapes its scheduler and storage server with the deployed rules
    (only their ``for:`` shortened, with ``window_s`` every range window: ``prometheus_config``; ``rules`` changes
    the rules' text further)."""
    config = prometheus_config(directory, window_s=window_s)
    if rules is not None:
        written = directory / "icecrawler-rules.yml"
        written.write_text(rules(written.read_text()))
    static_targets(directory, "scheduler", [stack.metrics_ports["scheduler"]])
    static_targets(directory, "storage", [stack.metrics_ports["storage"]])
    return Prometheus(stack.group, config, directory / "data")


def firing(prometheus: Prometheus, alert: str, *labels: str) -> set[tuple[str, ...]]:
    """These labels of ``alert``'s firing instances."""
    return {
        tuple(item["labels"].get(label, "") for label in labels)
        for item in prometheus.api("alerts")["alerts"]
        if item["labels"]["alertname"] == alert and item["state"] == "firing"
    }


def firing_sources(prometheus: Prometheus, alert: str) -> set[str]:
    """The ``source`` labels of ``alert``'s firing instances."""
    return {source for (source,) in firing(prometheus, alert, "source")}


def active_jobs(prometheus: Prometheus, alert: str) -> set[str]:
    """The ``job`` labels of ``alert``'s pending or firing instances."""
    return {
        item["labels"].get("job", "")
        for item in prometheus.api("alerts")["alerts"]
        if item["labels"]["alertname"] == alert
    }


def quiet_after_samples(prometheus: Prometheus, alert: str, job: str, series: str, samples: int = 5) -> None:
    """Wait (bounded) until Prometheus holds ``samples`` scrapes of every ``series`` ``alert`` reads and has
    evaluated ``alert`` since; then it must be neither pending nor firing for ``job`` (a healthy daemon)."""
    wait_for(
        lambda: bool(prometheus.query(series)) and not prometheus.query(f"count_over_time({series}[10m]) < {samples}"),
        lambda: f"fewer than {samples} scrapes of {series}: {prometheus.query(series)}",
        timeout_s=60,
    )
    since = time.time()

    def evaluated() -> bool:
        rules = [rule for group in prometheus.api("rules")["groups"] for rule in group["rules"]]
        (rule,) = [rule for rule in rules if rule.get("name") == alert]
        return datetime.fromisoformat(rule["lastEvaluation"]).timestamp() > since

    wait_for(evaluated, f"{alert} was not evaluated again", timeout_s=30)
    assert job not in active_jobs(prometheus, alert), (prometheus.api("alerts"), prometheus.query(series))


def wait_until_firing(prometheus: Prometheus, alert: str, source: str, series: str, timeout_s: float) -> None:
    """Wait (bounded) for ``alert`` to fire for ``source``; on a timeout the message shows ``series`` too."""
    wait_for(
        lambda: source in firing_sources(prometheus, alert),
        lambda: f"{alert} never fired for {source}: {prometheus.alert_states()}, {prometheus.query(series)}",
        timeout_s=timeout_s,
    )


def wait_until_ended(prometheus: Prometheus, alert: str, series: str = "", timeout_s: float = 90) -> None:
    """Wait (bounded) until ``alert`` is neither pending nor firing; on a timeout the message shows ``series`` too."""
    wait_for(
        lambda: alert not in prometheus.alert_states(),
        lambda: (
            f"{alert} never ended: {prometheus.alert_states()}" + (f", {prometheus.query(series)}" if series else "")
        ),
        timeout_s=timeout_s,
    )


def wait_until_crawled_ok(prometheus: Prometheus, source: str, timeout_s: float = 90) -> None:
    """Wait (bounded) until the scheduler has counted an Ok report of ``source``: the crawl works again."""
    ok = f'sum(icecrawler_scheduler_reports_total{{source="{source}",outcome="Ok"}})'
    wait_for(
        lambda: (prometheus.value(ok) or 0) > 0, lambda: f"{source} was not crawled: {prometheus.query(ok)}", timeout_s
    )


def test_no_progress_lease_expiries_and_site_failing_fire_on_their_real_conditions(tmp_path: Path) -> None:
    with watched_stack(
        tmp_path,
        scheduler_settings={
            "scheduler.lease_s": 3,
            "scheduler.initial_period_s": 600,
            "scheduler.min_period_s": 600,
            "scheduler.max_period_s": 1200,
        },
        client_settings={"client.workers": 2, "client.batch": 1, "client.idle_sleep_s": 0.3},
    ) as (stack, prometheus):
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
        static_targets(tmp_path / "prom", "client", [stack.metrics_ports["client-a"]])
        wait_until_ended(prometheus, "IcecrawlerNoProgress")
        wait_until_firing(
            prometheus, "IcecrawlerLeaseExpiries", "jd", "icecrawler_scheduler_lease_expiries_total > 0", 120
        )
        assert "weibo_mobile" not in firing_sources(prometheus, "IcecrawlerLeaseExpiries")
        wait_until_firing(prometheus, "IcecrawlerSiteFailing", "weibo_pc", "icecrawler_scheduler_reports_total > 0", 90)
        assert firing_sources(prometheus, "IcecrawlerSiteFailing") == {"weibo_pc"}
        healthy_ok = 'sum(icecrawler_scheduler_reports_total{source="weibo_mobile",outcome="Ok"})'
        assert (prometheus.value(healthy_ok) or 0) > 0


def test_disk_filling_fires_for_the_full_directory_and_resolves_once_there_is_room(tmp_path: Path) -> None:
    with (
        # Big enough that a healthy scheduler's writes, extrapolated a day ahead from seconds of history (the
        # expression's trend branch), stay far from filling it.
        small_tmpfs(tmp_path / "fs", 256) as fs,
        watched_stack(tmp_path, scheduler_settings={"scheduler.db_dir": str(fs / "db")}) as (stack, prometheus),
    ):
        free = 'icecrawler_scheduler_disk_free_bytes{dir="db"}'
        quiet_after_samples(prometheus, "IcecrawlerDiskFilling", "icecrawler-scheduler", free)

        filler = fill_to(fs, shutil.disk_usage(fs).total * 3 // 100)  # 97 % used
        scheduler_db = {("icecrawler-scheduler", "db")}
        wait_for(
            lambda: scheduler_db <= firing(prometheus, "IcecrawlerDiskFilling", "job", "dir"),
            lambda: (
                f"IcecrawlerDiskFilling never fired for the scheduler's db: {prometheus.alert_states()}, "
                f"{prometheus.query(free)}"
            ),
            timeout_s=60,
        )
        stack.seed([HEALTHY, SLOW, BUSY])  # nearly full is not full: it still takes writes
        assert stack.scheduler_stats()["tasks"] == 3

        filler.unlink()
        # The trend branch (its line fitted to every sample so far, the drop included) ends once the samples with
        # room outweigh those from before the drop: about as many scrapes as came before it.
        wait_for(
            lambda: "icecrawler-scheduler" not in active_jobs(prometheus, "IcecrawlerDiskFilling"),
            lambda: f"IcecrawlerDiskFilling never resolved: {prometheus.alert_states()}, {prometheus.query(free)}",
            timeout_s=240,
        )


JUMPS = "icecrawler_scheduler_clock_jumps_total"


def fired_for(prometheus: Prometheus, directions: set[str]) -> None:
    """Wait (bounded) until IcecrawlerClockJumped fires for exactly these ``direction`` labels."""
    wait_for(
        lambda: {d for (d,) in firing(prometheus, "IcecrawlerClockJumped", "direction")} == directions,
        lambda: (
            f"IcecrawlerClockJumped is not firing for {directions}: {prometheus.alert_states()}, "
            f"{prometheus.query(JUMPS)}"
        ),
        timeout_s=60,
    )


def test_clock_jumped_fires_for_each_direction_the_scheduler_clock_jumped(tmp_path: Path) -> None:
    clock = FakedWallClock(tmp_path / "faketime")
    with watched_stack(tmp_path, scheduler_wrap=clock.wrap) as (stack, prometheus):
        jumps = JUMPS
        quiet_after_samples(prometheus, "IcecrawlerClockJumped", "icecrawler-scheduler", jumps)

        clock.step_to(2 * 3600)  # an NTP step, or a clock set by hand
        fired_for(prometheus, {"forward"})
        assert prometheus.value(f'{jumps}{{direction="forward"}}') == 1
        assert prometheus.value(f'{jumps}{{direction="back"}}') == 0
        clock.step_to(0)
        fired_for(prometheus, {"forward", "back"})
        assert prometheus.value(f'{jumps}{{direction="back"}}') == 1
        assert stack.scheduler_stats()["tasks"] == 0  # it serves on
        stack.seed([HEALTHY])
        assert stack.scheduler_stats()["tasks"] == 1
        assert "Traceback" not in stack.scheduler.log_tail(400)


def test_clock_jumped_fires_when_prometheus_holds_no_sample_from_before_the_jump(tmp_path: Path) -> None:
    """What Prometheus sees of a scheduler whose machine was suspended for over an hour: on resuming it counts the
    jump at once, and every sample of the last hour says so (here: Prometheus starts after the jump)."""
    clock = FakedWallClock(tmp_path / "faketime")
    with running_stack(tmp_path / "stack", scenario(), speed=60, scheduler_wrap=clock.wrap) as stack:
        clock.step_to(2 * 3600)
        url = stack.metrics_urls()["scheduler"]
        counted = f'{JUMPS}{{direction="forward"}} 1.0'
        wait_for(lambda: counted in scrape(url), lambda: f"the jump was not counted: {scrape(url)}", timeout_s=30)
        fired_for(watch(stack, tmp_path / "prom"), {"forward"})


def test_no_usable_account_fires_while_every_account_is_frozen_and_ends_once_one_is_renewed(tmp_path: Path) -> None:
    """Weibo PC behind its login wall and an account whose login the site no longer takes: the crawl reports
    LoginRequired once, the account is frozen for an hour and weibo_pc's tasks wait, so no report says anything
    more. IcecrawlerNoUsableAccount fires for weibo_pc only, not for jd, which needs an account and has none but
    has no task either; a new login in the accounts file and SIGHUP end it."""
    accounts = tmp_path / "accounts"
    accounts.mkdir(mode=0o700)
    pool = accounts / "pool.toml"

    def login(cookies: str) -> None:
        pool.write_text(f'[[account]]\nid = "a1"\ncookies = "{cookies}"\nsources = ["weibo_pc"]\n')
        pool.chmod(0o600)

    login("EXPIRED=1")  # no SUB: the sandbox's Weibo takes it for logged out
    with watched_stack(
        tmp_path,
        scheduler_settings={
            "scheduler.accounts_dir": str(accounts),
            "scheduler.account_freeze_s": 3600,
            "scheduler.account_sources": "jd",
        },
        client_settings={"client.workers": 2, "client.batch": 1, "client.idle_sleep_s": 0.3},
    ) as (stack, prometheus):
        stack.misbehave({"site": "pc", "set": {"login_wall": True}})
        stack.seed([HEALTHY, BUSY])
        stack.start_client("client-a")
        usable = 'icecrawler_scheduler_source_accounts{state="ok"}'
        wait_until_firing(prometheus, "IcecrawlerNoUsableAccount", "weibo_pc", usable, 120)
        assert firing_sources(prometheus, "IcecrawlerNoUsableAccount") == {"weibo_pc"}
        assert prometheus.value('icecrawler_scheduler_source_accounts{source="jd",state="ok"}') == 0
        assert "source weibo_pc: no usable account (1 frozen)" in stack.icecrawler("status")

        login("SUB=fresh")  # the operator logs in again and pastes the new cookies
        stack.scheduler.popen.send_signal(signal.SIGHUP)
        wait_until_ended(prometheus, "IcecrawlerNoUsableAccount", usable)
        wait_until_crawled_ok(prometheus, "weibo_pc")


def test_source_blocked_fires_while_a_long_retry_after_keeps_the_host_blocked_and_ends_once_lifted(
    tmp_path: Path,
) -> None:
    """JD answers every request with HTTP 429 and a Retry-After of an hour: one report blocks its host and nothing
    more is reported. IcecrawlerSourceBlocked fires for jd (Prometheus starts after the block, so its 20-minute
    share is the block's alone); lifting the block (``icecrawler hold --lift``) with the site well again ends it."""
    blocked = 'icecrawler_scheduler_source_blocked_seconds{source="jd"}'
    with running_stack(tmp_path / "stack", scenario(), speed=60) as stack:
        stack.misbehave({"site": "jd", "set": {"retry_after_rate": 1.0, "retry_after_s": 3600}})
        stack.seed([SLOW])
        stack.start_client("client-a", {"client.workers": 1, "client.batch": 1, "client.idle_sleep_s": 0.3})
        url = stack.metrics_urls()["scheduler"]
        wait_for(
            lambda: f"{blocked} 0.0" not in scrape(url) and blocked in scrape(url),
            lambda: f"jd's host was never blocked: {stack.scheduler_stats()}",
            timeout_s=60,
        )
        prometheus = watch(stack, tmp_path / "prom")
        wait_until_firing(prometheus, "IcecrawlerSourceBlocked", "jd", blocked, 150)
        assert "blocked" in stack.icecrawler("status") and "(RateLimited)" in stack.icecrawler("status")

        stack.misbehave({"site": "jd", "set": {"retry_after_rate": 0.0}})
        host = stack.scheduler_stats()["source_hosts"]["jd"]
        stack.icecrawler("hold", host, "--lift")
        wait_for(
            lambda: (
                "jd" not in {s for (s,) in firing(prometheus, "IcecrawlerSourceBlocked", "source")}
                and "IcecrawlerSourceBlocked" not in prometheus.alert_states()
            ),
            lambda: f"IcecrawlerSourceBlocked never resolved: {prometheus.alert_states()}, {prometheus.query(blocked)}",
            timeout_s=180,
        )
        wait_until_crawled_ok(prometheus, "jd")


def test_backup_failing_fires_for_each_daemon_whose_backups_fail_and_ends_at_its_next_backup(tmp_path: Path) -> None:
    """The scheduler's and the storage server's backups go to one small file system that is full before they start:
    each backup fails (a try every interval), none is taken. IcecrawlerBackupFailing fires for both daemons; once
    the filler is gone the next backup of each succeeds and ends it."""
    backups = {"backup_dir": "", "backup_interval_s": 2, "backup_keep": 1}
    # Room for a Berkeley DB log file (10 MiB each) twice over, once the filler is gone.
    with small_tmpfs(tmp_path / "fs", 128) as fs:
        filler = fill(fs)
        with watched_stack(
            tmp_path,
            scheduler_settings={f"scheduler.{k}": v for k, v in {**backups, "backup_dir": fs / "scheduler"}.items()},
            storage_settings={f"storage.{k}": v for k, v in {**backups, "backup_dir": fs / "storage"}.items()},
        ) as (stack, prometheus):
            failures = "icecrawler_scheduler_backup_failures_total or icecrawler_storage_backup_failures_total"
            both = {("icecrawler-scheduler",), ("icecrawler-storage",)}
            wait_for(
                lambda: firing(prometheus, "IcecrawlerBackupFailing", "job") == both,
                lambda: (
                    f"IcecrawlerBackupFailing is not firing for both: {prometheus.alert_states()}, "
                    f"{prometheus.query(failures)}"
                ),
                timeout_s=120,
            )
            assert prometheus.value("icecrawler_scheduler_backups_total") == 0
            assert "backup failed" in stack.scheduler.log_tail(200)

            filler.unlink()
            wait_until_ended(prometheus, "IcecrawlerBackupFailing", failures, timeout_s=120)
            taken = "icecrawler_scheduler_backups_total > 0 or icecrawler_storage_backups_total > 0"
            assert len(prometheus.query(taken)) == 2
            assert [path.name for path in (fs / "scheduler").iterdir() if path.name.startswith("scheduler-")]


def test_visitor_sessions_failing_fires_while_the_passport_refuses_and_ends_once_it_mints(tmp_path: Path) -> None:
    """weibo_web is crawled with visitor sessions the scheduler mints at the site's passport; the passport refuses
    every mint (HTTP 429, as for an address it will not serve), so weibo_web's tasks wait and nothing is reported.
    IcecrawlerVisitorSessionsFailing fires for weibo_web; the passport serving again, a session is minted, the
    alert ends and the user is crawled."""
    with watched_stack(
        tmp_path,
        scheduler_settings={"scheduler.visitor_renew_s": 3},
        client_settings={"client.workers": 1, "client.batch": 1, "client.idle_sleep_s": 0.3},
    ) as (stack, prometheus):
        stack.misbehave({"site": "passport", "set": {"retry_after_rate": 1.0, "retry_after_s": 60}})
        stack.seed([VISITOR, HEALTHY])
        stack.start_client("client-a")
        failed = 'icecrawler_scheduler_visitor_session_mint_failures_total{source="weibo_web"}'
        wait_until_firing(prometheus, "IcecrawlerVisitorSessionsFailing", "weibo_web", failed, 120)
        assert firing_sources(prometheus, "IcecrawlerVisitorSessionsFailing") == {"weibo_web"}
        assert prometheus.value('icecrawler_scheduler_visitor_sessions_minted_total{source="weibo_web"}') == 0
        assert stack.truth(source="weibo_web")["items"] and not [
            row for row in stack.requests("web") if row["status"] == 200
        ]

        stack.misbehave({"site": "passport", "clear": True})
        wait_until_ended(prometheus, "IcecrawlerVisitorSessionsFailing", failed)
        wait_until_crawled_ok(prometheus, "weibo_web")


def test_login_refreshes_refused_fires_for_a_client_that_reports_another_login(tmp_path: Path) -> None:
    """A client of another release crawls weibo_pc with the pool's account and reports, with each crawl, the login
    as it read it from the site: with a cookie the accounts file does not name. The pool ignores each and counts it;
    IcecrawlerLoginRefreshesRefused fires for the scheduler. Refreshes that keep to the file's cookies are taken and
    count nothing: five of them, more than the alert's four, leave it quiet first. Every range window is a minute
    here (the deployed hour would hold the refusals for an hour after the last), so the alert is seen to end a minute
    after that client stops."""
    accounts = tmp_path / "accounts"
    accounts.mkdir(mode=0o700)
    pool = accounts / "pool.toml"
    pool.write_text('[[account]]\nid = "a1"\ncookies = "SUB=pasted"\nsources = ["weibo_pc"]\n')
    pool.chmod(0o600)
    C = rpc.crawler()
    with (
        watched_stack(tmp_path, window_s=60, scheduler_settings={"scheduler.accounts_dir": str(accounts)}) as (
            stack,
            prometheus,
        ),
        rpc.communicator() as comm,
    ):
        scheduler = C.SchedulerPrx(comm, stack.scheduler_proxy)
        refused = 'icecrawler_scheduler_login_refreshes_total{result="refused"}'
        quiet_after_samples(prometheus, "IcecrawlerLoginRefreshesRefused", "icecrawler-scheduler", refused)
        users = [f"weibo_pc:{2803301701 + n}" for n in range(10)]
        stack.seed(users)

        def crawl(cookies: str) -> str:
            """Lease one weibo_pc task and report it crawled, with ``cookies`` as the login the site refreshed; the
            login it was leased with."""
            tasks: list[Any] = []

            def leased() -> bool:
                try:
                    tasks.append(scheduler.getUser("other-release"))
                except C.NoWork:
                    return False
                return True

            wait_for(leased, "no weibo_pc task was leased", timeout_s=30, interval_s=0.2)
            (task,) = tasks
            assert task.account.id == "a1"
            scheduler.putUser(C.Report(taskId=task.id, leaseToken=task.leaseToken, accountCookies=cookies))
            return str(task.account.cookieBlob)

        login = "SUB=pasted"
        for n in range(5):  # refreshes of the file's login, more than the alert's four: each taken, and no alert
            assert crawl(f"SUB=refreshed{n}") == login
            login = f"SUB=refreshed{n}"
        taken = 'icecrawler_scheduler_login_refreshes_total{result="taken"}'
        wait_for(
            lambda: prometheus.value(taken) == 5, lambda: f"5 taken refreshes unseen: {prometheus.query(taken)}", 60
        )
        quiet_after_samples(prometheus, "IcecrawlerLoginRefreshesRefused", "icecrawler-scheduler", taken)
        for _ in range(5):  # a cookie the file does not name: refused, and the account leased on as it was
            assert crawl("SUB=refreshed; ALF=1767225600") == login
        wait_for(
            lambda: ("icecrawler-scheduler",) in firing(prometheus, "IcecrawlerLoginRefreshesRefused", "job"),
            lambda: (
                f"IcecrawlerLoginRefreshesRefused never fired: {prometheus.alert_states()}, {prometheus.query(refused)}"
            ),
            timeout_s=60,
        )
        assert prometheus.value(refused) == 5
        assert prometheus.value(taken) == 5
        assert "5 refreshed logins ignored" in stack.icecrawler("status")
        wait_until_ended(prometheus, "IcecrawlerLoginRefreshesRefused", timeout_s=150)


def test_source_reads_nothing_fires_when_the_sites_new_layout_reads_empty_and_ends_once_pages_read_again(
    tmp_path: Path,
) -> None:
    """JD changes its pages: the comments are still there, under names the parser does not read (the sandbox's
    ``new_layout``), so each crawl is reported Ok with nothing new and no parse error. IcecrawlerSourceReadsNothing
    compares the last half hour's pages with the day before's; here every duration of its expression is 30 times
    shorter (a minute against the 48 minutes before the last minute), so the healthy minute before the change is
    its day. It fires for jd, not before the change and not for the healthy source, and ends once pages read
    items again."""
    alert = "IcecrawlerSourceReadsNothing"
    periods = {"scheduler.initial_period_s": 60, "scheduler.min_period_s": 60, "scheduler.max_period_s": 120}
    with watched_stack(
        tmp_path,
        rules=scaled_durations(alert, 30),
        scheduler_settings=periods,
        client_settings={"client.workers": 2, "client.batch": 1, "client.idle_sleep_s": 0.3},
    ) as (stack, prometheus):
        stack.seed([SLOW, HEALTHY])
        stack.start_client("client-a")
        wait_for_port("127.0.0.1", stack.metrics_ports["client-a"], 60, alive=stack.clients["client-a"].alive)
        static_targets(tmp_path / "prom", "client", [stack.metrics_ports["client-a"]])
        parsed = 'sum(increase(icecrawler_client_pages_parsed_total{source="jd"}[48m] offset 1m))'
        wait_for(
            lambda: (prometheus.value(parsed) or 0) >= 5,
            lambda: f"too few jd pages a minute ago: {prometheus.query(parsed)}",
            timeout_s=180,
        )
        assert alert not in prometheus.alert_states()

        stack.misbehave({"site": "jd", "set": {"new_layout": True}})
        empty = 'sum by (source) (increase(icecrawler_client_pages_read_nothing_total{source="jd"}[1m]))'
        wait_until_firing(prometheus, alert, "jd", empty, 180)
        assert firing_sources(prometheus, alert) == {"jd"}
        assert "IcecrawlerParseErrorsJump" not in prometheus.alert_states()
        reports = 'sum by (outcome) (increase(icecrawler_scheduler_reports_total{source="jd"}[30s]))'
        assert {row["metric"]["outcome"] for row in prometheus.query(f"{reports} > 0")} == {"Ok"}

        stack.misbehave({"site": "jd", "clear": True})
        wait_until_ended(prometheus, alert, empty, timeout_s=120)


MAINTENANCE_FAILURES = "icecrawler_scheduler_maintenance_failures_total"
#: A removed task's lease entry (``startup.REMOVED_AT_KEY``) from 1970, past any retention, whose task id and token
#: are not UTF-8: damage Berkeley DB did not detect. The prune step reads it on every pass to drop it.
UNREADABLE_ENTRY = REMOVED_AT_KEY + time_key(1) + b"\xff\xfeuser:weibo_pc:1#token"


def unreadable_entry(db_dir: Path, present: bool) -> None:
    """Write (or delete) ``UNREADABLE_ENTRY`` through the store's own API, while no daemon runs on ``db_dir``."""
    store = BdbQueueStore(db_dir)
    try:
        with store.transaction() as txn:
            if present:
                txn.put("meta", UNREADABLE_ENTRY, b"")
            else:
                assert txn.delete("meta", UNREADABLE_ENTRY)
    finally:
        store.close()


def test_maintenance_failing_fires_for_the_step_that_fails_every_pass_and_ends_once_it_runs_clean(
    tmp_path: Path,
) -> None:
    """An entry of the scheduler's database that the prune step cannot read (written while the daemon is stopped, as
    tests/scheduler/test_quarantine.py damages a task record) fails that step on every maintenance pass (1 s); the
    other steps, and the calls, run on. IcecrawlerMaintenanceFailing fires for ``step="prune"`` only; with the entry
    gone and the daemon started again, prune runs clean and the alert ends. Every duration of its expression is 30
    times shorter: failures in each of the last three 10-second spans."""
    alert = "IcecrawlerMaintenanceFailing"
    prune = f'{MAINTENANCE_FAILURES}{{step="prune"}}'
    with scheduler_daemon(tmp_path, metrics__scheduler__port=free_port()) as daemon:
        directory = tmp_path / "prom"
        config = prometheus_config(directory, window_s=None)
        rules = directory / "icecrawler-rules.yml"
        rules.write_text(scaled_durations(alert, 30)(rules.read_text()))
        static_targets(directory, "scheduler", [int(daemon.settings["metrics.scheduler.port"])])
        prometheus = Prometheus(daemon.group, config, directory / "data")
        quiet_after_samples(prometheus, alert, "icecrawler-scheduler", MAINTENANCE_FAILURES)

        assert daemon.stop() == 0
        unreadable_entry(daemon.db_dir, present=True)
        daemon.start()
        wait_for(
            lambda: firing(prometheus, alert, "step") == {("prune",)},
            lambda: f"{alert} is not firing for prune alone: {prometheus.alert_states()}, {prometheus.query(prune)}",
            timeout_s=120,
        )
        assert (prometheus.value(prune) or 0) > 0
        assert prometheus.query(f'{MAINTENANCE_FAILURES}{{step!="prune"}} > 0') == []
        assert daemon.process is not None and "the prune step failed" in daemon.process.log_tail(400)
        with scheduler_proxy(daemon) as prx:  # the daemon serves on
            prx.addUsers(["weibo_pc:1907518591"], rpc.crawler().TaskKind.WeiboUser)
            assert [task.id for task in prx.getUsers("w", 10)] == ["user:weibo_pc:1907518591"]

        assert daemon.stop() == 0
        unreadable_entry(daemon.db_dir, present=False)
        daemon.start()
        # Ended while the new process is scraped and its every sample of the (scaled) 15 minutes counts no failure.
        wait_for(
            lambda: prometheus.value(f"max_over_time({prune}[30s])") == 0 and alert not in prometheus.alert_states(),
            lambda: f"{alert} never ended: {prometheus.alert_states()}, {prometheus.query(prune)}",
            timeout_s=120,
        )
        assert "the prune step failed" not in daemon.process.log_tail(400)
