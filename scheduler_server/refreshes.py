"""The sites' refreshes of logins as the scheduler keeps them in its database (``meta``), and which of them a start
or a reload of the accounts files may use. Pure logic over a ``Txn``: the account pool (``accounts``) decides what
a report's refresh does, the core puts it in the report's own transaction, and this module encodes, decodes and
sorts the stored ones.

A refresh is stored per account and site (the pool's own key) with a digest of the accounts file's blob it
refreshed (``accounts.login_digest``) and when the site set it. It is leased after a restart (and when SIGHUP finds
its account again) only while the file holds that login for that account: new cookies pasted into the file win,
and the stored refresh is deleted. An account missing from the files keeps its refreshes unused: a file caught
empty at SIGHUP (an editor truncates, then writes) or an accounts directory not mounted yet at start must not cost
every live login, and the login digest already keeps a refresh from outliving its login. They are deleted once the
account has been missing for ``ABSENT_KEEP_S`` (counted from the first start or SIGHUP that found it missing), so a
retired account's cookies do not stay in the database for good. A shard deletes the refreshes of an account whose
sources another shard crawls (a reshard copies every refresh to every new shard: see ``reshard``). A record this
version cannot read is deleted with one log line; it never stops a start. Values hold cookies: nothing here logs
or returns them in an error.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum

from icecrawler.shards import ShardMap
from scheduler_server.accounts import PooledAccount, login_digest, refresh_refusal
from scheduler_server.store import Txn, entries

__all__ = [
    "ABSENT_KEEP_S",
    "REFRESH_KEY",
    "REFRESH_VERSION",
    "Fate",
    "StoredRefresh",
    "accounts_elsewhere",
    "decode_refresh",
    "encode_refresh",
    "newer_copy",
    "refresh_key",
    "restore_verdict",
    "sweep_refreshes",
]

log = logging.getLogger(__name__)

#: The ``meta`` prefix of a stored refresh: ``REFRESH_KEY`` + JSON ``[account id, site]``.
REFRESH_KEY = b"login-refresh:"
#: The first key after every stored refresh (``:`` + 1), the end of their range scan.
_REFRESH_END = b"login-refresh;"
#: The record's format; another one is not read (deleted with a log line, like a damaged one).
REFRESH_VERSION = 1
#: How long the refreshes of an account missing from the accounts files are kept (30 days), from the first start or
#: SIGHUP that found it missing: long enough for a file truncated by an editor or a mount that comes late, short
#: enough that a retired account's cookies leave the database.
ABSENT_KEEP_S = 30 * 86400


class Fate(Enum):
    """What a start or SIGHUP does with a stored refresh (``restore_verdict``)."""

    #: Leased: its account is in the files with the login it refreshed.
    USE = "used"
    #: Kept, not leased: its account is missing from the files (it may come back with the same login).
    KEEP = "kept unused"
    DELETE = "deleted"


@dataclass(frozen=True)
class StoredRefresh:
    """One account's login as one site last refreshed it, and which login of the accounts file that refreshed."""

    account_id: str
    #: ``cookie_blob.site_domain`` of the sources it is leased to (the pool's key, "" for a source not named).
    site: str
    #: ``accounts.login_digest`` of the file's blob it refreshed.
    login: str
    #: The refreshed blob (secret: never logged, nor shown by ``repr``).
    cookies: str = field(repr=False)
    #: When the site set it (wall ms; 0 in a record stored before this was kept): of two copies of one refresh that
    #: a reshard meets, the newer wins (``newer_copy``).
    taken_ms: int = 0
    #: When a start or SIGHUP first found its account missing from the accounts files (wall ms); 0 while it is there.
    absent_ms: int = 0

    @property
    def key(self) -> bytes:
        return refresh_key(self.account_id, self.site)


def refresh_key(account_id: str, site: str) -> bytes:
    """The ``meta`` key of an account's refresh for ``site``: JSON, so no id or site can run into the other."""
    return REFRESH_KEY + json.dumps([account_id, site], ensure_ascii=False).encode()


def encode_refresh(refresh: StoredRefresh) -> bytes:
    """The stored value (JSON with a version)."""
    return json.dumps(
        {
            "v": REFRESH_VERSION,
            "account": refresh.account_id,
            "site": refresh.site,
            "login": refresh.login,
            "cookies": refresh.cookies,
            "taken": refresh.taken_ms,
            "absent": refresh.absent_ms,
        },
        ensure_ascii=False,
    ).encode()


def decode_refresh(key: bytes, value: bytes) -> StoredRefresh:
    """The refresh stored under ``key``; ValueError saying what is wrong with it (never quoting its cookies) when it
    is truncated, damaged, of another version, or not the record its key names."""
    try:
        record = json.loads(value.decode())
    except (ValueError, RecursionError) as exc:  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ValueError(f"it is not a JSON record ({type(exc).__name__})") from None
    if not isinstance(record, dict):
        raise ValueError("it is not a JSON object")
    version = record.get("v")
    if version != REFRESH_VERSION:
        shown = version if type(version) is int else "unknown"  # only a number is shown: a damaged field may be secret
        raise ValueError(f"it is of format version {shown}, this version reads {REFRESH_VERSION}")
    fields = {name: record.get(name) for name in ("account", "site", "login", "cookies")}
    text = {name: got for name, got in fields.items() if isinstance(got, str)}
    wrong = sorted(set(fields) - set(text))
    if wrong:
        raise ValueError(f"its {', '.join(wrong)} {'is' if len(wrong) == 1 else 'are'} missing or not text")
    times = {name: record.get(name, 0) for name in ("taken", "absent")}  # absent from a record stored before them
    if not all(type(ms) is int and ms >= 0 for ms in times.values()):
        raise ValueError("its taken or absent time is not a whole number of milliseconds")
    refresh = StoredRefresh(
        text["account"], text["site"], text["login"], text["cookies"], times["taken"], times["absent"]
    )
    if not refresh.account_id or not refresh.login or not refresh.cookies:
        raise ValueError("its account, login or cookies are empty")
    if refresh.key != key:
        raise ValueError("its key does not name its account and site")
    return refresh


def accounts_elsewhere(accounts: Iterable[PooledAccount], shard_map: ShardMap, shard: int) -> frozenset[str]:
    """The ids of ``accounts`` whose sources another shard than ``shard`` crawls: every shard loads every account,
    and only the one of its sources' hosts leases it (``config.configured_accounts`` refuses an account whose sources
    two shards crawl), so only that one keeps its refreshes."""
    return frozenset(
        pooled.account.id
        for pooled in accounts
        if any(shard_map.of_source(source) != shard for source in pooled.sources)
    )


def restore_verdict(
    refresh: StoredRefresh,
    accounts: Mapping[str, PooledAccount],
    sites: Collection[str],
    wall_ms: int,
    elsewhere: Collection[str] = (),
) -> tuple[Fate, str]:
    """What a start or SIGHUP does with a stored refresh, and why (never quoting cookies), given ``accounts`` (the
    accounts files as read now), ``sites`` (those of the sources' base_url settings: ``AccountPool.site_names``), the
    wall clock and ``elsewhere`` (``accounts_elsewhere``). Leased only while its account is in the files with the login
    it refreshed, on this shard, for a site of a source, and it still passes ``refresh_refusal``; kept unused while
    its account is missing from the files, for ``ABSENT_KEEP_S``; deleted otherwise."""
    pooled = accounts.get(refresh.account_id)
    if pooled is None:
        if refresh.absent_ms and wall_ms - refresh.absent_ms > ABSENT_KEEP_S * 1000:
            return (
                Fate.DELETE,
                f"its account has been missing from the accounts files for {ABSENT_KEEP_S // 86400} days",
            )
        return Fate.KEEP, "its account is not in the accounts files now"
    if refresh.account_id in elsewhere:
        return Fate.DELETE, "its account's sources are crawled by another scheduler shard"
    if login_digest(pooled.account.cookie_blob) != refresh.login:
        return Fate.DELETE, "the accounts file holds another login for it now"
    if refresh.site not in sites:
        return Fate.DELETE, "no source's base_url is on that site now"
    refusal = refresh_refusal(pooled.account.cookie_blob, refresh.cookies)
    if refusal is not None:
        return Fate.DELETE, f"it is not a refresh of the file's login: {refusal}"
    return Fate.USE, ""


def sweep_refreshes(
    txn: Txn,
    accounts: Mapping[str, PooledAccount],
    sites: Collection[str],
    wall: float,
    elsewhere: Collection[str] = (),
) -> list[StoredRefresh]:
    """Every stored refresh ``restore_verdict`` lets ``accounts`` use, in key order. In ``txn``: those it deletes,
    and records that do not read, are deleted, so they do not pile up; one whose account went missing is marked
    with the time (its ``ABSENT_KEEP_S`` starts), one whose account came back is unmarked. Each deletion or mark is
    one log line naming the account, never the cookies. Run at start (``startup.restore_state``) and when the
    accounts files are read again (SIGHUP)."""
    wall_ms = max(1, int(wall * 1000))
    used: list[StoredRefresh] = []
    for key, value in entries(txn, "meta", REFRESH_KEY, _REFRESH_END):
        try:
            refresh = decode_refresh(key, value)
        except ValueError as exc:
            log.warning("a stored login refresh (key %r) is not read and is deleted: %s", key[:80], exc)
            txn.delete("meta", key)
            continue
        fate, why = restore_verdict(refresh, accounts, sites, wall_ms, elsewhere)
        if fate is Fate.DELETE:
            log.info(
                "account %s: its stored login refresh for %r is deleted: %s", refresh.account_id, refresh.site, why
            )
            txn.delete("meta", key)
            continue
        absent_ms = (refresh.absent_ms or wall_ms) if fate is Fate.KEEP else 0
        if absent_ms != refresh.absent_ms:
            if fate is Fate.KEEP:
                log.info(
                    "account %s: its stored login refresh for %r is kept unused: %s (deleted if it stays missing "
                    "for %d days; leased again if it comes back with the same login)",
                    refresh.account_id,
                    refresh.site,
                    why,
                    ABSENT_KEEP_S // 86400,
                )
            refresh = replace(refresh, absent_ms=absent_ms)
            txn.put("meta", key, encode_refresh(refresh))
        if fate is Fate.USE:
            used.append(refresh)
    return used


def newer_copy(key: bytes, kept: bytes | None, other: bytes) -> bytes:
    """Of two stored copies of one refresh (two old shards held it: a reshard copies every refresh to every new
    shard), the one the site set last; of two as new, ``kept``. A copy that does not read loses to one that does
    (the sweep of the shard that gets it would delete it anyway)."""
    if kept is None:
        return other

    def taken(value: bytes) -> int:
        try:
            return decode_refresh(key, value).taken_ms
        except ValueError:
            return -1

    return other if taken(other) > taken(kept) else kept
