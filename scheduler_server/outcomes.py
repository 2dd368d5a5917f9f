"""What a crawl report's outcome does to its task, host and account, as data (``outcome_effects``, pure).

The core applies the effects in two steps. Inside the report's transaction: the task's attempts and next due
time, and the host block or account freeze as persisted ``meta`` entries (so a restart keeps them). After the
transaction committed: what lives only in memory, i.e. the host gate's block, the account pool's freeze and
the renewal of a visitor session the site ended; a rolled-back report therefore leaves no trace. Every
report, whatever its outcome, ends its lease and is written to the completion log (``done``) by the core.

Outcomes:
- ``Ok``: the revisit policy picks the next period, which is the requeue delay; failed attempts reset to 0.
- ``NotFound``: due again after ``max_period_s`` (the target may come back; nothing is dropped).
- task failures (``TASK_FAILURES``): one more attempt; no delay before ``backoff_after_attempts`` of them,
  then ``min_period_s`` doubling up to ``max_period_s``.
- ``Banned``/``RateLimited``: the host is blocked for the report's Retry-After, else ``host_block_s``;
- ``LoginRequired``/``AccountFrozen``/``Banned``: the logged-in account is frozen for the longer of the
  Retry-After and ``account_freeze_s``;
- a Retry-After is cut to ``max_period_s`` (a site may ask for any finite wait), never below what the outcome sets
  without one: the block to the longer of ``max_period_s`` and ``host_block_s``;
- except that a visitor session the site ended (``visitors.session_ended``) is renewed instead: no host block,
  no freeze (visitor sessions are never frozen);
- and that a ``LoginRequired`` in a class of ``REQUEST_REFUSALS`` (Weibo's errno 100006, 请求非法), on a visitor session
  renewed as an ended one, blocks the host on any other lease as a ban does (a Retry-After, else ``host_block_s``) and
  counts a failed attempt, freezing no account: the report that fresh cookies answer again is of an anonymous
  session, and the one of a logged-in session took it for the address refused (docs/SOURCES.md); frozen for it,
  every account of the pool would be frozen in turn within a few leases;
- ``LoginRequired``/``AccountFrozen`` with no account to freeze (an anonymous crawl) or on a visitor session that
  did not end (the content needs a real login): a failed attempt, as for task failures, so the task backs off.
Anything else (say ``Busy`` from a client) is due again at once.
"""

from __future__ import annotations

from dataclasses import dataclass

from icecrawler.models import Outcome, Report, is_visitor
from scheduler_server.config import SchedulerConfig
from scheduler_server.visitors import session_ended

__all__ = [
    "ACCOUNT_FAILURES",
    "HOST_FAILURES",
    "REQUEST_REFUSALS",
    "TASK_FAILURES",
    "WALLS",
    "Hold",
    "OutcomeEffects",
    "backoff_s",
    "outcome_effects",
]

#: Outcomes that count as a failed attempt of the task itself (exponential backoff after N of them).
TASK_FAILURES = frozenset(
    {Outcome.HttpError, Outcome.Timeout, Outcome.ConnectionError, Outcome.ParseError, Outcome.Busy, Outcome.TooLarge}
)
#: Outcomes that freeze the account the task was crawled with.
ACCOUNT_FAILURES = frozenset({Outcome.LoginRequired, Outcome.AccountFrozen, Outcome.Banned})
#: Outcomes that block the host.
HOST_FAILURES = frozenset({Outcome.Banned, Outcome.RateLimited})
#: Login walls: they freeze the account, and back the task off where there is none (anonymous, visitor).
WALLS = frozenset({Outcome.LoginRequired, Outcome.AccountFrozen})
#: ``LoginRequired`` error classes that refuse the request, not the login: the session that asked, for a visitor
#: session (renewed: ``visitors.session_ended``), else the address (the host blocked, no account frozen).
REQUEST_REFUSALS = frozenset({"illegal-request"})


@dataclass(frozen=True, slots=True)
class Hold:
    """A host block or an account freeze: ``name`` (host or account id) is held until ``until`` (wall seconds)
    for ``reason`` (the outcome's name, and its error class where that chose the effect: ``REQUEST_REFUSALS``)."""

    name: str
    until: float
    reason: str


@dataclass(frozen=True, slots=True)
class OutcomeEffects:
    """What one report does (see the module docstring)."""

    #: The task's failed attempts after this report.
    attempts: int
    #: True for Ok: the revisit policy's next period is the requeue delay (``delay_s`` is then unused).
    observe: bool = False
    #: Otherwise, the task is due again after this many simulated seconds.
    delay_s: float = 0.0
    block_host: Hold | None = None
    freeze_account: Hold | None = None
    #: The visitor account whose session the site ended, to be renewed ("" = none).
    renew_visitor: str = ""


def backoff_s(attempts: int, config: SchedulerConfig) -> float:
    """No delay before ``backoff_after_attempts`` failures, then min_period doubling up to max_period."""
    over = attempts - config.backoff_after_attempts
    if over < 0:
        return 0.0
    return min(config.max_period_s, config.min_period_s * 2.0 ** min(over, 60))


def _block_s(report: Report, config: SchedulerConfig) -> float:
    """How long a report blocks its host: the site's wait, cut to the longer of ``max_period_s`` and
    ``host_block_s``, else ``host_block_s``."""
    return min(report.retry_after_s, max(config.max_period_s, config.host_block_s)) or config.host_block_s


#: The effects of an Ok report (the common case, built once).
_OBSERVE = OutcomeEffects(attempts=0, observe=True)


def outcome_effects(
    report: Report, *, attempts: int, account_id: str, host: str, wall: float, config: SchedulerConfig
) -> OutcomeEffects:
    """The effects of ``report`` on a task with ``attempts`` failed attempts so far, leased with ``account_id``
    ("" = none) for a site on ``host``, reported at wall time ``wall``. Pure."""
    outcome = report.outcome
    if outcome is Outcome.Ok:
        return _OBSERVE
    delay_s = 0.0
    if outcome is Outcome.NotFound:
        delay_s = config.max_period_s
    elif outcome in TASK_FAILURES:
        attempts += 1
        delay_s = backoff_s(attempts, config)
    visitor = is_visitor(account_id)
    if visitor and session_ended(outcome, report.error_class, report.http_status):
        return OutcomeEffects(attempts=attempts, delay_s=delay_s, renew_visitor=account_id)
    if outcome is Outcome.LoginRequired and report.error_class in REQUEST_REFUSALS:
        attempts += 1
        refused = Hold(host, wall + _block_s(report, config), f"{outcome.value} {report.error_class}")
        return OutcomeEffects(attempts=attempts, delay_s=backoff_s(attempts, config), block_host=refused)
    if outcome in WALLS and (not account_id or visitor):
        # No account to freeze and no session to renew: the wall is the target's (its posts need a login).
        # Counted as a failed attempt, so the task backs off instead of coming round at every host slot.
        attempts += 1
        delay_s = backoff_s(attempts, config)
    block = freeze = None
    wait_s = report.retry_after_s  # a site's wait, any finite number of seconds (``checks``); cut below
    if outcome in HOST_FAILURES:
        block = Hold(host, wall + _block_s(report, config), outcome.value)
    if outcome in ACCOUNT_FAILURES and account_id and not visitor:
        freeze_s = max(min(wait_s, config.max_period_s), config.account_freeze_s)
        freeze = Hold(account_id, wall + freeze_s, outcome.value)
    return OutcomeEffects(attempts=attempts, delay_s=delay_s, block_host=block, freeze_account=freeze)
