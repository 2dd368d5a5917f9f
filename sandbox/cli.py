"""The sandbox's command line, of ``icecrawler sandbox`` (which ``sandbox.launch`` starts as a child process).

Flags override the ``sandbox.*`` and ``clock.*`` settings; ``--misbehave`` takes ``SITE[:TARGET].KEY=VALUE``
(e.g. ``--misbehave m.teapot_rate=0.1 --misbehave ecshop:12.login_wall=true``). ``--traces FILE`` makes the world
from real publication traces instead of a scenario (``sandbox.tracescenario``).
"""

from __future__ import annotations

import argparse
import errno
import json
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from icecrawler.errors import ConfigError
from icecrawler.settings import Settings
from sandbox.misbehave import MisbehaviourRule, site_names
from sandbox.scenario import WEIBO_SITES, Scenario, default_scenario, load_scenario
from sandbox.server import SandboxServer
from sandbox.tracescenario import TRACE_SHOPS, TraceMapping, load_trace_scenario, summarize_traces, traces_table_file

__all__ = [
    "add_options",
    "add_trace_options",
    "parse_misbehave",
    "run",
    "trace_options_scenario",
    "traces_line",
]

log = logging.getLogger("sandbox")


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", help="address to bind (default: setting sandbox.host, 127.0.0.1)")
    parser.add_argument(
        "--port", type=_port, help="port shared by all sites (default: setting sandbox.port, 8800; 0 = any free port)"
    )
    parser.add_argument("--scenario", metavar="FILE", help="scenario file, .toml or .json (default: built-in demo)")
    parser.add_argument(
        "--speed", type=float, help="simulated seconds per real second, e.g. 60 (default: setting clock.speed)"
    )
    parser.add_argument(
        "--clock-origin",
        type=float,
        metavar="EPOCH_S",
        help="wall-clock epoch simulated time starts from; share it with the other processes of a "
        "run (default: setting clock.origin; 0 = the origin the --truth-file records, else now)",
    )
    parser.add_argument(
        "--latency-ms", type=int, help="delay added to every site request (default: setting sandbox.latency_ms)"
    )
    parser.add_argument("--seed", type=int, help="override the scenario's seed")
    parser.add_argument("--truth-file", metavar="FILE", help="append the ground truth to this JSONL file")
    parser.add_argument(
        "--max-hang-s",
        type=float,
        help="cap on a 'hang' or 'hold' misbehaviour, seconds (default: setting sandbox.max_hang_s)",
    )
    parser.add_argument(
        "--visitor-ttl-s",
        type=float,
        help="lifetime of a passport visitor session, simulated seconds (default: setting sandbox.visitor_ttl_s)",
    )
    parser.add_argument(
        "--misbehave",
        action="append",
        default=[],
        metavar="SITE[:TARGET].KEY=VALUE",
        help=f"switch a misbehaviour on at start (repeatable); sites: {', '.join(site_names())}",
    )
    parser.add_argument("--print-scenario", action="store_true", help="print the scenario as JSON and exit")
    add_trace_options(parser)


def add_trace_options(parser: argparse.ArgumentParser) -> None:
    """The ``--traces`` options, of ``icecrawler sandbox`` and ``icecrawler demo`` (``trace_options_scenario``
    reads them)."""
    traces = parser.add_argument_group(
        "real publication traces", "publish items at real times instead of a scenario's schedules (docs/SANDBOX.md)"
    )
    traces.add_argument(
        "--traces",
        metavar="FILE",
        help="a trace file as `icecrawler bench revisit --traces` reads it (JSONL: target, source, times); each "
        "trace becomes one target, replacing the scenario",
    )
    traces.add_argument("--traces-limit", type=int, metavar="N", help="use the first N traces of the file only")
    traces.add_argument(
        "--traces-source",
        metavar="PREFIX",
        help="use only the traces whose source starts with PREFIX, in any case (e.g. weibo); before --traces-limit",
    )
    traces.add_argument(
        "--traces-weibo-site",
        choices=WEIBO_SITES,
        help="the Weibo front end of the users that replay Weibo traces (a source starting with 'weibo'; default m)",
    )
    traces.add_argument(
        "--traces-shop",
        choices=TRACE_SHOPS,
        help="the shop whose products replay the other traces (default jd)",
    )
    traces.add_argument(
        "--traces-backlog-days",
        type=float,
        metavar="DAYS",
        help="start each trace this many days after its first item; its items of those days are the backlog "
        "(default 0: the first item appears at the start)",
    )


def _port(text: str) -> int:
    """An argparse type for ``--port``: the range the setting ``sandbox.port`` allows, checked before any bind."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}: give a port from 0 to 65535") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port}: give a port from 0 to 65535 (0 = any free port)")
    return port


def parse_misbehave(specs: Sequence[str]) -> list[MisbehaviourRule]:
    """``SITE[:TARGET].KEY=VALUE`` flags, grouped into one rule per scope."""
    scopes: dict[tuple[str, str], dict[str, str]] = {}
    for spec in specs:
        scope, dot, assignment = spec.partition(".")
        key, eq, value = assignment.partition("=")
        if not dot or not eq or not key:
            raise ConfigError(f"--misbehave {spec!r}: expected SITE[:TARGET].KEY=VALUE")
        site, _, target = scope.partition(":")
        scopes.setdefault((site, target), {})[key] = value
    return [
        MisbehaviourRule.from_dict({"site": site, "target": target, **values})
        for (site, target), values in scopes.items()
    ]


def trace_options_scenario(args: argparse.Namespace, scenario_flag: str | None) -> Scenario | None:
    """The world of ``--traces FILE`` shaped by the other ``--traces-*`` options; None without ``--traces`` (then
    those options are an error, as is ``scenario_flag``, a scenario file given with it)."""
    trace_flags = [
        flag
        for flag, value in (
            ("--traces-limit", args.traces_limit),
            ("--traces-source", args.traces_source),
            ("--traces-weibo-site", args.traces_weibo_site),
            ("--traces-shop", args.traces_shop),
            ("--traces-backlog-days", args.traces_backlog_days),
        )
        if value is not None
    ]
    if not args.traces:
        if trace_flags:
            raise ConfigError(f"{', '.join(trace_flags)}: give --traces FILE too (these options shape its world)")
        return None
    if scenario_flag:
        raise ConfigError("give --traces or --scenario, not both: the traces make the whole world")
    defaults = TraceMapping()
    mapping = TraceMapping(
        weibo_site=args.traces_weibo_site or defaults.weibo_site,
        shop=args.traces_shop or defaults.shop,
        backlog_days=args.traces_backlog_days if args.traces_backlog_days is not None else defaults.backlog_days,
        limit=args.traces_limit,
        source=args.traces_source,
    )
    return load_trace_scenario(args.traces, mapping)


def traces_line(scenario: Scenario, traces: str | None, scenario_path: str | None, speed: float) -> str | None:
    """The start-up line of a world with trace targets (None without any), naming their trace file: ``traces`` (the
    ``--traces`` option), else the file of the scenario file's ``[traces]`` table."""
    traced = summarize_traces(scenario)
    if not (traced.users or traced.products):
        return None
    source = traces or (traces_table_file(Path(scenario_path)) if scenario_path else None) or scenario_path
    return traced.line(str(source), speed)


def _scenario(args: argparse.Namespace, settings: Settings) -> Scenario:
    """The world to serve: the trace file's (``--traces``), the scenario file's, or the built-in demo."""
    traced = trace_options_scenario(args, args.scenario)
    if traced is not None:
        return traced
    scenario_path = args.scenario or settings.get_str("sandbox.scenario")
    return load_scenario(scenario_path) if scenario_path else default_scenario()


def build_server(args: argparse.Namespace, settings: Settings, scenario: Scenario | None = None) -> SandboxServer:
    """A SandboxServer from the flags, falling back to the settings."""
    scenario = scenario if scenario is not None else _scenario(args, settings)
    seed = args.seed if args.seed is not None else settings.get_int("sandbox.seed")
    return SandboxServer(
        scenario,
        host=args.host or settings.get_str("sandbox.host"),
        port=args.port if args.port is not None else settings.get_int("sandbox.port"),
        speed=args.speed if args.speed is not None else settings.get_float("clock.speed"),
        origin=args.clock_origin if args.clock_origin is not None else settings.get_float("clock.origin"),
        latency_ms=args.latency_ms if args.latency_ms is not None else settings.get_int("sandbox.latency_ms"),
        seed=seed if seed is not None and seed >= 0 else None,
        truth_file=args.truth_file or settings.get_str("sandbox.truth_file") or None,
        max_hang_s=args.max_hang_s if args.max_hang_s is not None else settings.get_float("sandbox.max_hang_s"),
        misbehave=parse_misbehave(args.misbehave),
        visitor_ttl_s=(
            args.visitor_ttl_s if args.visitor_ttl_s is not None else settings.get_float("sandbox.visitor_ttl_s")
        ),
    )


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Serve until SIGTERM/SIGINT. Prints one JSON line with the URL once listening."""
    scenario = _scenario(args, settings)
    speed = args.speed if args.speed is not None else settings.get_float("clock.speed")
    line = traces_line(scenario, args.traces, args.scenario or settings.get_str("sandbox.scenario"), speed)
    if line:
        log.info("%s", line)
    if args.print_scenario:
        print(json.dumps(scenario.to_dict(), ensure_ascii=False, indent=2))
        return 0
    try:
        server = build_server(args, settings, scenario)
    except OSError as exc:
        if exc.errno not in (errno.EADDRINUSE, errno.EACCES, errno.EADDRNOTAVAIL):
            raise ConfigError(f"sandbox: {exc}") from exc  # a --truth-file, a host name: the error names it
        host = args.host or settings.get_str("sandbox.host")
        port = args.port if args.port is not None else settings.get_int("sandbox.port")
        raise ConfigError(
            f"sandbox: cannot listen on {host}:{port}: {exc.strerror or exc} (another port: --port, or --port 0 for "
            "a free one)"
        ) from exc
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    server.start()
    print(
        json.dumps(
            {
                "sandbox": server.url,
                "sites": {p: server.base_url(p) for p in sorted(server.sites)},
                "speed": server.clock.speed,
                "origin": server.clock.origin,
            }
        ),
        flush=True,
    )
    try:
        while not stop.wait(1.0):
            pass
    finally:
        server.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    log.info("sandbox stopped")
    sys.stdout.flush()
    return 0
