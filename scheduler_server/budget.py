"""The global fetch budget (``scheduler.fetch_budget_per_s``): the maintenance thread recomputes the constant of
the ``rate`` policy's square-root allocation from every task's current rate estimate, and hourly whether the daily
anchor applies from their daily profiles; periods change at each task's next report.

The task table is read chunk by chunk, each chunk in its own short transaction under the core's lock, and the
rates are estimated outside the lock, so leases and reports go on between chunks: the constant is an estimate
over slowly changing rates and needs no single snapshot."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from scheduler_server.config import BudgetedPolicy
from scheduler_server.quarantine import decoded
from shhd.policies import BudgetView

if TYPE_CHECKING:
    from scheduler_server.core import SchedulerCore

__all__ = ["rebalance_budget"]

log = logging.getLogger(__name__)

#: Records read per short transaction.
_SCAN_CHUNK = 1024


def rebalance_budget(core: SchedulerCore) -> float | None:
    """Set the budgeted policy's constant from all tasks' rates; returns it, or None when no budget applies
    (no budget set, another policy, no tasks)."""
    policy = core.policy
    if core.config.fetch_budget_per_s <= 0 or not isinstance(policy, BudgetedPolicy):
        return None
    profile = policy.profiles_due(core.clocks.now())  # hourly: the daily profiles cost several times a rate
    views: list[BudgetView] = []
    found: list[tuple[bytes, bytes, str]] = []  # records that do not decode: quarantined at the end
    start = b""
    while True:
        with core.lock, core.store.transaction() as txn:
            chunk = txn.scan("tasks", start, limit=_SCAN_CHUNK)
        if not chunk:
            break
        views.extend(
            policy.budget_view(core.resumed_state(record.policy_state), profile) for record in decoded(chunk, found)
        )
        start = chunk[-1][0] + b"\0"
    core.quarantine_found(found)
    if not views:
        return None
    # The longest period may stretch past scheduler.max_period_s when the budget is too small for that cap to
    # leave room for any allocation; the daily anchor goes off while the tasks keep one clock
    # (``shhd.rate.RatePolicy.apply_budget``).
    was_shared = policy.shared_clock
    scale = policy.apply_budget(
        views, core.config.fetch_budget_per_s, core.config.min_period_s, core.config.max_period_s, core.clocks.now()
    )
    if policy.shared_clock != was_shared:
        log.info(
            "the tasks %s one daily clock: the rate policy's daily anchor is %s",
            "keep" if policy.shared_clock else "no longer keep",
            "off" if policy.shared_clock else "on again",
        )
    return scale
