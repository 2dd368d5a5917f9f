"""Changing the shard count (``scheduler_server.reshard``): every entry lands on the shard that owns it, the new
shards start on what they got and serve it, going back gives the old tables, and bad inputs are refused before
anything is written. Core-level, over the memory store and a real Berkeley DB, and the command's order of fsyncs
and renames; the command against real daemons is in test_reshard_ice.py."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from icecrawler.errors import ConfigError, LeaseLostError, ServiceError
from icecrawler.models import Outcome, Report, Task, TaskKind
from icecrawler.settings import Settings
from icecrawler.shards import ShardMap, source_hosts
from icecrawler_cli.cli import main
from scheduler_server.accounts import login_digest
from scheduler_server.core import SchedulerCore
from scheduler_server.integrity import open_checked
from scheduler_server.quarantine import set_aside
from scheduler_server.refreshes import StoredRefresh, decode_refresh, encode_refresh, refresh_key
from scheduler_server.reshard import EVERY_SHARD, entry_owner, plan, read_layout, reshard
from scheduler_server.reshard_run import RUN_FILE
from scheduler_server.startup import CALIBRATION_KEY, GAP_KEY, GAP_VALUE, LAYOUT_KEY
from scheduler_server.store import TABLES, BdbQueueStore, MemoryQueueStore, QueueStore, held_key
from tests.helpers import record_fsyncs_and_renames
from tests.scheduler.conftest import ManualClocks, make_settings
from tests.scheduler.test_account_reload import accounts_dir
from tests.scheduler.test_shards import TWO_HOSTS, shard_settings

HOSTS = source_hosts(make_settings(**TWO_HOSTS))
ACCOUNT_FREEZE = (b"account:a1", json.dumps([1_900_000_000.0, "frozen by the test", ""]).encode())
#: A site's refresh of a1's login: like its freeze, on every shard (the one that leases a1 uses it).
ACCOUNT_REFRESH = (
    refresh_key("a1", ".weibo.com"),
    encode_refresh(StoredRefresh("a1", ".weibo.com", login_digest("SUB=file"), "SUB=refreshed")),
)
#: The entries every new shard gets.
EVERY = dict([ACCOUNT_FREEZE, ACCOUNT_REFRESH])


def busy_shard(store: QueueStore, clocks: ManualClocks) -> tuple[list[Task], Task]:
    """One unsharded scheduler's database with an entry of every kind: tasks pending and in flight, completion-log
    entries, a removed task's lease, a host's hold and ban block, an open gap, an account's freeze and login
    refresh, the rate calibration, and a quarantined record (``scheduler_server.quarantine``). Returns the tasks
    still in flight, and the removed one."""
    core = SchedulerCore.from_settings(make_settings(**TWO_HOSTS, scheduler__policy="rate"), store, clocks)
    core.add([f"jd:{n}" for n in range(30)] + [f"ecshop:{n}" for n in range(20)], TaskKind.ProductReviews)
    tasks = core.lease("w", 50)
    jd = [task for task in tasks if ":jd:" in task.id]
    ecshop = [task for task in tasks if ":ecshop:" in task.id]
    core.report([Report(task.id, task.lease_token, new_items=2, fetches=1) for task in jd[:10] + ecshop[:10]])
    core.remove([jd[10].id.removeprefix("reviews:")], TaskKind.ProductReviews)  # in flight: a removed lease
    core.report([Report(ecshop[10].id, ecshop[10].lease_token, outcome=Outcome.Banned, retry_after_s=600)])
    core.hold_host(HOSTS["jd"], 3600, "maintenance")
    with store.transaction() as txn:
        txn.put("meta", GAP_KEY + b"reviews:jd:29", GAP_VALUE)
        set_aside(txn, b"reviews:ecshop:99", b"\x80\x05damaged")  # as a core quarantines one
        for key, value in EVERY.items():
            txn.put("meta", key, value)
    return jd[11:] + ecshop[11:], jd[10]


def tables(store: QueueStore) -> dict[str, dict[bytes, bytes]]:
    with store.transaction() as txn:
        return {table: dict(txn.scan(table, limit=1_000_000)) for table in TABLES}


def test_every_entry_lands_on_the_shard_that_owns_it_and_nothing_is_lost(clocks: ManualClocks) -> None:
    old = MemoryQueueStore()
    busy_shard(old, clocks)
    before = tables(old)
    new = [MemoryQueueStore(), MemoryQueueStore()]
    result = reshard([old], new, HOSTS)
    after = [tables(store) for store in new]
    shard_map = ShardMap(HOSTS, 2)
    for shard, got in enumerate(after):
        assert json.loads(got["meta"].pop(LAYOUT_KEY)) == {"shard": shard, "shards": 2}
        assert got["meta"].pop(CALIBRATION_KEY) == before["meta"][CALIBRATION_KEY]
        assert {key: got["meta"].pop(key) for key in EVERY} == EVERY  # every shard: the one that leases a1 uses them
        held = got["meta"].pop(held_key("quarantine"), None)  # on the shard the quarantined record went to alone
        assert (held is not None, bool(got["quarantine"])) == (shard == 1, shard == 1)
        for table, entries in got.items():
            assert all(entry_owner(table, key, shard_map) == shard for key in entries), table
    for table in TABLES:
        merged = {key: value for got in after for key, value in got[table].items()}
        expected = {
            key: value
            for key, value in before[table].items()
            if table != "meta" or key not in (LAYOUT_KEY, CALIBRATION_KEY, held_key("quarantine"), *EVERY)
        }
        assert merged == expected, table
        assert sum(len(got[table]) for got in after) == len(expected)  # each entry once
    assert {key.decode().split(":")[1] for key in after[0]["tasks"]} == {"jd"}
    assert {key.decode().split(":")[1] for key in after[1]["tasks"]} == {"ecshop"}
    assert (result.shards, result.was_shards, result.calibration_from) == (2, 1, [0, 0])
    assert result.entries[0]["tasks"] + result.entries[1]["tasks"] == 49  # 50 added, one removed


def test_the_new_shards_serve_what_they_got(clocks: ManualClocks) -> None:
    """Started as shards 0 and 1 of 2: the same tasks, the in-flight lease reported on its new shard, the hold and
    the ban block on their hosts' shards, the removed lease still told TaskRemoved."""
    old = MemoryQueueStore()
    inflight, removed = busy_shard(old, clocks)
    stats = SchedulerCore.from_settings(make_settings(**TWO_HOSTS, scheduler__policy="rate"), old, clocks).stats()
    new = [MemoryQueueStore(), MemoryQueueStore()]
    reshard([old], new, HOSTS)
    shards = [
        SchedulerCore.from_settings(shard_settings(shard, scheduler__policy="rate"), new[shard], clocks)
        for shard in (0, 1)
    ]
    for key in ("tasks", "pending", "inflight", "done"):
        assert shards[0].stats()[key] + shards[1].stats()[key] == stats[key], key
    assert [shard.stats()["detail"]["quarantined"] for shard in shards] == [0, 1]  # with its task's host
    for task in inflight:
        owner = shards[ShardMap(HOSTS, 2).of_task(task.id)]
        owner.report([Report(task.id, task.lease_token, new_items=1, fetches=1)])  # taken: the lease moved with it
    with pytest.raises(LeaseLostError) as lost:
        shards[0].report([Report(removed.id, removed.lease_token)])
    assert lost.value.code == "TaskRemoved"
    assert [(shard.gauges()["held_hosts"], shard.gauges()["blocked_hosts"]) for shard in shards] == [(1, 0), (0, 1)]
    jd_block = shards[0].stats()["detail"]["hosts"][HOSTS["jd"]]["block"]
    assert jd_block["reason"] == "held by the operator: maintenance"  # the hold on jd's shard, the ban on ecshop's


def test_one_to_two_and_back_gives_the_old_tables(clocks: ManualClocks) -> None:
    old = MemoryQueueStore()
    busy_shard(old, clocks)
    two = [MemoryQueueStore(), MemoryQueueStore()]
    reshard([old], two, HOSTS)
    back = MemoryQueueStore()
    result = reshard(list(reversed(two)), [back], HOSTS)  # any order: the layout says which shard each one is
    assert tables(back) == tables(old)
    assert result.calibration_from == [0]


def test_bad_inputs_are_refused_before_anything_is_written(clocks: ManualClocks) -> None:
    two = [MemoryQueueStore(), MemoryQueueStore()]
    for shard, store in enumerate(two):
        SchedulerCore.from_settings(shard_settings(shard), store, clocks).add(
            ["jd:1" if shard == 0 else "ecshop:1"], TaskKind.ProductReviews
        )
    target = MemoryQueueStore()
    with pytest.raises(ConfigError, match=r"shards \[1\] of 2: every shard is needed, once \(missing: \[0\]\)"):
        reshard([two[1]], [target], HOSTS)
    with pytest.raises(ConfigError, match="every shard is needed, once"):
        reshard([two[0], two[0], two[1]], [target], HOSTS)
    unsharded = MemoryQueueStore()
    SchedulerCore.from_settings(make_settings(**TWO_HOSTS), unsharded, clocks)
    with pytest.raises(ConfigError, match="different layouts"):
        reshard([two[0], two[1], unsharded], [target], HOSTS)
    with pytest.raises(ConfigError, match=r"task reviews:jd:1 is on old shard 0, but .* put it on shard 1"):
        reshard(two, [target], {"jd": "127.0.0.3:8800", "ecshop": "127.0.0.3:8800"})
    not_empty = MemoryQueueStore()
    with not_empty.transaction() as txn:
        txn.put("tasks", b"reviews:jd:7", b"")
    with pytest.raises(ConfigError, match="new shard 1's database is not empty"):
        reshard(two, [target, not_empty], HOSTS)
    with two[0].transaction() as txn:
        txn.put("meta", b"a-later-version:x", b"")
    with pytest.raises(ConfigError, match="cannot place"):
        reshard(two, [target], HOSTS)
    assert tables(target) == {table: {} for table in TABLES}


def test_an_old_database_whose_counts_do_not_add_up_is_a_service_error(clocks: ManualClocks) -> None:
    old = MemoryQueueStore()
    busy_shard(old, clocks)
    with old.transaction() as txn:
        txn.put("tasks", b"reviews:jd:999", b"")  # a record in no queue
    with pytest.raises(ServiceError, match="new shard 0 holds 30 tasks but 10 pending and 19 in flight"):
        reshard([old], [MemoryQueueStore(), MemoryQueueStore()], HOSTS)


def test_the_plan_counts_each_new_shards_tasks_by_host_and_writes_nothing(clocks: ManualClocks) -> None:
    old = MemoryQueueStore()
    busy_shard(old, clocks)
    before = tables(old)
    assert plan([old], 2, HOSTS) == [Counter({HOSTS["jd"]: 29}), Counter({HOSTS["ecshop"]: 20})]
    assert plan([old], 1, HOSTS) == [Counter({HOSTS["jd"]: 29, HOSTS["ecshop"]: 20})]
    assert tables(old) == before


#: Account a1 crawls jd, whose host is on shard 0 of 2.
JD_ACCOUNT = '[[account]]\nid = "a1"\ncookies = "SUB=file"\nsources = ["jd"]\n'


def account_settings(accounts: Path, shard: int | None = None) -> Settings:
    """A scheduler of the two test hosts (unsharded, or shard ``shard`` of 2) whose account a1 crawls jd."""
    extra: dict[str, object] = {"scheduler__accounts_dir": str(accounts), "scheduler__account_sources": "jd"}
    return make_settings(**TWO_HOSTS, **extra) if shard is None else shard_settings(shard, 2, **extra)


def refreshed(core: SchedulerCore, clocks: ManualClocks, number: int, cookies: str) -> None:
    """A new jd task crawled with a1, whose report carries the site's refresh ``cookies``."""
    core.add([f"jd:{number}"], TaskKind.ProductReviews)
    clocks.advance(3600 * 24)
    task = core.lease("w", 1)[0]
    core.report([Report(task.id, task.lease_token, account_cookies=cookies)])
    clocks.advance(3600 * 24)


def stored_refresh(store: QueueStore) -> str | None:
    with store.transaction() as txn:
        value = txn.get("meta", refresh_key("a1", "127.0.0.1"))
    return None if value is None else decode_refresh(refresh_key("a1", "127.0.0.1"), value).cookies


def test_two_reshards_in_a_row_keep_the_refresh_the_site_set_last(clocks: ManualClocks, tmp_path: Path) -> None:
    """Was: the first reshard copied a1's refresh to both new shards; shard 0, which crawls a1's sources, took a
    newer one while shard 1 (not started since) kept the old copy, and the reshard back laid shard 1's old copy over
    shard 0's newer one, the higher old shard winning whatever its age. Now the one the site set last wins."""
    accounts = accounts_dir(tmp_path, JD_ACCOUNT)
    one = MemoryQueueStore()
    refreshed(SchedulerCore.from_settings(account_settings(accounts), one, clocks), clocks, 1, "SUB=older")
    two = [MemoryQueueStore(), MemoryQueueStore()]
    reshard([one], two, HOSTS)
    assert [stored_refresh(store) for store in two] == ["SUB=older", "SUB=older"]
    owner = SchedulerCore.from_settings(account_settings(accounts, 0), two[0], clocks)
    refreshed(owner, clocks, 2, "SUB=newest")
    back = MemoryQueueStore()
    reshard(two, [back], HOSTS)
    assert stored_refresh(back) == "SUB=newest"
    core = SchedulerCore.from_settings(account_settings(accounts), back, clocks)
    core.add(["jd:3"], TaskKind.ProductReviews)
    clocks.advance(3600 * 24)
    assert core.lease("w", 1)[0].account.cookie_blob == "SUB=newest"


def test_a_shard_that_does_not_crawl_an_accounts_sources_deletes_its_copy_of_the_refresh(
    clocks: ManualClocks, tmp_path: Path
) -> None:
    """Was: every new shard kept the copy a reshard gave it for good, to come back stale from the next reshard."""
    accounts = accounts_dir(tmp_path, JD_ACCOUNT)
    one = MemoryQueueStore()
    refreshed(SchedulerCore.from_settings(account_settings(accounts), one, clocks), clocks, 1, "SUB=refreshed")
    two = [MemoryQueueStore(), MemoryQueueStore()]
    reshard([one], two, HOSTS)
    for shard, store in enumerate(two):
        SchedulerCore.from_settings(account_settings(accounts, shard), store, clocks)
    assert [stored_refresh(store) for store in two] == ["SUB=refreshed", None]


def test_entries_are_placed_by_their_keys() -> None:
    shard_map = ShardMap(HOSTS, 2)
    assert entry_owner("meta", b"host:127.0.0.3:8800", shard_map) == 1
    assert entry_owner("meta", b"account:a1", shard_map) == EVERY_SHARD
    assert entry_owner("meta", ACCOUNT_REFRESH[0], shard_map) == EVERY_SHARD
    assert entry_owner("meta", GAP_KEY + b"reviews:ecshop:3", shard_map) == 1


@pytest.mark.bdb
def test_over_real_berkeley_db_a_database_that_never_ran_sharded_is_shard_0_of_1(
    tmp_path: Path, clocks: ManualClocks
) -> None:
    old = BdbQueueStore(tmp_path / "old")
    busy_shard(old, clocks)
    with old.transaction() as txn:
        txn.delete("meta", LAYOUT_KEY)  # as a database of a version before shards was
    assert read_layout(old) == (0, 1)
    new = [BdbQueueStore(tmp_path / f"new{shard}") for shard in range(3)]
    try:
        result = reshard([old], new, HOSTS)
        assert [read_layout(store) for store in new] == [(0, 3), (1, 3), (2, 3)]
        assert sum(counts["tasks"] for counts in result.entries) == 49
    finally:
        for store in (old, *new):
            store.close()


@pytest.mark.bdb
def test_the_command_puts_every_new_database_on_disk_before_its_first_rename(
    tmp_path: Path, clocks: ManualClocks, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A power cut must not leave a renamed shard whose pages, or whose run file, never reached the disk: every
    file and folder of every new database is fsynced before the first rename, and the folders holding the new names
    after the last one. (The real fsync and rename run; the test only records their order.)"""
    old = open_checked(tmp_path / "old")
    busy_shard(old, clocks)
    old.close()
    events = record_fsyncs_and_renames(monkeypatch)
    targets = [tmp_path / "s0" / "db", tmp_path / "s1" / "db"]
    sets = [f"--set={key.replace('__', '.')}={value}" for key, value in TWO_HOSTS.items()]
    assert main(["reshard", "--from", str(tmp_path / "old"), "--to", *map(str, targets), *sets]) == 0
    out = capsys.readouterr().out
    assert "shard 1: " in out and "quarantine 1" in out  # the summary counts every table, quarantined records too

    renames = [index for index, (kind, _) in enumerate(events) if kind == "rename"]
    assert [events[index][1] for index in renames] == [target.with_name("db.partial") for target in targets]
    synced_before = {path for kind, path in events[: renames[0]] if kind == "fsync"}
    for target in targets:
        written = {target.with_name("db.partial") / path.relative_to(target) for path in target.rglob("*")}
        assert {RUN_FILE, "tasks.db"} <= {path.name for path in written}
        assert written | {target.with_name("db.partial")} <= synced_before
    synced_after = {path for kind, path in events[renames[-1] :] if kind == "fsync"}
    assert {target.parent for target in targets} <= synced_after
