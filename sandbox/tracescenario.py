"""A sandbox world from real publication traces (``icecrawler sandbox --traces FILE``, or a scenario file's ``[traces]``
table, ``with_traces``): each trace becomes one target whose items appear at the trace's times, shifted onto the
run's clock (the ``trace`` schedule, ``sandbox.schedules.trace_times``). The file is read by ``sandbox.tracefile``,
the reader the revisit benchmark uses.

The mapping (docs/SANDBOX.md, "Real publication traces"), in file order:

- a trace whose source starts with "weibo" (in any case, as the benchmark's E0 plot decides it) becomes a Weibo user
  on one Weibo site (``weibo_site``: ``m`` by default), uid ``TRACE_UID_BASE + k``;
- any other trace (reviews, a thread's replies, a repository's commits: a stream of items under one target) becomes
  a product of one review shop (``shop``: ``jd`` by default, or ``ecshop``), id ``TRACE_PRODUCT_BASE + k``;

where ``k`` counts the traces of the same kind (Weibo, or other) before it among the traces used: the first Weibo
trace is user ``TRACE_UID_BASE`` and the first other trace product ``TRACE_PRODUCT_BASE``, wherever they are in the
file. A target's name is ``source:target`` of its trace, so the scenario (``--print-scenario``,
``/__sandbox/scenario``) shows which trace each target replays. Sites need numeric ids while a trace's target is any
text, hence the numbering. ``trace_scenario`` and ``summarize_traces`` are pure; ``load_trace_scenario``,
``with_traces`` and ``traces_table_file`` read files.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from crawler_client.sources.jd import PAGE_SIZE as JD_PAGE_SIZE
from icecrawler.errors import ConfigError
from sandbox.scenario import WEIBO_SITES, Product, Scenario, WeiboUser, read_scenario_data
from sandbox.schedules import TRACE_MAX_DAYS, Schedule, trace_times
from sandbox.sites.jd import MAX_PAGE as JD_MAX_PAGE
from sandbox.tracefile import DAY_S, Trace, TraceError, is_weibo_trace, load_traces, warn_on_stderr

__all__ = [
    "TABLE_KEYS",
    "TRACE_PRODUCT_BASE",
    "TRACE_SHOPS",
    "TRACE_UID_BASE",
    "TraceMapping",
    "TraceSummary",
    "load_trace_scenario",
    "summarize_traces",
    "trace_scenario",
    "traces_table_file",
    "with_traces",
]

#: The uid of the first Weibo trace (ten digits, like the real site's uids).
TRACE_UID_BASE = 6_000_000_000
#: The product id of the first other trace.
TRACE_PRODUCT_BASE = 900_000_000_000
#: The shops a non-Weibo trace may become a product of.
TRACE_SHOPS = ("jd", "ecshop")
#: JD shows at most this many reviews of a product, as the real site does: its last page (the stand-in's MAX_PAGE) of
#: the page size the JD source asks for (1000).
JD_VISIBLE = JD_MAX_PAGE * JD_PAGE_SIZE


@dataclass(frozen=True)
class TraceMapping:
    """How traces become targets (the ``--traces-*`` options)."""

    #: The Weibo front end (``pc``, ``m``, ``web``) that shows every Weibo trace's user.
    weibo_site: str = "m"
    #: The shop whose products replay the other traces.
    shop: str = "jd"
    #: The run starts this many days after each trace's first item; the items of those days are its backlog.
    backlog_days: float = 0.0
    #: Use the first ``limit`` traces of the file only (None: all), after the ``source`` filter.
    limit: int | None = None
    #: Use only the traces whose source starts with this (in any case, as ``is_weibo_trace`` reads a source); None:
    #: every source. A file sorted by source (``bench/revisit/data/real.jsonl``) gives one source per ``limit``.
    source: str | None = None

    def __post_init__(self) -> None:
        if self.weibo_site not in WEIBO_SITES:
            raise ConfigError(f"traces: the Weibo site must be one of {list(WEIBO_SITES)}, not {self.weibo_site!r}")
        if self.shop not in TRACE_SHOPS:
            raise ConfigError(f"traces: the shop must be one of {list(TRACE_SHOPS)}, not {self.shop!r}")
        days = self.backlog_days
        if isinstance(days, bool) or not isinstance(days, int | float) or not 0 <= days <= TRACE_MAX_DAYS:
            raise ConfigError(f"traces: the backlog must be a number of days from 0 to {TRACE_MAX_DAYS}, not {days!r}")
        limit = self.limit
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise ConfigError(f"traces: the limit must be a whole number of traces, at least 1, not {limit!r}")
        if self.source is not None and (not isinstance(self.source, str) or not self.source.strip()):
            raise ConfigError(f"traces: the source must be a non-empty prefix of a trace's source, not {self.source!r}")

    def chosen(self, traces: Sequence[Trace]) -> list[Trace]:
        """The traces used: those of the ``source`` prefix, then the first ``limit`` of them."""
        prefix = (self.source or "").lower()
        return [t for t in traces if t.source.lower().startswith(prefix)][: self.limit]


def _schedule(trace: Trace, mapping: TraceMapping) -> Schedule:
    return Schedule("trace", times=trace.times, start_s=trace.times[0] + mapping.backlog_days * DAY_S)


def trace_scenario(traces: Sequence[Trace], mapping: TraceMapping, seed: int = 0) -> Scenario:
    """The world of ``traces`` (those ``mapping.chosen``): one target per trace, as the module docstring maps
    them. A user or product has no synthetic backlog (``backlog = 0``): a trace's backlog is its own items before
    the start. Users show no pinned post (a trace does not say which post was pinned)."""
    chosen = mapping.chosen(traces)
    if not chosen:
        sources = ", ".join(sorted({t.source for t in traces}))
        which = f" of a source starting with {mapping.source!r} (the file's: {sources})" if mapping.source else ""
        raise ConfigError(f"traces: no traces{which} to replay")
    users: list[WeiboUser] = []
    products: list[Product] = []
    for trace in chosen:
        name = f"{trace.source}:{trace.target}"
        if is_weibo_trace(trace.source):
            users.append(
                WeiboUser(
                    uid=TRACE_UID_BASE + len(users),
                    name=name,
                    sites=(mapping.weibo_site,),
                    pinned=False,
                    backlog=0,
                    schedule=_schedule(trace, mapping),
                )
            )
        else:
            products.append(
                Product(
                    mapping.shop,
                    str(TRACE_PRODUCT_BASE + len(products)),
                    name=name,
                    backlog=0,
                    schedule=_schedule(trace, mapping),
                )
            )
    return Scenario(seed=seed, users=tuple(users), products=tuple(products))


#: The keys of a scenario file's ``[traces]`` table: the file, and the fields of TraceMapping.
TABLE_KEYS = ("file", "limit", "source", "weibo_site", "shop", "backlog_days")


def with_traces(scenario: Scenario, table: Mapping[str, Any], scenario_path: Path) -> Scenario:
    """``scenario`` with the targets of its file's ``[traces]`` table added after its own (``file`` relative to the
    scenario file's folder; the other keys as the ``--traces-*`` options). A trace target whose id the file's own
    targets use is a duplicate, refused like any other."""
    where = f"{scenario_path}: [traces]"
    if not isinstance(table, Mapping):
        raise ConfigError(f'{where} must be a table like {{file = "traces.jsonl"}}, got {table!r}')
    unknown = sorted(set(table) - set(TABLE_KEYS))
    if unknown or "file" not in table:
        raise ConfigError(f"{where}: keys {list(TABLE_KEYS)}, file required; got {sorted(table)}")
    mapping = TraceMapping(**{key: table[key] for key in TABLE_KEYS[1:] if key in table})
    traced = load_trace_scenario(scenario_path.parent / str(table["file"]), mapping, scenario.seed, where)
    return replace(scenario, users=scenario.users + traced.users, products=scenario.products + traced.products)


def traces_table_file(scenario_path: Path) -> Path | None:
    """The trace file a scenario file's ``[traces]`` table names (as ``with_traces`` reads it), None without one:
    what the start-up line names."""
    data = read_scenario_data(scenario_path)
    table = data.get("traces") if isinstance(data, dict) else None
    if not isinstance(table, Mapping) or "file" not in table:
        return None
    return scenario_path.parent / str(table["file"])


def load_trace_scenario(path: str | Path, mapping: TraceMapping, seed: int = 0, where: str = "--traces") -> Scenario:
    """``trace_scenario`` of a trace file; a file the reader refuses is a ConfigError naming the file and line (after
    ``where``: the option or the table that named the file)."""
    try:
        traces = load_traces(Path(path), warn=warn_on_stderr)
    except TraceError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    return trace_scenario(traces, mapping, seed)


@dataclass(frozen=True)
class TraceSummary:
    """What a trace world will publish, for the line the sandbox prints at start."""

    users: int
    products: int
    backlog: int
    future: int
    #: Simulated seconds from the start to the last item.
    span_s: float
    #: Items moved to keep one target's items MIN_GAP_MS apart, and the largest move (ms).
    spread: int
    most_moved_ms: int
    #: Products on JD with more items than its pages show (the oldest stay out of reach, as on the real site).
    over_jd_pages: int

    def line(self, source: str, speed: float) -> str:
        """One line: targets, items, span (and its wall time at ``speed``), spread items."""
        wall = f", {self.span_s / speed / 3600:.1f} h of wall time at speed {speed:g}" if speed > 0 else ""
        text = (
            f"traces {source}: {self.users} Weibo user(s), {self.products} product(s); "
            f"{self.backlog + self.future} items: {self.backlog} backlog, {self.future} over "
            f"{self.span_s / DAY_S:.2f} simulated days from the start{wall}; "
            f"{self.spread} item(s) moved (at most {self.most_moved_ms / 1000:g} s) to keep a target's items 1 s apart"
        )
        if self.over_jd_pages:
            text += f"; {self.over_jd_pages} JD product(s) hold more than the {JD_VISIBLE} reviews JD's pages show"
        return text


def summarize_traces(scenario: Scenario) -> TraceSummary:
    """The counts of ``TraceSummary`` for the trace-scheduled targets of ``scenario`` (start at 0)."""
    schedules = [(user.schedule, False) for user in scenario.users] + [
        (product.schedule, product.source == "jd") for product in scenario.products
    ]
    backlog = future = spread = most = over = 0
    span_ms = 0
    for schedule, on_jd in schedules:
        if schedule.kind != "trace":
            continue
        times = trace_times(schedule, 0)
        backlog += len(times.backlog)
        future += len(times.future)
        spread += times.spread
        most = max(most, times.most_moved_ms)
        span_ms = max(span_ms, times.future[-1] if times.future else 0)
        over += on_jd and len(times.backlog) + len(times.future) > JD_VISIBLE
    return TraceSummary(
        sum(u.schedule.kind == "trace" for u in scenario.users),
        sum(p.schedule.kind == "trace" for p in scenario.products),
        backlog,
        future,
        span_ms / 1000,
        spread,
        most,
        over,
    )
