"""What a sandbox run contains: Weibo users, products, ECSHOP categories, accounts and misbehaviour rules.

A scenario is a TOML or JSON file with the same structure (see docs/SANDBOX.md)::

    seed = 7
    [[users]]                       # a Weibo user, shown on the desktop (pc) and/or mobile (m) site
    uid = 1907518591
    name = "沙盒用户甲"
    sites = ["pc", "m", "web"]      # any of: desktop v6 feed (pc), m.weibo.cn (m), weibo.com's JSON API (web)
    cursor = "since_id"             # mobile next-page cursor the responses carry: "since_id" or "page"
    pinned = true                   # an old post pinned on top of the mobile timeline
    shows_likes = true              # pc: page 1 shows another user's old post this one liked (not its own)
    long_text_every = 4             # every 4th post is isLongText (0 = never)
    retweet_every = 5               # every 5th post reposts someone (0 = never)
    backlog = 60                    # posts published before the run starts
    backlog_gap_s = 3600
    schedule = { kind = "poisson", per_hour = 12 }

    [[products]]
    source = "jd"                   # or "ecshop"
    id = "100012043978"
    schedule = { kind = "periodic", interval_s = 600 }
    backlog = 25
    category = 0                    # ecshop: the category that lists it
    appear_after_s = 0              # ecshop: when it appears (simulated seconds after the start)

    [[categories]]                  # ecshop category pages; new products may arrive over time
    id = 1
    per_page = 10
    arrivals = { kind = "periodic", interval_s = 1800 }
    arrival_first_id = 1000
    arrival_limit = 20
    arrival_reviews = { kind = "poisson", per_hour = 4 }
    parent = 0                      # a sub-category's goods also show on its parent's pages

    [[accounts]]                    # ecshop logins accepted by user.php
    username = "sandbox"
    password = "sandbox"

    [[misbehave]]                   # see sandbox.misbehave.Misbehaviour for the keys
    site = "m"
    teapot_rate = 0.05

    [traces]                        # one more target per trace of a trace file (sandbox.tracescenario)
    file = "traces.jsonl"           # relative to this file
    limit = 20                      # and weibo_site, shop, backlog_days: as the --traces-* options

``default_scenario()`` is the demo's built-in world.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from icecrawler.errors import ConfigError
from icecrawler.sourcespec import registry
from sandbox.content import SLOTS
from sandbox.misbehave import MisbehaviourRule
from sandbox.schedules import Schedule

__all__ = ["Category", "Product", "Scenario", "WeiboUser", "default_scenario", "load_scenario"]

WEIBO_SITES = ("pc", "m", "web")


def product_sources() -> tuple[str, ...]:
    """Sources a scenario product may use: every registered source whose items are reviews and whose spec names a
    sandbox site (``icecrawler.sourcespec``; the built-in shops, ecshop and jd, among them). Read from the registry
    only, so a new source is listed nowhere here."""
    return tuple(name for name, spec in registry.items() if spec.table == "review" and spec.sandbox_site)


def _not_a_product_source(source: str) -> str:
    """Why a scenario product cannot name ``source``, and what would let it: a review source the sandbox serves."""
    spec = registry.get(source)
    if spec is None:
        why = registry.unknown(source)
    elif spec.table != "review":
        why = f"{source} stores {spec.table} items, not reviews (a scenario's products are review targets)"
    else:
        why = f"{source} declares no sandbox site (its SourceSpec's sandbox_site is empty)"
    return f"source {source!r} cannot have products here ({why}); they may name {list(product_sources())}"


def _schedule(value: Any) -> Schedule:
    if isinstance(value, Schedule):
        return value
    if not isinstance(value, Mapping):
        raise ConfigError(f'schedule must be a table like {{kind = "periodic", interval_s = 600}}, got {value!r}')
    return Schedule.from_dict(value)


def _check_keys(data: Mapping[str, Any], known: set[str], where: str) -> None:
    unknown = set(data) - known
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {sorted(unknown)} (known: {sorted(known)})")


def _from_table[T](
    cls: type[T],
    data: Mapping[str, Any],
    where: str,
    required: tuple[str, ...],
    convert: Mapping[str, Callable[[Any], Any]],
) -> T:
    """Build one scenario dataclass from a TOML/JSON table: unknown keys and missing required keys are
    ConfigErrors, listed keys are converted, and the class's ``__post_init__`` checks the values."""
    _check_keys(data, set(cls.__dataclass_fields__), where)  # type: ignore[attr-defined]
    missing = [key for key in required if key not in data]
    if missing:
        raise ConfigError(f"{where}: {', '.join(missing)} required")
    values = dict(data)
    try:
        for key, function in convert.items():
            if key in values:
                values[key] = function(values[key])
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: {exc}") from exc
    return cls(**values)


@dataclass(frozen=True)
class WeiboUser:
    uid: int
    name: str = ""
    sites: tuple[str, ...] = WEIBO_SITES
    cursor: str = "since_id"
    pinned: bool = True
    shows_likes: bool = True
    long_text_every: int = 4
    retweet_every: int = 5
    backlog: int = 30
    backlog_gap_s: float = 3600.0
    domain: str = "100505"
    schedule: Schedule = field(default_factory=Schedule)

    def __post_init__(self) -> None:
        if not self.sites or not set(self.sites) <= set(WEIBO_SITES):
            raise ConfigError(f"user {self.uid}: sites must be a subset of {list(WEIBO_SITES)}")
        if self.cursor not in ("since_id", "page"):
            raise ConfigError(f"user {self.uid}: cursor must be 'since_id' or 'page'")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WeiboUser:
        return _from_table(cls, data, "users[]", ("uid",), {"uid": int, "sites": tuple, "schedule": _schedule})

    @property
    def display_name(self) -> str:
        return self.name or f"沙盒用户{self.uid % 10000}"


@dataclass(frozen=True)
class Product:
    source: str
    id: str
    name: str = ""
    backlog: int = 20
    backlog_gap_s: float = 3600.0
    category: int = 0
    appear_after_s: float = 0.0
    #: Added to the review count in JD's ``*CountStr`` summary ("100万+"), like a popular real product.
    count_bonus: int = 0
    schedule: Schedule = field(default_factory=Schedule)

    def __post_init__(self) -> None:
        if self.source not in product_sources():
            raise ConfigError(f"product {self.id}: {_not_a_product_source(self.source)}")
        if not self.id.isdigit():
            raise ConfigError(f"product {self.id!r}: id must be digits")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Product:
        return _from_table(cls, data, "products[]", ("source", "id"), {"id": str, "schedule": _schedule})

    @property
    def display_name(self) -> str:
        return self.name or f"沙盒商品{self.id}"


@dataclass(frozen=True)
class Category:
    id: int
    name: str = ""
    per_page: int = 10
    arrivals: Schedule = field(default_factory=Schedule)
    arrival_first_id: int = 1000
    arrival_limit: int = 20
    arrival_backlog: int = 0
    arrival_reviews: Schedule = field(default_factory=lambda: Schedule("poisson", per_hour=4))
    #: A sub-category of this one (0: top level). Like ECSHOP, a category's pages also list the goods of its
    #: sub-categories, so two listings can show the same products (discovery must not queue them twice).
    parent: int = 0

    def __post_init__(self) -> None:
        if self.per_page < 1:
            raise ConfigError(f"category {self.id}: per_page must be >= 1")
        for key in ("arrivals", "arrival_reviews"):
            if getattr(self, key).kind == "trace":
                # arrivals: a trace's items before its start would be dropped (only future arrivals are read);
                # arrival_reviews: every arriving product would replay the one trace.
                raise ConfigError(
                    f"category {self.id}: {key} cannot be a trace schedule (a trace is one target's items: give it "
                    "to a product, or use a [traces] table)"
                )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Category:
        return _from_table(
            cls, data, "categories[]", ("id",), {"id": int, "arrivals": _schedule, "arrival_reviews": _schedule}
        )

    @property
    def display_name(self) -> str:
        return self.name or f"分类{self.id}"


@dataclass(frozen=True)
class Scenario:
    seed: int = 0
    users: tuple[WeiboUser, ...] = ()
    products: tuple[Product, ...] = ()
    categories: tuple[Category, ...] = ()
    accounts: tuple[tuple[str, str], ...] = (("sandbox", "sandbox"),)
    misbehave: tuple[MisbehaviourRule, ...] = ()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Scenario:
        _check_keys(data, set(cls.__dataclass_fields__), "scenario")
        accounts = tuple((str(a["username"]), str(a["password"])) for a in data.get("accounts", ()))
        return cls(
            seed=int(data.get("seed", 0)),
            users=tuple(WeiboUser.from_dict(u) for u in data.get("users", ())),
            products=tuple(Product.from_dict(p) for p in data.get("products", ())),
            categories=tuple(Category.from_dict(c) for c in data.get("categories", ())),
            accounts=accounts or cls.accounts,
            misbehave=tuple(MisbehaviourRule.from_dict(m) for m in data.get("misbehave", ())),
        )

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        self._check_slots()
        uids = [u.uid for u in self.users]
        if len(uids) != len(set(uids)):
            raise ConfigError("scenario: duplicate Weibo uid")
        keys = [(p.source, p.id) for p in self.products]
        if len(keys) != len(set(keys)):
            raise ConfigError("scenario: duplicate product")
        categories = {c.id for c in self.categories}
        if len(categories) != len(self.categories):
            raise ConfigError("scenario: duplicate category")
        for category in self.categories:
            if category.parent and (category.parent not in categories or category.parent == category.id):
                raise ConfigError(f"category {category.id}: parent {category.parent} is not another declared category")
        goods_ids = {int(p.id) for p in self.products if p.source == "ecshop"}
        for product in self.products:
            if product.source == "ecshop" and product.category and product.category not in categories:
                raise ConfigError(f"product {product.id}: category {product.category} is not declared")
        for category in self.categories:
            if category.arrivals.kind == "static":
                continue
            arriving = set(range(category.arrival_first_id, category.arrival_first_id + category.arrival_limit))
            if arriving & goods_ids:
                raise ConfigError(
                    f"category {category.id}: arriving goods ids {min(arriving)}..{max(arriving)} "
                    f"overlap other ECSHOP goods"
                )
            goods_ids |= arriving

    def _check_slots(self) -> None:
        """At most SLOTS users and SLOTS declared products: past that, two targets' items get the same id at the same
        instant (``sandbox.content.SLOTS``), which every trace world's first items share. (A category's arriving
        goods are ECSHOP's, whose reviews carry no id.)"""
        for what, count in (("Weibo users", len(self.users)), ("products", len(self.products))):
            if count > SLOTS:
                raise ConfigError(
                    f"scenario: {count} {what}, more than the {SLOTS} whose item ids the sites keep apart; "
                    "use fewer (of a trace file: --traces-source or --traces-limit, or source or limit in a [traces] "
                    "table)"
                )

    def to_dict(self) -> dict[str, Any]:
        """The scenario as plain data (what ``GET /__sandbox/scenario`` returns)."""

        def plain(obj: Any) -> Any:
            if isinstance(obj, Schedule | MisbehaviourRule):
                return obj.to_dict()
            if hasattr(obj, "__dataclass_fields__"):
                return {name: plain(getattr(obj, name)) for name in obj.__dataclass_fields__}
            if isinstance(obj, tuple | list):
                return [plain(x) for x in obj]
            return obj

        data = plain(self)
        data["accounts"] = [{"username": u, "password": p} for u, p in self.accounts]
        return dict(data)


def read_scenario_data(path: Path) -> Any:
    """A scenario file's plain data (TOML, or JSON by its suffix), before any check."""
    try:
        text = path.read_text(encoding="utf-8")
        return json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read scenario {path}: {exc}") from exc


def load_scenario(path: str | Path) -> Scenario:
    """Read a ``.toml`` or ``.json`` scenario file; its ``[traces]`` table adds the targets of a trace file
    (``sandbox.tracescenario.with_traces``)."""
    path = Path(path)
    data = read_scenario_data(path)
    if not isinstance(data, dict):
        return Scenario.from_dict(data)
    traces = data.pop("traces", None)
    scenario = Scenario.from_dict(data)
    if traces is None:
        return scenario
    from sandbox.tracescenario import with_traces  # it builds on this module

    return with_traces(scenario, traces, path)


def default_scenario(seed: int = 0) -> Scenario:
    """The demo's world: three Weibo users on every Weibo site (both cursor forms), two ECSHOP products in a
    category that gains new products over time, an empty category, and two JD products."""
    return Scenario(
        seed=seed,
        users=(
            WeiboUser(
                uid=1907518591,
                name="沙盒用户甲",
                cursor="since_id",
                schedule=Schedule("poisson", per_hour=6),
                backlog=60,
            ),
            WeiboUser(
                uid=1163218074,
                name="沙盒用户乙",
                cursor="page",
                schedule=Schedule("bursty", interval_s=3600, burst_size=4),
                backlog=50,
            ),
            WeiboUser(
                uid=2803301701,
                name="沙盒用户丙",
                cursor="since_id",
                pinned=False,
                schedule=Schedule("periodic", interval_s=1200),
                backlog=20,
                retweet_every=0,
            ),
        ),
        products=(
            Product(
                "ecshop", "12", name="沙盒手机", category=1, schedule=Schedule("periodic", interval_s=600), backlog=12
            ),
            Product("ecshop", "13", name="沙盒耳机", category=1, schedule=Schedule("poisson", per_hour=2), backlog=3),
            Product(
                "jd",
                "100012043978",
                name="沙盒京东商品",
                schedule=Schedule("poisson", per_hour=10),
                backlog=35,
                count_bonus=1_000_000,
            ),
            Product("jd", "100008348542", schedule=Schedule("static"), backlog=8),
        ),
        categories=(
            Category(
                1,
                name="手机数码",
                per_page=10,
                arrivals=Schedule("periodic", interval_s=1800),
                arrival_first_id=100,
                arrival_limit=20,
            ),
            Category(2, name="空分类"),
        ),
    )
