"""Visitor sessions: the passport answer's parsing, minting and renewal (once, rate-limited, stale reports
ignored), and the scheduler core leasing them like accounts, renewing on a 432 instead of blocking the host.

The mint itself is a scripted function here (pure logic), except for one loopback passport that drips its answer
and one passport whose name servers never answer;
tests/sandbox/test_weibo_web.py mints from the sandbox's passport over HTTP and tests/e2e/test_visitor_sessions.py
runs the whole flow across processes."""

from __future__ import annotations

import http.server
import json
import logging
import re
import threading
import urllib.parse
from collections.abc import Callable, Iterator

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from icecrawler.errors import ConfigError, NoWorkError
from icecrawler.models import Outcome, Report, Task, TaskKind
from icecrawler.processes import free_port
from scheduler_server.core import SchedulerCore
from scheduler_server.metrics import SchedulerMetrics
from scheduler_server.store import MemoryQueueStore
from scheduler_server.visitors import (
    VisitorError,
    VisitorSessions,
    incarnate_query,
    mint_visitor,
    parse_visitor_answer,
    session_ended,
)
from tests.helpers import drip, silent_name_server, wait_for
from tests.scheduler.conftest import ManualClocks, illegal_request, make_settings

ANSWER = (
    b'window.visitor_gray_callback && visitor_gray_callback({"retcode":20000000,"msg":"succ","data":'
    b'{"sub":"_2AkMvisitor1","subp":"0033WrSXqPxfM72","tid":"abc"}});'
)


class Passport:
    """A scripted genvisitor2: each mint hands out the next numbered SUB, or raises what it is told."""

    def __init__(self) -> None:
        self.calls = 0
        self.fail_next: list[str] = []

    def mint(self, url: str) -> dict[str, str]:
        self.calls += 1
        if self.fail_next:
            raise VisitorError(self.fail_next.pop(0))
        return {"SUB": f"_2AkMv{self.calls}", "SUBP": "0033"}


def sessions(passport: Passport, renew_s: float = 30.0) -> VisitorSessions:
    return VisitorSessions(
        {"weibo_web": "http://passport.invalid/visitor/genvisitor2", "jd": ""},
        renew_s=renew_s,
        mint=passport.mint,
        spawn=lambda work: work(),
    )


def test_parse_visitor_answer_forms() -> None:
    assert parse_visitor_answer(ANSWER, []) == {"SUB": "_2AkMvisitor1", "SUBP": "0033WrSXqPxfM72"}
    assert parse_visitor_answer(b"", ["SUB=_2AkMc; path=/; domain=.weibo.com", "SUBP=0033x; path=/"]) == {
        "SUB": "_2AkMc",
        "SUBP": "0033x",
    }
    with pytest.raises(VisitorError, match="retcode 50111"):
        parse_visitor_answer(b'cb({"retcode":50111,"msg":"busy"});', [])
    for garbage in (b"", b"<html>nope</html>", b'cb({"retcode":20000000,"data":{}});', b"cb({not json});"):
        with pytest.raises(VisitorError):
            parse_visitor_answer(garbage, [])


def test_an_answer_with_a_visitor_id_only_asks_for_the_incarnate_step() -> None:
    tid_only = (
        b'window.gen_callback && gen_callback({"retcode":20000000,"msg":"succ",'
        b'"data":{"tid":"T+1/x=","new_tid":true,"confidence":95}});'
    )
    query = incarnate_query(tid_only, [], 0.25)
    assert query is not None
    assert {k: query[k] for k in ("a", "t", "w", "c", "gc", "cb", "from")} == {
        "a": "incarnate",
        "t": "T+1/x=",
        "w": "3",
        "c": "095",
        "gc": "",
        "cb": "cross_domain",
        "from": "weibo",
    }
    known = incarnate_query(b'cb({"retcode":20000000,"data":{"tid":"T2","new_tid":false}});', [], 0.5)
    assert known is not None and (known["w"], known["c"]) == ("2", "100")
    # An answer that is already the session, a refusal or garbage needs no second step.
    assert incarnate_query(ANSWER, [], 0.5) is None
    assert incarnate_query(b'cb({"retcode":20000000,"data":{"tid":"T3"}});', ["SUB=_2AkMc; path=/"], 0.5) is None
    for other in (b'cb({"retcode":50111,"data":{"tid":"T4"}});', b"<html></html>", b'cb({"retcode":20000000});'):
        assert incarnate_query(other, [], 0.5) is None


def test_session_ended_signals() -> None:
    assert session_ended(Outcome.Banned, "http-432", 432)
    assert session_ended(Outcome.LoginRequired, "visitor", 200)
    assert session_ended(Outcome.LoginRequired, "html-instead-of-json", 200)
    assert session_ended(Outcome.LoginRequired, "empty-answer", 200)  # weibo.com's {} to a cookie it no longer takes
    # errno 100006 请求非法: the session refused, fresh cookies answered again (docs/SOURCES.md, weibo_web "Signals")
    assert session_ended(Outcome.LoginRequired, "illegal-request", 403)
    assert not session_ended(Outcome.LoginRequired, "captcha", 200)  # any ok:-100, as before: the content needs a login
    assert not session_ended(Outcome.Banned, "http-418", 418)  # an IP ban: renewing the cookie does not help
    assert not session_ended(Outcome.LoginRequired, "login-wall", 200)  # ok:-100: the content needs a login


def test_minted_once_then_renewed_once_per_generation_and_rate_limited() -> None:
    passport = Passport()
    visitors = sessions(passport, renew_s=30.0)
    assert visitors.serves("weibo_web") and not visitors.serves("jd") and not visitors.serves("weibo_pc")
    first = visitors.account("weibo_web", 1000.0)
    assert first is not None and first.id == "visitor:weibo_web:1"
    assert json.loads(first.cookie_blob) == {"cookies": {"SUB": "_2AkMv1", "SUBP": "0033"}}
    assert visitors.account("weibo_web", 1001.0) is first and passport.calls == 1
    # two clients report the same ended session: one renewal; the second report (and later ones) changes nothing
    assert visitors.renew(first.id, 1040.0) and visitors.renew(first.id, 1040.5)
    second = visitors.account("weibo_web", 1041.0)
    assert second is not None and second.id == "visitor:weibo_web:2" and passport.calls == 2
    assert visitors.renew(first.id, 1042.0) and visitors.account("weibo_web", 1042.0) is second
    # the new session ends at once: renewed no sooner than renew_s after the last mint
    visitors.renew(second.id, 1050.0)
    assert visitors.account("weibo_web", 1060.0) is None and passport.calls == 2
    third = visitors.account("weibo_web", 1071.0)
    assert third is not None and third.id == "visitor:weibo_web:3"
    state = visitors.describe(1071.0)["weibo_web"]
    assert (state["mints"], state["renewals"], state["account"]) == (3, 2, "visitor:weibo_web:3")
    assert "_2AkM" not in repr(visitors.describe(1071.0))
    assert not visitors.renew("a1", 1080.0)  # not a visitor account


def test_a_failed_mint_is_retried_after_the_interval() -> None:
    passport = Passport()
    passport.fail_next = ["HTTPError: 503"]
    visitors = sessions(passport, renew_s=10.0)
    assert visitors.account("weibo_web", 0.0) is None
    assert visitors.describe(0.0)["weibo_web"]["last_error"] == "HTTPError: 503"
    assert visitors.account("weibo_web", 5.0) is None and passport.calls == 1
    assert visitors.account("weibo_web", 10.0) is not None and passport.calls == 2


def test_a_mint_whose_thread_cannot_start_is_tried_again_after_the_interval() -> None:
    """A mint runs on a thread of its own. One that could not be started (a daemon at its thread limit after months:
    ``RuntimeError: can't start new thread``) left the session marked as minting for good, so no mint ever ran again
    and the source's tasks were never leased; it now counts as a failed mint (the visitor_session_mint_failures_total
    counter, its alert), tried again after the interval."""
    passport = Passport()
    starts: list[int] = []

    def spawn(work: Callable[[], None]) -> None:
        starts.append(len(starts))
        if len(starts) == 1:
            raise RuntimeError("can't start new thread")
        work()

    visitors = VisitorSessions(
        {"weibo_web": "http://passport.invalid/visitor/genvisitor2"}, renew_s=10.0, mint=passport.mint, spawn=spawn
    )
    assert visitors.account("weibo_web", 0.0) is None  # the lease goes on without it: the source's tasks wait
    state = visitors.describe(0.0)["weibo_web"]
    assert state["state"] == "none" and state["failures"] == 1 and "can't start new thread" in state["last_error"]
    assert visitors.account("weibo_web", 5.0) is None and len(starts) == 1  # the interval, as after a failed mint
    account = visitors.account("weibo_web", 10.0)
    assert account is not None and passport.calls == 1 and len(starts) == 2


def test_bad_visitor_url_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="visitor_url"):
        VisitorSessions.from_settings(make_settings(sources__weibo_web__visitor_url="ftp://x/"))


class _DrippingPassport(http.server.BaseHTTPRequestHandler):
    """One byte every 0.1 s, 100 s in all: of its status line and headers (``?part=headers``), or of a 1 000-byte body
    after headers sent at once. ``server.sent`` counts the bytes dripped."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path.endswith("part=headers"):
            answer = b"HTTP/1.1 200 OK\r\nX-Slow: " + b"y" * 1000
        else:
            self.send_response(200)
            self.send_header("Content-Length", "1000")
            self.end_headers()
            answer = b" " * 1000
        server = self.server
        drip(self.wfile, answer, 0.1, server.stop, lambda: setattr(server, "sent", server.sent + 1))  # type: ignore[attr-defined]

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def dripping_passport() -> Iterator[http.server.ThreadingHTTPServer]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _DrippingPassport)
    server.daemon_threads = True
    server.stop = threading.Event()  # type: ignore[attr-defined]
    server.sent = 0  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.stop.set()  # type: ignore[attr-defined]
    server.shutdown()
    server.server_close()
    thread.join(5)


@pytest.mark.parametrize("part", ["headers", "body"])
def test_a_passport_that_drips_its_answer_fails_the_mint_after_the_timeout(
    dripping_passport: http.server.ThreadingHTTPServer, part: str
) -> None:
    """Every read brings a byte well within the read timeout, so only a bound on the whole call ends the mint;
    before it, this mint took the 100 s of the drip and the source had no session meanwhile."""
    url = f"http://127.0.0.1:{dripping_passport.server_address[1]}/visitor/genvisitor2?part={part}"
    with pytest.raises(VisitorError, match=r"not complete after 1s"):
        mint_visitor(url, timeout_s=1.0)
    assert dripping_passport.sent < 500, f"the mint waited for {dripping_passport.sent} bytes of the drip"  # type: ignore[attr-defined]


_MINT_BEHIND_SILENT_NAME_SERVERS = """
import time
from scheduler_server.visitors import VisitorError, mint_visitor
started = time.monotonic()
try:
    mint_visitor("https://passport.slow-name-servers.test/visitor/genvisitor2", timeout_s=1.0)
except VisitorError as exc:
    print(f"{time.monotonic() - started:.2f} {exc}")
"""


def test_a_passport_whose_name_servers_do_not_answer_fails_the_mint_after_the_timeout() -> None:
    """The name lookup has no socket to shut down; it held the mint for the resolver's 4 s past its 1 s bound."""
    with silent_name_server(resolver_timeout_s=4) as names:
        done = names.run(_MINT_BEHIND_SILENT_NAME_SERVERS)
        assert done.returncode == 0, done.stderr
        assert names.queries() >= 1, "the lookup never asked the silent name server: the test proves nothing"
    seconds, message = done.stdout.split(" ", 1)
    assert "not complete after 1s" in message
    assert float(seconds) < 3, f"the mint waited {seconds}s for the resolver"


@pytest.mark.parametrize("url", ["http://127.0.0.1:notaport/visitor", "ftp://127.0.0.1/visitor", "http:///visitor"])
def test_a_mint_from_a_url_it_cannot_call_is_a_visitor_error(url: str) -> None:
    with pytest.raises(VisitorError) as refused:
        mint_visitor(url, timeout_s=1.0)
    assert url in str(refused.value)


def ended_by_432(task: Task, fetches: int = 0) -> list[Report]:
    """The report of a crawl that met Weibo's 432 (the visitor session ended)."""
    return [
        Report(
            task_id=task.id,
            lease_token=task.lease_token,
            outcome=Outcome.Banned,
            http_status=432,
            error_class="http-432",
            fetches=fetches,
        )
    ]


def core_with_visitors(clocks: ManualClocks, passport: Passport, **settings: object) -> SchedulerCore:
    core = SchedulerCore.from_settings(
        make_settings(scheduler__host_block_s=600.0, **settings), MemoryQueueStore(), clocks
    )
    core.accounts.visitors = sessions(passport, renew_s=5.0)
    return core


def test_core_leases_visitor_sessions_and_a_432_renews_instead_of_blocking_the_host(clocks: ManualClocks) -> None:
    passport = Passport()
    core = core_with_visitors(clocks, passport)
    core.add(["weibo_web:1", "weibo_web:2"], TaskKind.WeiboUser)
    core.add(["jd:3"], TaskKind.ProductReviews)
    leased = {task.id: task for task in core.lease("w1", 3)}
    assert leased["reviews:jd:3"].account.id == ""
    one, two = leased["user:weibo_web:1"], leased["user:weibo_web:2"]
    assert one.account.id == two.account.id == "visitor:weibo_web:1"
    # both crawls hit the expired session (two clients): one renewal, no host block, no freeze
    core.report(ended_by_432(one, fetches=2))
    clocks.advance(1)
    core.report(ended_by_432(two))
    stats = core.stats()["detail"]
    assert stats["accounts"]["visitor:weibo_web"]["renewals"] == 1 and passport.calls == 1
    with pytest.raises(NoWorkError):
        core.lease("w2", 2)  # no session until the rate limit allows the next mint (5 s after the last)
    clocks.advance(4)
    again = core.lease("w2", 2)
    assert {task.id for task in again} == {one.id, two.id}  # due at once, host not blocked
    assert {task.account.id for task in again} == {"visitor:weibo_web:2"}
    # an IP-level ban (418) still blocks the host, and never freezes or renews the visitor session
    first = again[0]
    core.report(
        [
            Report(
                task_id=first.id,
                lease_token=first.lease_token,
                outcome=Outcome.Banned,
                http_status=418,
                error_class="http-418",
            )
        ]
    )
    core.add(["jd:4"], TaskKind.ProductReviews)
    with pytest.raises(NoWorkError):
        core.lease("w3", 1)
    assert passport.calls == 2


def test_ok_minus_100_with_a_visitor_session_fails_the_task_without_freezing(clocks: ManualClocks) -> None:
    passport = Passport()
    core = core_with_visitors(clocks, passport)
    core.add(["weibo_web:1"], TaskKind.WeiboUser)
    task = core.lease("w", 1)[0]
    core.report(
        [Report(task_id=task.id, lease_token=task.lease_token, outcome=Outcome.LoginRequired, error_class="login-wall")]
    )
    assert core.stats()["detail"]["accounts"]["visitor:weibo_web"]["state"] == "ok"
    assert core.lease("w", 1)[0].account.id == "visitor:weibo_web:1" and passport.calls == 1


def test_a_visitor_session_refused_as_illegal_is_renewed_without_blocking_the_host(clocks: ManualClocks) -> None:
    """errno 100006 (请求非法) to a visitor session: fresh cookies answer again, so the session is renewed and the host
    is not blocked (on a logged-in account's lease the host is blocked instead: ``test_outcomes.py``)."""
    passport = Passport()
    core = core_with_visitors(clocks, passport)
    core.add(["weibo_web:1"], TaskKind.WeiboUser)
    task = core.lease("w", 1)[0]
    core.report([illegal_request(task)])
    detail = core.stats()["detail"]
    assert detail["accounts"]["visitor:weibo_web"]["renewals"] == 1
    assert all(not host["block"]["reason"] for host in detail["hosts"].values())
    clocks.advance(5)  # the renewal's rate limit (renew_s)
    assert core.lease("w", 1)[0].account.id == "visitor:weibo_web:2" and passport.calls == 2


def test_a_configured_account_wins_over_visitor_sessions(tmp_path: object, clocks: ManualClocks) -> None:
    from pathlib import Path

    accounts = Path(str(tmp_path)) / "accounts"
    accounts.mkdir()
    (accounts / "a.toml").write_text('[[account]]\nid = "real"\ncookies = "SUB=logged-in"\nsources = ["weibo_web"]\n')
    passport = Passport()
    core = core_with_visitors(
        clocks, passport, scheduler__accounts_dir=str(accounts), scheduler__account_sources="weibo_web"
    )
    core.add(["weibo_web:1"], TaskKind.WeiboUser)
    assert core.lease("w", 1)[0].account.id == "real" and passport.calls == 0
    assert "visitor:weibo_web" not in core.stats()["detail"]["accounts"]


def test_status_text_shows_visitor_sessions_without_cookies(clocks: ManualClocks) -> None:
    from icecrawler_cli.commands.status import render_text

    passport = Passport()
    core = core_with_visitors(clocks, passport)
    core.add(["weibo_web:1"], TaskKind.WeiboUser)
    before = render_text({"scheduler": {"reachable": True, **core.stats(), **core.stats()["detail"]}})
    assert "visitor:weibo_web: none, 0 minted, 0 renewed" in before  # nothing minted yet: no stray space
    core.lease("w", 1)
    text = render_text({"scheduler": {"reachable": True, **core.stats(), **core.stats()["detail"]}})
    assert "visitor:weibo_web: ok visitor:weibo_web:1, 1 minted, 0 renewed" in text and "_2AkM" not in text


def test_each_mint_posts_the_form_of_today_s_visitor_page_with_a_fresh_request_id() -> None:
    """genvisitor2 as weibo.com's visitor page calls it since late 2025 (``ver``, ``request_id``, ``webdriver``)
    plus the older fields; a loopback passport records two mints' forms."""
    forms: list[dict[str, list[str]]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            forms.append(urllib.parse.parse_qs(self.rfile.read(length).decode(), keep_blank_values=True))
            self.send_response(200)
            self.send_header("Set-Cookie", "SUB=_2AkMvisitor1; Path=/")
            self.send_header("Set-Cookie", "SUBP=0033WrSXqPxfM72; Path=/")
            self.send_header("Content-Length", str(len(ANSWER)))
            self.end_headers()
            self.wfile.write(ANSWER)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/visitor/genvisitor2"
        for _ in range(2):
            assert mint_visitor(url, timeout_s=5.0)["SUB"] == "_2AkMvisitor1"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
    first, second = ({key: values[0] for key, values in form.items()} for form in forms)
    assert {k: first[k] for k in ("cb", "tid", "from", "ver", "webdriver")} == {
        "cb": "visitor_gray_callback",
        "tid": "",
        "from": "weibo",
        "ver": "20250916",
        "webdriver": "false",
    }
    assert re.fullmatch(r"[0-9a-f]{32}", first["request_id"]) and first["request_id"] != second["request_id"]


def test_a_432_for_a_lease_from_before_a_restart_leaves_the_new_session_alone(clocks: ManualClocks) -> None:
    """A restarted scheduler numbers its visitor sessions from 1 again, so a client's late report of a crawl leased
    before the restart can name the same account id as the session minted since. Clients keep such reports through
    a scheduler outage and send them when it is back; one that says the old session ended must not end the new one
    (before, it did: one more mint at the passport, and the source leased nothing until the rate limit allowed it)."""
    passport = Passport()
    store = MemoryQueueStore()
    settings = make_settings(scheduler__host_block_s=600.0)
    before = SchedulerCore.from_settings(settings, store, clocks)
    before.accounts.visitors = sessions(passport, renew_s=5.0)
    before.add(["weibo_web:1", "weibo_web:2"], TaskKind.WeiboUser)
    old = before.lease("w1", 1)[0]
    before.close()
    clocks.advance(10)
    after = SchedulerCore.from_settings(settings, store, clocks)  # the same queue database: a restart
    after.accounts.visitors = sessions(passport, renew_s=5.0)
    fresh = after.lease("w2", 1)[0]
    assert fresh.account.id == old.account.id == "visitor:weibo_web:1"
    assert fresh.account.cookie_blob != old.account.cookie_blob and passport.calls == 2
    after.report(ended_by_432(old))
    state = after.stats()["detail"]["accounts"]["visitor:weibo_web"]
    assert (state["state"], state["account"], state["renewals"], passport.calls) == ("ok", "visitor:weibo_web:1", 0, 2)
    assert after.lease("w2", 1)[0].account.cookie_blob == fresh.account.cookie_blob  # the task is due again at once


def test_status_text_and_log_escape_the_control_characters_of_a_passport_s_failure_message(
    clocks: ManualClocks, caplog: pytest.LogCaptureFixture
) -> None:
    """A failed mint's message quotes the passport's own ``msg`` (a site's text): ``icecrawler status`` prints it
    with ESC and newlines escaped, as ``icecrawler tasks`` prints a report's error class, and so does the log."""
    from icecrawler_cli.commands.status import render_text

    answer = b'cb({"retcode":50111,"msg":"\\u001b[2J\\u001b[31mred\\nforged line"});'
    passport = Passport()
    core = core_with_visitors(clocks, passport)
    core.accounts.visitors = VisitorSessions(
        {"weibo_web": "http://passport.invalid/visitor/genvisitor2"},
        renew_s=5.0,
        mint=lambda url: parse_visitor_answer(answer, []),
        spawn=lambda work: work(),
    )
    core.add(["weibo_web:1"], TaskKind.WeiboUser)
    with caplog.at_level(logging.WARNING, logger="scheduler_server.visitors"), pytest.raises(NoWorkError):
        core.lease("w", 1)
    assert [r.getMessage() for r in caplog.records] == [
        "visitor session for weibo_web: passport retcode 50111: \\x1b[2J\\x1b[31mred\\nforged line (next try in 5s)"
    ]
    assert "\x1b" in core.stats()["detail"]["accounts"]["visitor:weibo_web"]["last_error"]  # kept as it came
    text = render_text({"scheduler": {"reachable": True, **core.stats(), **core.stats()["detail"]}})
    assert "\x1b" not in text
    line = next(line for line in text.splitlines() if "visitor:weibo_web" in line)
    assert line.endswith("last error: passport retcode 50111: \\x1b[2J\\x1b[31mred\\nforged line"), line


def test_a_passport_that_fails_every_mint_is_counted_for_the_metrics(clocks: ManualClocks) -> None:
    """Nothing answers at the passport: no session is minted, weibo_web's tasks wait and no report says anything.
    Each failed mint is counted (what IcecrawlerVisitorSessionsFailing reads) next to the mints that worked."""
    url = f"http://127.0.0.1:{free_port()}/visitor/genvisitor2"
    core = SchedulerCore.from_settings(make_settings(sources__weibo_web__visitor_url=url), MemoryQueueStore(), clocks)
    registry = CollectorRegistry()
    SchedulerMetrics(core).register(registry)
    core.add(["weibo_web:1"], TaskKind.WeiboUser)

    def failures() -> int:
        return int(core.stats()["detail"]["accounts"]["visitor:weibo_web"]["failures"])

    for tries in (1, 2, 3):
        with pytest.raises(NoWorkError):
            core.lease("w", 1)  # starts a mint in the background; the task waits for its session
        wait_for(lambda: failures() >= tries, f"mint {tries} did not fail", timeout_s=30)  # noqa: B023
        assert failures() == tries
        clocks.advance(31)  # scheduler.visitor_renew_s: the next mint may start
    text = generate_latest(registry).decode()
    assert 'icecrawler_scheduler_visitor_session_mint_failures_total{source="weibo_web"} 3.0' in text
    assert 'icecrawler_scheduler_visitor_sessions_minted_total{source="weibo_web"} 0.0' in text


@pytest.mark.parametrize("crawl_s", [0.0, 2.0])
def test_a_wall_clock_set_back_neither_ignores_an_ended_session_nor_holds_its_renewal_for_the_jump(
    crawl_s: float, clocks: ManualClocks
) -> None:
    """The last mint's time is a wall time: after the clock was set back an hour it lay in the future, so a 432 of a
    lease handed out since read as one of a lease from before the mint and was ignored, and the renewal's rate limit
    was waited out for the hour too. The dead session was leased again and again meanwhile (its tasks due at once
    after each 432), a crawl against the site per lease. As for a host's spacing, a mint "in the future" counts as
    made now: from the first lease after the jump, not only from the 432's report, or a crawl that took ``crawl_s``
    read as leased before the mint all the same."""
    passport = Passport()
    core = core_with_visitors(clocks, passport)  # renew_s=5
    core.add(["weibo_web:1"], TaskKind.WeiboUser)
    first = core.lease("w", 1)[0]  # the session's first mint
    core.report([Report(task_id=first.id, lease_token=first.lease_token)])
    clocks.wall_s -= 3600
    core.add(["weibo_web:2"], TaskKind.WeiboUser)  # due at the new "now"
    task = core.lease("w", 1)[0]
    assert (task.id, task.account.id) == ("user:weibo_web:2", "visitor:weibo_web:1")
    clocks.advance(crawl_s)
    core.report(ended_by_432(task))
    assert core.stats()["detail"]["accounts"]["visitor:weibo_web"]["renewals"] == 1
    with pytest.raises(NoWorkError):
        core.lease("w", 1)  # no session until the rate limit allows the next mint
    clocks.advance(5)
    assert core.lease("w", 1)[0].account.id == "visitor:weibo_web:2" and passport.calls == 2
