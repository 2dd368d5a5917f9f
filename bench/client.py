"""``icecrawler bench client``: what one crawler client costs and delivers.

1. **CPU per page** (parse + fingerprint), per source, on realistic sample pages (``bench._pages.bench_cases``,
   rendered by the sandbox's site renderers): a 45-post legacy weibo.com page (its 3 ``mbloglist`` chunks), a
   10-post m.weibo.cn page, a 20-post page of weibo.com's JSON API (``weibo_web``), an ECSHOP goods
   page and a 10-review ``comment.php`` page, a 10-review JD page.
   Baseline in the same run: only decoding the body with the generic library (``json.loads`` / lxml via
   BeautifulSoup), i.e. the floor any parser pays.
2. **Throughput**: pages/s of ONE ``icecrawler client`` process (real scheduler + storage servers, the
   sandbox adding ``--latency-ms`` to every request) against the ceiling ``workers × 1000 / latency_ms``;
   baseline in the same run: a bare ``requests`` loop with the same number of threads fetching the same URLs
   (no parsing, no Ice, no storage). Target: ≥ 90 % of the ceiling. Best of ``--runs`` runs, each listed in
   the JSON with the machine's load average (other processes on a shared machine only ever slow a run).
3. **A new connection under the fetch deadline**: microseconds per new loopback TCP connection made through the
   deadline's helper thread (``Watchdog.call_within``, which bounds the name lookup), against the same connection
   made directly, alternating in rounds; and, for scale, one whole fetch through the real transport on a new
   connection each time (a loopback server that closes every connection). ``--only-connect`` runs this part alone
   and merges its keys into the JSON.

Writes docs/bench/client.json.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import json
import os
import socket
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests

from bench import ROOT, write_figures
from bench._pages import BenchCase, bench_cases
from bench._scrape import Scraper
from crawler_client.crawl import item_text
from crawler_client.http import Fetcher, FetchPolicy
from crawler_client.sources import get_source
from crawler_client.sources._decode import decode_body, make_soup, strip_jsonp
from crawler_client.sources.base import PageRequest
from crawler_client.transport import HttpSession, Urllib3Transport
from icecrawler.deadline import Watchdog
from icecrawler.settings.default_settings import DEFAULTS
from shhd.fingerprint import clear_token_cache, fingerprint_texts

OUT = ROOT / "docs" / "bench" / "client.json"


# --- 1. CPU per page ------------------------------------------------------------------------------------------


def _cpu_ms(fn: Callable[[], object], repeat: int) -> float:
    """Best of 3 mean CPU milliseconds (process time: other processes on the machine do not count)."""
    best = float("inf")
    for _ in range(3):
        start = time.process_time()
        for _ in range(repeat):
            fn()
        best = min(best, (time.process_time() - start) / repeat)
    return best * 1000


def _generic_decode(case: BenchCase) -> object:
    """Baseline: decode the body with the generic library only (json, then lxml for embedded HTML)."""
    text = strip_jsonp(decode_body(case.page.body)).strip()
    if text.startswith("{"):
        doc = json.loads(text)
        html = next((v for v in doc.values() if isinstance(v, str) and "<" in v), "") if isinstance(doc, dict) else ""
        return make_soup(html) if html else doc
    return make_soup(text)


def _fingerprint_cold(texts: list[str]) -> int:
    """A first visit's fingerprint: nothing in the token cache."""
    clear_token_cache()
    return fingerprint_texts(texts)


def _decode_all(group: list[BenchCase]) -> list[object]:
    return [_generic_decode(case) for case in group]


def cpu_per_page(repeat: int) -> list[dict[str, Any]]:
    cases = bench_cases()
    groups: dict[str, list[BenchCase]] = {}
    for case in cases:
        key = "weibo_pc/page45 (3 chunks)" if case.source == "weibo_pc" else case.name
        groups.setdefault(key, []).append(case)
    fingerprint_texts(["预热"])  # jieba's one-off dictionary load is per process, not per page
    rows = []
    for name, group in groups.items():
        source = get_source(group[0].source)

        def parse(group: list[BenchCase] = group, source: Any = source) -> list[Any]:
            return [item for c in group for item in source.parse(c.task, c.request, c.page, c.now_ms).items]

        items = parse()
        texts = [item_text(item) for item in items]
        parse_ms = _cpu_ms(parse, repeat)
        # First visit (token cache cleared each time) and a re-crawl of the same window (cache hits).
        fp_ms = _cpu_ms(functools.partial(_fingerprint_cold, texts), repeat)
        fp_warm_ms = _cpu_ms(functools.partial(fingerprint_texts, texts), repeat)
        base_ms = _cpu_ms(functools.partial(_decode_all, group), repeat)
        rows.append(
            {
                "page": name,
                "source": group[0].source,
                "items": len(items),
                "bytes": sum(len(c.page.body) for c in group),
                "parse_ms": round(parse_ms, 3),
                "fingerprint_ms": round(fp_ms, 3),
                "fingerprint_recrawl_ms": round(fp_warm_ms, 3),
                "total_ms": round(parse_ms + fp_ms, 3),
                "baseline_decode_ms": round(base_ms, 3),
            }
        )
    return rows


# --- 2. throughput --------------------------------------------------------------------------------------------


def _scenario(products: int, users: int, backlog: int) -> Any:
    from sandbox.scenario import Product, Scenario, WeiboUser
    from sandbox.schedules import Schedule

    return Scenario(
        seed=3,
        products=tuple(
            Product("jd", str(100_000_000_000 + n), backlog=backlog, schedule=Schedule("static"))
            for n in range(products)
        ),
        users=tuple(
            WeiboUser(
                uid=1_900_000_000 + n,
                sites=("m",),
                backlog=backlog,
                pinned=False,
                long_text_every=0,
                retweet_every=0,
                schedule=Schedule("static"),
            )
            for n in range(users)
        ),
    )


def _raw_baseline(urls: list[str], workers: int) -> float:
    """Pages/s of a bare requests loop with ``workers`` threads over ``urls``."""
    lock = threading.Lock()
    todo = list(urls)

    def work() -> None:
        with requests.Session() as session:
            while True:
                with lock:
                    if not todo:
                        return
                    url = todo.pop()
                session.get(url, timeout=10).content  # noqa: B018 - reading the body is the point

    threads = [threading.Thread(target=work) for _ in range(workers)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return len(urls) / (time.perf_counter() - start)


def throughput(
    workers: int, latency_ms: int, products: int, users: int, backlog: int, metrics: bool = True
) -> dict[str, Any]:
    """One run; ``metrics``: the client serves /metrics and is scraped once a second (else metrics.client.port=0)."""
    from icecrawler.processes import cpu_seconds
    from icecrawler_local.stack import running_stack

    max_pages = backlog // 10 + 1
    with tempfile.TemporaryDirectory(prefix="bench-client-") as tmp:
        scheduler = {
            "scheduler.initial_period_s": 86400,
            "scheduler.min_period_s": 3600,
            "scheduler.max_period_s": 86400,
        }
        client = {
            "client.workers": workers,
            "client.batch": workers,
            "client.max_pages": max_pages,
            "client.idle_sleep_s": 0.2,
            "client.progress_log_s": 5,
        }
        with running_stack(
            Path(tmp),
            _scenario(products, users, backlog),
            speed=1.0,
            latency_ms=latency_ms,
            scheduler_settings=scheduler,
            client_settings=client,
        ) as stack:
            ids = [f"jd:{p.id}" for p in stack.scenario.products]
            ids += [f"weibo_mobile:{u.uid}" for u in stack.scenario.users]
            process = stack.start_client("bench-client", None if metrics else {"metrics.client.port": 0})
            scraper = Scraper([stack.metrics_urls()["bench-client"]] if metrics else [])
            started = time.monotonic() + 60
            while "started" not in process.log_path.read_text(errors="replace") and time.monotonic() < started:
                time.sleep(0.1)
            cpu_before = cpu_seconds(process.pid)  # imports, Ice and jieba start-up are not per-page costs
            stack.seed(ids)
            expected = len(stack.truth()["items"])
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                if len(stack.stored()) >= expected or not process.alive():
                    break
                time.sleep(1.0)
            stored = len(stack.stored())
            client_cpu_s = cpu_seconds(process.pid) - cpu_before
            scrapes = scraper.stop()
            load = os.getloadavg()[0]
            process.stop(timeout_s=20)
            site = [r for r in stack.requests() if r["site"] in ("jd", "m")]
            first, last = min(r["wall_ms"] for r in site), max(r["wall_ms"] for r in site)
            pages = len(site)
            client_rate = (pages - 1) / ((last - first) / 1000) if last > first else 0.0
            urls = [
                f"{stack.sandbox.url}/{r['site']}{r['path']}" + (f"?{r['query']}" if r["query"] else "") for r in site
            ]
            raw_rate = _raw_baseline(urls, workers)
    ceiling = workers * 1000 / latency_ms
    return {
        "workers": workers,
        "latency_ms": latency_ms,
        "tasks": products + users,
        "pages": pages,
        "items_published": expected,
        "items_stored": stored,
        "client_pages_per_s": round(client_rate, 2),
        "raw_requests_pages_per_s": round(raw_rate, 2),
        "ceiling_pages_per_s": round(ceiling, 2),
        "client_share_of_ceiling": round(client_rate / ceiling, 3),
        "raw_share_of_ceiling": round(raw_rate / ceiling, 3),
        "client_cpu_ms_per_page": round(client_cpu_s * 1000 / max(1, pages), 2),
        "machine_load_avg_1min": round(load, 2),
        "cpu_cores": os.cpu_count(),
        "metrics": metrics,
        "scrapes": scrapes,
    }


# --- 3. A new connection under the fetch deadline -------------------------------------------------------------


class _ClosingHandler(http.server.BaseHTTPRequestHandler):
    """Answers every GET with a small page and closes the connection: each fetch needs a new one."""

    def do_GET(self) -> None:
        body = b"ok"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def connection_setup(rounds: int, per_round: int) -> dict[str, float]:
    """Median over ``rounds`` of the mean microseconds per new connection, direct and under the deadline (ABAB,
    so the machine's drift lands on both), and per whole fetch on a new connection."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=4096)
    address = listener.getsockname()
    watchdog = Watchdog()
    done = threading.Event()  # the rounds are over: stop accepting

    def accept_all() -> None:
        while not done.is_set():
            try:
                listener.accept()[0].close()
            except OSError:
                return

    acceptor = threading.Thread(target=accept_all, daemon=True)
    acceptor.start()

    def connect() -> socket.socket:
        return socket.create_connection(address, timeout=5)

    def direct() -> None:
        connect().close()

    def under_deadline() -> None:
        watch = watchdog.watch(5)
        watchdog.call_within(watch, connect, socket.socket.close).close()
        watchdog.release(watch)

    samples: dict[str, list[float]] = {"direct": [], "under_deadline": []}
    for _ in range(rounds):
        for name, step in (("direct", direct), ("under_deadline", under_deadline)):
            started = time.perf_counter()
            for _ in range(per_round):
                step()
            samples[name].append((time.perf_counter() - started) / per_round * 1e6)
    done.set()
    socket.create_connection(address, timeout=5).close()  # wakes the acceptor's accept(): it sees the rounds are over
    acceptor.join(5)
    listener.close()

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _ClosingHandler)
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    policy = FetchPolicy(
        timeout_s=5, total_timeout_s=10, retries=0, backoff_s=0.01, max_body_bytes=10_000, user_agent="b"
    )
    session = HttpSession()
    fetcher = Fetcher(Urllib3Transport(session, watchdog), policy)
    request = PageRequest(url=f"http://127.0.0.1:{server.server_address[1]}/")
    fetches: list[float] = []
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(per_round):
            fetcher.fetch(request)
        fetches.append((time.perf_counter() - started) / per_round * 1e6)
    session.close()
    server.shutdown()
    server.server_close()
    direct_us, deadline_us = statistics.median(samples["direct"]), statistics.median(samples["under_deadline"])
    return {
        "new_connection_direct_us": round(direct_us, 1),
        "new_connection_under_deadline_us": round(deadline_us, 1),
        "new_connection_deadline_cost_us": round(deadline_us - direct_us, 1),
        "fetch_on_new_connection_us": round(statistics.median(fetches), 1),
    }


def _print_connection_setup(figures: dict[str, float]) -> None:
    print()
    print("a new loopback connection (median of rounds, microseconds)")
    print(f"{'baseline: direct connect':44s} {figures['new_connection_direct_us']:9.1f}")
    print(f"{'through the deadline helper (call_within)':44s} {figures['new_connection_under_deadline_us']:9.1f}")
    print(f"{'cost of the helper':44s} {figures['new_connection_deadline_cost_us']:9.1f}")
    print(f"{'for scale: one whole fetch on a new connection':44s} {figures['fetch_on_new_connection_us']:9.1f}")


def headline(result: dict[str, Any]) -> dict[str, Any]:
    """The flat figures for docs/bench/client.json: one key per number, units in the key names."""
    flat: dict[str, Any] = dict(result.get("connection_setup", {}))
    for row in result["cpu_per_page"]:
        page = row["page"].split(" ")[0].replace("/", "_")
        flat[f"{page}_items"] = row["items"]
        for key in ("parse_ms", "fingerprint_ms", "fingerprint_recrawl_ms", "total_ms", "baseline_decode_ms"):
            flat[f"{page}_{key}"] = row[key]
    for tp in result["throughput"]:
        prefix = f"workers_{tp['workers']}_latency_{tp['latency_ms']}ms"
        for key in (
            "client_pages_per_s",
            "raw_requests_pages_per_s",
            "ceiling_pages_per_s",
            "client_share_of_ceiling",
            "raw_share_of_ceiling",
            "client_cpu_ms_per_page",
            "machine_load_avg_1min",
            "items_published",
            "items_stored",
        ):
            flat[f"{prefix}_{key}"] = tp[key]
        ab = tp.get("metrics_ab", {})
        for state, figures in ab.items():
            flat[f"{prefix}_metrics_{state}_client_pages_per_s"] = figures["client_pages_per_s"]
            flat[f"{prefix}_metrics_{state}_client_cpu_ms_per_page"] = figures["client_cpu_ms_per_page"]
        if {"on", "off"} <= ab.keys():
            off, on = ab["off"], ab["on"]
            flat[f"{prefix}_metrics_cost_throughput_pct"] = round(
                100 * (off["client_pages_per_s"] - on["client_pages_per_s"]) / off["client_pages_per_s"], 2
            )
            flat[f"{prefix}_metrics_cost_cpu_pct"] = round(
                100 * (on["client_cpu_ms_per_page"] - off["client_cpu_ms_per_page"]) / off["client_cpu_ms_per_page"], 2
            )
    return flat


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="icecrawler bench client", description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=20, help="parses per timing (default 20)")
    parser.add_argument(
        "--workers",
        type=int,
        nargs="+",
        default=[DEFAULTS["client.workers"]],
        help="client.workers for the throughput runs, one run each (default: the setting's default)",
    )
    parser.add_argument("--latency-ms", type=int, default=100, help="sandbox latency per request (default 100)")
    parser.add_argument("--products", type=int, default=24, help="JD products crawled (default 24)")
    parser.add_argument("--users", type=int, default=24, help="m.weibo.cn users crawled (default 24)")
    parser.add_argument("--backlog", type=int, default=100, help="items per target (10 per page; default 100)")
    parser.add_argument(
        "--runs", type=int, default=2, help="throughput runs per worker count; the best counts (default 2)"
    )
    parser.add_argument("--skip-throughput", action="store_true", help="only the CPU part")
    parser.add_argument(
        "--metrics",
        default="off,on",
        help="throughput runs with the client's /metrics off and/or "
        "on (scraped every second), alternating, comma-separated (default: off,on)",
    )
    parser.add_argument(
        "--only-connect",
        action="store_true",
        help="only the new-connection part; its keys are merged into docs/bench/client.json",
    )
    parser.add_argument("--connect-rounds", type=int, default=9, help="alternating rounds (default 9)")
    parser.add_argument("--connect-per-round", type=int, default=1000, help="connections per round (default 1000)")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)

    connect = connection_setup(args.connect_rounds, args.connect_per_round)
    _print_connection_setup(connect)
    if args.only_connect:
        if not args.no_write:
            write_figures(OUT, {**json.loads(OUT.read_text(encoding="utf-8")), **connect})
        return 0

    rows = cpu_per_page(args.repeat)
    print(
        f"{'page':28s} {'items':>5s} {'KiB':>6s} {'parse ms':>9s} {'fp ms':>7s} {'total ms':>9s} "
        f"{'baseline: decode only ms':>25s} {'fp re-crawl ms':>15s}"
    )
    for row in rows:
        print(
            f"{row['page']:28s} {row['items']:5d} {row['bytes'] / 1024:6.1f} {row['parse_ms']:9.2f} "
            f"{row['fingerprint_ms']:7.2f} {row['total_ms']:9.2f} {row['baseline_decode_ms']:25.2f} "
            f"{row['fingerprint_recrawl_ms']:15.2f}"
        )
    result: dict[str, Any] = {"cpu_per_page": rows, "connection_setup": connect}
    result["throughput"] = []
    for workers in [] if args.skip_throughput else args.workers:
        # Best of --runs: on a shared machine the other tenants' load only ever slows a run down.
        states = [state.strip() == "on" for state in args.metrics.split(",") if state.strip()]
        runs = [
            throughput(workers, args.latency_ms, args.products, args.users, args.backlog, metrics)
            for _ in range(args.runs)
            for metrics in states
        ]
        best = {
            metrics: max((run for run in runs if run["metrics"] is metrics), key=lambda run: run["client_pages_per_s"])
            for metrics in set(states)
        }
        tp = dict(best[states[-1]])
        tp["metrics_ab"] = {
            ("on" if metrics else "off"): {
                key: run[key] for key in ("client_pages_per_s", "client_cpu_ms_per_page", "scrapes")
            }
            for metrics, run in best.items()
        }
        tp["runs"] = [
            {
                key: run[key]
                for key in (
                    "client_pages_per_s",
                    "raw_requests_pages_per_s",
                    "machine_load_avg_1min",
                    "metrics",
                    "client_cpu_ms_per_page",
                )
            }
            for run in runs
        ]
        result["throughput"].append(tp)
        print()
        print(
            f"best of {len(runs)} run(s): one client process, {tp['workers']} workers, sandbox latency "
            f"{tp['latency_ms']} ms, "
            f"{tp['tasks']} tasks, {tp['pages']} pages, {tp['items_stored']}/{tp['items_published']} items stored"
        )
        print(f"{'':34s} {'pages/s':>8s} {'of ceiling':>11s}")
        print(f"{'ceiling (workers x 1000/latency)':34s} {tp['ceiling_pages_per_s']:8.1f} {1:11.0%}")
        print(f"{'icecrawler client':34s} {tp['client_pages_per_s']:8.1f} {tp['client_share_of_ceiling']:11.1%}")
        print(
            f"{'baseline: bare requests threads':34s} {tp['raw_requests_pages_per_s']:8.1f} "
            f"{tp['raw_share_of_ceiling']:11.1%}"
        )
        for state, ab in sorted(tp["metrics_ab"].items()):
            print(
                f"metrics {state:3s} (best of {args.runs}): {ab['client_pages_per_s']:8.1f} pages/s, "
                f"{ab['client_cpu_ms_per_page']:.2f} ms CPU per page, {ab['scrapes']} scrapes"
            )
        print(
            f"client CPU {tp['client_cpu_ms_per_page']:.1f} ms per page (whole process: fetch, parse, fingerprint, "
            f"Ice); machine load average {tp['machine_load_avg_1min']} on {tp['cpu_cores']} cores"
        )
    if not args.no_write:
        write_figures(OUT, headline(result))
    return 0
