"""Each misbehaviour, switched at start (scenario, CLI flags) or at run time (``POST /__sandbox/misbehave``),
and what the real parsers make of it."""

from __future__ import annotations

import itertools
import json
import threading
from typing import Any

import pytest
import requests

from icecrawler.errors import ConfigError, FetchError, ParseError
from icecrawler.models import TaskKind
from sandbox import Misbehaviour, MisbehaviourRule, SandboxServer
from sandbox.cli import parse_misbehave
from sandbox.misbehave import MisbehaviourTable
from tests.sandbox.conftest import crawl, small_scenario

UID = "1000000001"
JD_PRODUCT = "100012043978"


def _switch(server: SandboxServer, payload: dict[str, Any]) -> list[dict[str, Any]]:
    response = requests.post(f"{server.url}/__sandbox/misbehave", json=payload, timeout=10)
    assert response.status_code == 200, response.text
    rules: list[dict[str, Any]] = response.json()["rules"]
    return rules


def _mobile(server: SandboxServer, uid: str = UID, **kwargs: Any) -> requests.Response:
    params = {"type": "uid", "value": uid, "containerid": f"107603{uid}"}
    return requests.get(f"{server.base_url('m')}/api/container/getIndex", params=params, timeout=10, **kwargs)


def test_teapot_bursts_have_their_length() -> None:
    table = MisbehaviourTable((MisbehaviourRule("m", "", Misbehaviour(teapot_rate=0.1, teapot_burst=4)),), seed=1)
    statuses = [table.decide("m", "", 60).status for _ in range(400)]
    runs = [len(list(group)) for status, group in itertools.groupby(statuses) if status == 418]
    assert runs and all(run >= 4 for run in runs)
    assert table.decide("jd", "", 60).status == 0  # other sites are unaffected


def test_teapot_at_run_time_and_per_target(server: SandboxServer) -> None:
    rules = _switch(server, {"site": "m", "target": UID, "set": {"teapot_rate": 1}})
    assert rules == [{**rules[0], "site": "m", "target": UID, "teapot_rate": 1.0}]
    assert _mobile(server).status_code == 418
    assert _mobile(server, "1000000002").status_code == 200  # the rule names one target
    with pytest.raises(FetchError) as error:
        crawl(server, "weibo_mobile", UID)
    assert error.value.outcome == "Banned" and error.value.http_status == 418
    assert _switch(server, {"clear": True}) == []
    assert _mobile(server).status_code == 200


def test_retry_after(server: SandboxServer) -> None:
    _switch(server, {"site": "jd", "set": {"retry_after_rate": 1, "retry_after_s": 42}})
    with pytest.raises(FetchError) as error:
        crawl(server, "jd", JD_PRODUCT, TaskKind.ProductReviews)
    assert error.value.outcome == "RateLimited" and error.value.http_status == 429
    assert error.value.retry_after_s == 42


def test_a_new_layout_keeps_every_row_but_the_parser_reads_none(server: SandboxServer) -> None:
    """JD's ``new_layout``: the same comment rows, pager and summary, their ids renamed; the real parser reads no
    review off the page and reports no failure (what IcecrawlerSourceReadsNothing is for). A site without a layout
    of its own refuses the rule rather than serve its pages unchanged; cleared, the reviews read again."""
    before = crawl(server, "jd", JD_PRODUCT, TaskKind.ProductReviews, max_requests=1)
    assert before.items
    _switch(server, {"site": "jd", "set": {"new_layout": True}})
    after = crawl(server, "jd", JD_PRODUCT, TaskKind.ProductReviews, max_requests=1)
    assert after.items == [] and after.last.status == 200
    rows = json.loads(after.last.body.decode().partition("(")[2].rpartition(")")[0])["comments"]
    assert len(rows) == len(before.items) and all("id" not in row and "commentIdV2" in row for row in rows)
    refused = requests.post(
        f"{server.url}/__sandbox/misbehave", json={"site": "m", "set": {"new_layout": True}}, timeout=10
    )
    assert refused.status_code == 400 and "no new layout" in refused.json()["error"]
    with pytest.raises(ConfigError, match="site 'pc' has no new layout"):
        SandboxServer(small_scenario(), misbehave=[MisbehaviourRule("pc", "", Misbehaviour(new_layout=True))])
    assert server.requests(site="jd")["requests"][-1]["misbehaviour"] == ["new-layout"]
    _switch(server, {"clear": True})
    assert crawl(server, "jd", JD_PRODUCT, TaskKind.ProductReviews, max_requests=1).items == before.items


def test_a_new_layout_is_refused_for_every_site_and_logged_only_where_it_changed_the_page(
    server: SandboxServer,
) -> None:
    """``new_layout`` on ``*`` would name sites without a layout of their own, which would serve their pages
    unchanged: refused, at start and at run time. The request log says ``new-layout`` only of a page the site
    relaid out, not of one a 418, a 429 or a ban replaced, nor of a page with no comment rows (a 404)."""
    with pytest.raises(ConfigError, match="new_layout"):
        SandboxServer(small_scenario(), misbehave=[MisbehaviourRule("*", "", Misbehaviour(new_layout=True))])
    refused = requests.post(
        f"{server.url}/__sandbox/misbehave", json={"site": "*", "set": {"new_layout": True}}, timeout=10
    )
    assert refused.status_code == 400 and "new_layout" in refused.json()["error"]
    assert server.misbehaviour.rules() == []
    for replaced, label in (({"teapot_rate": 1, "teapot_burst": 1}, "418"), ({"retry_after_rate": 1}, "429")):
        _switch(server, {"clear": True})
        _switch(server, {"site": "jd", "set": {"new_layout": True, **replaced}})
        with pytest.raises(FetchError):
            crawl(server, "jd", JD_PRODUCT, TaskKind.ProductReviews, max_requests=1)
        assert server.requests(site="jd")["requests"][-1]["misbehaviour"] == [label]
    _switch(server, {"clear": True})
    _switch(server, {"site": "jd", "set": {"new_layout": True, "ban_rate": 1}})
    with pytest.raises(FetchError):
        crawl(server, "jd", JD_PRODUCT, TaskKind.ProductReviews, max_requests=1)
    assert server.requests(site="jd")["requests"][-1]["misbehaviour"] == ["ban-busy"]
    _switch(server, {"clear": True})
    _switch(server, {"site": "jd", "set": {"new_layout": True}})
    assert requests.get(f"{server.url}/jd/no/such/page", timeout=10).status_code == 404
    assert server.requests(site="jd")["requests"][-1]["misbehaviour"] == []
    crawl(server, "jd", JD_PRODUCT, TaskKind.ProductReviews, max_requests=1)
    assert server.requests(site="jd")["requests"][-1]["misbehaviour"] == ["new-layout"]


@pytest.mark.parametrize(
    ("page", "outcome", "marker"), [("busy", "Busy", "抱歉，网络繁忙"), ("frozen", "AccountFrozen", "帐号存在异常")]
)
def test_gbk_ban_pages_that_claim_utf8(server: SandboxServer, page: str, outcome: str, marker: str) -> None:
    _switch(server, {"site": "pc", "set": {"ban_rate": 1, "ban_page": page}})
    response = requests.get(
        f"{server.base_url('pc')}/p/aj/v6/mblog/mbloglist",
        params={"id": f"100505{UID}", "page": "1", "pagebar": "0"},
        timeout=10,
    )
    assert b"charset=utf-8" in response.content and b"bpType']='sorry'" in response.content
    with pytest.raises(UnicodeDecodeError):
        response.content.decode("utf-8")
    assert marker in response.content.decode("gbk")
    with pytest.raises(FetchError) as error:
        crawl(server, "weibo_pc", UID)
    assert error.value.outcome == outcome


@pytest.mark.parametrize(
    ("site", "source", "target", "page", "outcome", "error_class"),
    [
        ("jd", "jd", JD_PRODUCT, "busy", "Banned", "jd-system-busy"),
        ("jd", "jd", JD_PRODUCT, "frozen", "Banned", "jd-risk-605"),
        ("ecshop", "ecshop", "12", "busy", "Busy", "shop-closed"),
    ],
)
def test_shops_refuse_in_their_own_way(
    server: SandboxServer, site: str, source: str, target: str, page: str, outcome: str, error_class: str
) -> None:
    """``ban_rate`` on a shop serves that shop's own refusal (a Weibo interstitial on JD was a parse error), and its
    parser classifies it: JD's as Banned (the scheduler blocks the host), ECSHOP's closed shop as Busy (retried)."""
    _switch(server, {"site": site, "set": {"ban_rate": 1, "ban_page": page}})
    with pytest.raises(FetchError) as error:
        crawl(server, source, target, TaskKind.ProductReviews)
    assert (error.value.outcome, error.value.error_class) == (outcome, error_class)


def test_truncated_bodies(server: SandboxServer) -> None:
    full = requests.get(
        f"{server.base_url('jd')}/comment/productPageComments.action", params={"productId": JD_PRODUCT}, timeout=10
    ).content
    _switch(server, {"site": "jd", "set": {"truncate_rate": 1, "truncate_mode": "cut"}})
    cut = requests.get(
        f"{server.base_url('jd')}/comment/productPageComments.action", params={"productId": JD_PRODUCT}, timeout=10
    )
    assert cut.status_code == 200 and cut.content == full[: len(full) // 2]
    with pytest.raises(ParseError):
        crawl(server, "jd", JD_PRODUCT, TaskKind.ProductReviews)
    _switch(server, {"site": "jd", "set": {"truncate_mode": "drop"}})
    with pytest.raises(requests.exceptions.RequestException):
        requests.get(
            f"{server.base_url('jd')}/comment/productPageComments.action", params={"productId": JD_PRODUCT}, timeout=10
        )


def test_slow_answers_are_logged(server: SandboxServer) -> None:
    _switch(server, {"site": "m", "set": {"slow_rate": 1, "slow_ms": 50}})
    assert _mobile(server).status_code == 200
    last = server.requests(site="m")["requests"][-1]
    assert last["misbehaviour"] == ["slow"] and last["status"] == 200


def test_hangs_are_bounded_and_end_at_stop() -> None:
    with SandboxServer(small_scenario(), speed=0, port=0, max_hang_s=0.2) as server:
        server.misbehaviour.update("m", "", {"hang_rate": 1, "hang_s": 3600})
        with pytest.raises(requests.exceptions.ConnectionError):
            _mobile(server)  # closed without an answer once the (capped) hang ends
        assert server.requests(site="m")["requests"][-1]["status"] == -1
    with SandboxServer(small_scenario(), speed=0, port=0, max_hang_s=3600) as server:
        server.misbehaviour.update("m", "", {"hang_rate": 1, "hang_s": 3600})
        assert _stop_while_a_request_waits(server)  # the hung request is closed unanswered


def _stop_while_a_request_waits(server: SandboxServer) -> list[BaseException]:
    """Stop ``server`` while a request to site m waits for its answer; the errors the caller got (its request
    closed unanswered) once ``stop`` returned. The caller must have ended by then."""
    errors: list[BaseException] = []

    def call() -> None:
        try:
            _mobile(server)
        except requests.exceptions.RequestException as exc:
            errors.append(exc)

    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    for _ in range(3000):  # bounded: until the request is in the log (it is logged before it waits)
        if server.requests(site="m")["requests"]:
            break
        caller.join(0.01)
    server.stop()
    caller.join(30)
    assert not caller.is_alive()
    return errors


def test_a_held_request_is_answered_only_once_its_rule_is_cleared(server: SandboxServer) -> None:
    """``hold`` keeps every request of its scope waiting, logged with status 0, until the rule stops holding it;
    then the request gets its normal answer. Other targets of the site are not held."""
    _switch(server, {"site": "m", "target": UID, "set": {"hold": True}})
    answers: list[requests.Response] = []
    caller = threading.Thread(target=lambda: answers.append(_mobile(server)), daemon=True)
    caller.start()
    for _ in range(1000):  # bounded: until the request is in the log (a held one has no status yet)
        held = [r for r in server.requests(site="m")["requests"] if r["target"] == UID]
        if held:
            break
        caller.join(0.01)
    assert held and held[-1]["misbehaviour"] == ["hold"] and held[-1]["status"] == 0, held
    assert _mobile(server, uid="1000000002").status_code == 200  # another target answers meanwhile
    assert caller.is_alive() and not answers
    _switch(server, {"site": "m", "target": UID, "clear": True})
    caller.join(30)
    assert not caller.is_alive() and answers[0].status_code == 200
    logged = [r for r in server.requests(site="m")["requests"] if r["seq"] == held[-1]["seq"]]
    assert logged[0]["status"] == 200, logged


def test_a_hold_ends_at_the_max_hang_and_at_stop() -> None:
    with SandboxServer(small_scenario(), speed=0, port=0, max_hang_s=0.2) as server:
        server.misbehaviour.update("m", "", {"hold": True})
        assert _mobile(server).status_code == 200  # answered once the (capped) hold ends
    with SandboxServer(small_scenario(), speed=0, port=0, max_hang_s=3600) as server:
        server.misbehaviour.update("m", "", {"hold": True})
        _stop_while_a_request_waits(server)  # stop() may close it unanswered, or answer it: either way it ends


def test_login_walls_per_site(server: SandboxServer) -> None:
    _switch(server, {"site": "*", "set": {"login_wall": True}})
    walled = _mobile(server).json()
    assert walled["ok"] == -100 and "passport.weibo.cn" in walled["url"]
    assert _mobile(server, cookies={"SUB": "x"}).json()["ok"] == 1
    with pytest.raises(FetchError) as error:
        crawl(server, "weibo_mobile", UID)
    assert error.value.outcome == "LoginRequired"
    jd = requests.get(
        f"{server.base_url('jd')}/comment/productPageComments.action", params={"productId": JD_PRODUCT}, timeout=10
    )
    assert jd.status_code == 200 and jd.content == b""
    pc = requests.get(f"{server.base_url('pc')}/p/aj/v6/mblog/mbloglist", params={"id": f"100505{UID}"}, timeout=10)
    assert "新浪通行证" in pc.content.decode("gbk") and b"ajaxlogin.php" in pc.content
    with pytest.raises(FetchError) as error:
        crawl(server, "weibo_pc", UID)
    assert error.value.outcome == "LoginRequired"


def test_misbehaviour_at_start_from_scenario_and_flags() -> None:
    rules = parse_misbehave(["m.teapot_rate=1", "m.teapot_burst=2", "ecshop:12.login_wall=true"])
    assert {(r.site, r.target) for r in rules} == {("m", ""), ("ecshop", "12")}
    assert rules[0].behaviour.teapot_burst == 2
    with SandboxServer(small_scenario(), speed=0, port=0, misbehave=rules) as server:
        assert _mobile(server).status_code == 418
        goods = requests.get(
            f"{server.base_url('ecshop')}/goods.php", params={"id": "12"}, timeout=10, allow_redirects=False
        )
        assert goods.status_code == 302 and goods.headers["Location"] == "user.php"
        assert requests.get(f"{server.base_url('ecshop')}/goods.php", params={"id": "13"}, timeout=10).ok
    with pytest.raises(ConfigError):
        parse_misbehave(["m.teapot"])
    with pytest.raises(ConfigError):
        MisbehaviourRule.from_dict({"site": "m", "teapot_rate": 2})
    with pytest.raises(ConfigError):
        MisbehaviourRule.from_dict({"site": "weibo", "slow_rate": 1})
