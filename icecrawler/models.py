"""Plain core types shared by every role. They mirror slice/crawler.ice but need no Ice, so the pure logic
(queues, parsers, SHHD, stores) is tested without servers. ``icecrawler.rpc`` converts at the boundary.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace

from icecrawler.errors import InvalidArgumentError, is_control, quote
from icecrawler.outcomes import Outcome
from icecrawler.sourcespec import TaskKind, registry

__all__ = [
    "MAX_DISCOVERED_IDS",
    "MAX_ITEM_TIMES",
    "SOURCES",
    "VISITOR_PREFIX",
    "Account",
    "Outcome",
    "Post",
    "Report",
    "Review",
    "Task",
    "TaskKind",
    "account_lineage",
    "is_visitor",
    "make_task_id",
    "split_task_id",
    "valid_target",
    "visitor_account_id",
]


class _SourceKinds(Mapping[str, frozenset[TaskKind]]):
    """Source name → the task kinds it crawls, read from the source registry (``icecrawler.sourcespec``), which
    finds the sources on first use: each source declares its kinds next to its parser, nothing here lists them."""

    def __getitem__(self, name: str) -> frozenset[TaskKind]:
        return frozenset(registry[name].kinds)

    def __iter__(self) -> Iterator[str]:
        return iter(registry)

    def __len__(self) -> int:
        return len(registry)

    def __contains__(self, name: object) -> bool:
        return name in registry


#: Which task kinds each source can crawl.
SOURCES: Mapping[str, frozenset[TaskKind]] = _SourceKinds()

_TARGET_RE = re.compile(r"[0-9A-Za-z_.-]{1,64}")  # always fullmatch: "$" would let a trailing newline in


def valid_target(target: str) -> bool:
    """Whether ``target`` may be the target part of a task id: 1-64 characters of ``[0-9A-Za-z_.-]``."""
    return _TARGET_RE.fullmatch(target) is not None


def make_task_id(kind: TaskKind, source: str, target: str) -> str:
    """Validate and build ``<kind>:<source>:<target>``."""
    if source not in SOURCES:
        raise InvalidArgumentError(registry.unknown(source, quote(source)), code="InvalidId", field="source")
    if kind not in SOURCES[source]:
        raise InvalidArgumentError(f"source {source} cannot crawl {kind.name} tasks", code="InvalidId", field="kind")
    if not valid_target(target):
        raise InvalidArgumentError(
            f"invalid target {quote(target)}: 1-64 chars of [0-9A-Za-z_.-]", code="InvalidId", field="target"
        )
    return f"{kind.value}:{source}:{target}"


def split_task_id(task_id: str) -> tuple[TaskKind, str, str]:
    """Inverse of make_task_id; raises InvalidArgumentError on anything malformed."""
    parts = task_id.split(":")
    if len(parts) != 3:
        raise InvalidArgumentError(
            f"invalid task id {quote(task_id)}: expected <kind>:<source>:<target>", code="InvalidId", field="taskId"
        )
    try:
        kind = TaskKind(parts[0])
    except ValueError as exc:
        raise InvalidArgumentError(f"invalid task kind in {quote(task_id)}", code="InvalidId", field="taskId") from exc
    make_task_id(kind, parts[1], parts[2])
    return kind, parts[1], parts[2]


@dataclass(frozen=True)
class Account:
    id: str = ""
    cookie_blob: str = ""

    def __repr__(self) -> str:  # cookies never reach logs
        return f"Account(id={self.id!r}, cookie_blob=<{len(self.cookie_blob)} chars>)"


#: The accounts the scheduler mints itself, visitor sessions, are named ``visitor:<source>:<generation>``. A renewal
#: is a new generation, so that a report about an ended generation cannot end its successor.
VISITOR_PREFIX = "visitor:"


def visitor_account_id(source: str, generation: int) -> str:
    return f"{VISITOR_PREFIX}{source}:{generation}"


def is_visitor(account_id: str) -> bool:
    return account_id.startswith(VISITOR_PREFIX)


def account_lineage(account_id: str) -> str:
    """The account id without a visitor session's generation. Every generation of one source's visitor session
    shares it, so a client keeps one HTTP session across renewals and only swaps its cookies; any other account
    is its own lineage."""
    return account_id.rpartition(":")[0] if is_visitor(account_id) else account_id


@dataclass
class Task:
    id: str
    kind: TaskKind
    source: str
    target: str
    params: dict[str, str] = field(default_factory=dict)
    lease_token: str = ""
    #: When the lease ends (wall ms): the scheduler's clock as leased, this machine's once ``on_local_clock``.
    lease_deadline_ms: int = 0
    #: How long the lease lasts (s); 0 from a scheduler that does not say.
    lease_s: float = 0.0
    period_s: float = 0.0
    cursor: str = ""
    attempts: int = 0
    account: Account = field(default_factory=Account)

    def on_local_clock(self, sent_s: float) -> Task:
        """This task with its lease deadline on this machine's wall clock. The lease began after ``sent_s`` (this
        machine's time when the call that leased it was sent), so here it ends at ``sent_s + lease_s`` at the latest,
        however far the two machines' clocks disagree. A clock 2 minutes ahead of the scheduler's would otherwise
        see every lease as over before its first fetch."""
        if self.lease_s <= 0:
            return self
        return replace(self, lease_deadline_ms=int((sent_s + self.lease_s) * 1000))

    def clock_ahead_s(self, sent_s: float, received_s: float) -> float:
        """How far this machine's clock is at least ahead of the scheduler's (< 0: behind), from a lease asked
        for at ``sent_s`` and answered at ``received_s`` here: the scheduler granted it between the two. 0 when
        the two agree within the call's time, or the scheduler does not give the lease's length."""
        if self.lease_s <= 0 or not self.lease_deadline_ms:
            return 0.0
        granted_s = self.lease_deadline_ms / 1000 - self.lease_s
        if granted_s < sent_s:
            return sent_s - granted_s
        return min(0.0, received_s - granted_s)


#: Item times one report may carry: a visit's page budget holds far fewer items, and the scheduler keeps only
#: a short history per task anyway, so more is a malformed report.
MAX_ITEM_TIMES = 1000
#: Product ids one listing report may carry (``Report.discovered_ids``): a visit's page budget (``client.max_pages``
#: pages, a few dozen products each) holds far fewer, and a client stops a listing walk at this many, resuming
#: at the next visit; more is a malformed report. With ids of at most 64 characters it bounds a report's
#: discoveries to ~64 KiB on the wire (``icecrawler.limits``).
MAX_DISCOVERED_IDS = 1000
#: Characters of a report's ``account_cookies`` (an account's whole cookie blob, as the site last set it): a browser
#: keeps at most 4096 per cookie, and a login is a handful of cookies (``crawler_client.cookie_jar``).
MAX_ACCOUNT_COOKIES = 16_384


def account_cookies_fit(text: str) -> bool:
    """Whether ``text`` may travel as a report's ``account_cookies``: at most ``MAX_ACCOUNT_COOKIES`` characters and
    no control character (the scheduler refuses a report otherwise; a client leaves such a refresh out)."""
    return len(text) <= MAX_ACCOUNT_COOKIES and not any(is_control(char) for char in text)


@dataclass
class Report:
    task_id: str
    lease_token: str
    outcome: Outcome = Outcome.Ok
    http_status: int = 0
    error_class: str = ""
    fingerprint: int = 0
    new_items: int = 0
    window_items: int = 0
    newest_item_ms: int = 0
    cursor: str = ""
    retry_after_s: float = 0.0
    fetches: int = 0
    #: Publication times (epoch ms) of the new items, newest first, at most ``MAX_ITEM_TIMES``.
    new_item_times_ms: tuple[int, ...] = ()
    #: A Listing task's discoveries: product ids of the task's own source, bare (no ``<source>:`` prefix), at most
    #: ``MAX_DISCOVERED_IDS``. The scheduler adds them in the report's own transaction and sets ``new_items`` of a
    #: Listing report to how many were new (slice/crawler.ice, ``Report.discoveredIds``).
    discovered_ids: tuple[str, ...] = ()
    #: The leased account's cookie blob with the values the site set during the crawl (``Set-Cookie`` refreshing the
    #: login), when they differ from the lease's; "" otherwise. The scheduler leases the account with it from then
    #: on (slice/crawler.ice, ``Report.accountCookies``). Never logged.
    account_cookies: str = ""

    def __repr__(self) -> str:  # cookies never reach logs
        shown = {k: v for k, v in vars(self).items() if k != "account_cookies"}
        cookies = f"<{len(self.account_cookies)} chars>" if self.account_cookies else "''"
        return f"Report({', '.join(f'{k}={v!r}' for k, v in shown.items())}, account_cookies={cookies})"


@dataclass
class Post:
    id: int
    user_id: int
    user_name: str = ""
    text: str = ""
    html: str = ""
    created_at: str = ""
    reposts: int = 0
    comments: int = 0
    likes: int = 0
    pinned: bool = False
    retweeted_id: int = 0
    pictures: list[str] = field(default_factory=list)
    permalink: str = ""
    fetched_at: str = ""
    source: str = ""


@dataclass
class Review:
    id: str
    product_id: str
    source: str = ""
    user: str = ""
    content: str = ""
    score: int = 0
    created_at: str = ""
    fetched_at: str = ""
