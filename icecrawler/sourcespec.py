"""What a source declares about its site, and the registry every role asks: the one place a source is known.

A source is one module in ``crawler_client/sources/`` (a module whose name has no leading underscore) that
defines ``SOURCE``: its ``Source`` class, whose ``spec`` class attribute is a ``SourceSpec``. The registry finds
those modules by name on first use, plus the modules named in the ``ICECRAWLER_SOURCE_MODULES`` environment
variable (comma-separated; how a test or a third party adds a source without touching this tree). Everything
else derives from the specs: the task-id check (``icecrawler.models.SOURCES``), ``seed``'s default kind, the
``sources.<name>.*`` settings a source adds, form logins, storage tables and the sandbox's site prefixes.

Discovery is by name, not by import: the ground floor names the package it searches but imports no role
statically, and a role that never asks (most of the CLI) never pays for loading the parsers.
"""

from __future__ import annotations

import enum
import importlib
import os
import pkgutil
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from icecrawler.errors import ConfigError

__all__ = [
    "ENV_MODULES",
    "KIND_NAMES",
    "SOURCE_PACKAGE",
    "TABLES",
    "SourceSpec",
    "TaskKind",
    "group_by_kind",
    "registry",
    "unknown_source",
]

#: The package searched for built-in sources.
SOURCE_PACKAGE = "crawler_client.sources"
#: Modules of the source package that hold the shared mechanism, not a source: they declare no ``SOURCE`` by design
#: (the other helpers' names start with "_" and are not looked at).
HELPER_MODULES = frozenset({"base"})
#: Extra source modules (comma-separated module names) loaded after the built-in ones.
ENV_MODULES = "ICECRAWLER_SOURCE_MODULES"
#: Storage tables and what identifies one row in each (a source's items land in exactly one).
TABLES = {
    "weibo": "(user id, post id): a post seen through two Weibo front ends is one row",
    "review": "(source, product id, review id)",
}
#: Ways a source logs in: "" none, "form" (a member login form the client posts, credentials from
#: ``sources.<name>.username/password``), "visitor" (sessions the scheduler mints at ``sources.<name>.visitor_url``).
LOGINS = ("", "form", "visitor")


class TaskKind(enum.StrEnum):
    """What a task crawls; the value is the task-id prefix. Defined here, with the specs that declare which kinds
    each source crawls; ``icecrawler.models`` hands it on with the other core types."""

    WeiboUser = "user"
    ProductReviews = "reviews"
    Listing = "listing"


#: A kind by its task-id prefix ("user", "reviews", "listing"), as ``icecrawler seed --kind`` takes it.
KIND_NAMES = {kind.value: kind for kind in TaskKind}


@dataclass(frozen=True)
class SourceSpec:
    """Everything the rest of the system needs to know about one source, declared next to its parser."""

    #: The middle part of a task id (``reviews:<name>:<target>``), also the ``sources.<name>.*`` settings prefix.
    name: str
    #: Task kinds it crawls, and the one a bare ``<name>:<target>`` means in ``icecrawler seed``.
    kinds: frozenset[TaskKind]
    default_kind: TaskKind
    #: Storage table its items go to (a key of ``TABLES``) and what identifies one item, in words.
    table: str
    identity: str
    #: Where the site lives by default (``sources.<name>.base_url``).
    base_url: str
    #: How it logs in (one of ``LOGINS``).
    login: str = ""
    #: The sandbox site prefix serving it (``""``: the sandbox has no such site), built by ``make_site(context)``
    #: in ``sandbox.sites.<name>`` or by ``make_sandbox_site(context)`` in the module that declared the source.
    sandbox_site: str = ""
    #: More ``sources.<name>.*`` settings and their defaults (e.g. JD's ``endpoint``); ``base_url`` and
    #: ``headers`` are always there, ``username``/``password`` for a form login, ``visitor_url`` for visitors.
    #: Every role may read them (the scheduler reads ``visitor_url``); the parser's constructor receives only
    #: those its class lists in ``OPTIONS``.
    options: Mapping[str, Any] = field(default_factory=dict)
    #: Whether the site's pages show each item's id. False (ECSHOP): the parser makes one from what the item
    #: shows, and a judge of a crawl can only match items by time and text.
    shows_item_ids: bool = True

    def __post_init__(self) -> None:
        if self.default_kind not in self.kinds:
            raise ConfigError(f"source {self.name}: default kind {self.default_kind} is not one of its kinds")
        if self.table not in TABLES:
            raise ConfigError(f"source {self.name}: table must be one of {sorted(TABLES)}, got {self.table!r}")
        if self.login not in LOGINS:
            raise ConfigError(f"source {self.name}: login must be one of {list(LOGINS)}, got {self.login!r}")

    def settings(self) -> dict[str, Any]:
        """The ``sources.<name>.*`` defaults this source brings (``icecrawler.settings`` adds the missing ones)."""
        values: dict[str, Any] = {"base_url": self.base_url, "headers": ""}
        if self.login == "form":
            values.update(username="", password="")
        if self.login == "visitor":
            values["visitor_url"] = ""
        values.update(self.options)
        return {f"sources.{self.name}.{key}": value for key, value in values.items()}


def unknown_source(quoted: str, known: Iterable[str]) -> str:
    """The one message for a source name no registered source has (``quoted``: the name as the caller quotes it),
    with the likeliest cause of one that exists: a process started without the module that declares it."""
    return (
        f"unknown source {quoted} (known: {', '.join(sorted(known))}); a source declared outside {SOURCE_PACKAGE} "
        f"is known only to a process whose {ENV_MODULES} names its module"
    )


def _not_found_hint(module_name: str, exc: ImportError) -> str:
    """What to do when the module named in ``ENV_MODULES`` itself is not found (not one it imports)."""
    missing = exc.name if isinstance(exc, ModuleNotFoundError) else None
    if not missing or not (module_name == missing or module_name.startswith(missing + ".")):
        return ""
    return (
        f" ({ENV_MODULES} names modules on the Python path, not files: for /some/dir/mysource.py, put /some/dir "
        "on PYTHONPATH and name mysource)"
    )


class Registry(Mapping[str, SourceSpec]):
    """Source name → spec, loaded once (thread-safe) on first use; also the source classes and modules."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._specs: dict[str, SourceSpec] | None = None
        self._classes: dict[str, Any] = {}
        self._modules: dict[str, Any] = {}
        #: Modules of the source package, helpers aside, that define no ``SOURCE``: a new source missing its last line.
        self._sourceless: set[str] = set()

    def _load(self) -> dict[str, SourceSpec]:
        specs = self._specs
        if specs is not None:
            return specs
        with self._lock:
            if self._specs is None:
                package = importlib.import_module(SOURCE_PACKAGE)
                names = [
                    f"{SOURCE_PACKAGE}.{info.name}"
                    for info in pkgutil.iter_modules(package.__path__)
                    if not info.name.startswith("_")
                ]
                extra = [name.strip() for name in os.environ.get(ENV_MODULES, "").split(",") if name.strip()]
                found: dict[str, SourceSpec] = {}
                for module_name in names:
                    short = module_name.rpartition(".")[2]
                    if self._add(importlib.import_module(module_name), found) is None and short not in HELPER_MODULES:
                        self._sourceless.add(short)
                for module_name in extra:
                    try:
                        module = importlib.import_module(module_name)
                    except ImportError as exc:
                        raise ConfigError(
                            f"{ENV_MODULES}: cannot import {module_name!r}: {exc}{_not_found_hint(module_name, exc)}"
                        ) from exc
                    if self._add(module, found) is None:
                        raise ConfigError(f"{ENV_MODULES}: {module_name!r} declares no source (no SOURCE)")
                self._specs = found
            return self._specs

    def _add(self, module: Any, found: dict[str, SourceSpec]) -> SourceSpec | None:
        cls = getattr(module, "SOURCE", None)
        if cls is None:
            return None  # a helper module (base)
        spec = getattr(cls, "spec", None)
        if not isinstance(spec, SourceSpec):
            raise ConfigError(f"{module.__name__}.SOURCE has no SourceSpec in its 'spec' attribute")
        if spec.name in found and self._classes[spec.name] is not cls:
            raise ConfigError(
                f"source {spec.name!r} declared twice ({self._modules[spec.name].__name__}, {module.__name__})"
            )
        found[spec.name] = spec
        self._classes[spec.name] = cls
        self._modules[spec.name] = module
        return spec

    def register(self, module: Any) -> SourceSpec:
        """Add the source a module declares (``SOURCE``) in this process; returns its spec."""
        specs = self._load()
        with self._lock:
            spec = self._add(module, specs)
        if spec is None:
            raise ConfigError(f"{getattr(module, '__name__', module)!r} declares no source (no SOURCE)")
        return spec

    def forget(self, name: str) -> None:
        """Drop a source ``register`` added (a test's throwaway source, once the test is over)."""
        specs = self._load()
        with self._lock:
            specs.pop(name, None)
            self._classes.pop(name, None)
            self._modules.pop(name, None)

    def source_class(self, name: str) -> Any:
        """The ``Source`` class of ``name`` (``ConfigError`` naming the known ones otherwise)."""
        self.spec(name)
        return self._classes[name]

    def module(self, name: str) -> Any:
        """The module that declared ``name`` (where its sandbox site may live too)."""
        self.spec(name)
        return self._modules[name]

    def spec(self, name: str) -> SourceSpec:
        specs = self._load()
        try:
            return specs[name]
        except KeyError:
            raise ConfigError(self.unknown(name)) from None

    def unknown(self, name: str, quoted: str = "") -> str:
        """``unknown_source`` for ``name`` (quoted as ``quoted``, else by ``repr``), told so when the source package
        has a module of that name that declares nothing: a new source without its ``SOURCE = ...`` line, which the
        registry passes over as a helper, would otherwise be blamed on ``ENV_MODULES``."""
        specs = self._load()
        quoted = quoted or repr(name)
        if name in self._sourceless:
            return (
                f"unknown source {quoted} (known: {', '.join(sorted(specs))}); {SOURCE_PACKAGE}.{name} defines no "
                'SOURCE: end the module with `SOURCE = YourSourceClass` (CONTRIBUTING.md, "Adding a source", step 3)'
            )
        return unknown_source(quoted, specs)

    def __getitem__(self, name: str) -> SourceSpec:
        return self._load()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._load())

    def __len__(self) -> int:
        return len(self._load())

    def __contains__(self, name: object) -> bool:
        return name in self._load()


#: The process's one registry.
registry = Registry()


def group_by_kind(ids: Iterable[str], kind: TaskKind | None) -> dict[TaskKind, list[str]]:
    """``<source>:<target>`` ids by task kind: ``kind`` if given, else what the source declares
    (``SourceSpec.default_kind``). A task id as ``icecrawler tasks`` prints it (``<kind>:<source>:<target>``) names
    its own kind. How ``icecrawler seed`` and ``remove`` read their ids, and how a benchmark seeds."""
    groups: dict[TaskKind, list[str]] = {}
    for text in ids:
        own_kind, _, rest = text.partition(":")
        if own_kind in KIND_NAMES and rest:
            if kind is not None and KIND_NAMES[own_kind] is not kind:
                raise ConfigError(f"{text!r} is a {own_kind} task, but --kind says {kind.value}")
            groups.setdefault(KIND_NAMES[own_kind], []).append(rest)
            continue
        source = own_kind
        if kind is None and source not in registry:
            raise ConfigError(f"{text!r}: {registry.unknown(source)}")
        groups.setdefault(kind or registry.spec(source).default_kind, []).append(text)
    return groups
