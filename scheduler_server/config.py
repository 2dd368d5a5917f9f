"""What the scheduler core is built from: its settings (``SchedulerConfig``), its clocks, and the wiring of
settings into a revisit policy and an account pool (``core_parts``), checked before anything starts.

Kept apart from the core so that the core's module is about moving tasks, and so that a settings mistake is
found, and named by its key, before a database is opened."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, fields
from typing import Protocol

from icecrawler.clock import Clock
from icecrawler.cookie_blob import site_domain
from icecrawler.errors import ConfigError
from icecrawler.models import SOURCES
from icecrawler.settings import Settings
from icecrawler.settings.validation import RULES, validate_values
from icecrawler.shards import ShardMap, source_hosts
from scheduler_server.accounts import AccountPool, PooledAccount, load_accounts
from scheduler_server.visitors import VisitorSessions
from shhd.policies import RatePolicy, RevisitPolicy, make_policy

__all__ = ["BudgetedPolicy", "Clocks", "SchedulerConfig", "configured_accounts", "core_parts"]

log = logging.getLogger(__name__)

#: Policies that take a global fetch budget (they expose rate_of and set_budget_scale).
BudgetedPolicy = RatePolicy


class Clocks(Protocol):
    """Simulated time for periods and due times; wall time for leases and politeness (``icecrawler.clock.Clock``
    in a server; tests pass one on a manual wall)."""

    def now(self) -> float: ...

    def wall(self) -> float: ...

    def wall_delay(self, sim_seconds: float) -> float:
        """Wall seconds until ``sim_seconds`` of simulated time have passed."""
        ...


@dataclass(frozen=True)
class SchedulerConfig:
    """The ``scheduler.*`` settings the core reads (documented in default_settings)."""

    lease_s: float
    batch_limit: int
    host_spacing_s: float
    host_block_s: float
    backoff_after_attempts: int
    min_period_s: float
    max_period_s: float
    initial_period_s: float
    account_sources: frozenset[str]
    account_budget_per_min: int
    account_freeze_s: float
    history_len: int
    done_retention_s: float
    #: Decoded task records kept in memory (``cache.RecordCache``); 0 = read every record from the store.
    record_cache: int = 50_000
    #: Global fetch budget (fetches per simulated second over all tasks) for policies that allocate one; 0 = off.
    fetch_budget_per_s: float = 0.0
    #: source -> host (netloc of ``sources.<source>.base_url``).
    hosts: dict[str, str] = field(default_factory=dict)
    #: This process is shard ``shard`` of ``shards`` (``icecrawler.shards``): it holds the tasks of the hosts
    #: that hash to it, and only those.
    shards: int = 1
    shard: int = 0

    @classmethod
    def from_settings(cls, settings: Settings) -> SchedulerConfig:
        sources = frozenset(s.strip() for s in settings.get_str("scheduler.account_sources").split(",") if s.strip())
        if sources - set(SOURCES):
            raise ConfigError(f"scheduler.account_sources: unknown sources {sorted(sources - set(SOURCES))}")
        config = cls(
            lease_s=settings.get_float("scheduler.lease_s"),
            batch_limit=settings.get_int("scheduler.batch_limit"),
            host_spacing_s=settings.get_float("scheduler.host_spacing_s"),
            host_block_s=settings.get_float("scheduler.host_block_s"),
            backoff_after_attempts=settings.get_int("scheduler.backoff_after_attempts"),
            min_period_s=settings.get_float("scheduler.min_period_s"),
            max_period_s=settings.get_float("scheduler.max_period_s"),
            initial_period_s=settings.get_float("scheduler.initial_period_s"),
            account_sources=sources,
            account_budget_per_min=settings.get_int("scheduler.account_budget_per_min"),
            account_freeze_s=settings.get_float("scheduler.account_freeze_s"),
            history_len=settings.get_int("scheduler.history_len"),
            done_retention_s=settings.get_float("scheduler.done_retention_s"),
            record_cache=settings.get_int("scheduler.record_cache"),
            fetch_budget_per_s=settings.get_float("scheduler.fetch_budget_per_s"),
            hosts=source_hosts(settings),
            shards=settings.get_int("scheduler.shards"),
            shard=settings.get_int("scheduler.shard"),
        )
        config.validate()
        return config

    def validate(self) -> None:
        """What involves several fields, then each field by its setting's rule (``RULES`` of
        ``icecrawler.settings.validation``, which ``load_settings`` applies too: one place per bound, applied again here
        for settings that did not come through it, such as a test's ``Settings.copy_with``)."""
        if not 0 < self.min_period_s <= self.initial_period_s <= self.max_period_s:
            raise ConfigError("need 0 < scheduler.min_period_s <= initial_period_s <= max_period_s")
        if not 0 <= self.shard < self.shards:
            raise ConfigError(f"need 0 <= scheduler.shard < scheduler.shards, got shard {self.shard} of {self.shards}")
        if self.shards > 1 and self.fetch_budget_per_s > 0:
            raise ConfigError(
                "scheduler.fetch_budget_per_s is spread over all tasks by one process; it cannot be "
                "used with scheduler.shards > 1"
            )
        ruled = {f"scheduler.{item.name}": getattr(self, item.name) for item in fields(self)}
        validate_values({key: value for key, value in ruled.items() if key in RULES})


def configured_accounts(settings: Settings, config: SchedulerConfig) -> list[PooledAccount]:
    """The accounts of ``scheduler.accounts_dir``, each on one shard's hosts (at start-up, and again on SIGHUP);
    ConfigError names the file or account at fault."""
    accounts = load_accounts(settings.get_str("scheduler.accounts_dir"), config.account_sources)
    shard_map = ShardMap(config.hosts, config.shards)
    for pooled in accounts:
        if len({shard_map.of_source(source) for source in pooled.sources}) > 1:
            raise ConfigError(
                f"account {pooled.account.id} serves sources on different scheduler shards "
                f"({', '.join(sorted(pooled.sources))}); its request budget needs one owner: "
                "give each shard's hosts their own accounts"
            )
    return accounts


def core_parts(
    settings: Settings, clocks: Clocks | None = None
) -> tuple[SchedulerConfig, RevisitPolicy, Clocks, AccountPool]:
    """The config, revisit policy, clocks and account pool a ``SchedulerCore`` is built from
    (``SchedulerCore.from_settings``); ConfigError names the setting that is wrong."""
    config = SchedulerConfig.from_settings(settings)
    try:
        policy = make_policy(
            settings.get_str("scheduler.policy"),
            min_period_s=config.min_period_s,
            max_period_s=config.max_period_s,
            initial_period_s=config.initial_period_s,
            reference_period_s=settings.get_float("scheduler.rate_reference_period_s"),
            calibrate=settings.get_bool("scheduler.rate_calibration"),
        )
    except ValueError as exc:
        raise ConfigError(f"scheduler.policy: {exc}") from exc
    accounts = configured_accounts(settings, config)
    pool = AccountPool(
        accounts,
        config.account_sources,
        config.account_budget_per_min,
        config.account_freeze_s,
        VisitorSessions.from_settings(settings),
        sites={source: site_domain(host) for source, host in config.hosts.items()},
    )
    for source in sorted(config.account_sources - {s for a in accounts for s in a.sources}):
        if not pool.uses_visitors(source):
            log.warning(
                "no account can crawl %s (scheduler.account_sources): its tasks wait until one is added", source
            )
    return config, policy, clocks or Clock.from_settings(settings), pool
