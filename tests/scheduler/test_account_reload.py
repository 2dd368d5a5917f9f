"""Accounts read again while the scheduler runs (SIGHUP): new cookies thaw a frozen account at once and after a
restart, the same cookies keep a freeze, removed accounts are no longer leased, and a file that does not read
leaves the accounts in use as they were. The pool's rules without a store, the core's over both stores, then the
real daemon and its signal."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from icecrawler import rpc
from icecrawler.models import Account, Outcome, Report, TaskKind
from icecrawler.settings import Settings
from icecrawler_cli.commands.status import render_text
from scheduler_server import accounts as accounts_module
from scheduler_server.accounts import AccountPool, PooledAccount, account_changes
from scheduler_server.config import SchedulerConfig, configured_accounts
from scheduler_server.core import SchedulerCore
from scheduler_server.metrics import SchedulerMetrics
from scheduler_server.store import BdbQueueStore, QueueStore
from tests.helpers import wait_for
from tests.scheduler.conftest import ManualClocks, make_settings
from tests.scheduler.daemon import scheduler_daemon, scheduler_proxy

ONE = '[[account]]\nid = "a1"\ncookies = "SUB={cookies}"\n'
TWO = ONE + '\n[[account]]\nid = "a2"\ncookies = "SUB=second"\n'


def pooled(account_id: str, cookies: str) -> PooledAccount:
    return PooledAccount(Account(account_id, cookies), frozenset({"weibo_pc"}))


def test_changes_are_counted_by_id_and_cookies() -> None:
    old = {p.account.id: p for p in (pooled("a1", "x"), pooled("a2", "y"), pooled("a3", "z"))}
    changes = account_changes(old, [pooled("a1", "x"), pooled("a2", "SUB=secret"), pooled("a4", "w")])
    assert (changes.kept, changes.renewed, changes.added, changes.removed) == (("a1",), ("a2",), ("a4",), ("a3",))
    text = changes.describe()
    assert text == "1 kept; 1 renewed (thawed): a2; 1 added: a4; 1 removed: a3" and "secret" not in text


def test_the_pool_keeps_freezes_and_budgets_by_login() -> None:
    pool = AccountPool([pooled("a1", "x"), pooled("a2", "y")], frozenset({"weibo_pc"}), 2, 60.0)
    now = 1000.0
    assert pool.pick("weibo_pc", now) is not None and pool.pick("weibo_pc", now) is not None
    pool.freeze("a1", now + 60, "LoginRequired")
    pool.freeze("a2", now + 60, "LoginRequired")
    pool.replace([pooled("a1", "x"), pooled("a2", "fresh"), pooled("a3", "z")])
    picked = pool.pick("weibo_pc", now)
    assert picked is not None and (picked.id, picked.cookie_blob) == ("a2", "fresh")  # renewed: thawed
    assert pool.pick("weibo_pc", now) == Account("a3", "z")  # a1 keeps its freeze; a2 used its budget of 2
    assert pool.describe(now)["a1"]["state"] == "frozen"
    pool.replace([pooled("a3", "z")])
    assert set(pool.describe(now)) == {"a3"}
    pool.charge("a1", 5, now)  # a lease handed out with a removed account reports: nothing to charge or freeze
    pool.freeze("a1", now + 60, "Banned")
    assert set(pool.describe(now)) == {"a3"}


def accounts_dir(tmp_path: Path, pool: str, private: bool = False) -> Path:
    """An accounts directory holding ``pool.toml``; ``private``: modes 0700/0600, as the daemon wants them."""
    accounts = tmp_path / "accounts"
    accounts.mkdir(mode=0o700 if private else 0o777)
    (accounts / "pool.toml").write_text(pool)
    if private:
        (accounts / "pool.toml").chmod(0o600)
    return accounts


def frozen_core(store: QueueStore, clocks: ManualClocks, accounts: Path) -> SchedulerCore:
    """A core whose only account a1 was frozen by a LoginRequired report."""
    settings = make_settings(
        scheduler__accounts_dir=str(accounts),
        scheduler__account_sources="weibo_pc",
        scheduler__account_freeze_s=3600.0,
    )
    core = SchedulerCore.from_settings(settings, store, clocks)
    core.add(["weibo_pc:1"], TaskKind.WeiboUser)
    task = core.lease("w", 1)[0]
    core.report([Report(task.id, task.lease_token, outcome=Outcome.LoginRequired)])
    return core


def test_new_cookies_thaw_an_account_now_and_after_a_restart(tmp_path: Path, clocks: ManualClocks) -> None:
    accounts = accounts_dir(tmp_path, ONE.format(cookies="old"))
    core = frozen_core(BdbQueueStore(tmp_path / "db"), clocks, accounts)
    clocks.advance(120)  # the task is due again, the account still frozen
    assert core.stats()["detail"]["accounts"]["a1"]["state"] == "frozen"
    settings = make_settings(scheduler__accounts_dir=str(accounts))
    assert core.reload_accounts(configured_accounts(settings, core.config)).kept == ("a1",)
    assert core.stats()["detail"]["accounts"]["a1"]["state"] == "frozen"  # the same login stays frozen
    (accounts / "pool.toml").write_text(ONE.format(cookies="new"))
    assert core.reload_accounts(configured_accounts(settings, core.config)).renewed == ("a1",)
    task = core.lease("w", 1)[0]
    assert (task.account.id, task.account.cookie_blob) == ("a1", "SUB=new")
    core.release([(task.id, task.lease_token)])
    core.close()
    again = SchedulerCore.from_settings(
        make_settings(scheduler__accounts_dir=str(accounts), scheduler__account_sources="weibo_pc"),
        BdbQueueStore(tmp_path / "db"),
        clocks,
    )
    try:  # the freeze of the old cookies was deleted with the reload: a restart does not bring it back
        assert again.stats()["detail"]["accounts"]["a1"]["state"] == "ok"
        assert again.lease("w", 1)[0].account.cookie_blob == "SUB=new"
    finally:
        again.close()


def test_a_late_failure_of_the_old_login_does_not_freeze_the_new_one(
    store: QueueStore, clocks: ManualClocks, tmp_path: Path
) -> None:
    """The operator pastes a new login for a frozen account and sends SIGHUP: it is thawed at once. A crawl leased
    with the old login before that, reporting its login wall afterwards, froze the new login for
    ``account_freeze_s`` (an hour by default, and a restart kept it: the freeze was stored under the new login)."""
    accounts = accounts_dir(tmp_path, ONE.format(cookies="old"))
    settings = make_settings(
        scheduler__accounts_dir=str(accounts),
        scheduler__account_sources="weibo_pc",
        scheduler__account_freeze_s=3600.0,
    )
    core = SchedulerCore.from_settings(settings, store, clocks)
    core.add(["weibo_pc:1", "weibo_pc:2"], TaskKind.WeiboUser)
    first, late = core.lease("w", 2)
    assert first.account.cookie_blob == late.account.cookie_blob == "SUB=old"
    core.report([Report(first.id, first.lease_token, outcome=Outcome.LoginRequired)])
    assert core.stats()["detail"]["accounts"]["a1"]["state"] == "frozen"
    (accounts / "pool.toml").write_text(ONE.format(cookies="new"))
    assert core.reload_accounts(configured_accounts(settings, core.config)).renewed == ("a1",)
    core.report([Report(late.id, late.lease_token, outcome=Outcome.LoginRequired)])  # of the old login
    assert core.stats()["detail"]["accounts"]["a1"]["state"] == "ok"
    clocks.advance(120)
    task = core.lease("w", 1)[0]
    assert (task.account.id, task.account.cookie_blob) == ("a1", "SUB=new")
    core.report([Report(task.id, task.lease_token, outcome=Outcome.Banned)])  # the new login's own: frozen
    assert core.stats()["detail"]["accounts"]["a1"]["state"] == "frozen"


@pytest.mark.bdb
def test_a_restart_keeps_the_freeze_of_the_same_cookies_only(tmp_path: Path, clocks: ManualClocks) -> None:
    accounts = accounts_dir(tmp_path, ONE.format(cookies="old"))
    settings = make_settings(
        scheduler__accounts_dir=str(accounts),
        scheduler__account_sources="weibo_pc",
        scheduler__account_freeze_s=3600.0,
    )
    frozen_core(BdbQueueStore(tmp_path / "db"), clocks, accounts).close()

    def state_after_restart() -> str:
        core = SchedulerCore.from_settings(settings, BdbQueueStore(tmp_path / "db"), clocks)
        try:
            return str(core.stats()["detail"]["accounts"]["a1"]["state"])
        finally:
            core.close()

    assert state_after_restart() == "frozen"
    store = BdbQueueStore(tmp_path / "db")
    with store.transaction() as txn:  # a freeze stored before freezes named their login: kept, as it was
        until, reason, _ = json.loads(txn.get("meta", b"account:a1") or b"[]")
        txn.put("meta", b"account:a1", json.dumps([until, reason]).encode())
    store.close()
    assert state_after_restart() == "frozen"
    frozen_core(BdbQueueStore(tmp_path / "db2"), clocks, accounts).close()  # a freeze that names its login
    (accounts / "pool.toml").write_text(ONE.format(cookies="new"))
    core = SchedulerCore.from_settings(settings, BdbQueueStore(tmp_path / "db2"), clocks)
    try:
        assert core.stats()["detail"]["accounts"]["a1"]["state"] == "ok"
        clocks.advance(1)
        assert core.lease("w", 1)[0].account.cookie_blob == "SUB=new"
    finally:
        core.close()


def test_a_removed_account_is_no_longer_leased(store: QueueStore, clocks: ManualClocks, tmp_path: Path) -> None:
    accounts = accounts_dir(tmp_path, TWO.format(cookies="old"))
    settings = make_settings(scheduler__accounts_dir=str(accounts), scheduler__account_sources="weibo_pc")
    core = SchedulerCore.from_settings(settings, store, clocks)
    core.add(["weibo_pc:1", "weibo_pc:2"], TaskKind.WeiboUser)
    held = core.lease("w", 1)[0]
    (accounts / "pool.toml").write_text('[[account]]\nid = "a2"\ncookies = "SUB=second"\n')
    assert core.reload_accounts(configured_accounts(settings, core.config)).removed == ("a1",)
    assert held.account.id == "a1"
    core.report([Report(held.id, held.lease_token, outcome=Outcome.LoginRequired)])  # lands, freezes nothing
    clocks.advance(120)
    assert {task.account.id for task in core.lease("w", 2)} == {"a2"}


def test_cookies_the_site_refreshed_are_what_the_account_is_leased_with(
    store: QueueStore, clocks: ManualClocks, tmp_path: Path
) -> None:
    """A report carries the login as the site refreshed it (``Set-Cookie``): every later lease, whichever client
    gets it, starts from it, not from the pasted cookies that expire within days. The accounts file stays as
    written: reading it again unchanged keeps the refresh (it is no "renewed" login, and no freeze is lifted),
    a report of a failed login refreshes nothing, and neither does one leased before the operator's new cookies."""
    accounts = accounts_dir(tmp_path, ONE.format(cookies="pasted"))
    settings = make_settings(scheduler__accounts_dir=str(accounts), scheduler__account_sources="weibo_pc")
    core = SchedulerCore.from_settings(settings, store, clocks)
    core.add(["weibo_pc:1"], TaskKind.WeiboUser)

    def crawl(outcome: Outcome = Outcome.Ok, cookies: str = "") -> str:
        """Lease the task, report it with ``cookies``; the cookies it was leased with."""
        task = core.lease("w", 1)[0]
        core.report([Report(task.id, task.lease_token, outcome=outcome, account_cookies=cookies)])
        clocks.advance(3600 * 24)
        return task.account.cookie_blob

    assert crawl(cookies="SUB=refreshed") == "SUB=pasted"
    assert crawl() == "SUB=refreshed"
    assert core.stats()["detail"]["accounts"]["a1"]["login_refreshes"] == 1
    text = render_text({"scheduler": {"reachable": True, **core.stats(), **core.stats()["detail"]}})
    assert "account a1: ok, " in text and "login refreshed by the site 1x" in text and "SUB=" not in text
    assert crawl(cookies="SUB=other; EXTRA=1") == "SUB=refreshed"  # names a cookie the file does not: ignored
    text = render_text({"scheduler": {"reachable": True, **core.stats(), **core.stats()["detail"]}})
    assert "1 refreshed logins ignored" in text and "EXTRA" not in text
    registry = CollectorRegistry()  # what IcecrawlerLoginRefreshesRefused reads
    SchedulerMetrics(core).register(registry)
    scraped = generate_latest(registry).decode()
    assert 'icecrawler_scheduler_login_refreshes_total{result="refused"} 1.0' in scraped
    assert 'icecrawler_scheduler_login_refreshes_total{result="taken"} 1.0' in scraped
    changes = core.reload_accounts(configured_accounts(settings, core.config))
    assert changes.kept == ("a1",) and not changes.renewed
    assert crawl(Outcome.LoginRequired, "SUB=broken") == "SUB=refreshed"
    clocks.advance(3600 * 24)  # the freeze is over
    held = core.lease("w", 1)[0]
    assert held.account.cookie_blob == "SUB=refreshed"
    clocks.advance(1)  # while that crawl runs, the operator pastes a new login
    (accounts / "pool.toml").write_text(ONE.format(cookies="operator"))
    assert core.reload_accounts(configured_accounts(settings, core.config)).renewed == ("a1",)
    core.report([Report(held.id, held.lease_token, account_cookies="SUB=refreshed-again")])  # of the old login
    clocks.advance(3600 * 24)
    assert crawl() == "SUB=operator"
    assert "refreshed" not in json.dumps(core.stats()) and "operator" not in json.dumps(core.stats())


def leased_cookies(proxy: Any) -> str | None:
    """Lease the task and give it back: the cookies it came with, or None while no account can take it."""
    C = rpc.crawler()
    try:
        task = proxy.getUser("reload-test")
    except C.NoWork:
        return None
    proxy.releaseUsers([C.LeaseRef(taskId=task.id, leaseToken=task.leaseToken)])
    return str(task.account.cookieBlob)


@pytest.mark.ice
@pytest.mark.bdb
def test_sighup_reloads_the_accounts_of_a_running_scheduler(tmp_path: Path) -> None:
    C = rpc.crawler()
    accounts = accounts_dir(tmp_path, ONE.format(cookies="old"), private=True)
    pool = accounts / "pool.toml"
    settings = {
        "scheduler__accounts_dir": str(accounts),
        "scheduler__account_sources": "weibo_pc",
        "scheduler__account_freeze_s": 3600,
    }
    with scheduler_daemon(tmp_path, **settings) as daemon, scheduler_proxy(daemon) as proxy:
        process = daemon.process
        assert process is not None
        proxy.addUsers(["weibo_pc:1"], C.TaskKind.WeiboUser)
        task = proxy.getUser("reload-test")
        assert task.account.cookieBlob == "SUB=old"
        proxy.putUser(C.Report(taskId=task.id, leaseToken=task.leaseToken, outcome=C.Outcome.LoginRequired))
        assert leased_cookies(proxy) is None  # due again at once, but its only account is frozen for an hour
        pool.write_text(ONE.format(cookies="new"))
        process.popen.send_signal(signal.SIGHUP)
        wait_for(lambda: leased_cookies(proxy) == "SUB=new", "the new cookies were never leased", 30)
        assert "accounts reloaded" in process.log_path.read_text()
        pool.write_text("[[account]\nthis is not toml")
        process.popen.send_signal(signal.SIGHUP)
        wait_for(
            lambda: "accounts not reloaded" in process.log_path.read_text(),
            "a bad accounts file on SIGHUP was not reported",
            30,
        )
        assert process.alive() and leased_cookies(proxy) == "SUB=new"  # the accounts in use stay
        detail = json.loads(proxy.stats().detailJson)
        assert detail["accounts"]["a1"]["state"] == "ok" and "SUB=" not in json.dumps(detail)
        assert daemon.stop() == 0
    assert "Traceback" not in process.log_path.read_text()


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        # A single table where an array of tables is meant: was a traceback (a string has no .get).
        ("a.toml", '[account]\nid = "a1"\ncookies = "SUB=x"\n', r"a\.toml: accounts are \[\[account\]\] tables"),
        # A misspelt table name: was read as a file of no accounts.
        ("a.toml", '[[accounts]]\nid = "a1"\ncookies = "SUB=x"\n', r"a\.toml: unknown key 'accounts'"),
        # One source as a string: was read letter by letter ("unknown sources ['_', 'b', ...]").
        ("a.toml", '[[account]]\nid = "a1"\ncookies = "SUB=x"\nsources = "weibo_pc"\n', r"sources is a list of source"),
        # Not a list at all (a number, a boolean, a table): was a TypeError traceback, and on SIGHUP escaped the
        # reload's error handling.
        ("a.toml", '[[account]]\nid = "a1"\ncookies = "SUB=x"\nsources = 5\n', r"sources is a list of source"),
        ("a.toml", '[[account]]\nid = "a1"\ncookies = "SUB=x"\nsources = true\n', r"sources is a list of source"),
        ("a.toml", '[[account]]\nid = "a1"\ncookies = "SUB=x"\nsources = {weibo_pc = 1}\n', r"sources is a list"),
    ],
)
def test_an_accounts_file_of_another_shape_is_refused_by_name(
    tmp_path: Path, name: str, text: str, message: str
) -> None:
    from icecrawler.errors import ConfigError
    from scheduler_server.accounts import load_accounts

    (tmp_path / name).write_text(text)
    (tmp_path / name).chmod(0o600)
    with pytest.raises(ConfigError, match=message):
        load_accounts(tmp_path, frozenset({"weibo_pc"}))


def test_an_account_id_in_the_visitor_sessions_namespace_is_refused(tmp_path: Path) -> None:
    """An id such as ``visitor:backup`` was loaded, leased, and then read everywhere as a visitor session's: a ban,
    a login wall or an AccountFrozen report never froze it (visitor sessions are renewed, not frozen), so a banned
    login kept being leased at the full budget. Refused by name, as a duplicate id is."""
    from icecrawler.errors import ConfigError
    from icecrawler.models import is_visitor
    from scheduler_server.accounts import load_accounts
    from scheduler_server.outcomes import outcome_effects

    config = make_settings().copy_with(scheduler__account_freeze_s=600.0)
    effects = outcome_effects(
        Report(task_id="user:weibo_pc:1", lease_token="t", outcome=Outcome.Banned),
        attempts=0,
        account_id="visitor:backup",
        host="weibo.com",
        wall=1000.0,
        config=SchedulerConfig.from_settings(config),
    )
    assert is_visitor("visitor:backup") and effects.freeze_account is None  # why such an id cannot be an account's
    (tmp_path / "a.toml").write_text('[[account]]\nid = "visitor:backup"\ncookies = "SUB=x"\n')
    (tmp_path / "a.toml").chmod(0o600)
    with pytest.raises(ConfigError, match=r"a\.toml account #0: the id 'visitor:backup' .*visitor:"):
        load_accounts(tmp_path, frozenset({"weibo_pc"}))


@pytest.mark.parametrize(
    "cookies", ["SUBsecret-value", '{"cookies": 5}', '{"SUB": "secret", "n": 1}', '{"cookies": {}, "token": "secret"}']
)
def test_cookies_the_client_cannot_read_are_refused_by_file_and_account(tmp_path: Path, cookies: str) -> None:
    """Such an account was loaded and leased: every client failed its session at once as LoginRequired
    (``bad-cookie-blob``), the scheduler froze it for an hour as if the site had logged it out, and status said
    "LoginRequired" only. Refused when the files are read, at start or SIGHUP, without quoting the cookies."""
    from icecrawler.errors import ConfigError
    from scheduler_server.accounts import load_accounts

    (tmp_path / "a.toml").write_text(f'[[account]]\nid = "a1"\ncookies = {json.dumps(cookies)}\n')
    (tmp_path / "a.toml").chmod(0o600)
    with pytest.raises(ConfigError) as refused:
        load_accounts(tmp_path, frozenset({"weibo_pc"}))
    assert str(refused.value).startswith("a.toml account #0 (a1): cookies do not read as a cookie blob")
    assert "secret" not in str(refused.value)


def test_files_the_accounts_directory_does_not_read_are_named_in_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An account written as JSON (as the shipped settings file once said) was skipped without a word."""
    from scheduler_server.accounts import load_accounts

    (tmp_path / "acct-01.json").write_text(json.dumps({"id": "a1", "cookies": "SUB=x"}))
    (tmp_path / "acct-02.toml").write_text('[[account]]\nid = "a2"\ncookies = "SUB=y"\n')
    (tmp_path / "acct-02.toml").chmod(0o600)
    with caplog.at_level("WARNING", logger="scheduler_server.accounts"):
        accounts = load_accounts(tmp_path, frozenset({"weibo_pc"}))
    assert [pooled.account.id for pooled in accounts] == ["a2"]
    assert "acct-01.json" in caplog.text and "*.toml" in caplog.text


def test_a_key_an_account_does_not_know_is_named_in_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """``source = [...]`` (for ``sources``) was dropped without a word, and the account served every source."""
    from scheduler_server.accounts import load_accounts

    (tmp_path / "a.toml").write_text('[[account]]\nid = "a1"\ncookies = "SUB=x"\nsource = ["jd"]\n')
    (tmp_path / "a.toml").chmod(0o600)
    with caplog.at_level("WARNING", logger="scheduler_server.accounts"):
        accounts = load_accounts(tmp_path, frozenset({"weibo_pc"}))
    assert [pooled.account.id for pooled in accounts] == ["a1"]
    assert "'source'" in caplog.text and "a.toml account #0" in caplog.text and "sources" in caplog.text


def refresh_settings(accounts: Path) -> Settings:
    """Account a1 of ``accounts`` serves weibo_pc on weibo.com and weibo_mobile on m.weibo.cn."""
    return make_settings(
        scheduler__accounts_dir=str(accounts),
        scheduler__account_sources="weibo_pc,weibo_mobile",
        sources__weibo_pc__base_url="https://weibo.com",
        sources__weibo_mobile__base_url="https://m.weibo.cn",
    )


def refresh_core(store: QueueStore, clocks: ManualClocks, accounts: Path, cookies: str = "SUB=pasted") -> SchedulerCore:
    """A core whose account a1 (``cookies``) serves weibo_pc on weibo.com and weibo_mobile on m.weibo.cn."""
    (accounts / "pool.toml").write_text(f'[[account]]\nid = "a1"\ncookies = "{cookies}"\n')
    return SchedulerCore.from_settings(refresh_settings(accounts), store, clocks)


def test_a_sites_refresh_is_leased_to_that_site_only(store: QueueStore, clocks: ManualClocks, tmp_path: Path) -> None:
    """m.weibo.cn's refresh of ``SUB`` is for .weibo.cn: a weibo.com lease of the same account still gets the file's
    cookies (or weibo.com's own refresh), never the other site's."""
    core = refresh_core(store, clocks, tmp_path)
    core.add(["weibo_mobile:1"], TaskKind.WeiboUser)
    mobile = core.lease("w", 1)[0]
    core.report([Report(mobile.id, mobile.lease_token, account_cookies="SUB=for-weibo-cn")])
    core.add(["weibo_pc:2"], TaskKind.WeiboUser)
    clocks.advance(3600 * 24)
    by_source = {task.source: task for task in core.lease("w", 5)}
    assert by_source["weibo_pc"].account.cookie_blob == "SUB=pasted"
    assert by_source["weibo_mobile"].account.cookie_blob == "SUB=for-weibo-cn"
    pc = by_source["weibo_pc"]
    core.report([Report(pc.id, pc.lease_token, account_cookies="SUB=for-weibo-com")])
    core.release([(by_source["weibo_mobile"].id, by_source["weibo_mobile"].lease_token)])
    clocks.advance(3600 * 24)
    by_source = {task.source: task for task in core.lease("w", 5)}
    assert by_source["weibo_pc"].account.cookie_blob == "SUB=for-weibo-com"
    assert by_source["weibo_mobile"].account.cookie_blob == "SUB=for-weibo-cn"
    assert core.stats()["detail"]["accounts"]["a1"]["login_refreshes"] == 2


def test_an_older_leases_refresh_does_not_overwrite_a_newer_one(
    store: QueueStore, clocks: ManualClocks, tmp_path: Path
) -> None:
    """Two leases of one account handed the same login: the first refresh reported is taken, and the other lease's,
    of the login as it was before that refresh, is not laid over it, whichever reports last."""
    core = refresh_core(store, clocks, tmp_path)
    core.add(["weibo_pc:1", "weibo_pc:2"], TaskKind.WeiboUser)
    older = core.lease("w", 1)[0]
    clocks.advance(5)
    newer = core.lease("w", 1)[0]
    core.report([Report(newer.id, newer.lease_token, account_cookies="SUB=v3-newer")])
    core.report([Report(older.id, older.lease_token, account_cookies="SUB=v2-older")])
    clocks.advance(3600 * 24)
    assert core.lease("w", 1)[0].account.cookie_blob == "SUB=v3-newer"


def test_a_site_that_refreshes_a_login_at_every_crawl_is_said_once_an_hour(
    store: QueueStore, clocks: ManualClocks, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Each refresh taken used to log one INFO line: a site that sets the login afresh on every answer wrote one per
    crawl. The first is said, and the ones after it within the hour only in the next line's count."""
    core = refresh_core(store, clocks, tmp_path)
    core.add(["weibo_pc:1"], TaskKind.WeiboUser)
    with caplog.at_level("INFO", logger="scheduler_server.accounts"):
        for n in range(5):
            task = core.lease("w", 1)[0]
            core.report([Report(task.id, task.lease_token, account_cookies=f"SUB=refresh-{n}")])
            clocks.advance(3600 * 24)
    said = [r.getMessage() for r in caplog.records if "refreshed its cookies" in r.getMessage()]
    assert core.lease("w", 1)[0].account.cookie_blob == "SUB=refresh-4"  # every refresh was taken
    assert len(said) == 1, said


@pytest.mark.bdb
def test_a_lease_from_before_a_restart_refreshes_nothing(tmp_path: Path, clocks: ManualClocks) -> None:
    """The operator pastes a new login and restarts the scheduler while a crawl of the old one runs: that crawl's
    report lands, and its refresh of the old login is not leased over the new one. A restart starts from the
    file."""
    accounts = tmp_path / "accounts"
    accounts.mkdir()
    core = refresh_core(BdbQueueStore(tmp_path / "db"), clocks, accounts)
    core.add(["weibo_pc:1"], TaskKind.WeiboUser)
    held = core.lease("w", 1)[0]
    core.close()
    clocks.advance(5)
    again = refresh_core(BdbQueueStore(tmp_path / "db"), clocks, accounts, cookies="SUB=operator")
    try:
        again.report([Report(held.id, held.lease_token, account_cookies="SUB=refreshed-of-old-login")])
        clocks.advance(3600 * 24)
        assert again.lease("w", 1)[0].account.cookie_blob == "SUB=operator"
        assert again.stats()["detail"]["accounts"]["a1"]["login_refreshes"] == 0
    finally:
        again.close()


def test_leases_are_forgotten_when_they_end(store: QueueStore, clocks: ManualClocks, tmp_path: Path) -> None:
    """The pool remembers a lease's blob only while the lease runs: a report, a release and an expiry each drop it
    (with or without a refresh), so the map stays as big as the leases in flight."""
    core = refresh_core(store, clocks, tmp_path)
    core.add(["weibo_pc:1", "weibo_pc:2", "weibo_pc:3"], TaskKind.WeiboUser)
    reported, released, expired = core.lease("w", 3)
    assert core.accounts.lent_count == 3
    core.report([Report(reported.id, reported.lease_token, outcome=Outcome.LoginRequired, account_cookies="SUB=x")])
    core.release([(released.id, released.lease_token)])
    assert core.accounts.lent_count == 1
    clocks.advance(core.config.lease_s + 1)
    assert core.reap() == 1
    assert core.accounts.lent_count == 0
    assert expired.account.id == "a1"


def test_the_pool_bounds_the_leases_it_remembers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past ``MAX_LENT`` leases never heard of again (a commit that failed after the pick), the oldest are
    forgotten: their refresh is not taken, which is safe; a newer lease's still is."""
    monkeypatch.setattr(accounts_module, "MAX_LENT", 2)
    pool = AccountPool([pooled("a1", "SUB=x")], frozenset({"weibo_pc"}), 100, 60.0, sites={"weibo_pc": ".weibo.com"})
    for token in ("t1", "t2", "t3"):
        account = pool.pick("weibo_pc", 1000.0)
        assert account is not None
        pool.lent(token, "weibo_pc", account)
    assert pool.lent_count == 2
    assert not pool.ended("t1", "SUB=y")
    assert pool.ended("t3", "SUB=y")


def test_a_refresh_that_is_not_of_the_files_login_is_ignored_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    """A refresh must read as a blob, keep the form login's username and password and name only the file's
    cookies; any other is ignored, counted for status and logged without its cookies."""
    form = json.dumps({"cookies": "ECS_ID=a", "username": "shopper", "password": "pw"})
    pool = AccountPool([PooledAccount(Account("a1", form), frozenset({"ecshop"}))], frozenset({"ecshop"}), 100, 60.0)
    wrong = [
        "{not json",
        json.dumps({"cookies": "ECS_ID=b", "username": "someone-else", "password": "pw"}),
        json.dumps({"cookies": "ECS_ID=b; EXTRA=1", "username": "shopper", "password": "pw"}),
    ]
    for number, blob in enumerate(wrong):
        account = pool.pick("ecshop", 1000.0)
        assert account is not None and account.cookie_blob == form
        pool.lent(f"t{number}", "ecshop", account)
        assert not pool.ended(f"t{number}", blob)
    described = pool.describe(1000.0)["a1"]
    assert (described["login_refreshes"], described["login_refreshes_refused"]) == (0, 3)
    assert "someone-else" not in caplog.text and "ECS_ID" not in caplog.text and "ignored" in caplog.text
    good = json.dumps({"cookies": "ECS_ID=b", "username": "shopper", "password": "pw"})
    pool.lent("ok", "ecshop", pool.pick("ecshop", 1000.0) or Account())
    assert pool.ended("ok", good)
    assert pool.pick("ecshop", 1000.0) == Account("a1", good)


@pytest.mark.ice
@pytest.mark.bdb
def test_refreshes_over_ice_stay_with_their_site_and_do_not_outlive_a_restart(tmp_path: Path) -> None:
    """The running daemon, over Ice and Berkeley DB: m.weibo.cn's refresh goes to the account's later m.weibo.cn
    leases and not to its weibo.com ones; a weibo.com lease held across a restart with new cookies in the file
    reports the old login's refresh, and the new login is what the account is leased with after it."""
    C = rpc.crawler()
    accounts = accounts_dir(tmp_path, ONE.format(cookies="pasted"), private=True)
    pool = accounts / "pool.toml"
    settings = {
        "scheduler__accounts_dir": str(accounts),
        "scheduler__account_sources": "weibo_pc,weibo_mobile",
        "sources__weibo_pc__base_url": "https://weibo.com",
        "sources__weibo_mobile__base_url": "https://m.weibo.cn",
    }

    def lease(proxy: Any, source: str, number: int) -> Any:
        proxy.addUsers([f"{source}:{number}"], C.TaskKind.WeiboUser)
        return next(task for task in proxy.getUsers("ice-test", 5) if task.source == source)

    with scheduler_daemon(tmp_path, **settings) as daemon:
        with scheduler_proxy(daemon) as proxy:
            mobile = lease(proxy, "weibo_mobile", 1)
            proxy.putUser(C.Report(taskId=mobile.id, leaseToken=mobile.leaseToken, accountCookies="SUB=for-weibo-cn"))
            assert lease(proxy, "weibo_mobile", 2).account.cookieBlob == "SUB=for-weibo-cn"
            held = lease(proxy, "weibo_pc", 3)
            assert held.account.cookieBlob == "SUB=pasted"
        assert daemon.stop() == 0
        pool.write_text(ONE.format(cookies="operator"))
        daemon.start()
        with scheduler_proxy(daemon) as proxy:
            proxy.putUser(C.Report(taskId=held.id, leaseToken=held.leaseToken, accountCookies="SUB=old-login"))
            assert lease(proxy, "weibo_pc", 4).account.cookieBlob == "SUB=operator"
            assert json.loads(proxy.stats().detailJson)["accounts"]["a1"]["login_refreshes"] == 0
        assert daemon.stop() == 0
