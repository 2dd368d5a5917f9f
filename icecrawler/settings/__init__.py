"""Layered settings: defaults < config file < environment < command line.

Every key must exist in ``default_settings.DEFAULTS`` or be a ``sources.<name>.*`` setting the named source
declares (``icecrawler.sourcespec``: a source brings its own, so adding one edits no defaults); an unknown key is
an error (a typo fails at start-up, not at run time). Values from text (environment, ``--set``) are converted to
the default's type. A text setting takes text (or a number, as its digits): a TOML array, table, boolean or date
given for one is refused by name, never read as its Python repr (a list is one comma-separated string).
"""

from __future__ import annotations

import datetime
import os
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from icecrawler.errors import ConfigError
from icecrawler.settings.default_settings import DEFAULTS
from icecrawler.settings.validation import validate_values

__all__ = ["PRIORITIES", "Settings", "load_settings"]

#: Named priorities: a value set at a higher priority wins (Scrapy's SETTINGS_PRIORITIES).
PRIORITIES: dict[str, int] = {"default": 0, "file": 20, "env": 30, "cmdline": 40}

#: The config file read when none is named: ``./icecrawler.toml`` if it exists.
DEFAULT_CONFIG_FILE = "icecrawler.toml"
ENV_PREFIX = "ICECRAWLER_"


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(_flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def _coerce(key: str, value: Any, like: Any) -> Any:
    """Convert ``value`` to the type of the default ``like``; text comes from env and ``--set``. A value that does
    not convert is named with the type expected, in the operator's words rather than Python's."""
    if isinstance(like, bool):
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in {"1", "true", "yes", "on"}:
            return True
        if text in {"0", "false", "no", "off"}:
            return False
        raise ConfigError(f"setting {key}: not a boolean: {value!r}")
    expected = "an integer" if isinstance(like, int) else "a number" if isinstance(like, float) else ""
    if not expected:
        kind = _not_text(value)
        if kind:  # str() of a TOML array is its Python repr: ["a", "b"] would read as "['a'" and " 'b']"
            raise ConfigError(
                f'setting {key}: expected text, got {kind} (a list of several is one comma-separated string: "a,b")'
            )
        return str(value)
    try:
        if isinstance(value, bool):  # a TOML true is no number: int()/float() would read it as 1
            raise ValueError(value)
        if isinstance(like, int):
            if isinstance(value, float) and not value.is_integer():
                raise ValueError(value)
            return int(value)
        return float(value)
    except (TypeError, ValueError, OverflowError) as exc:  # OverflowError: an int past a float
        raise ConfigError(f"setting {key}: expected {expected}, got {value!r}") from exc


def _not_text(value: Any) -> str:
    """What a TOML value is, in the operator's words, when it is no text (nor a number, read as its digits) that a
    text setting could take; "" when it is. Never the value itself: a text setting may be a password."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (list, tuple, set, frozenset)):
        return "an array"
    if isinstance(value, Mapping):
        return "a table"
    if isinstance(value, (datetime.date, datetime.time)):
        return "a date or time"
    return ""


def _declared(key: str) -> dict[str, Any]:
    """The ``sources.<name>.*`` defaults the source named in ``key`` declares (``icecrawler.sourcespec``): a
    source added without editing ``default_settings`` still has its settings. {} for other keys."""
    parts = key.split(".")
    if len(parts) < 2 or parts[0] != "sources":
        return {}
    from icecrawler.sourcespec import registry

    return registry[parts[1]].settings() if parts[1] in registry else {}


def _unknown_setting(key: str) -> str:
    """What an error says of a key that is no setting: for ``sources.<name>.*`` of a source this process does not
    know, why (a source from ``ICECRAWLER_SOURCE_MODULES`` is known only where that variable names it)."""
    parts = key.split(".")
    if len(parts) >= 3 and parts[0] == "sources":
        from icecrawler.sourcespec import registry

        if parts[1] not in registry:
            return f"unknown setting {key!r}: {registry.unknown(parts[1])}"
    return f"unknown setting {key!r}"


class Settings:
    """Read-only view of the merged settings, with the priority each value came from."""

    def _know(self, key: str) -> bool:
        """Whether ``key`` is a setting, adding a source-declared default the first time one is asked for."""
        if key in self._defaults:
            return True
        for name, value in _declared(key).items():
            # _defaults last: a reader in another thread that sees the key there finds its value and priority.
            self._values.setdefault(name, value)
            self._priority.setdefault(name, PRIORITIES["default"])
            self._defaults.setdefault(name, value)
        return key in self._defaults

    def __init__(self) -> None:
        self._defaults: dict[str, Any] = dict(DEFAULTS)
        self._values: dict[str, Any] = dict(DEFAULTS)
        self._priority: dict[str, int] = {key: PRIORITIES["default"] for key in DEFAULTS}

    def set(self, key: str, value: Any, priority: str = "cmdline") -> None:
        if not self._know(key):
            raise ConfigError(f"{_unknown_setting(key)} (see `icecrawler settings` for the list)")
        level = PRIORITIES[priority]
        if level >= self._priority[key]:
            self._values[key] = _coerce(key, value, self._defaults[key])
            self._priority[key] = level

    def update(self, values: Mapping[str, Any], priority: str) -> None:
        for key, value in values.items():
            self.set(key, value, priority)

    def copy_with(self, **overrides: Any) -> Settings:
        """A copy with keys (underscored dots: ``scheduler__lease_s``) overridden at command-line priority."""
        clone = Settings()
        clone._defaults = dict(self._defaults)
        clone._values = dict(self._values)
        clone._priority = dict(self._priority)
        for name, value in overrides.items():
            clone.set(name.replace("__", "."), value)
        return clone

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self._know(key)

    def include_sources(self) -> Settings:
        """Know every registered source's settings now (they are otherwise added when first asked for): what
        ``icecrawler settings`` lists. Loads the source registry, so roles that never crawl do not call it."""
        from icecrawler.sourcespec import registry

        for name in registry:
            self._know(f"sources.{name}.base_url")
        return self

    def __getitem__(self, key: str) -> Any:
        if not self._know(key):
            raise ConfigError(_unknown_setting(key))
        return self._values[key]

    def get_str(self, key: str) -> str:
        return str(self[key])

    def get_int(self, key: str) -> int:
        return int(self[key])

    def get_float(self, key: str) -> float:
        return float(self[key])

    def get_bool(self, key: str) -> bool:
        return bool(self[key])

    def with_prefix(self, prefix: str) -> dict[str, Any]:
        """All keys under ``prefix.`` with the prefix removed."""
        start = prefix + "."
        self._know(start + "base_url")  # a source's declared settings, when the prefix is one
        return {key[len(start) :]: value for key, value in self._values.items() if key.startswith(start)}

    def source_of(self, key: str) -> str:
        level = self._priority[key]
        return next(name for name, value in PRIORITIES.items() if value == level)

    def as_dict(self) -> dict[str, Any]:
        return dict(self._values)


def parse_assignments(assignments: Iterable[str]) -> dict[str, str]:
    """Parse ``key=value`` strings from ``--set``."""
    parsed: dict[str, str] = {}
    for item in assignments:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set expects key=value, got {item!r}")
        parsed[key.strip()] = value
    return parsed


def load_settings(
    config_file: str | Path | None = None,
    assignments: Iterable[str] = (),
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """Merge defaults, the TOML file, ``ICECRAWLER_SECTION__KEY`` variables and ``--set`` pairs, then check every
    value's range (``validation``)."""
    settings = Settings()
    #: Where each value that is not a default came from (the last layer that set it), for the range check's error.
    origins: dict[str, str] = {}
    path = Path(config_file) if config_file else Path(DEFAULT_CONFIG_FILE)
    if path.exists():
        try:
            with path.open("rb") as handle:
                table = _flatten(tomllib.load(handle))
        except ValueError as exc:  # TOMLDecodeError, UnicodeDecodeError, an integer of over 4300 digits
            # A property file given where the settings go (-c client.conf) reads as broken TOML: say which flag.
            hint = "" if path.suffix == ".toml" else f"; an Ice property file goes with --Ice.Config={path}"
            raise ConfigError(f"{path}: invalid TOML: {str(exc)[:200]}{hint}") from exc
        except OSError as exc:
            raise ConfigError(f"config file {path}: {exc.strerror or exc}") from exc
        try:  # the file may be ./icecrawler.toml, read without -c: the error names it
            settings.update(table, "file")
        except ConfigError as exc:
            raise ConfigError(f"{path}: {exc}") from exc
        origins.update(dict.fromkeys(table, str(path)))
    elif config_file:
        raise ConfigError(f"config file not found: {path}")
    env = os.environ if environ is None else environ
    for name, value in env.items():
        if name.startswith(ENV_PREFIX):
            key = name[len(ENV_PREFIX) :].lower().replace("__", ".")
            if settings._know(key):
                try:
                    settings.set(key, value, "env")
                except ConfigError as exc:
                    raise ConfigError(f"environment variable {name}: {exc}") from exc
                origins[key] = f"environment variable {name}"
            elif "__" in name:  # shaped like a setting (ICECRAWLER_SECTION__KEY): a typo fails like one in the file
                raise ConfigError(f"environment variable {name}: {_unknown_setting(key)}")
    assigned = parse_assignments(assignments)
    settings.update(assigned, "cmdline")
    origins.update(dict.fromkeys(assigned, "--set"))
    validate_values(settings.as_dict(), origins=origins)
    return settings
