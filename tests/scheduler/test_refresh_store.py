"""The sites' refreshes of logins kept in the scheduler's database (``scheduler_server.refreshes``): a restart (a
``kill -9`` included) leases each account with the refresh of the login its file still holds, and the file wins
once the operator changed it. The restore decision and the record's format without a store, the core over both
stores and over a Berkeley DB closed and opened again, then the real daemon killed with SIGKILL."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from icecrawler import rpc
from icecrawler.models import Account, Report, TaskKind
from icecrawler.shards import ShardMap
from icecrawler_cli.commands.status import render_text
from scheduler_server.accounts import PooledAccount, login_digest
from scheduler_server.config import configured_accounts
from scheduler_server.core import SchedulerCore
from scheduler_server.refreshes import (
    ABSENT_KEEP_S,
    REFRESH_KEY,
    Fate,
    StoredRefresh,
    accounts_elsewhere,
    decode_refresh,
    encode_refresh,
    refresh_key,
    restore_verdict,
    sweep_refreshes,
)
from scheduler_server.store import BdbQueueStore, MemoryQueueStore, QueueStore
from tests.scheduler.conftest import ManualClocks, queued_together
from tests.scheduler.daemon import scheduler_daemon, scheduler_proxy
from tests.scheduler.test_account_reload import ONE, accounts_dir, refresh_core, refresh_settings

SITE = ".weibo.com"
SITES = frozenset({SITE, ".weibo.cn"})
#: A wall clock reading, in ms, for the restore decision.
NOW_MS = 1_800_000_000_000
DAY_MS = 86_400_000


def pooled(account_id: str, cookies: str) -> PooledAccount:
    return PooledAccount(Account(account_id, cookies), frozenset({"weibo_pc"}))


def stored(cookies: str = "SUB=refreshed", login_of: str = "SUB=pasted", site: str = SITE) -> StoredRefresh:
    """a1's refresh for ``site``, of the file's login ``login_of``."""
    return StoredRefresh("a1", site, login_digest(login_of), cookies)


# --- the restore decision and the record, without a store ------------------------------------------------------


def test_a_stored_refresh_is_used_only_while_the_file_holds_its_login() -> None:
    accounts = {"a1": pooled("a1", "SUB=pasted")}
    assert restore_verdict(stored(), accounts, SITES, NOW_MS) == (Fate.USE, "")
    renewed = {"a1": pooled("a1", "SUB=operator")}
    assert restore_verdict(stored(), renewed, SITES, NOW_MS) == (
        Fate.DELETE,
        "the accounts file holds another login for it now",
    )
    gone_site = restore_verdict(stored(site=".gone.com"), accounts, SITES, NOW_MS)
    assert gone_site == (Fate.DELETE, "no source's base_url is on that site now")
    elsewhere = restore_verdict(stored(), accounts, SITES, NOW_MS, elsewhere={"a1"})
    assert elsewhere == (Fate.DELETE, "its account's sources are crawled by another scheduler shard")
    # Of the same login, but not a refresh the pool would take from a report: not taken from the database either.
    fate, why = restore_verdict(stored("SUB=x; EXTRA=1"), accounts, SITES, NOW_MS)
    assert fate is Fate.DELETE and "EXTRA" not in why and "SUB=x" not in why


def test_a_missing_accounts_refresh_is_kept_unused_for_a_month() -> None:
    """Was: deleted as soon as a start or SIGHUP did not find its account, so a file caught empty (an editor
    truncates, then writes) or an accounts directory mounted late cost every live login for good. Now kept, unused,
    for ``ABSENT_KEEP_S`` from the first sweep that found its account missing (``absent_ms``)."""
    assert restore_verdict(stored(), {}, SITES, NOW_MS) == (Fate.KEEP, "its account is not in the accounts files now")
    missing_since = StoredRefresh("a1", SITE, login_digest("SUB=pasted"), "SUB=r", absent_ms=NOW_MS)
    later = NOW_MS + ABSENT_KEEP_S * 1000
    assert restore_verdict(missing_since, {}, SITES, later)[0] is Fate.KEEP
    fate, why = restore_verdict(missing_since, {}, SITES, later + 1)
    assert (fate, why) == (Fate.DELETE, "its account has been missing from the accounts files for 30 days")


def test_only_the_shard_that_crawls_an_accounts_sources_keeps_its_refreshes() -> None:
    hosts = {"jd": "127.0.0.1:8800", "ecshop": "127.0.0.3:8800"}  # shard 0 and shard 1 of 2
    accounts = [
        PooledAccount(Account("on-0", "SUB=a"), frozenset({"jd"})),
        PooledAccount(Account("on-1", "SUB=b"), frozenset({"ecshop"})),
    ]
    assert accounts_elsewhere(accounts, ShardMap(hosts, 2), 0) == {"on-1"}
    assert accounts_elsewhere(accounts, ShardMap(hosts, 2), 1) == {"on-0"}
    assert accounts_elsewhere(accounts, ShardMap(hosts, 1), 0) == set()


def test_a_stored_refresh_does_not_show_its_cookies() -> None:
    """Was: ``StoredRefresh``'s repr, in any traceback or debug line that showed one, held the cookies."""
    refresh = stored("SUB=secret-value")
    assert "secret-value" not in repr(refresh) and "secret-value" not in str(refresh)


def test_a_record_reads_back_and_a_bad_one_is_refused_without_its_cookies() -> None:
    refresh = stored("SUB=secret-value")
    assert decode_refresh(refresh.key, encode_refresh(refresh)) == refresh
    assert refresh_key("a1", SITE) != refresh_key("a1" + SITE, "")  # an id cannot run into its site
    value = encode_refresh(refresh)
    other_version = json.dumps({**json.loads(value), "v": 2}).encode()
    no_cookies = json.dumps({k: v for k, v in json.loads(value).items() if k != "cookies"}).encode()
    bad = {
        "truncated": (refresh.key, value[: len(value) // 2], "not a JSON record"),
        "other version": (refresh.key, other_version, "format version 2"),
        "version not a number": (refresh.key, value.replace(b'"v": 1', b'"v": "secret"'), "format version unknown"),
        "not an object": (refresh.key, b'["a1"]', "not a JSON object"),
        "no cookies": (refresh.key, no_cookies, "cookies is missing"),
        "not utf-8": (refresh.key, b"\xff" + value, "not a JSON record"),
        "another key": (refresh_key("a2", SITE), value, "key does not name"),
    }
    for name, (key, data, message) in bad.items():
        with pytest.raises(ValueError, match=message) as raised:
            decode_refresh(key, data)
        assert "secret" not in str(raised.value), name


def test_the_sweep_keeps_the_files_logins_and_deletes_the_rest(caplog: pytest.LogCaptureFixture) -> None:
    """At start and on SIGHUP: a refresh of a login the file still holds is used; one of a changed account, of an
    account another shard crawls, of an account missing for a month, and a record that does not read are deleted;
    a missing account's is kept, marked with the time it was first found missing. Each said in one line without
    cookies."""
    store = MemoryQueueStore()
    keep = stored("SUB=keep-me", site=".weibo.cn")
    renewed = StoredRefresh("a2", SITE, login_digest("SUB=old"), "SUB=of-old")
    missing = StoredRefresh("gone", SITE, login_digest("SUB=g"), "SUB=g")
    long_gone = StoredRefresh("long-gone", SITE, login_digest("SUB=l"), "SUB=l", absent_ms=NOW_MS - 31 * DAY_MS)
    other_shard = StoredRefresh("a3", SITE, login_digest("SUB=third"), "SUB=third-refreshed")
    with store.transaction() as txn:
        for refresh in (keep, renewed, missing, long_gone, other_shard):
            txn.put("meta", refresh.key, encode_refresh(refresh))
        txn.put("meta", refresh_key("a1", SITE), b'{"v": 1, "account": "a1", "si')  # cut short by a crash
        txn.put("meta", b"account:a1", b'[0, "frozen"]')  # another kind of entry: not the sweep's
    accounts = {
        "a1": pooled("a1", "SUB=pasted"),
        "a2": pooled("a2", "SUB=new"),
        "a3": pooled("a3", "SUB=third"),
    }
    with caplog.at_level("INFO", logger="scheduler_server.refreshes"), store.transaction() as txn:
        assert sweep_refreshes(txn, accounts, SITES, NOW_MS / 1000, elsewhere={"a3"}) == [keep]
        left = dict(txn.scan("meta"))
    assert sorted(left) == sorted([b"account:a1", keep.key, missing.key])
    assert decode_refresh(missing.key, left[missing.key]).absent_ms == NOW_MS
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 5, lines
    assert any("not read and is deleted" in line for line in lines)
    assert any("gone: its stored login refresh for '.weibo.com' is kept unused" in line for line in lines)
    assert "SUB=" not in caplog.text
    with caplog.at_level("INFO", logger="scheduler_server.refreshes"), store.transaction() as txn:
        caplog.clear()
        assert sweep_refreshes(txn, accounts, SITES, NOW_MS / 1000 + 3600, elsewhere={"a3"}) == [keep]
        assert decode_refresh(missing.key, txn.get("meta", missing.key) or b"").absent_ms == NOW_MS  # not moved on
    assert caplog.records == []  # nothing new to say


# --- the core over a store ----------------------------------------------------------------------------------------


def refreshed_once(core: SchedulerCore, clocks: ManualClocks, cookies: str = "SUB=refreshed") -> None:
    """Crawl a new weibo_pc task whose report carries the site's refresh of the account's login."""
    core.add(["weibo_pc:1"], TaskKind.WeiboUser)
    task = core.lease("w", 1)[0]
    core.report([Report(task.id, task.lease_token, account_cookies=cookies)])
    clocks.advance(3600 * 24)


def stored_keys(store: QueueStore) -> list[bytes]:
    with store.transaction() as txn:
        return [key for key, _ in txn.scan("meta", REFRESH_KEY, REFRESH_KEY[:-1] + b";")]


def test_a_refresh_is_stored_with_its_report_and_a_new_login_deletes_it(
    store: QueueStore, clocks: ManualClocks, tmp_path: Path
) -> None:
    """The report's transaction stores the refresh; SIGHUP with the file unchanged keeps it, with new cookies in
    the file deletes it (durably, before the new login is served)."""
    core = refresh_core(store, clocks, tmp_path)
    refreshed_once(core, clocks)
    assert stored_keys(store) == [refresh_key("a1", SITE)]
    settings = refresh_settings(tmp_path)
    assert core.reload_accounts(configured_accounts(settings, core.config)).kept == ("a1",)
    assert stored_keys(store) == [refresh_key("a1", SITE)]
    (tmp_path / "pool.toml").write_text(ONE.format(cookies="operator"))
    assert core.reload_accounts(configured_accounts(settings, core.config)).renewed == ("a1",)
    assert stored_keys(store) == []


def test_an_account_missing_from_the_file_at_one_sighup_is_leased_with_its_refresh_when_it_is_back(
    store: QueueStore, clocks: ManualClocks, tmp_path: Path
) -> None:
    """Was: a SIGHUP that caught the file empty (an editor truncates it, then writes) deleted the account's stored
    refreshes, so the SIGHUP after the write served the pasted cookies, expired within days. Now the first keeps
    them unused and the second leases the account with them again."""
    core = refresh_core(store, clocks, tmp_path)
    refreshed_once(core, clocks)
    settings = refresh_settings(tmp_path)
    (tmp_path / "pool.toml").write_text("")
    assert core.reload_accounts(configured_accounts(settings, core.config)).removed == ("a1",)
    assert stored_keys(store) == [refresh_key("a1", SITE)]
    (tmp_path / "pool.toml").write_text(ONE.format(cookies="pasted"))
    assert core.reload_accounts(configured_accounts(settings, core.config)).added == ("a1",)
    assert core.lease("w", 1)[0].account.cookie_blob == "SUB=refreshed"
    assert core.stats()["detail"]["accounts"]["a1"]["login_refreshes_restored"] == 1
    with store.transaction() as txn:
        value = txn.get("meta", refresh_key("a1", SITE))
    assert value is not None and decode_refresh(refresh_key("a1", SITE), value).absent_ms == 0  # its month is off


def test_a_refresh_nested_too_deep_is_refused_and_its_report_goes_through(
    store: QueueStore, clocks: ManualClocks, tmp_path: Path
) -> None:
    """Was: a refresh of JSON nested ~2700 deep (16 KB: it fits a report) raised RecursionError inside the report's
    transaction, so the report failed on every retry until its lease expired. Now it is a refresh refused."""
    core = refresh_core(store, clocks, tmp_path)
    core.add(["weibo_pc:1"], TaskKind.WeiboUser)
    task = core.lease("w", 1)[0]
    core.report([Report(task.id, task.lease_token, account_cookies='{"a":' * 2700 + '"x"' + "}" * 2700)])
    assert (core.stats()["inflight"], core.stats()["detail"]["accounts"]["a1"]["login_refreshes_refused"]) == (0, 1)
    assert stored_keys(store) == []
    clocks.advance(3600 * 24)
    assert core.lease("w", 1)[0].account.cookie_blob == "SUB=pasted"


def test_two_refreshes_in_one_transaction_keep_the_compare_and_set(
    store: QueueStore, clocks: ManualClocks, tmp_path: Path
) -> None:
    """Two leases handed the same login report in one group: the first refresh is taken and stored, the second
    (of the login as it was before the first) neither, so what is stored is what the account is leased with."""
    core = refresh_core(store, clocks, tmp_path)
    core.add(["weibo_pc:1", "weibo_pc:2"], TaskKind.WeiboUser)
    first = core.lease("w", 1)[0]
    clocks.advance(5)
    second = core.lease("w", 1)[0]
    with queued_together(core):
        one = core.report_async([Report(first.id, first.lease_token, account_cookies="SUB=first")])
        two = core.report_async([Report(second.id, second.lease_token, account_cookies="SUB=second")])
    one.result(10)
    two.result(10)
    with store.transaction() as txn:
        value = txn.get("meta", refresh_key("a1", SITE))
    assert value is not None and decode_refresh(refresh_key("a1", SITE), value).cookies == "SUB=first"
    clocks.advance(3600 * 24)
    assert core.lease("w", 1)[0].account.cookie_blob == "SUB=first"


def test_a_refresh_in_a_group_that_rolls_back_is_taken_once_when_its_report_runs_again(
    store: QueueStore, clocks: ManualClocks, tmp_path: Path
) -> None:
    """The group's transaction fails (another call's fault): the refresh it had stored is rolled back with it and
    the pool has taken nothing; the report, run again alone, stores and takes it once."""
    core = refresh_core(store, clocks, tmp_path)
    core.add(["weibo_pc:1"], TaskKind.WeiboUser)
    task = core.lease("w", 1)[0]

    def broken(txn: Any, group: Any) -> Any:
        raise RuntimeError("disk on fire")

    with queued_together(core):
        good = core.report_async([Report(task.id, task.lease_token, account_cookies="SUB=refreshed")])
        failing = core._call(broken, durable=False)
    assert good.result(10) is None
    with pytest.raises(RuntimeError, match="disk on fire"):
        failing.result(10)
    assert stored_keys(store) == [refresh_key("a1", SITE)]
    assert core.stats()["detail"]["accounts"]["a1"]["login_refreshes"] == 1
    clocks.advance(3600 * 24)
    assert core.lease("w", 1)[0].account.cookie_blob == "SUB=refreshed"


@pytest.mark.bdb
def test_a_refresh_survives_closing_and_opening_the_database(tmp_path: Path, clocks: ManualClocks) -> None:
    """Was: a restart leased the file's pasted cookies again, which expire within days, so every account fell into
    LoginRequired after a restart. Now the refresh is leased after it, until the file holds another login."""
    accounts = tmp_path / "accounts"
    accounts.mkdir()
    core = refresh_core(BdbQueueStore(tmp_path / "db"), clocks, accounts)
    refreshed_once(core, clocks)
    core.close()
    again = refresh_core(BdbQueueStore(tmp_path / "db"), clocks, accounts)
    try:
        assert again.lease("w", 1)[0].account.cookie_blob == "SUB=refreshed"
        detail = again.stats()["detail"]
        assert detail["accounts"]["a1"]["login_refreshes_restored"] == 1
        text = render_text({"scheduler": {"reachable": True, **again.stats(), **detail}})
        assert "1 refreshed logins restored from the database" in text and "SUB=" not in text
    finally:
        again.close()
    renewed = refresh_core(BdbQueueStore(tmp_path / "db"), clocks, accounts, cookies="SUB=operator")
    try:
        clocks.advance(3600 * 24)
        assert renewed.lease("w", 1)[0].account.cookie_blob == "SUB=operator"
        assert stored_keys(renewed.store) == []  # deleted, not left to pile up
    finally:
        renewed.close()


@pytest.mark.bdb
def test_a_start_with_the_account_missing_keeps_its_refresh_for_the_next_start(
    tmp_path: Path, clocks: ManualClocks
) -> None:
    """Was: a start whose accounts directory was still empty (a secrets mount not there yet) deleted every stored
    refresh. Now they wait, unused, and the next start with the file back leases them."""
    accounts = tmp_path / "accounts"
    accounts.mkdir()
    core = refresh_core(BdbQueueStore(tmp_path / "db"), clocks, accounts)
    refreshed_once(core, clocks)
    core.close()
    (accounts / "pool.toml").unlink()
    empty = SchedulerCore.from_settings(refresh_settings(accounts), BdbQueueStore(tmp_path / "db"), clocks)
    assert stored_keys(empty.store) == [refresh_key("a1", SITE)]
    empty.close()
    again = refresh_core(BdbQueueStore(tmp_path / "db"), clocks, accounts)
    try:
        assert again.lease("w", 1)[0].account.cookie_blob == "SUB=refreshed"
    finally:
        again.close()


@pytest.mark.bdb
def test_the_database_that_holds_the_refreshes_is_readable_by_the_scheduler_only(
    tmp_path: Path, clocks: ManualClocks
) -> None:
    """The refreshed logins are secrets like the accounts files (which the scheduler wants 0600): the tables and
    logs Berkeley DB creates were group-readable (0640 under the usual umask)."""
    accounts = tmp_path / "accounts"
    accounts.mkdir()
    core = refresh_core(BdbQueueStore(tmp_path / "db"), clocks, accounts)
    refreshed_once(core, clocks)
    core.close()
    files = sorted((tmp_path / "db").glob("*.db")) + sorted((tmp_path / "db").glob("log.*"))
    assert files and {file.name: file.stat().st_mode & 0o077 for file in files} == {file.name: 0 for file in files}


@pytest.mark.bdb
@pytest.mark.parametrize(
    "damage", [b'{"v": 1, "account": "a1", "si', b'{"v": 9, "whatever": true}', b"\x00\x01"], ids=["cut", "v9", "junk"]
)
def test_a_stored_refresh_that_does_not_read_is_deleted_at_start(
    tmp_path: Path, clocks: ManualClocks, caplog: pytest.LogCaptureFixture, damage: bytes
) -> None:
    """A truncated, damaged or other-version record costs its refresh (the file's cookies are leased), one log line
    and nothing else: the scheduler starts."""
    accounts = tmp_path / "accounts"
    accounts.mkdir()
    core = refresh_core(BdbQueueStore(tmp_path / "db"), clocks, accounts)
    refreshed_once(core, clocks)
    with core.store.transaction() as txn:
        txn.put("meta", refresh_key("a1", SITE), damage)
    core.close()
    with caplog.at_level("WARNING", logger="scheduler_server.refreshes"):
        again = refresh_core(BdbQueueStore(tmp_path / "db"), clocks, accounts)
    try:
        assert again.lease("w", 1)[0].account.cookie_blob == "SUB=pasted"
        assert stored_keys(again.store) == []
        said = [r.getMessage() for r in caplog.records if r.name == "scheduler_server.refreshes"]
        assert len(said) == 1 and "not read and is deleted" in said[0], said
    finally:
        again.close()


# --- the daemon ----------------------------------------------------------------------------------------------------


@pytest.mark.ice
@pytest.mark.bdb
def test_a_scheduler_killed_after_a_refresh_leases_it_after_the_restart_until_the_file_changes(tmp_path: Path) -> None:
    """The daemon is killed with SIGKILL right after a client's report refreshed the login: after the restart the
    next lease gets the refreshed cookies (a lease from before the kill refreshes nothing, the safe choice), and once
    the operator pasted a new login into the file the next start leases that one."""
    C = rpc.crawler()
    accounts = accounts_dir(tmp_path, ONE.format(cookies="pasted"), private=True)
    settings = {
        "scheduler__accounts_dir": str(accounts),
        "scheduler__account_sources": "weibo_pc",
        "sources__weibo_pc__base_url": "https://weibo.com",
    }

    def lease(proxy: Any, number: int) -> Any:
        proxy.addUsers([f"weibo_pc:{number}"], C.TaskKind.WeiboUser)
        return proxy.getUser("kill-test")

    with scheduler_daemon(tmp_path, **settings) as daemon:
        with scheduler_proxy(daemon) as proxy:
            task = lease(proxy, 1)
            assert task.account.cookieBlob == "SUB=pasted"
            proxy.putUser(C.Report(taskId=task.id, leaseToken=task.leaseToken, accountCookies="SUB=refreshed"))
            held = lease(proxy, 2)
            assert held.account.cookieBlob == "SUB=refreshed"
        daemon.kill9()
        daemon.start()
        first = daemon.process
        assert first is not None
        with scheduler_proxy(daemon) as proxy:
            proxy.putUser(C.Report(taskId=held.id, leaseToken=held.leaseToken, accountCookies="SUB=from-before"))
            assert lease(proxy, 3).account.cookieBlob == "SUB=refreshed"
            detail = json.loads(proxy.stats().detailJson)
            assert detail["accounts"]["a1"]["login_refreshes_restored"] == 1
        daemon.kill9()
        (accounts / "pool.toml").write_text(ONE.format(cookies="operator"))
        daemon.start()
        second = daemon.process
        assert second is not None
        with scheduler_proxy(daemon) as proxy:
            assert lease(proxy, 4).account.cookieBlob == "SUB=operator"
        assert daemon.stop() == 0
    assert "1 login refreshes restored from the database" in first.log_path.read_text()
    assert "stored login refresh for '.weibo.com' is deleted" in second.log_path.read_text()
    logs = first.log_path.read_text() + second.log_path.read_text()
    assert "Traceback" not in logs and "SUB=" not in logs
