"""End to end: the sandbox sites, a real scheduler (BDB), a real storage server (embedded SQLite) and two
``icecrawler client`` processes crawl all four sources. During the run ECSHOP is behind its login wall (the
clients log in through user.php), m.weibo.cn answers 418 bursts and weibo.com the GBK busy page for a while,
and one JD product hangs until the clients have timed out on it. Afterwards every item the sandbox published
(before the catch-up window) is in storage exactly once, nothing else is, and both clients exit cleanly on
SIGTERM."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from icecrawler_local.stack import running_stack
from sandbox.misbehave import Misbehaviour, MisbehaviourRule
from sandbox.scenario import Category, Product, Scenario, WeiboUser
from sandbox.schedules import Schedule
from tests.helpers import caught_up, client_logs, expected_keys, truncated_posts, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.ice, pytest.mark.bdb, pytest.mark.slow]

#: Simulated seconds per wall second: one simulated hour of publishing takes one wall minute.
SPEED = 60.0
HANGING_PRODUCT = "100008348542"
#: Products that appear on the ECSHOP category page during the run (the listing task discovers them).
ARRIVALS = ("1000", "1001")
#: Published items older than this (wall seconds) must be stored by the end.
CATCH_UP_S = 8.0


def scenario() -> Scenario:
    return Scenario(
        seed=11,
        users=(
            WeiboUser(
                uid=1907518591,
                sites=("m",),
                cursor="since_id",
                backlog=25,
                long_text_every=4,
                schedule=Schedule("periodic", interval_s=300),
            ),
            WeiboUser(
                uid=1163218074,
                sites=("m",),
                cursor="page",
                backlog=12,
                pinned=False,
                schedule=Schedule("periodic", interval_s=420),
            ),
            WeiboUser(uid=2803301701, sites=("pc",), backlog=50, schedule=Schedule("periodic", interval_s=360)),
        ),
        products=(
            Product("ecshop", "12", category=1, backlog=12, schedule=Schedule("periodic", interval_s=300)),
            Product("jd", "100012043978", backlog=25, schedule=Schedule("periodic", interval_s=240)),
            Product("jd", HANGING_PRODUCT, backlog=6, schedule=Schedule("static")),
        ),
        categories=(
            Category(
                id=1,
                per_page=5,
                arrivals=Schedule("periodic", interval_s=600),
                arrival_first_id=1000,
                arrival_limit=2,
                arrival_reviews=Schedule("periodic", interval_s=300),
            ),
        ),
        accounts=(("sandbox", "sandbox"),),
        misbehave=(
            MisbehaviourRule("ecshop", "", Misbehaviour(login_wall=True)),
            MisbehaviourRule("jd", HANGING_PRODUCT, Misbehaviour(hang_rate=1.0, hang_s=20.0)),
        ),
    )


def test_two_clients_crawl_all_sources_through_login_bans_and_hangs(tmp_path: Path) -> None:
    scheduler_settings = {
        "scheduler.initial_period_s": 60,
        "scheduler.min_period_s": 30,
        "scheduler.max_period_s": 120,
        "scheduler.host_block_s": 2,
        "scheduler.lease_s": 20,
        "scheduler.backoff_after_attempts": 100,
    }
    client_settings = {
        "client.workers": 2,
        "client.batch": 2,
        "client.max_pages": 30,
        "client.timeout_s": 1.5,
        "client.total_timeout_s": 5,
        "client.retries": 1,
        "client.backoff_s": 0.1,
        "client.idle_sleep_s": 0.3,
        "client.progress_log_s": 5,
        "client.shutdown_grace_s": 5,
        "sources.ecshop.username": "sandbox",
        "sources.ecshop.password": "sandbox",
    }
    with running_stack(
        tmp_path, scenario(), speed=SPEED, scheduler_settings=scheduler_settings, client_settings=client_settings
    ) as stack:
        stack.seed(
            [
                "weibo_mobile:1907518591",
                "weibo_mobile:1163218074",
                "weibo_pc:2803301701",
                "ecshop:12",
                "jd:100012043978",
                f"jd:{HANGING_PRODUCT}",
            ],
            listings=["ecshop:1"],
        )
        clients = [stack.start_client("client-a"), stack.start_client("client-b")]
        # The first crawls are under way (some items stored) before the ban starts: a ban in the middle of the
        # crawl, 418 bursts on the mobile site and the GBK busy page on the desktop site, until both were met.
        wait_for(lambda: len(stack.stored()) > 0, "no item stored at all")
        stack.misbehave({"site": "m", "set": {"teapot_rate": 1.0, "teapot_burst": 5}})
        stack.misbehave({"site": "pc", "set": {"ban_rate": 1.0, "ban_page": "busy"}})
        wait_for(lambda: "Banned (http-418)" in client_logs(clients), "no 418 burst was classified as Banned")
        wait_for(lambda: "Busy (busy)" in client_logs(clients), "the GBK busy page was not classified as Busy")
        wait_for(lambda: "Timeout" in client_logs(clients), "the hanging product never timed out")
        stack.misbehave({"site": "m", "clear": True})
        stack.misbehave({"site": "pc", "clear": True})
        # The hanging product comes back; its items must be caught up too.
        stack.misbehave({"site": "jd", "target": HANGING_PRODUCT, "clear": True})

        # A product the listing discovers must have published reviews before the catch-up is checked.
        def arrival_published() -> bool:
            return any(key[1] in ARRIVALS for key in expected_keys(stack, int((time.time() - CATCH_UP_S) * 1000)))

        wait_for(arrival_published, "the sandbox category never gained a product with reviews", timeout_s=60)
        expected, stored, published = caught_up(stack, CATCH_UP_S, timeout_s=60)
        truncated = truncated_posts(stack)
        codes = [client.stop(timeout_s=20) for client in clients]
        logs = client_logs(clients)

    missing = expected - stored
    assert not missing, f"{sum(missing.values())} published item(s) never stored, e.g. {list(missing)[:5]}"
    duplicated = {key: count for key, count in stored.items() if count > 1}
    assert not duplicated, f"stored more than once: {list(duplicated.items())[:5]}"
    assert not truncated, f"long posts stored truncated (extend never fetched): {truncated[:5]}"
    phantom = set(stored) - set(published)
    assert not phantom, f"stored items the sandbox never published: {list(phantom)[:5]}"
    assert codes == [0, 0], logs[-4000:]
    assert logs.count("stopped") == 2 and "could not be reported in time" not in logs
    assert "logging in as sandbox" in logs, "the ECSHOP login wall never triggered a login"
    assert "Traceback" not in logs, logs[-4000:]
    assert sum(1 for key in stored if key[0] == "ecshop" and key[1] in ARRIVALS) > 0, (
        "products discovered by the listing were never crawled"
    )


@pytest.mark.parametrize("account_sources", ["weibo_mobile,jd", ""])
def test_account_cookie_blobs_from_the_scheduler_open_login_walls(tmp_path: Path, account_sources: str) -> None:
    """Both blob forms travel scheduler → client session: a JSON blob with a Weibo SUB cookie, a Cookie-header
    string with JD's thor cookie; both sites are behind their login walls for the whole run. The accounts' own
    ``sources`` are enough: without ``scheduler.account_sources`` their tasks went out with no login."""
    accounts = tmp_path / "accounts"
    accounts.mkdir()
    (accounts / "pool.toml").write_text(
        '[[account]]\nid = "weibo-1"\ncookies = \'{"cookies": {"SUB": "sandbox-sub"}}\'\nsources = ["weibo_mobile"]\n'
        '[[account]]\nid = "jd-1"\ncookies = "Cookie: thor=sandbox-thor"\nsources = ["jd"]\n',
        encoding="utf-8",
    )
    world = Scenario(
        seed=4,
        users=(WeiboUser(uid=1907518591, sites=("m",), backlog=15, schedule=Schedule("periodic", interval_s=300)),),
        products=(Product("jd", "100012043978", backlog=15, schedule=Schedule("periodic", interval_s=300)),),
        misbehave=(
            MisbehaviourRule("m", "", Misbehaviour(login_wall=True)),
            MisbehaviourRule("jd", "", Misbehaviour(login_wall=True)),
        ),
    )
    scheduler_settings = {
        "scheduler.initial_period_s": 60,
        "scheduler.min_period_s": 30,
        "scheduler.max_period_s": 120,
        "scheduler.accounts_dir": str(accounts),
        "scheduler.account_sources": account_sources,
        "scheduler.account_budget_per_min": 100000,
    }
    client_settings = {"client.workers": 2, "client.idle_sleep_s": 0.3, "client.shutdown_grace_s": 5}
    with running_stack(
        tmp_path / "run", world, speed=SPEED, scheduler_settings=scheduler_settings, client_settings=client_settings
    ) as stack:
        stack.seed(["weibo_mobile:1907518591", "jd:100012043978"])
        client = stack.start_client("client")
        wait_for(lambda: len(stack.stored()) >= 30, "the walled sites' backlog was never stored")
        expected, stored, _ = caught_up(stack, CATCH_UP_S, timeout_s=60)
        code = client.stop(timeout_s=20)
        logs = client_logs([client])
    assert not (expected - stored), f"missing: {list(expected - stored)[:3]}"
    assert code == 0, logs[-3000:]
    assert "LoginRequired" not in logs, "a leased account's cookies did not open the login wall"
