"""How the sandbox sites misbehave, switched per site or per target, at start or at run time.

A rule is a scope (``site``: a registered source's ``sandbox_site``, such as ``pc``, ``m``, ``web``, ``ecshop``,
``jd``, or ``*`` for every site; optional ``target``: a uid or product id) plus a ``Misbehaviour``. For one request
the most specific rule wins: (site, target), then (site, any), then (``*``, target), then (``*``, any). Rates are
per-request probabilities drawn from one seeded RNG (1.0 = every request).

Decisions only: this module picks what to do; ``sandbox.server`` does it (sleeps, status codes, truncation)
and each site renders its own login wall.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from icecrawler.errors import ConfigError
from icecrawler.sourcespec import registry
from sandbox.sites.passport import PassportSite

__all__ = ["Action", "Misbehaviour", "MisbehaviourRule", "MisbehaviourTable", "site_names"]


def site_names() -> tuple[str, ...]:
    """Sites a rule may name: the sandbox site of every registered source (read from the registry only, so a new
    source is listed nowhere here), the visitor passport (a site of no source: a passport that refuses or hangs is
    how a test makes visitor sessions fail), and "*" (every site)."""
    sources = dict.fromkeys(spec.sandbox_site for spec in registry.values() if spec.sandbox_site)
    return (*sources, PassportSite.prefix, "*")


@dataclass(frozen=True)
class Misbehaviour:
    """What a scope does wrong. All off by default."""

    #: Pages need a session: ECSHOP via user.php login, Weibo a ``SUB`` cookie, JD a ``thor`` cookie.
    login_wall: bool = False
    #: HTTP 418 bursts: with this probability a burst of ``teapot_burst`` consecutive 418s starts.
    teapot_rate: float = 0.0
    teapot_burst: int = 3
    #: HTTP 429 with ``Retry-After: retry_after_s``.
    retry_after_rate: float = 0.0
    retry_after_s: int = 30
    #: The GBK "busy" (or "frozen") interstitial that declares utf-8, with HTTP 200.
    ban_rate: float = 0.0
    ban_page: str = "busy"
    #: Only half the body arrives. ``truncate_mode`` "cut": a consistent short response;
    #: "drop": Content-Length announces the full body and the connection closes early.
    truncate_rate: float = 0.0
    truncate_mode: str = "cut"
    #: Extra delay before the answer.
    slow_rate: float = 0.0
    slow_ms: int = 2000
    #: No answer for ``hang_s`` (capped by the server's max hang), then the connection closes.
    hang_rate: float = 0.0
    hang_s: float = 30.0
    #: The site has changed its pages: each item is still there, under names our parser does not read, so every
    #: page parses empty (the site's own ``new_layout(response)``; JD: comment rows whose ids are renamed).
    new_layout: bool = False
    #: Every request waits unanswered while this rule holds it (until the rule is cleared or ``hold`` set false,
    #: capped by the server's max hang), then gets its answer: a test's way to act while a crawl is surely mid-way.
    hold: bool = False

    def __post_init__(self) -> None:
        for name in ("teapot_rate", "retry_after_rate", "ban_rate", "truncate_rate", "slow_rate", "hang_rate"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ConfigError(f"misbehaviour {name} must be in [0, 1], got {value}")
        if self.ban_page not in ("busy", "frozen"):
            raise ConfigError("misbehaviour ban_page must be 'busy' or 'frozen'")
        if self.truncate_mode not in ("cut", "drop"):
            raise ConfigError("misbehaviour truncate_mode must be 'cut' or 'drop'")
        if self.teapot_burst < 1 or self.retry_after_s < 0 or self.slow_ms < 0 or self.hang_s < 0:
            raise ConfigError("misbehaviour: teapot_burst >= 1, retry_after_s, slow_ms and hang_s >= 0")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Misbehaviour:
        unknown = set(data) - set(cls.__dataclass_fields__)
        if unknown:
            raise ConfigError(
                f"unknown misbehaviour key(s) {sorted(unknown)} (known: {sorted(cls.__dataclass_fields__)})"
            )
        types = {name: type(getattr(cls(), name)) for name in cls.__dataclass_fields__}
        try:
            values = {key: _coerce(value, types[key]) for key, value in data.items()}
        except ValueError as exc:
            raise ConfigError(f"misbehaviour: {exc}") from exc
        return cls(**values)


def _coerce(value: Any, kind: type) -> Any:
    if kind is bool and isinstance(value, str):
        if value.lower() in ("1", "true", "yes", "on"):
            return True
        if value.lower() in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"not a boolean: {value!r}")
    return kind(value)


@dataclass(frozen=True)
class MisbehaviourRule:
    site: str = "*"
    target: str = ""
    behaviour: Misbehaviour = field(default_factory=Misbehaviour)

    def __post_init__(self) -> None:
        if self.site not in site_names():
            raise ConfigError(f"misbehaviour site must be one of {list(site_names())}, got {self.site!r}")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MisbehaviourRule:
        values = dict(data)
        site = str(values.pop("site", "*"))
        target = str(values.pop("target", ""))
        return cls(site, target, Misbehaviour.from_dict(values))

    def to_dict(self) -> dict[str, Any]:
        return {"site": self.site, "target": self.target, **asdict(self.behaviour)}


@dataclass(frozen=True)
class Action:
    """What to do to one request (several may combine: slow, then a 418)."""

    login_wall: bool = False
    new_layout: bool = False
    hang_s: float = 0.0
    hold: bool = False
    delay_ms: int = 0
    status: int = 0  # 418 or 429; 0 = serve normally
    retry_after_s: int = 0
    ban_page: str = ""
    truncate: str = ""
    rule: str = ""

    @property
    def names(self) -> list[str]:
        """Short labels for the request log."""
        labels = []
        if self.hang_s:
            labels.append("hang")
        if self.hold:
            labels.append("hold")
        if self.delay_ms:
            labels.append("slow")
        if self.status:
            labels.append(str(self.status))
        if self.ban_page:
            labels.append(f"ban-{self.ban_page}")
        if self.truncate:
            labels.append(f"truncate-{self.truncate}")
        return labels  # "new-layout" only once the site relaid the page out (the server adds it)


class MisbehaviourTable:
    """The live rules plus the RNG and the 418-burst counters; thread-safe."""

    def __init__(self, rules: tuple[MisbehaviourRule, ...] = (), seed: int = 0) -> None:
        self._rules: dict[tuple[str, str], Misbehaviour] = {}
        self._bursts: dict[tuple[str, str], int] = {}
        self._rng = random.Random(f"misbehave|{seed}")
        self._lock = threading.Lock()
        for rule in rules:
            self.set(rule)

    def set(self, rule: MisbehaviourRule) -> None:
        with self._lock:
            self._rules[(rule.site, rule.target)] = rule.behaviour
            self._bursts.pop((rule.site, rule.target), None)

    def update(self, site: str, target: str, changes: Mapping[str, Any]) -> MisbehaviourRule:
        """Change some keys of a scope's rule (creating it from the defaults)."""
        with self._lock:
            current = self._rules.get((site, target), Misbehaviour())
        merged = Misbehaviour.from_dict({**asdict(current), **changes})
        rule = MisbehaviourRule(site, target, merged)
        self.set(rule)
        return rule

    def clear(self, site: str | None = None, target: str | None = None) -> None:
        """Remove one scope's rule, or every rule when ``site`` is None."""
        with self._lock:
            if site is None:
                self._rules.clear()
                self._bursts.clear()
            else:
                self._rules.pop((site, target or ""), None)
                self._bursts.pop((site, target or ""), None)

    def rules(self) -> list[MisbehaviourRule]:
        with self._lock:
            return [MisbehaviourRule(site, target, b) for (site, target), b in sorted(self._rules.items())]

    def _lookup(self, site: str, target: str) -> tuple[tuple[str, str], Misbehaviour] | None:
        for key in ((site, target), (site, ""), ("*", target), ("*", "")):
            behaviour = self._rules.get(key)
            if behaviour is not None:
                return key, behaviour
        return None

    def holds(self, site: str, target: str) -> bool:
        """Whether the rule for this request (the most specific one) holds its answer back now."""
        with self._lock:
            found = self._lookup(site, target)
            return found is not None and found[1].hold

    def decide(self, site: str, target: str, max_hang_s: float) -> Action:
        """Draw this request's misbehaviour."""
        with self._lock:
            found = self._lookup(site, target)
            if found is None:
                return Action()
            key, rule = found
            draw = self._rng.random
            action = Action(login_wall=rule.login_wall, new_layout=rule.new_layout, rule=f"{key[0]}:{key[1] or '*'}")
            if rule.hang_rate and draw() < rule.hang_rate:
                return replace(action, hang_s=min(rule.hang_s, max_hang_s))
            action = replace(action, hold=rule.hold)
            if rule.slow_rate and draw() < rule.slow_rate:
                action = replace(action, delay_ms=rule.slow_ms)
            remaining = self._bursts.get(key, 0)
            if remaining > 0:
                self._bursts[key] = remaining - 1
                return replace(action, status=418)
            if rule.teapot_rate and draw() < rule.teapot_rate:
                self._bursts[key] = rule.teapot_burst - 1
                return replace(action, status=418)
            if rule.retry_after_rate and draw() < rule.retry_after_rate:
                return replace(action, status=429, retry_after_s=rule.retry_after_s)
            if rule.ban_rate and draw() < rule.ban_rate:
                return replace(action, ban_page=rule.ban_page)
            if rule.truncate_rate and draw() < rule.truncate_rate:
                action = replace(action, truncate=rule.truncate_mode)
            return action
