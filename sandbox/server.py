"""The one HTTP server: every site under its prefix, misbehaviour applied around the sites, the request log,
and the control endpoints under ``/__sandbox/``.

Control endpoints (JSON):

- ``GET  /__sandbox/health``: ``{"ok": true, "now_ms", "wall_ms", "origin_ms", "speed", "sites"}``.
- ``GET  /__sandbox/truth[?source=&target=&since_ms=]``: published items and product appearances.
- ``GET  /__sandbox/requests[?site=&path=&since=&limit=]``: the request log, arrival times included.
- ``GET  /__sandbox/misbehave``: the live rules. ``POST /__sandbox/misbehave`` with
  ``{"site": "m", "target": "", "set": {"teapot_rate": 1}}``, ``{"site": "m", "clear": true}`` or
  ``{"clear": true}`` (all rules).
- ``POST /__sandbox/advance`` with ``{"seconds": 600}``: jump simulated time (this process only).
- ``GET  /__sandbox/scenario``: the scenario in use.
- ``GET  /__sandbox/visitors``: the passport's visitor sessions (``ttl_s``, ``minted``). ``POST`` with
  ``{"ttl_s": 30}`` changes the lifetime of sessions minted from now on, ``{"expire": true}`` ends every
  visitor session at once (the next API call with one gets HTTP 432), ``{"two_step": true}`` makes the passport
  answer in its older two-step form (a visitor id, then ``/visitor/visitor?a=incarnate``).
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import json
import logging
import socket
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import replace
from http.cookies import CookieError, SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import IO, Any
from urllib.parse import parse_qs, urlsplit

from icecrawler.clock import Clock
from icecrawler.errors import ConfigError
from sandbox.misbehave import Action, MisbehaviourRule, MisbehaviourTable, site_names
from sandbox.pages import interstitial
from sandbox.scenario import Scenario, default_scenario
from sandbox.sites import SiteContext, source_sites
from sandbox.sites.passport import PassportSite, VisitorRegistry
from sandbox.web import SimRequest, SimResponse, Site
from sandbox.world import World

__all__ = ["CONTROL_PREFIX", "SandboxServer"]

log = logging.getLogger("sandbox")

CONTROL_PREFIX = "/__sandbox"
#: Most requests kept in the log (the oldest are dropped; ``seq`` keeps counting).
LOG_LIMIT = 200_000
#: How often a held request looks whether its rule still holds it (``_hold``).
_HOLD_POLL_S = 0.05


class _HttpServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    #: Many clients connect at once in the scale benchmark; the default backlog of 5 would drop SYNs.
    request_queue_size = 256
    sandbox: SandboxServer

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__(address, handler)
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        with self._connections_lock:
            self._connections.add(request)
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._connections_lock:
                self._connections.discard(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A peer that reset its connection (a crawler killed with ``kill -9`` while the connection waited for its
        next request) is a debug line, not the traceback socketserver prints to stderr, which read in a log as a
        crash of the sandbox; any other error still prints one."""
        if isinstance(sys.exc_info()[1], ConnectionError):
            log.debug("connection from %s ended by the peer: %s", client_address, sys.exc_info()[1])
            return
        super().handle_error(request, client_address)

    def close_connections(self) -> None:
        """End every open (kept-alive) connection: their handler threads see EOF and return."""
        with self._connections_lock:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)


class _Handler(BaseHTTPRequestHandler):
    """HTTP/1.1 with keep-alive, like the real sites: a client's session reuses its connection, so a page costs
    neither side a TCP handshake nor the server a new thread. Every answer carries Content-Length; answers that
    misbehave at the connection level (hang, truncate) close it, as does a request body too large to read."""

    server: _HttpServer
    protocol_version = "HTTP/1.1"
    server_version = "nginx"
    sys_version = ""
    #: An idle kept-alive connection is closed after this many seconds (nginx's keepalive_timeout is 75 s).
    timeout = 75
    #: Headers and body go out in separate writes; on a kept-alive connection Nagle's algorithm would hold the
    #: body back until the client's delayed ACK (~40 ms per page). nginx sets tcp_nodelay on keep-alive too.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.client_address[0], *args)

    def do_GET(self) -> None:
        self.server.sandbox._dispatch(self)

    def do_POST(self) -> None:
        self.server.sandbox._dispatch(self)

    def do_HEAD(self) -> None:
        self.server.sandbox._dispatch(self)


class SandboxServer:
    """Every site on one port, in this process (a daemon thread) or in the foreground.

    ``speed``/``origin`` follow ``icecrawler.clock`` (speed 0 freezes time; use ``advance``). ``latency_ms`` is
    added to every site request. A hang or a hold never lasts longer than ``max_hang_s`` and ends at ``stop()``.
    """

    def __init__(
        self,
        scenario: Scenario | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        speed: float = 1.0,
        origin: float = 0.0,
        latency_ms: int = 0,
        seed: int | None = None,
        truth_file: str | Path | None = None,
        max_hang_s: float = 60.0,
        misbehave: Iterable[MisbehaviourRule] = (),
        clock: Clock | None = None,
        visitor_ttl_s: float = 86_400.0,
    ) -> None:
        scenario = scenario if scenario is not None else default_scenario()
        if seed is not None:
            scenario = replace(scenario, seed=seed)
        if latency_ms < 0 or max_hang_s < 0:
            raise ConfigError("latency_ms and max_hang_s must be >= 0")
        self.scenario = scenario
        self._truth_path = Path(truth_file) if truth_file else None
        recorded = read_run_record(self._truth_path) if self._truth_path is not None else None
        if recorded is not None and clock is None and origin <= 0:
            origin = float(recorded["origin"])  # the run the truth file holds goes on: same clock, same world
            _say_run_continues(self._truth_path, origin, speed)
        self.clock = clock if clock is not None else Clock(speed, origin)
        if recorded is not None and self._truth_path is not None:
            _check_same_run(self._truth_path, recorded, self._run_record())
        self.world = World(scenario, self.clock.origin_ms)
        self.latency_ms = latency_ms
        self.max_hang_s = max_hang_s
        self.misbehaviour = MisbehaviourTable((*scenario.misbehave, *misbehave), seed=scenario.seed)
        accounts = dict(scenario.accounts)
        #: Visitor sessions minted by the passport, checked by weibo.com's API (simulated-time expiry).
        self.visitors = VisitorRegistry(visitor_ttl_s)
        context = SiteContext(self.world, accounts, self.visitors)
        self.sites: dict[str, Site] = {PassportSite.prefix: PassportSite(self.visitors)}
        self.sites.update((site.prefix, site) for site in source_sites(context, self.sites))
        for rule in self.misbehaviour.rules():
            if rule.behaviour.new_layout:
                self._check_new_layout(rule.site)
        self._log: collections.deque[dict[str, Any]] = collections.deque(maxlen=LOG_LIMIT)
        self._log_seq = 0
        self._log_lock = threading.Lock()
        self._stopping = threading.Event()
        self._truth_file: IO[str] | None = None
        self._truth_written = (0, 0)
        self._httpd = _HttpServer((host, port), _Handler)
        self._httpd.sandbox = self
        self.host = host
        self.port = int(self._httpd.server_address[1])
        self._threads: list[threading.Thread] = []

    # --- lifecycle ------------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def base_url(self, prefix: str) -> str:
        """A site's base URL (what ``sources.<name>.base_url`` should be), e.g. ``base_url("m")``."""
        return f"{self.url}/{prefix}"

    def start(self) -> SandboxServer:
        """Serve in daemon threads; returns at once."""
        if self._threads or self._stopping.is_set():
            raise ConfigError("a SandboxServer starts once")
        self._open_truth()
        workers = [("sandbox-http", self._serve)]
        if self._truth_file is not None:
            workers.append(("sandbox-truth", self._truth_loop))
        for name, target in workers:
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def _serve(self) -> None:
        self._httpd.serve_forever(poll_interval=0.05)

    def stop(self) -> None:
        """Stop serving, wake hanging requests, flush the truth file. Idempotent, bounded."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        if self._threads:  # shutdown() would wait forever for a loop that never ran
            self._httpd.shutdown()
        self._httpd.close_connections()
        self._finish()

    def _finish(self) -> None:
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout=5)
        self._threads.clear()
        self._httpd.server_close()
        self._write_truth()
        if self._truth_file is not None:
            self._truth_file.close()
            self._truth_file = None

    def __enter__(self) -> SandboxServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # --- ground truth -----------------------------------------------------------------------------------

    def truth(self, source: str = "", target: str = "", since_ms: int = -1) -> dict[str, Any]:
        """The ``/__sandbox/truth`` document (see docs/SANDBOX.md)."""
        now = self.clock.now_ms()
        items, products = self.world.truth(now)
        counts: dict[str, dict[str, int]] = {}
        out_items = []
        for item in items:
            if (source and item.source != source) or (target and item.target != target):
                continue
            if item.published_ms <= since_ms:
                continue
            counts.setdefault(item.source, {}).setdefault(item.target, 0)
            counts[item.source][item.target] += 1
            out_items.append({**item.to_dict(), "published_wall_ms": self.clock.wall_at(item.published_ms)})
        out_products = [
            {**p.to_dict(), "appeared_wall_ms": self.clock.wall_at(p.appeared_ms)}
            for p in products
            if p.appeared_ms <= now and (not source or p.source == source) and (not target or p.product == target)
        ]
        return {
            "now_ms": now,
            "wall_ms": self.clock.wall_ms(),
            "origin_ms": self.clock.origin_ms,
            "speed": self.clock.speed,
            "counts": counts,
            "items": out_items,
            "products": out_products,
        }

    def _open_truth(self) -> None:
        """Open the truth file for appending. A sandbox killed while it wrote a line left that line without its end:
        it is ended first, so the torn line stays alone (readers skip it) instead of swallowing our first record."""
        if self._truth_path is not None and self._truth_file is None:
            self._truth_path.parent.mkdir(parents=True, exist_ok=True)
            self._truth_file = self._truth_path.open("a", encoding="utf-8")
            if self._truth_file.tell() == 0:
                self._truth_file.write(json.dumps(self._run_record()) + "\n")
                self._truth_file.flush()
            elif not _ends_a_line(self._truth_path):
                self._truth_file.write("\n")

    def _run_record(self) -> dict[str, Any]:
        """The truth file's first line: what makes this world (clock and scenario), so that a sandbox started again
        on the file (after ``kill -9``) continues it instead of appending another world's items."""
        return {"kind": "run", "origin": self.clock.origin, "speed": self.clock.speed, "scenario": self._digest()}

    def _digest(self) -> str:
        text = json.dumps(self.scenario.to_dict(), sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]

    def _truth_loop(self) -> None:
        while not self._stopping.wait(0.25):
            self._write_truth()

    def _write_truth(self) -> None:
        """Append newly published items/products to the JSONL truth file (one JSON object per line)."""
        if self._truth_file is None:
            return
        done_items, done_products = self._truth_written
        items, products = self.world.published_since(self.clock.now_ms(), done_items, done_products)
        for product in products:
            record = {**product.to_dict(), "appeared_wall_ms": self.clock.wall_at(product.appeared_ms)}
            self._truth_file.write(json.dumps(record, ensure_ascii=False) + "\n")
        for item in items:
            record = {**item.to_dict(), "published_wall_ms": self.clock.wall_at(item.published_ms)}
            self._truth_file.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._truth_written = (done_items + len(items), done_products + len(products))
        self._truth_file.flush()

    # --- request log --------------------------------------------------------------------------------------

    def requests(self, site: str = "", path: str = "", since: int = 0, limit: int = 10_000) -> dict[str, Any]:
        """Logged requests with ``seq > since`` (``next`` is the last seq seen), optionally per site/path."""
        with self._log_lock:
            rows = [
                r
                for r in self._log
                if r["seq"] > since and (not site or r["site"] == site) and (not path or r["path"] == path)
            ]
            last = self._log_seq
        return {"next": last, "requests": rows[:limit]}

    def _record(self, entry: dict[str, Any]) -> dict[str, Any]:
        with self._log_lock:
            self._log_seq += 1
            entry["seq"] = self._log_seq
            self._log.append(entry)
        return entry

    # --- dispatch -----------------------------------------------------------------------------------------

    def _dispatch(self, handler: _Handler) -> None:
        arrived_ms = self.clock.wall_ms()
        split = urlsplit(handler.path)
        length_text = handler.headers.get("Content-Length") or "0"
        length = int(length_text) if length_text.isdigit() else 0
        body = handler.rfile.read(min(length, 1_000_000)) if length > 0 else b""
        if length > len(body) or self._stopping.is_set():
            handler.close_connection = True  # unread body bytes would be taken for the next request
        if split.path == CONTROL_PREFIX or split.path.startswith(CONTROL_PREFIX + "/"):
            self._send(handler, self._control(handler.command, split.path[len(CONTROL_PREFIX) :], split.query, body))
            return
        prefix, _, rest = split.path.lstrip("/").partition("/")
        site = self.sites.get(prefix)
        if site is None:
            self._send(handler, SimResponse.not_found())
            return
        request = _build_request(handler, "/" + rest, split.query, body, self.clock.now_ms())
        target = site.target_of(request)
        entry = self._record(
            {
                "wall_ms": arrived_ms,
                "sim_ms": request.now_ms,
                "site": prefix,
                "path": "/" + rest,
                "query": split.query,
                "method": handler.command,
                "target": target,
                "host": handler.headers.get("Host", ""),
                "agent": handler.headers.get("User-Agent", ""),
                "status": 0,
                "misbehaviour": [],
            }
        )
        action = self.misbehaviour.decide(prefix, target, self.max_hang_s)
        entry["misbehaviour"] = action.names
        if self.latency_ms:
            self._stopping.wait(self.latency_ms / 1000)
        if action.hang_s:
            self._stopping.wait(action.hang_s)
            handler.close_connection = True
            entry["status"] = -1
            return
        if action.hold:
            self._hold(prefix, target)
        if action.delay_ms:
            self._stopping.wait(action.delay_ms / 1000)
        response = self._respond(site, request, action, entry["misbehaviour"])
        entry["status"] = response.status
        entry["bytes"] = len(response.body)
        self._send(handler, response, action.truncate)

    def _hold(self, site: str, target: str) -> None:
        """Keep a held request waiting while its rule still holds it: at most ``max_hang_s``, and ``stop()`` ends
        the wait (``Misbehaviour.hold``)."""
        deadline = time.monotonic() + self.max_hang_s
        while self.misbehaviour.holds(site, target) and time.monotonic() < deadline:
            if self._stopping.wait(min(_HOLD_POLL_S, max(0.0, deadline - time.monotonic()))):
                return

    def _respond(self, site: Site, request: SimRequest, action: Action, labels: list[str]) -> SimResponse:
        """The answer ``action`` leaves this request; ``labels`` (the request log's) gains ``new-layout`` only when
        the site's relayout changed the page (not for a 418, a ban, a login wall, or a page without items)."""
        if action.status == 418:
            return SimResponse(418, b"I'm a teapot", "text/plain; charset=utf-8")
        if action.status == 429:
            return SimResponse(
                429, b"Too Many Requests", "text/plain; charset=utf-8", {"Retry-After": str(action.retry_after_s)}
            )
        if action.ban_page:
            # A site's own refusal when it has one (JD, ECSHOP); Weibo's interstitial otherwise.
            own = getattr(site, "ban_answer", None)
            if own is not None:
                return own(action.ban_page, request.now_ms // 1000)  # type: ignore[no-any-return]
            return SimResponse(200, interstitial(action.ban_page, request.now_ms // 1000))
        if action.login_wall and not site.logged_in(request):
            wall = site.login_wall(request)
            if wall is not None:
                return wall
        try:
            response = site.handle(request)
            relayout = getattr(site, "new_layout", None) if action.new_layout else None
            relaid: SimResponse = relayout(response) if relayout is not None else response
            if relaid is not response:
                labels.append("new-layout")
            return relaid
        except Exception:  # a bug in a site must not kill the connection silently
            log.exception("site %s failed on %s", site.prefix, request.path)
            return SimResponse(500, b"<html><body>500 Internal Server Error</body></html>")

    def _send(self, handler: _Handler, response: SimResponse, truncate: str = "") -> None:
        body = response.body
        sent = body[: len(body) // 2] if truncate else body
        announced = len(body) if truncate == "drop" else len(sent)
        try:
            handler.send_response(response.status)
            handler.send_header("Content-Type", response.content_type)
            for name, value in response.headers.items():
                handler.send_header(name, value)
            handler.send_header("Content-Length", str(announced))
            if truncate or self._stopping.is_set() or handler.close_connection:
                handler.send_header("Connection", "close")  # also sets handler.close_connection
            handler.end_headers()
            if handler.command != "HEAD":
                handler.wfile.write(sent)
        except (BrokenPipeError, ConnectionResetError):
            handler.close_connection = True

    def _control(self, method: str, path: str, query: str, body: bytes) -> SimResponse:
        params = {k: v[0] for k, v in parse_qs(query, keep_blank_values=True).items()}
        try:
            data: Any = json.loads(body or b"{}") if method == "POST" else {}
            if path in ("", "/", "/health"):
                return SimResponse.json(
                    {
                        "ok": True,
                        "now_ms": self.clock.now_ms(),
                        "wall_ms": self.clock.wall_ms(),
                        "origin_ms": self.clock.origin_ms,
                        "speed": self.clock.speed,
                        "sites": sorted(self.sites),
                    }
                )
            if path == "/truth":
                return SimResponse.json(
                    self.truth(params.get("source", ""), params.get("target", ""), int(params.get("since_ms", -1)))
                )
            if path == "/requests":
                return SimResponse.json(
                    self.requests(
                        params.get("site", ""),
                        params.get("path", ""),
                        int(params.get("since", 0)),
                        int(params.get("limit", 10_000)),
                    )
                )
            if path == "/scenario":
                return SimResponse.json(self.scenario.to_dict())
            if path == "/advance" and method == "POST":
                return SimResponse.json({"now_ms": self.clock.advance(float(data.get("seconds", 0)))})
            if path == "/visitors":
                if method == "POST":
                    if "ttl_s" in data:
                        self.visitors.ttl_s = float(data["ttl_s"])
                    if data.get("expire"):
                        self.visitors.expire_all()
                    if "two_step" in data:
                        self.visitors.two_step = bool(data["two_step"])
                return SimResponse.json(self.visitors.describe())
            if path == "/misbehave":
                if method == "POST":
                    self._change_misbehaviour(data)
                return SimResponse.json({"rules": [rule.to_dict() for rule in self.misbehaviour.rules()]})
        except (ValueError, TypeError, AttributeError) as exc:
            return SimResponse(
                400, json.dumps({"error": str(exc)}, ensure_ascii=False).encode(), "application/json; charset=utf-8"
            )
        return SimResponse(404, b'{"error": "unknown control endpoint"}', "application/json")

    def _change_misbehaviour(self, data: dict[str, Any]) -> None:
        site = data.get("site")
        target = str(data.get("target", ""))
        if site is None:
            if data.get("clear"):
                self.misbehaviour.clear()
                return
            raise ConfigError("misbehave: give 'site' (or 'clear': true for all rules)")
        if site not in site_names():
            raise ConfigError(f"misbehave: site must be one of {list(site_names())}")
        if data.get("clear"):
            self.misbehaviour.clear(site, target)
        else:
            changes = data.get("set", {})
            if changes.get("new_layout"):
                self._check_new_layout(site)
            self.misbehaviour.update(site, target, changes)

    def _check_new_layout(self, name: str) -> None:
        """A ``new_layout`` rule names a site that has one: a site without would serve its pages as before,
        silently, and so would every site but JD under ``*``."""
        if getattr(self.sites.get(name), "new_layout", None) is None:
            having = sorted(prefix for prefix, site in self.sites.items() if getattr(site, "new_layout", None))
            raise ConfigError(
                f"misbehaviour new_layout: site {name!r} has no new layout of its own (name one that has: {having})"
            )


def _build_request(handler: _Handler, path: str, query: str, body: bytes, now_ms: int) -> SimRequest:
    cookies: dict[str, str] = {}
    with contextlib.suppress(CookieError):
        jar: SimpleCookie = SimpleCookie(handler.headers.get("Cookie", ""))
        cookies = {name: morsel.value for name, morsel in jar.items()}
    form: dict[str, str] = {}
    if body and "form-urlencoded" in (handler.headers.get("Content-Type") or ""):
        form = {k: v[0] for k, v in parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True).items()}
    params = {k: v[0] for k, v in parse_qs(query, keep_blank_values=True).items()}
    return SimRequest(handler.command, path, params, dict(handler.headers.items()), cookies, form, now_ms)


def read_run_record(path: Path) -> dict[str, Any] | None:
    """The run a truth file records on its first line; None for a missing or empty file, or one written before
    files recorded their run."""
    try:
        with path.open(encoding="utf-8") as file:
            first = file.readline()
    except FileNotFoundError:
        return None
    with contextlib.suppress(ValueError):
        record = json.loads(first)
        if isinstance(record, dict) and record.get("kind") == "run":
            return record
    return None


#: A run older than this, continued on its truth file, is said in a WARNING: more likely a file left from an
#: earlier try than a restart after a crash, and its world has gone on all that time (at the run's speed).
STALE_RUN_S = 3600.0


def _say_run_continues(path: Path | None, origin: float, speed: float) -> None:
    """Log that the sandbox continues the run ``path`` records; a WARNING with its age when that is long ago."""
    age_s = time.time() - origin
    if age_s <= STALE_RUN_S:
        log.info("sandbox: continuing the run of %s (clock origin %s)", path, origin)
        return
    log.warning(
        "sandbox: continuing the run of %s, started %.1f hours ago (clock origin %s): its world is %.1f simulated "
        "days in, and everything published since then is served as backlog; give another --truth-file for a new run",
        path,
        age_s / 3600,
        origin,
        age_s * speed / 86_400,
    )


def _check_same_run(path: Path, recorded: dict[str, Any], ours: dict[str, Any]) -> None:
    """Refuse to append another world to a truth file: a judge reading it would see the first world's items as
    published and never stored."""
    differ = [key for key in ("origin", "speed", "scenario") if recorded.get(key) != ours[key]]
    if differ:
        raise ConfigError(
            f"the truth file {path} holds another run ({', '.join(f'{k} {recorded.get(k)}' for k in differ)}; "
            f"this sandbox: {', '.join(f'{k} {ours[k]}' for k in differ)}): give the same --clock-origin, --speed, "
            "scenario and --seed to continue that run, or another --truth-file"
        )


def _ends_a_line(path: Path) -> bool:
    """Whether the file at ``path`` ends with a newline (an empty one counts as ended)."""
    with path.open("rb") as file:
        if file.seek(0, 2) == 0:
            return True
        file.seek(-1, 2)
        return file.read(1) == b"\n"
