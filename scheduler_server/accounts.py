"""The account pool: logged-in accounts leased to clients with the tasks of sources that need them.

Accounts come from TOML files in ``scheduler.accounts_dir`` (readable by the scheduler only)::

    [[account]]
    id = "acct-01"
    cookies = "SUB=...; SUBP=..."      # opaque blob, handed to the client's session as is
    sources = ["weibo_pc"]             # optional: default = every source in scheduler.account_sources

An id is unique across the files and never starts with ``visitor:``, the visitor sessions' own ids; cookies that do
not read as a cookie blob (``icecrawler.cookie_blob``) refuse the file, as the client would refuse the session.

An account is frozen on an AccountFrozen, LoginRequired or Banned report (until the Retry-After or
``scheduler.account_freeze_s``, whichever is later), then thawed automatically. The scheduler daemon reads the
files again on SIGHUP (``AccountPool.replace``): an account whose cookies changed is a fresh login and is thawed
at once, so an operator who replaces expired cookies need not restart the scheduler or wait out the freeze, and a
failure reported since by a crawl leased with the old cookies does not freeze it again (``lent_replaced_login``;
which login a lease was handed is kept in memory only, so across a restart such a report freezes the new login).
Each account has a request budget per minute across all clients. An exhausted pool pauses the affected sources;
it never drops tasks.

A site refreshes a login as it is used (``Set-Cookie`` on its answers; a pasted login expires within days where the
browser that kept its cookie jar stays logged in). A crawl report carries the account's cookies as the site last set
them (``Report.account_cookies``), and the account's leases for that site are made with them from then on (``ended``),
so a client's new session, any client's, starts from the live login rather than the pasted one. A refresh is kept per
account and site (``site_domain`` of the source's host: ``.weibo.com``, ``.weibo.cn``): what m.weibo.cn set is never
leased to a weibo.com crawl. It is taken only as a compare-and-set: the pool remembers, in memory, a digest of the blob
each lease was handed, and takes the lease's refresh only while that is still what the account is leased with for that
site; so an older lease's refresh never overwrites a newer one, nor a login the operator has since put in the file
(SIGHUP). A refresh must also read as a cookie blob (``icecrawler.cookie_blob``), keep the file's form-login username
and password, and name no cookie the file does not: another one is ignored and counted (status:
``login_refreshes_refused``). The core asks ``judge`` inside the report's transaction, stores a refresh taken in the
scheduler's database with a digest of the file's blob it refreshed (``refreshes``) in that transaction, and ``settle``s
after the commit. A restart (``kill -9`` included) leases each account with its stored refreshes again while the file
still holds that login (status: ``login_refreshes_restored``), and so does a SIGHUP that finds a missing account
again; those of a changed account are deleted at start and on SIGHUP, a missing account's kept unused for a while
(``refreshes``). A lease handed out before a restart refreshes nothing: the pool no longer knows what it was handed,
and taking its refresh unchecked could lay an older login over a newer one. The file stays as the operator wrote it:
freezes and SIGHUP's "renewed" are judged by the file's cookies (``PooledAccount.account``); an unchanged file read
again keeps the refreshes, a changed login drops that account's.
Cookies never appear in logs or status: only ids, states and counts do.

Sources that serve visitors (``sources.<name>.visitor_url``) and have no configured account get visitor
sessions instead (``scheduler_server.visitors``), leased the same way; a visitor session is never frozen, and
a report that it ended renews it (``scheduler_server.outcomes``).
"""

from __future__ import annotations

import hashlib
import logging
import tomllib
from collections.abc import Container, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from icecrawler.cookie_blob import parse_cookie_blob
from icecrawler.errors import ConfigError, FetchError
from icecrawler.logs import LogThrottle
from icecrawler.models import SOURCES, VISITOR_PREFIX, Account, is_visitor
from scheduler_server.politeness import Hold, RateWindow
from scheduler_server.visitors import VisitorSessions

__all__ = [
    "MAX_LENT",
    "AccountChanges",
    "AccountPool",
    "PooledAccount",
    "RefreshVerdict",
    "account_changes",
    "load_accounts",
    "login_digest",
    "refresh_refusal",
]

#: What a source that needs no login is leased with (Account is frozen, so one instance serves every lease).
_NO_ACCOUNT = Account()
#: Leases whose blob the pool remembers for their refresh (``AccountPool.lent``): each one's entry goes when it
#: ends (report, release, expiry); past this many (ends the pool never heard of), the oldest go and those leases
#: refresh nothing, which is safe.
MAX_LENT = 100_000

log = logging.getLogger(__name__)


@dataclass
class PooledAccount:
    account: Account
    sources: frozenset[str]
    frozen: Hold = field(default_factory=Hold)
    used: RateWindow = field(default_factory=RateWindow)
    #: The login as the site refreshed it, by site (``site_domain``): what a lease of a source of that site gets
    #: instead of ``account`` (the cookies the accounts file gives).
    refreshed: dict[str, Account] = field(default_factory=dict)
    #: Times a site's refresh of the login was taken since the file gave it (status shows it; never the cookies).
    refreshes: int = 0
    #: Refreshes ignored as unreadable or of another login (``refresh_refusal``).
    refused: int = 0
    #: Sites whose refresh was taken back from the database, at start or when SIGHUP found the account again
    #: (``restore``).
    restored: int = 0

    def leased_with(self, site: str) -> Account:
        """What a lease of this account for ``site`` is handed: the site's refresh, else the file's cookies."""
        return self.refreshed.get(site, self.account)


#: The keys of one ``[[account]]`` table.
ACCOUNT_KEYS = frozenset({"id", "cookies", "sources"})


def load_accounts(directory: str | Path, default_sources: frozenset[str]) -> list[PooledAccount]:
    """Every ``[[account]]`` of every ``*.toml`` in ``directory`` (sorted by file name). Bad files fail loudly."""
    if not str(directory):
        return []
    path = Path(directory)
    if not path.is_dir():
        raise ConfigError(f"scheduler.accounts_dir {path} is not a directory")
    accounts: list[PooledAccount] = []
    seen: set[str] = set()
    skipped = sorted(file.name for file in path.iterdir() if file.suffix != ".toml" and not file.name.startswith("."))
    if skipped:  # an account written as JSON, or a file saved under another name, would serve nothing unsaid
        log.warning("%s: only *.toml files hold accounts; not read: %s", path, ", ".join(skipped))
    for file in sorted(path.glob("*.toml")):
        if file.stat().st_mode & 0o077:
            log.warning("%s is readable by other users; account cookies should be readable by the scheduler only", file)
        try:
            table = tomllib.loads(file.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"{file}: cannot read accounts: {exc}") from exc
        entries = _account_tables(file, table)
        for number, entry in enumerate(entries):
            where = f"{file.name} account #{number}"
            account_id, cookies = entry.get("id"), entry.get("cookies")
            if not isinstance(account_id, str) or not account_id or not isinstance(cookies, str):
                raise ConfigError(f"{where}: needs a string id and a string cookies")
            if account_id in seen:
                raise ConfigError(f"{where}: duplicate account id {account_id!r}")
            if is_visitor(account_id):  # read as a visitor session's everywhere: renewed, never frozen
                raise ConfigError(
                    f"{where}: the id {account_id!r} starts with {VISITOR_PREFIX!r}, kept for visitor sessions"
                )
            try:  # else leased, refused by every client's session as LoginRequired, and frozen as logged out
                parse_cookie_blob(cookies)
            except FetchError:
                raise ConfigError(  # not the parser's words: they may quote the cookies
                    f"{where} ({account_id}): cookies do not read as a cookie blob: a Cookie header "
                    '("SUB=...; SUBP=...") or a JSON object of cookies (icecrawler/cookie_blob.py)'
                ) from None
            extra = sorted(set(entry) - ACCOUNT_KEYS)
            if extra:  # a typo (``source``) would otherwise serve the default sources without a word
                log.warning("%s: keys %s ignored; an account has %s", where, extra, ", ".join(sorted(ACCOUNT_KEYS)))
            listed = entry.get("sources", list(default_sources))
            if not isinstance(listed, list) or not all(isinstance(source, str) for source in listed):
                # Only a TOML array: a string iterates by letter, a table by key, a number not at all (a TypeError).
                raise ConfigError(f'{where}: sources is a list of source names, e.g. ["weibo_pc"]')
            sources = frozenset(listed)
            unknown = sources - set(SOURCES)
            if unknown:
                raise ConfigError(f"{where}: unknown sources {sorted(unknown)}")
            seen.add(account_id)
            accounts.append(PooledAccount(Account(account_id, cookies), sources))
    return accounts


def _account_tables(file: Path, table: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``[[account]]`` tables of one file; a file of another shape (``[account]``, ``[[accounts]]``) is refused
    by name rather than read as no accounts."""
    unknown = sorted(set(table) - {"account"})
    if unknown:
        raise ConfigError(f"{file}: unknown key {unknown[0]!r}; accounts are [[account]] tables")
    entries = table.get("account", [])
    if not isinstance(entries, list) or not all(isinstance(entry, dict) for entry in entries):
        raise ConfigError(f"{file}: accounts are [[account]] tables (an array of tables), one per account")
    return entries


def refresh_refusal(configured: str, refreshed: str) -> str | None:
    """Why ``refreshed`` is not a refresh of the login ``configured`` (the file's blob) that the pool may lease, or
    None: it must read as a blob (the client's own parser), keep the form login's username and password, and name
    only cookies ``configured`` names (the client refreshes the values of those alone). Never quotes a cookie."""
    try:
        given, got = parse_cookie_blob(configured), parse_cookie_blob(refreshed)
    except FetchError:
        return "it is not a cookie blob the client can read (or the file's is not)"
    if (got.username, got.password) != (given.username, given.password):
        return "it names another form login"
    extra = set(got.cookies) - set(given.cookies)
    if extra:
        return f"it names {len(extra)} cookie(s) the accounts file does not"
    return None


def login_digest(cookie_blob: str) -> str:
    """Which login a stored freeze was for, without the cookies: a restart with other cookies for the same account
    id does not bring the freeze back (``scheduler_server.startup``)."""
    return hashlib.sha256(cookie_blob.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class RefreshVerdict:
    """What the end of a lease does to its account's login (``AccountPool.judge``); never shown (``cookies``)."""

    account_id: str = ""
    site: str = ""
    #: The lease's refresh passes (or repeats the cookies it was handed); ``cookies`` set when they change.
    taken: bool = False
    #: The refreshed blob to lease from now on ("" when nothing changes), and ``login_digest`` of the file's blob
    #: it refreshed: what the core stores (``refreshes.StoredRefresh``).
    cookies: str = field(default="", repr=False)
    login: str = ""
    #: The account is no longer leased with what this lease was handed (a newer refresh, new cookies in the file).
    stale: bool = False
    #: Why ``refresh_refusal`` refused it.
    refusal: str | None = None


@dataclass(frozen=True)
class AccountChanges:
    """What taking a new list of accounts changes, by account id (``account_changes``)."""

    kept: tuple[str, ...] = ()
    #: Ids whose cookies changed: a fresh login, thawed.
    renewed: tuple[str, ...] = ()
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()

    def describe(self) -> str:
        """One line for the log, ids named (never cookies)."""
        parts = [f"{len(self.kept)} kept"]
        for word, ids in (("renewed (thawed)", self.renewed), ("added", self.added), ("removed", self.removed)):
            parts.append(f"{len(ids)} {word}" + (f": {', '.join(ids)}" if ids else ""))
        return "; ".join(parts)


def account_changes(old: Mapping[str, PooledAccount], new: list[PooledAccount]) -> AccountChanges:
    """How the accounts ``new`` differ from ``old`` (by id): same cookies in the file = kept (whatever the site has
    refreshed since), other cookies = renewed."""
    ids = {pooled.account.id: pooled for pooled in new}
    return AccountChanges(
        kept=tuple(i for i in ids if i in old and old[i].account == ids[i].account),
        renewed=tuple(i for i in ids if i in old and old[i].account != ids[i].account),
        added=tuple(i for i in ids if i not in old),
        removed=tuple(i for i in old if i not in ids),
    )


class AccountPool:
    """Round-robin over usable accounts; see the module docstring. Times are wall-clock seconds."""

    def __init__(
        self,
        accounts: list[PooledAccount],
        needs_account: frozenset[str],
        budget_per_min: int,
        freeze_s: float,
        visitors: VisitorSessions | None = None,
        sites: Mapping[str, str] | None = None,
    ) -> None:
        self.needs_account = needs_account
        #: source -> the site its refreshes are kept for (``site_domain`` of its host); "" for a source not named.
        self.sites = dict(sites or {})
        #: lease token -> (account id, site, ``login_digest`` of the blob it was handed, ``login_of`` the account
        #: then): see ``lent``.
        self._lent: dict[str, tuple[str, str, str, str]] = {}
        self._refusals = LogThrottle()
        #: A site may refresh a login on every answer: one line an hour per (account, site) says it does.
        self._refreshes_said = LogThrottle(interval_s=3600.0)
        self.budget_per_min = budget_per_min
        self.freeze_s = freeze_s
        #: Refreshes of the logins by the sites since start, taken and ignored (``refresh_refusal``), whatever the
        #: accounts files say meanwhile: the metrics' counters (each account's own counts are in ``describe``).
        self.refreshes = {"taken": 0, "refused": 0}
        self._next = 0
        self.visitors = visitors if visitors is not None else VisitorSessions({})
        self._take(accounts)

    def _take(self, accounts: list[PooledAccount]) -> None:
        self._accounts = {pooled.account.id: pooled for pooled in accounts}
        self._order = list(self._accounts)
        self._next %= max(1, len(self._order))
        #: Sources a configured account serves: those never get visitor sessions.
        self._served = frozenset(source for pooled in accounts for source in pooled.sources)

    @property
    def by_id(self) -> Mapping[str, PooledAccount]:
        return self._accounts

    @property
    def site_names(self) -> frozenset[str]:
        """The sites a refresh may be kept for: those of the sources, and "" (a source ``sites`` does not name)."""
        return frozenset({*self.sites.values(), ""})

    def login_of(self, account_id: str) -> str:
        """``login_digest`` of a configured account's cookies (as its file gives them); "" for any other id (a
        visitor session)."""
        pooled = self._accounts.get(account_id)
        return login_digest(pooled.account.cookie_blob) if pooled is not None else ""

    def replace(self, accounts: list[PooledAccount]) -> AccountChanges:
        """Serve ``accounts`` from now on (the accounts files read again). An account that keeps its id keeps its
        requests of the last minute (the site counts them against that login); one that also keeps its cookies
        keeps its freeze and the sites' refreshes of them, and one with new cookies is thawed and leased with them
        (a lease of the old login refreshes nothing: ``ended``). A lease already handed out with a removed account
        runs on; its report charges, freezes and refreshes nothing."""
        changes = account_changes(self._accounts, accounts)
        for pooled in accounts:
            before = self._accounts.get(pooled.account.id)
            if before is not None:
                pooled.used = before.used
                if pooled.account.id in changes.kept:
                    pooled.frozen, pooled.refreshed = before.frozen, before.refreshed
                    pooled.refreshes, pooled.refused = before.refreshes, before.refused
                    pooled.restored = before.restored
        self._take(accounts)
        return changes

    def lent(self, token: str, source: str, account: Account) -> None:
        """Remember that lease ``token`` (of ``source``) was handed ``account``: a digest of its blob, so that its
        refresh is taken only while the account is still leased with that blob for the site (``ended``). Visitor
        sessions and sources without an account are not remembered."""
        pooled = self._accounts.get(account.id)
        if pooled is None:
            return
        files_login = login_digest(pooled.account.cookie_blob)
        # Handed the file's cookies (no stored refresh): one hash, not the same one twice on every lease.
        handed = files_login if account.cookie_blob == pooled.account.cookie_blob else login_digest(account.cookie_blob)
        self._lent[token] = (account.id, self.sites.get(source, ""), handed, files_login)
        while len(self._lent) > MAX_LENT:
            del self._lent[next(iter(self._lent))]

    def lent_replaced_login(self, token: str) -> bool:
        """Whether lease ``token`` was handed a login the accounts files have since replaced for its account (new
        cookies, SIGHUP): its report of a failed login says nothing of the new one, which it must not freeze. False
        for a lease the pool does not remember (a visitor session's, one from before a restart)."""
        entry = self._lent.get(token)
        return entry is not None and entry[3] != self.login_of(entry[0])

    def ended(self, token: str, refreshed: str = "") -> bool:
        """Lease ``token`` ended (reported, given back, expired); ``refreshed``: its login as the site refreshed it
        ("" when it reports none, or its login failed): ``judge``, then ``settle``. True when the refresh is taken
        (or the lease was handed the same cookies)."""
        verdict = self.judge(token, refreshed)
        self.settle(token, verdict)
        return verdict.taken

    def judge(
        self, token: str, refreshed: str = "", taken: Mapping[tuple[str, str], str] | None = None
    ) -> RefreshVerdict:
        """What the end of lease ``token`` with ``refreshed`` does to its account's login, changing nothing (the core
        asks inside the report's transaction, stores a refresh taken there, and ``settle``s after the commit). The
        refresh is taken, for that account and site, only if the account is still leased there with the blob this
        lease was handed (a compare-and-set: not an older lease's over a newer one's, nor the old login's over the
        operator's new one, nor a lease from before a restart, which the pool never heard of) and
        ``refresh_refusal`` finds nothing wrong with it. ``taken``: (account id, site) -> blob, the refreshes that
        calls before this one in the same transaction took, which the pool does not hold yet."""
        entry = self._lent.get(token)
        if entry is None or not refreshed:
            return RefreshVerdict()
        account_id, site, digest, _ = entry
        pooled = self._accounts.get(account_id)
        if pooled is None:
            return RefreshVerdict()
        current = (taken or {}).get((account_id, site), pooled.leased_with(site).cookie_blob)
        if login_digest(current) != digest:
            return RefreshVerdict(account_id, site, stale=True)
        refusal = refresh_refusal(pooled.account.cookie_blob, refreshed)
        if refusal is not None:
            return RefreshVerdict(account_id, site, refusal=refusal)
        if current == refreshed:
            return RefreshVerdict(account_id, site, taken=True)
        return RefreshVerdict(account_id, site, taken=True, cookies=refreshed, login=self.login_of(account_id))

    def settle(self, token: str, verdict: RefreshVerdict) -> None:
        """Lease ``token`` ended with ``verdict`` (``judge``): forget the lease, and take the refresh or count its
        refusal."""
        self._lent.pop(token, None)
        account_id, site = verdict.account_id, verdict.site
        pooled = self._accounts.get(account_id)
        if pooled is None:
            return
        if verdict.stale:
            log.debug("account %s: a refresh of cookies it is no longer leased with for %r, ignored", account_id, site)
        if verdict.refusal is not None:
            pooled.refused += 1
            self.refreshes["refused"] += 1
            admitted = self._refusals.admit(account_id)
            if admitted is not None:
                log.warning(
                    "account %s: a refreshed login reported for %r ignored: %s%s",
                    account_id,
                    site,
                    verdict.refusal,
                    LogThrottle.more(admitted, "ignored"),
                )
        if verdict.cookies:
            pooled.refreshed[site] = Account(account_id, verdict.cookies)
            pooled.refreshes += 1
            self.refreshes["taken"] += 1
            said = self._refreshes_said.admit((account_id, site))
            if said is not None:
                log.info(
                    "account %s: the site %r refreshed its cookies; leased with them there from now on%s",
                    account_id,
                    site,
                    LogThrottle.more(said, "refreshes"),
                )

    def restore(self, account_id: str, site: str, cookies: str) -> None:
        """Lease ``account_id`` with ``cookies`` for ``site``: a refresh taken before a restart, which the caller
        checked is of the login the file holds now (``refreshes.restore_verdict``)."""
        pooled = self._accounts.get(account_id)
        if pooled is not None:
            pooled.refreshed[site] = Account(account_id, cookies)
            pooled.restored += 1

    @property
    def lent_count(self) -> int:
        """Leases whose blob the pool remembers (bounded: ``MAX_LENT``)."""
        return len(self._lent)

    def uses_visitors(self, source: str) -> bool:
        """Whether ``source`` is leased with visitor sessions (it serves visitors, no account is configured)."""
        return self.visitors.serves(source) and source not in self._served

    def pick(self, source: str, now: float, frozen: Container[str] = ()) -> Account | None:
        """An account for ``source`` (the empty Account if it needs none: neither ``needs_account`` nor a configured
        account names it), or None if none is usable now.
        ``frozen``: accounts to pass over (frozen by a report whose freeze is not applied yet)."""
        if self.uses_visitors(source):
            return self.visitors.account(source, now)
        if source not in self.needs_account and source not in self._served:
            # A source a configured account names is crawled with it even when scheduler.account_sources leaves it
            # out: leased without one, a login-walled site turned each crawl away (and weibo.com's API, whose
            # visitor sessions the account replaces, went out with no session at all).
            return _NO_ACCOUNT
        for step in range(len(self._order)):
            pooled = self._accounts[self._order[(self._next + step) % len(self._order)]]
            if (
                source in pooled.sources
                and pooled.frozen.until <= now
                and pooled.used.total(now) < self.budget_per_min
                and pooled.account.id not in frozen
            ):
                self._next = (self._next + step + 1) % len(self._order)
                pooled.used.add(now)
                return pooled.leased_with(self.sites.get(source, ""))
        return None

    def charge(self, account_id: str, requests: int, now: float) -> None:
        """Count requests beyond the one charged at lease time."""
        pooled = self._accounts.get(account_id)
        if pooled is not None and requests > 0:
            pooled.used.add(now, requests)

    def freeze(self, account_id: str, until: float, reason: str) -> None:
        """Freeze a logged-in account (visitor sessions are never frozen: they are renewed)."""
        pooled = self._accounts.get(account_id)
        if pooled is not None:
            pooled.frozen.extend(until, reason)

    def by_source(self, now: float) -> dict[str, dict[str, int]]:
        """For each source crawled with configured accounts (``needs_account`` or named by an account; not one
        leased with visitor sessions): how many of its accounts are usable ("ok") and how many are frozen. A source
        with none "ok" is not crawled at all: its tasks wait, and no report says so (the metrics and status do)."""
        sources = sorted(source for source in self.needs_account | self._served if not self.uses_visitors(source))
        counts = {source: {"ok": 0, "frozen": 0} for source in sources}
        for pooled in self._accounts.values():
            state = "frozen" if pooled.frozen.until > now else "ok"
            for source in pooled.sources:
                if source in counts:
                    counts[source][state] += 1
        return counts

    def describe(self, now: float) -> dict[str, Any]:
        """Per-account state for status, visitor sessions under ``visitor:<source>``: never the cookies."""
        visitors = {
            f"visitor:{source}": state
            for source, state in self.visitors.describe(now).items()
            if self.uses_visitors(source)
        }
        return visitors | {
            aid: {
                "state": "frozen" if p.frozen.until > now else "ok",
                "frozen": p.frozen.describe(now),
                "used_last_min": p.used.total(now),
                "budget_per_min": self.budget_per_min,
                "sources": sorted(p.sources),
                "login_refreshes": p.refreshes,
                "login_refreshes_refused": p.refused,
                "login_refreshes_restored": p.restored,
            }
            for aid, p in sorted(self._accounts.items())
        }
