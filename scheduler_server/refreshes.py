"""The sites' refreshes of logins as the scheduler keeps them in its database (``meta``), and which of them a start
or a reload of the accounts files may use. Pure logic over a ``Txn``: the account pool (``accounts``) decides what
a report's refresh does, the core puts it in the report's own transaction, and this module encodes, decodes and
sorts the stored ones.

A refresh is stored per account and site (the pool's own key) with a digest of the accounts file's blob it
refreshed (``accounts.login_digest``). It is used after a restart (and kept at SIGHUP) only while the file still
holds that login for that account: an operator who pasted a new login, or removed the account, means the file wins,
and the stored refresh is deleted. A record this version cannot read is deleted with one log line; it never stops a
start. Values hold cookies: nothing here logs or returns them in an error.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from scheduler_server.accounts import PooledAccount, login_digest, refresh_refusal
from scheduler_server.store import Txn, entries

__all__ = [
    "REFRESH_KEY",
    "REFRESH_VERSION",
    "StoredRefresh",
    "decode_refresh",
    "encode_refresh",
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


@dataclass(frozen=True)
class StoredRefresh:
    """One account's login as one site last refreshed it, and which login of the accounts file that refreshed."""

    account_id: str
    #: ``cookie_blob.site_domain`` of the sources it is leased to (the pool's key, "" for a source not named).
    site: str
    #: ``accounts.login_digest`` of the file's blob it refreshed.
    login: str
    #: The refreshed blob (secret: never logged).
    cookies: str

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
        },
        ensure_ascii=False,
    ).encode()


def decode_refresh(key: bytes, value: bytes) -> StoredRefresh:
    """The refresh stored under ``key``; ValueError saying what is wrong with it (never quoting its cookies) when it
    is truncated, damaged, of another version, or not the record its key names."""
    try:
        record = json.loads(value.decode())
    except ValueError as exc:  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors
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
    refresh = StoredRefresh(text["account"], text["site"], text["login"], text["cookies"])
    if not refresh.account_id or not refresh.login or not refresh.cookies:
        raise ValueError("its account, login or cookies are empty")
    if refresh.key != key:
        raise ValueError("its key does not name its account and site")
    return refresh


def restore_verdict(
    refresh: StoredRefresh, accounts: Mapping[str, PooledAccount], sites: Collection[str]
) -> str | None:
    """Why a stored refresh is not used with ``accounts`` (the accounts files as read now) and ``sites`` (those the
    pool's sources are crawled on), or None to lease it: the account must still be in the files with the login the
    refresh is of, the site must still be one a source is crawled on, and it must still pass ``refresh_refusal``."""
    pooled = accounts.get(refresh.account_id)
    if pooled is None:
        return "the account is no longer in the accounts files"
    if login_digest(pooled.account.cookie_blob) != refresh.login:
        return "the accounts file holds another login for it now"
    if refresh.site not in sites:
        return "no source is crawled on that site now"
    refusal = refresh_refusal(pooled.account.cookie_blob, refresh.cookies)
    if refusal is not None:
        return f"it is not a refresh of the file's login: {refusal}"
    return None


def sweep_refreshes(txn: Txn, accounts: Mapping[str, PooledAccount], sites: Collection[str]) -> list[StoredRefresh]:
    """Every stored refresh ``restore_verdict`` lets ``accounts`` use, in key order; the others, and records that do
    not read, are deleted in ``txn`` (each with one log line naming the account, never the cookies), so they do not
    pile up. Run at start (``startup.restore_state``) and when the accounts files are read again (SIGHUP)."""
    kept: list[StoredRefresh] = []
    for key, value in entries(txn, "meta", REFRESH_KEY, _REFRESH_END):
        try:
            refresh = decode_refresh(key, value)
        except ValueError as exc:
            log.warning("a stored login refresh (key %r) is not read and is deleted: %s", key[:80], exc)
            txn.delete("meta", key)
            continue
        verdict = restore_verdict(refresh, accounts, sites)
        if verdict is None:
            kept.append(refresh)
            continue
        log.info(
            "account %s: its stored login refresh for %r is deleted: %s", refresh.account_id, refresh.site, verdict
        )
        txn.delete("meta", key)
    return kept
