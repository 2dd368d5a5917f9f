"""``icecrawler bench revisit [--quick]``: the revisit-policy benchmark (docs/REVISIT.md).

E0 replays the SHHD paper's ECSHOP test (one review every 10 min, first period 1 min) on one page, with the real
simhash detector on several page layouts and with an ideal detector. E3 runs a many-page mixture under a global
fetch budget B (every policy spends exactly the same fetches) against the known-rate square-root bound (O2) and the
clairvoyant offline oracle (O1). Knobs are tuned on TUNING_SEEDS; tables report REPORT seeds only.

The full run writes docs/bench/revisit.json, docs/revisit/*.png and the results block of docs/REVISIT.md;
``--quick`` (fewer seeds and pages) only prints, unless ``--write`` is given, and so does a full run with
``--no-write``; ``--ablation`` prints what each forecast of the rate policy is worth, on the development seeds
ABLATION_SEEDS (never the reported ones); ``--traces FILE --phases N`` is the development harness on real traces
(``phases``), which prints only; with ``--rate KEY=VALUE`` it measures the default policy with one of its knobs
changed (a ``RatePolicy`` field), so a round can try a setting without editing the code.

This module is the command line only: the contenders and run sizes are in ``contenders``, the synthetic experiments
in ``synthetic``, their tables and plots in ``synthetic_report``, the real-trace run (``--traces``) in ``real``, its
development harness in ``phases``.
Both runs say how far they are on stderr (``progress``); stdout carries the report only.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import multiprocessing.pool
import signal
import sys
import time
import types
import typing
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from bench.revisit.contenders import FULL, MAX_DEFAULT_WORKERS, QUICK, REPORT_BASE, ROOT, usable_cpus
from bench.revisit.progress import Progress, starmap_with_progress
from bench.revisit.publish import merge_json, write_block
from bench.revisit.replay import FITTED_WINDOW_RULE
from bench.revisit.synthetic import ablation, e0_seed, e3_seed, tune
from bench.revisit.synthetic_report import plots, report
from sandbox.tracefile import finite
from shhd.fingerprint import tokenize

__all__ = ["main"]


def _pool(workers: int) -> multiprocessing.pool.Pool:
    """Forked workers (they share the parent's jieba dictionary and traces) that leave Ctrl-C and SIGTERM to the
    parent: a Ctrl-C reaches every process of the terminal's group, and a worker that kept the command's handler
    (``interrupts_once``) printed a KeyboardInterrupt traceback for each, there and when the pool terminated them."""
    return multiprocessing.get_context("fork").Pool(workers, initializer=_leave_signals_to_the_parent)


def _leave_signals_to_the_parent() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _warm_up() -> None:
    tokenize("预热")  # initialise jieba once in the parent, so forked workers share it


#: Targets per seed of ``--quick --traces`` (unless ``--targets`` says otherwise): a quick look at a large file stays
#: quick.
QUICK_TARGETS = 60


def _writes(args: argparse.Namespace) -> bool:
    """Whether a run rewrites the docs and docs/bench/revisit.json: a full run does unless ``--no-write``, a quick one
    only with ``--write``."""
    return bool(args.write or not (args.quick or args.no_write))


def _main_traces(args: argparse.Namespace, command: str) -> int:
    from bench.revisit.phases import run_phases
    from bench.revisit.real import RealConfig, run_traces
    from bench.revisit.replay import TraceError

    cfg = RealConfig(
        args.traces,
        seeds=args.seeds or (2 if args.quick else 5),
        half=args.half or ("dev" if args.phases else "report"),
        targets=args.targets or (QUICK_TARGETS if args.quick and not args.phases else None),
        tune=not args.quick,
        oracle=not args.quick,
        workers=args.workers or usable_cpus(),
        window_days=args.window_days,
        warmup_days=args.warmup_days,
        rate_knobs=dict(args.rate),
    )
    _warm_up()
    try:
        with _pool(cfg.workers) as pool:
            if args.phases:
                print(run_phases(cfg, pool, args.phases, command.strip()))
            else:
                print(run_traces(cfg, pool, command.strip(), write=_writes(args)))
    except TraceError as exc:
        print(f"icecrawler bench revisit: {exc}", file=sys.stderr)
        return 2
    return 0


#: RatePolicy fields that are not knobs: the run sets the period bounds, and the budget thread the scale, the longest
#: period and the shared-clock state.
RATE_KNOBS_SET_BY_THE_RUN = frozenset(
    {
        "min_period_s",
        "max_period_s",
        "initial_period_s",
        "scale",
        "budget_max_s",
        "shared_clock",
        "clock_checked_s",
        "name",
    }
)


#: The range of a number knob of ``--rate`` where it is not "above 0" (periods, half-lives, item counts, factors).
#: shared_clock_agreement is a mean cosine between two targets' daily phases. A knob absent here refuses 0 and less,
#: also where the policy would read 0 as something (day_half_life_s=0 and burst_fade_s=0 fall back to another value as
#: ``or`` reads them, but null is how to ask for that): a new number field where 0 or a negative value is legitimate
#: needs an entry.
RATE_KNOB_RANGES: dict[str, tuple[float, float]] = {"shared_clock_agreement": (-1.0, 1.0)}


def _rate_knob(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` of ``--rate``: a field of ``RatePolicy`` (not its period bounds, which the run sets) and a JSON
    value of the field's type."""
    from shhd.policies import RatePolicy

    key, sep, value = text.partition("=")
    known = sorted(f.name for f in fields(RatePolicy) if f.init and f.name not in RATE_KNOBS_SET_BY_THE_RUN)
    if not sep or key not in known:
        raise argparse.ArgumentTypeError(f"{text!r}: give KEY=VALUE with KEY one of {', '.join(known)}")
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: VALUE must be JSON (a number, true, false, null, a string in double quotes)"
        ) from None
    if key == "calibration":
        if parsed is not None:
            raise argparse.ArgumentTypeError(f"{text!r}: calibration takes null only (no population calibration)")
        return key, parsed
    hint = typing.get_type_hints(RatePolicy)[key]
    # ``float | None`` is a float knob that also takes null; list[float] is no float knob.
    members = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    kinds = [m for m in members if m is not type(None)]
    optional = len(kinds) < len(members)
    if parsed is None and optional:
        return key, parsed
    or_null = " or null" if optional else ""
    kind = kinds[0] if len(kinds) == 1 else None
    if kind is bool:
        if not isinstance(parsed, bool):
            raise argparse.ArgumentTypeError(f"{text!r}: {key} takes true or false{or_null}")
        return key, parsed
    if kind in (float, int):
        # A string or null reached the workers and ended the run in a TypeError traceback there, and a negative
        # half-life ran and printed the figures of a policy nobody meant.
        low, high = RATE_KNOB_RANGES.get(key, (0.0, math.inf))
        whole = kind is int
        if (
            not finite(parsed)
            or (whole and not isinstance(parsed, int))
            or not (low <= parsed <= high if key in RATE_KNOB_RANGES else parsed > 0)
        ):
            span = f"from {low:g} to {high:g}" if key in RATE_KNOB_RANGES else "above 0"
            number = "whole number" if whole else "finite number"
            raise argparse.ArgumentTypeError(f"{text!r}: {key} takes a {number} {span}{or_null}")
        return key, parsed
    # Any other field (a round's scratch ``str`` setting): its JSON value as it is, if of the field's type where that
    # is a plain class; a type the check cannot read (a union, a generic) is the round's to get right.
    if isinstance(kind, type) and typing.get_origin(kind) is None and not isinstance(parsed, kind):
        quoted = " (in double quotes)" if kind is str else ""
        raise argparse.ArgumentTypeError(f"{text!r}: {key} takes a JSON {kind.__name__}{quoted}{or_null}")
    return key, parsed


def _positive(text: str) -> int:
    """A count on the command line (seeds, pages, workers, targets): 0 or less is refused, not run or read as unset."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _days(text: str) -> float:
    """A number of days on the command line: finite and above 0."""
    value = float(text)
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a number of days above 0, not {text}")
    return value


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="icecrawler bench revisit", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"small config (< 2 min on 2 cores; with --traces: 2 seeds of at most {QUICK_TARGETS} targets, no "
        "tuning, no oracle), prints only",
    )
    writing = parser.add_mutually_exclusive_group()
    writing.add_argument("--write", action="store_true", help="with --quick: write docs and json anyway")
    writing.add_argument(
        "--no-write",
        action="store_true",
        help="a full run that only prints: the docs and docs/bench/revisit.json are left as they are",
    )
    parser.add_argument("--seeds", type=_positive, help="override the number of report seeds")
    parser.add_argument("--pages", type=_positive, help="override the E3 page count")
    parser.add_argument(
        "--workers",
        type=_positive,
        help=f"worker processes (default: the CPUs this process may use, at most {MAX_DEFAULT_WORKERS}: "
        f"{usable_cpus()} here); the figures do not depend on it",
    )
    parser.add_argument("--e0-days", type=float, help="override the E0 horizon (days)")
    parser.add_argument("--end-days", type=float, help="override the E3 end of item arrivals (days)")
    parser.add_argument(
        "--ablation",
        action="store_true",
        help="only the rate policy's ablation on the development seeds (prints a table)",
    )
    parser.add_argument(
        "--traces",
        type=Path,
        help="E3 on real traces instead: a JSONL file (gzip-compressed or not), one object per line, "
        '{"target": "ID", "source": "NAME", "times": [unix seconds of each item\'s publication]} (times out of '
        "order are sorted, with a warning; milliseconds are refused); each trace is replayed over its last window "
        '(see --window-days), lags in minutes (docs/REVISIT.md, "Real publication traces"); like the synthetic '
        "run it rewrites the real_* keys of docs/bench/revisit.json, the real-trace block of docs/REVISIT.md and its "
        "E0 plot, whatever the file (--quick or --no-write: prints only)",
    )
    parser.add_argument(
        "--half",
        choices=("report", "dev", "all"),
        help="with --traces: which targets to run (default: report; dev with --phases)",
    )
    parser.add_argument(
        "--phases",
        type=_positive,
        help="with --traces: the development harness instead of the recorded run: every target of the half (no "
        "resampling), this many fetch phases, rate ÷ the best of every baseline setting per phase; prints only",
    )
    parser.add_argument(
        "--rate",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        type=_rate_knob,
        help="with --phases: run the default policy with this RatePolicy field changed (repeatable; VALUE is JSON: "
        "diurnal=false, burst_fade_s=null, half_life_s=172800)",
    )
    parser.add_argument(
        "--targets",
        type=_positive,
        help="with --traces: targets per seed, a bootstrap resample (default: all of the half); with --phases one "
        "subsample without replacement for every phase",
    )
    parser.add_argument(
        "--window-days",
        type=_days,
        help=f"with --traces: days of each trace to replay, ending at its last item, all traces aligned to start "
        f"within the first simulated day, times of day kept (default: {FITTED_WINDOW_RULE})",
    )
    parser.add_argument(
        "--warmup-days",
        type=_days,
        help="with --traces: unscored days at the start (default: 7, or a quarter of a window over 28 days; at most "
        "half the window)",
    )
    args = parser.parse_args(argv)
    # An option of the other run is refused, not ignored: each run would go on without it, and a full one rewrites the
    # docs (--traces FILE --ablation ran the recorded real-trace run, --window-days without --traces the synthetic one).
    trace_only = (args.window_days, args.warmup_days, args.targets, args.phases, args.half)
    if args.traces is None and any(v is not None for v in trace_only):
        parser.error("--window-days, --warmup-days, --targets, --phases and --half need --traces")
    if args.traces is not None and (
        args.ablation or any(v is not None for v in (args.pages, args.e0_days, args.end_days))
    ):
        parser.error(
            "--ablation, --pages, --e0-days and --end-days are for the synthetic benchmark: drop them with --traces"
        )
    if args.phases and (args.seeds or args.quick or args.write):
        parser.error("--phases runs its own phases and prints only: drop --seeds, --quick and --write")
    if args.rate and not args.phases:
        parser.error("--rate changes the default policy in the development harness only: add --phases N")
    if args.traces is not None:
        return _main_traces(args, "icecrawler bench revisit " + " ".join(argv))
    cfg = QUICK if args.quick else FULL
    overrides = {
        "seeds": args.seeds,
        "pages": args.pages,
        "workers": args.workers,
        "e0_days": args.e0_days,
        "end_days": args.end_days,
    }
    cfg = replace(cfg, **{k: v for k, v in overrides.items() if v is not None})
    command = "icecrawler bench revisit " + " ".join(argv)
    started = time.monotonic()
    _warm_up()
    if args.ablation:
        with _pool(cfg.workers) as pool:
            print(ablation(cfg, pool))
        return 0
    progress = Progress()
    with _pool(cfg.workers) as pool:
        knobs = tune(cfg, pool, progress) if cfg.tune else {}
        seeds = [REPORT_BASE + k for k in range(cfg.seeds)]
        e0 = starmap_with_progress(pool, e0_seed, [(s, cfg) for s in seeds], progress, "E0 seeds")
        e3_jobs = [(s, cfg, knobs, k < cfg.oracle_seeds) for k, s in enumerate(seeds)]
        e3 = starmap_with_progress(pool, e3_seed, e3_jobs, progress, "E3 seeds")
    seconds = time.monotonic() - started
    md, head = report(cfg, e0, e3, knobs, seconds, command.strip())
    print(md)
    if _writes(args):
        merge_json(ROOT / "docs" / "bench" / "revisit.json", head, lambda k: not k.startswith("real_"))
        plots(cfg, e0, e3, knobs, ROOT / "docs" / "revisit")
        write_block(ROOT / "docs" / "REVISIT.md", md)
    sys.stdout.flush()
    return 0
