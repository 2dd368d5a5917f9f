"""The sandbox on real publication traces (``icecrawler sandbox --traces FILE``): the file is read by the revisit
benchmark's reader, each trace becomes one target (Weibo traces users of one Weibo site, the others products of
one shop), and the ground truth holds the trace's times shifted so that its start lands on the run's start, served
over real HTTP through the real parsers."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from icecrawler.errors import ConfigError
from icecrawler.models import Review, TaskKind
from icecrawler.processes import ProcessGroup, free_port, icecrawler_argv, wait_for_port
from icecrawler_local.oracle import read_truth_file
from sandbox import SandboxServer, sandbox_argv, sandbox_process
from sandbox.cli import add_options, trace_options_scenario
from sandbox.content import SLOTS, beijing
from sandbox.scenario import load_scenario
from sandbox.tracefile import Trace
from sandbox.tracescenario import (
    TRACE_PRODUCT_BASE,
    TRACE_UID_BASE,
    TraceMapping,
    load_trace_scenario,
    summarize_traces,
    trace_scenario,
)
from tests.helpers import TRACE_T0, wait_for, write_traces
from tests.sandbox.conftest import ORIGIN_S, crawl, visitor_session

CREATED = "%Y-%m-%d %H:%M:%S"
#: A Weibo user posting through two hours (two posts in one second among them), a review stream, a commit stream.
TRACES = (
    Trace("1669879400", "weibo", (TRACE_T0, TRACE_T0 + 300, TRACE_T0 + 300, TRACE_T0 + 1800.25, TRACE_T0 + 7200)),
    Trace("p-17", "reviews", (TRACE_T0 - 3600, TRACE_T0 + 60, TRACE_T0 + 600, TRACE_T0 + 5400)),
    Trace("abc", "git-author", (TRACE_T0 + 10, TRACE_T0 + 20, TRACE_T0 + 4000)),
)


#: Their targets in the truth: the Weibo user on m.weibo.cn, the two streams products of JD.
TARGETS = (("weibo_mobile", str(TRACE_UID_BASE)), ("jd", str(TRACE_PRODUCT_BASE)), ("jd", str(TRACE_PRODUCT_BASE + 1)))
#: Each item's time on the run's clock, ms after the start, when each trace starts at its first item: its gaps kept,
#: the second post of one second moved 1 s later (MIN_GAP_MS).
FROM_FIRST_MS = (
    [0, 300_000, 301_000, 1_800_250, 7_200_000],
    [0, 3_660_000, 4_200_000, 9_000_000],
    [0, 10_000, 3_990_000],
)
#: ... and when each starts half an hour after its first item: what came before is the backlog, and the second post
#: of one second is moved 1 s earlier, away from the start.
FROM_HALF_AN_HOUR_MS = (
    [-1_800_000, -1_501_000, -1_500_000, 250, 5_400_000],
    [-1_800_000, 1_860_000, 2_400_000, 7_200_000],
    [-1_800_000, -1_790_000, 2_190_000],
)


def published(truth: dict[str, Any], source: str, target: str) -> list[tuple[int, str]]:
    """(published_ms, created_at) of a target's items in the truth, oldest first."""
    return [
        (int(i["published_ms"]), str(i["created_at"]))
        for i in truth["items"]
        if i["source"] == source and i["target"] == target
    ]


def shifted(origin_ms: int, offsets: list[int], source: str) -> list[tuple[int, str]]:
    """What the truth must say of items at ``offsets`` ms after the start: the item's time in ``created_at``; as
    ``published_ms``, that time too, but a product's backlog counts as published when the product appeared (the
    start), as for every sandbox product."""
    return [
        (origin_ms + (ms if source.startswith("weibo") else max(ms, 0)), beijing(origin_ms + ms).strftime(CREATED))
        for ms in offsets
    ]


def test_each_trace_becomes_one_target_named_after_it() -> None:
    scenario = trace_scenario(TRACES, TraceMapping(weibo_site="web", shop="ecshop"), seed=4)
    assert [(u.uid, u.name, u.sites, u.schedule.times) for u in scenario.users] == [
        (TRACE_UID_BASE, "weibo:1669879400", ("web",), TRACES[0].times)
    ]
    assert [(p.source, p.id, p.name) for p in scenario.products] == [
        ("ecshop", str(TRACE_PRODUCT_BASE), "reviews:p-17"),
        ("ecshop", str(TRACE_PRODUCT_BASE + 1), "git-author:abc"),
    ]
    assert scenario.seed == 4 and all(p.schedule.start_s == p.schedule.times[0] for p in scenario.products)
    limited = trace_scenario(TRACES, TraceMapping(limit=2, backlog_days=1))
    assert len(limited.users) == 1 and [p.source for p in limited.products] == ["jd"]
    assert limited.products[0].schedule.start_s == TRACE_T0 - 3600 + 86400


def test_a_source_prefix_picks_the_traces_before_the_limit(tmp_path: Path) -> None:
    """``--traces-source``: a file sorted by source (the committed real.jsonl: Weibo last) gives the Weibo users
    without taking every trace before them."""
    parser = argparse.ArgumentParser()
    add_options(parser)
    path = str(write_traces(tmp_path / "t.jsonl", TRACES[::-1]))
    world = trace_options_scenario(
        parser.parse_args(["--traces", path, "--traces-source", "WEIBO", "--traces-limit", "1"]), None
    )
    assert world is not None and [u.name for u in world.users] == ["weibo:1669879400"] and not world.products
    git = trace_scenario(TRACES, TraceMapping(source="git"))
    assert [p.name for p in git.products] == ["git-author:abc"] and not git.users
    with pytest.raises(
        ConfigError, match=r"no traces of a source starting with 'forum' \(the file's: git-author, reviews, weibo\)"
    ):
        trace_scenario(TRACES, TraceMapping(source="forum"))
    with pytest.raises(ConfigError, match="--traces-source: give --traces FILE too"):
        trace_options_scenario(parser.parse_args(["--traces-source", "weibo"]), None)


def test_the_summary_counts_targets_items_backlog_span_and_spread() -> None:
    summary = summarize_traces(trace_scenario(TRACES, TraceMapping(backlog_days=600 / 86400)))
    # Ten minutes in: Weibo 3 items before, 2 after (the last 6600 s after the start); reviews 1 and 3 (8400 s);
    # commits 2 and 1. The two posts of one second are both backlog: one moves 1 s earlier.
    assert (summary.users, summary.products, summary.backlog, summary.future) == (1, 2, 6, 6)
    assert summary.span_s == 8400 and (summary.spread, summary.most_moved_ms) == (1, 1000)
    line = summary.line("f.jsonl", speed=60)
    assert "1 Weibo user(s), 2 product(s); 12 items: 6 backlog, 6 over 0.10 simulated days" in line, line
    assert "1 item(s) moved (at most 1 s)" in line, line


@pytest.mark.parametrize(
    ("mapping", "message"),
    [
        ({"weibo_site": "weibo.com"}, "Weibo site must be one of"),
        ({"shop": "taobao"}, "shop must be one of"),
        ({"limit": 0}, "at least 1, not 0"),
        ({"limit": "5"}, "whole number of traces"),
        ({"source": ""}, "source must be a non-empty prefix"),
        ({"source": 3}, "source must be a non-empty prefix"),
        ({"backlog_days": "2"}, "backlog must be a number of days"),
        ({"backlog_days": -1.0}, "backlog must be a number of days"),
    ],
)
def test_a_bad_mapping_is_a_config_error(mapping: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        TraceMapping(**mapping)


def test_a_file_the_trace_reader_refuses_is_a_config_error_naming_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(
        json.dumps({"target": "a", "source": "weibo", "times": [TRACE_T0]}) + "\n{not json\n", encoding="utf-8"
    )
    with pytest.raises(ConfigError, match=rf"--traces: {path}:2: not JSON"):
        load_trace_scenario(path, TraceMapping())
    path.write_text(json.dumps({"target": "a", "source": "weibo", "times": [TRACE_T0 * 1000]}) + "\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="after 2100"):
        load_trace_scenario(path, TraceMapping())


def test_the_sites_serve_the_traces_items_at_the_shifted_times(tmp_path: Path) -> None:
    """In process, on a frozen clock: the truth holds every trace item at its shifted time (the backlog before the
    start flagged as such), and the real parsers read the same ids from the sites' pages."""
    scenario = load_trace_scenario(write_traces(tmp_path / "t.jsonl", TRACES), TraceMapping(backlog_days=0.5 / 24))
    with SandboxServer(scenario, speed=0, port=0, origin=ORIGIN_S) as server:
        server.clock.advance(3 * 3600)
        truth = server.truth()
        origin_ms = int(truth["origin_ms"])
        for (source, target), trace, offsets in zip(TARGETS, TRACES, FROM_HALF_AN_HOUR_MS, strict=True):
            assert published(truth, source, target) == shifted(origin_ms, offsets, source), target
            backlog = [i["backlog"] for i in truth["items"] if i["target"] == target]
            assert backlog == [t < trace.times[0] + 1800 for t in trace.times], target
        uid, review_stream = TARGETS[0][1], TARGETS[1][1]
        posts = crawl(server, "weibo_mobile", uid)
        reviews = crawl(server, "jd", review_stream, kind=TaskKind.ProductReviews)
        shown = {str(getattr(item, "id", "")) for item in posts.items + reviews.items}
        assert shown >= {i["id"] for i in truth["items"] if i["target"] in (uid, review_stream)}


@pytest.mark.e2e
@pytest.mark.slow
def test_icecrawler_sandbox_traces_publishes_a_trace_file_over_http_on_a_fast_clock(tmp_path: Path) -> None:
    """The command as a user runs it: ``icecrawler sandbox --traces FILE --speed 3600``. Every item of the file
    appears in /__sandbox/truth at the trace's time shifted onto the run's clock (two simulated hours: two wall
    seconds), the scenario names the trace each target replays, and the log has the start-up summary."""
    path = write_traces(tmp_path / "t.jsonl", TRACES)
    total = sum(len(t.times) for t in TRACES)
    with sandbox_process(tmp_path, speed=3600, traces=path) as sandbox:

        def truth() -> dict[str, Any]:
            return dict(sandbox.control("truth"))

        wait_for(lambda: len(truth()["items"]) == total, lambda: f"not every item published: {truth()}", 60)
        final = truth()
        names = {u["name"] for u in sandbox.control("scenario")["users"]}
        log = sandbox.process.log_tail(50)
    origin_ms = int(final["origin_ms"])
    for (source, target), offsets in zip(TARGETS, FROM_FIRST_MS, strict=True):
        assert published(final, source, target) == shifted(origin_ms, offsets, source), target
    assert not any(i["backlog"] for i in final["items"]), "a trace started at its first item has no backlog"
    assert names == {"weibo:1669879400"}
    assert "1 Weibo user(s), 2 product(s); 12 items: 0 backlog, 12 over" in log, log
    assert "1 item(s) moved (at most 1 s)" in log, log


@pytest.mark.parametrize(("weibo_site", "shop"), [("pc", "ecshop"), ("web", "jd")])
def test_the_weibo_site_and_shop_options_put_the_traces_on_those_sites_over_http(
    tmp_path: Path, weibo_site: str, shop: str
) -> None:
    """``--traces-weibo-site pc|web`` and ``--traces-shop ecshop``: the trace targets live on the sites chosen, whose
    pages the real parsers read every item of the truth from (the Weibo trace's five posts, the review stream's
    four reviews; ECSHOP's reviews have no id, so by their texts)."""
    parser = argparse.ArgumentParser()
    add_options(parser)
    path = str(write_traces(tmp_path / "t.jsonl", TRACES))
    args = ["--traces", path, "--traces-weibo-site", weibo_site, "--traces-shop", shop]
    scenario = trace_options_scenario(parser.parse_args(args), None)
    assert scenario is not None
    weibo = {"pc": "weibo_pc", "web": "weibo_web"}[weibo_site]
    uid, product = str(TRACE_UID_BASE), str(TRACE_PRODUCT_BASE)
    with SandboxServer(scenario, speed=0, port=0, origin=ORIGIN_S) as server:
        server.clock.advance(3 * 3600)
        session = visitor_session(server) if weibo_site == "web" else None
        posts = crawl(server, weibo, uid, session=session)
        reviews = [r for r in crawl(server, shop, product, kind=TaskKind.ProductReviews).items if isinstance(r, Review)]
        truth_posts = server.truth(weibo, uid)["items"]
        truth_reviews = server.truth(shop, product)["items"]
    assert len(truth_posts) == 5 and len(truth_reviews) == 4
    assert {str(getattr(p, "id", "")) for p in posts.items} >= {i["id"] for i in truth_posts}
    if shop == "ecshop":
        assert sorted(r.content for r in reviews) == sorted(i["text"] for i in truth_reviews)
    else:
        assert sorted(str(r.id) for r in reviews) == sorted(i["id"] for i in truth_reviews)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ((), "--traces: {path}: no traces"),
        (
            ("--traces-backlog-days", "1e6"),
            "traces: the backlog must be a number of days from 0 to 36500, not 1000000.0",
        ),
    ],
)
def test_the_command_refuses_an_unusable_trace_file_or_option_with_one_line(
    tmp_path: Path, options: tuple[str, ...], message: str
) -> None:
    """Run outside the checkout (``cwd``), so nothing of the repository's folder can add to or hide the line. A
    backlog of a million days put the items before year 1 and crashed with a traceback."""
    path = tmp_path / "t.jsonl"
    if options:
        write_traces(path, TRACES)
    else:
        path.write_text("\n\n", encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "icecrawler_cli", "sandbox", "--traces", str(path), "--port", "0", *options],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == f"icecrawler sandbox: error: {message.format(path=path)}", done.stderr
    assert done.stdout == ""


def test_the_trace_options_need_a_trace_file_and_replace_the_scenario(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    add_options(parser)
    path = str(write_traces(tmp_path / "t.jsonl", TRACES))
    with pytest.raises(ConfigError, match="--traces-limit, --traces-shop: give --traces FILE too"):
        trace_options_scenario(parser.parse_args(["--traces-limit", "2", "--traces-shop", "ecshop"]), None)
    with pytest.raises(ConfigError, match="give --traces or --scenario, not both"):
        trace_options_scenario(parser.parse_args(["--traces", path]), "my.toml")
    assert trace_options_scenario(parser.parse_args([]), None) is None
    world = trace_options_scenario(
        parser.parse_args(["--traces", path, "--traces-limit", "2", "--traces-shop", "ecshop"]), None
    )
    assert world is not None and [p.source for p in world.products] == ["ecshop"] and len(world.users) == 1


def test_the_demo_plots_a_trace_targets_true_interval_as_its_mean_gap_from_the_start() -> None:
    from icecrawler_local.demo import mean_interval_s

    scenario = trace_scenario(TRACES, TraceMapping())
    # The Weibo trace: 5 items over 7200 s from its start, spread 1 s apart where two share a second.
    assert mean_interval_s(scenario.users[0].schedule) == 7200 / 4
    assert mean_interval_s(trace_scenario(TRACES, TraceMapping(backlog_days=1)).users[0].schedule) is None


@pytest.mark.e2e
@pytest.mark.slow
def test_a_truth_file_records_the_trace_world_so_another_one_is_refused_on_it(tmp_path: Path) -> None:
    """The trace times are part of the scenario whose digest the truth file's run line records: the same command
    started again continues the run, and a world of other traces on that file is refused with one line."""
    path = write_traces(tmp_path / "t.jsonl", TRACES)
    truth = tmp_path / "truth.jsonl"
    port = free_port()
    with ProcessGroup(tmp_path) as group:
        first = group.start("first", sandbox_argv(port, speed=60, traces=path, truth_file=truth))
        wait_for_port("127.0.0.1", port, 40.0, alive=first.alive)
        wait_for(lambda: len(read_truth_file(truth)) > 0, "the sandbox wrote no truth", timeout_s=30)
        first.stop()
        again = group.start("again", sandbox_argv(port, speed=60, traces=path, truth_file=truth))
        wait_for_port("127.0.0.1", port, 40.0, alive=again.alive)
        again.stop()
        continued = again.log_tail()
        before = truth.read_bytes()
        other = group.start("other", sandbox_argv(free_port(), speed=60, traces=path, traces_limit=1, truth_file=truth))
        code = other.popen.wait(timeout=60)
        log = other.log_tail()
    assert code != 0 and str(truth) in log and "another run" in log, log
    assert f"continuing the run of {truth}" in continued, continued
    runs = [r for r in map(json.loads, before.decode().splitlines()) if r["kind"] == "run"]
    assert len(runs) == 1, runs
    assert "Traceback" not in log, log
    assert truth.read_bytes() == before


def test_a_scenario_files_traces_table_adds_one_target_per_trace_to_its_own(tmp_path: Path) -> None:
    write_traces(tmp_path / "t.jsonl", TRACES)
    path = tmp_path / "world.toml"
    path.write_text(
        'seed = 3\n[[users]]\nuid = 1907518591\n[[misbehave]]\nsite = "jd"\nteapot_rate = 0.5\n'
        '[traces]\nfile = "t.jsonl"\nlimit = 2\nshop = "ecshop"\nbacklog_days = 0.5\n',
        encoding="utf-8",
    )
    scenario = load_scenario(path)
    assert [u.uid for u in scenario.users] == [1907518591, TRACE_UID_BASE]
    assert [(p.source, p.id, p.name) for p in scenario.products] == [
        ("ecshop", str(TRACE_PRODUCT_BASE), "reviews:p-17")
    ]
    assert scenario.seed == 3 and len(scenario.misbehave) == 1
    assert scenario.users[1].schedule.start_s == TRACE_T0 + 43200
    assert "traces" not in scenario.to_dict(), "the world it serves holds the traces' targets themselves"


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ("[traces]\nlimit = 2\n", r"file required"),
        ('[traces]\nfile = "t.jsonl"\nstart = 3\n', r"file required; got \['file', 'start'\]"),
        ('[traces]\nfile = "t.jsonl"\nlimit = "all"\n', "whole number of traces"),
        ('[traces]\nfile = "missing.jsonl"\n', r"world.toml: \[traces\]: .*missing.jsonl: cannot read it"),
        (f'[[users]]\nuid = {TRACE_UID_BASE}\n[traces]\nfile = "t.jsonl"\n', "duplicate Weibo uid"),
        ('traces = "t.jsonl"\n', "must be a table"),
    ],
)
def test_a_bad_traces_table_is_a_config_error(tmp_path: Path, table: str, message: str) -> None:
    write_traces(tmp_path / "t.jsonl", TRACES)
    path = tmp_path / "world.toml"
    path.write_text(table, encoding="utf-8")
    with pytest.raises(ConfigError, match=message):
        load_scenario(path)


def test_the_summary_counts_jd_products_with_more_reviews_than_jds_pages_show() -> None:
    long = (
        Trace("big", "reviews", tuple(TRACE_T0 + 10 * k for k in range(1001))),
        Trace("small", "reviews", (TRACE_T0,)),
    )
    on_jd = summarize_traces(trace_scenario(long, TraceMapping(shop="jd")))
    assert on_jd.over_jd_pages == 1 and "1 JD product(s) hold more than the 1000 reviews" in on_jd.line("f", 60)
    assert summarize_traces(trace_scenario(long, TraceMapping(shop="ecshop"))).over_jd_pages == 0


@pytest.mark.parametrize("source", ["weibo", "reviews"])
def test_more_traces_of_a_kind_than_the_sites_ids_keep_apart_are_refused_naming_the_limit(source: str) -> None:
    """Every trace's first item lands on the start (no backlog), and an item id is (time, slot % SLOTS): the
    SLOTS + 1st user (or product) would publish the first user's (product's) ids. Refused, pointing at the limit."""
    traces = [Trace(f"t{k}", source, (TRACE_T0,)) for k in range(SLOTS + 1)]
    fits = trace_scenario(traces[:SLOTS], TraceMapping())
    assert len(fits.users) + len(fits.products) == SLOTS
    with pytest.raises(ConfigError, match=rf"{SLOTS + 1} .*more than the {SLOTS}.*--traces-limit"):
        trace_scenario(traces, TraceMapping())


def test_the_start_up_line_of_a_scenario_files_traces_table_names_the_trace_file(tmp_path: Path) -> None:
    """The line says which file the traces came from: the table's, not the scenario file (which holds none)."""
    write_traces(tmp_path / "t.jsonl", TRACES)
    path = tmp_path / "world.toml"
    path.write_text('seed = 3\n[traces]\nfile = "t.jsonl"\n', encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "icecrawler_cli", "sandbox", "--scenario", str(path), "--print-scenario"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert f"traces {tmp_path / 't.jsonl'}: 1 Weibo user(s), 2 product(s)" in done.stderr, done.stderr


def test_sandbox_argv_passes_every_trace_option_the_command_takes() -> None:
    """``sandbox_process`` (tests, benchmarks, the harnesses) could not filter traces by source: ``sandbox_argv`` had
    no ``traces_source``, though ``icecrawler sandbox`` and ``demo`` take ``--traces-source``."""
    argv = sandbox_argv(1, traces="t.jsonl", traces_source="weibo")
    assert argv[argv.index("--traces-source") + 1] == "weibo"
    help_text = subprocess.run(
        icecrawler_argv("sandbox", "--help"), capture_output=True, text=True, timeout=60, check=False
    )
    flags = {part for part in argv if part.startswith("--")}
    assert flags <= set(re.findall(r"--[a-z-]+", help_text.stdout)), flags
