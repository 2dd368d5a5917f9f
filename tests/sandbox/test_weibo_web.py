"""weibo.com's JSON API site and the passport visitor flow: a cookie-less call is sent to the visitor system, a
minted visitor session reads the whole timeline through the real parser (since_id and page users, the pinned
post, long texts by mblogid), the XSRF token must be echoed, and an expired session is answered with 432."""

from __future__ import annotations

import pytest
import requests

from crawler_client.sources import get_source
from crawler_client.sources.weibo_web import WeiboWebSource
from icecrawler.errors import FetchError
from icecrawler.models import Post, Task, TaskKind
from sandbox import SandboxServer
from sandbox.sites.weibo_web import PAGE_SIZE
from tests.sandbox.conftest import crawl, fetch, truth_ids, visitor_session

UID = "1000000001"  # since_id users, pinned post, long texts, retweets
UID_PAGE = "1000000002"  # page cursor, no pinned post
TASK = Task(id=f"user:weibo_web:{UID}", kind=TaskKind.WeiboUser, source="weibo_web", target=UID)


def test_a_cookie_less_call_is_sent_to_the_visitor_system(server: SandboxServer) -> None:
    with_session = crawl(server, "weibo_web", UID, session=visitor_session(server), max_requests=1)
    assert with_session.items
    with pytest.raises(FetchError) as info:
        crawl(server, "weibo_web", UID)
    assert (info.value.outcome, info.value.error_class) == ("LoginRequired", "visitor")


def test_visitor_session_reads_every_published_post_with_both_cursor_forms(server: SandboxServer) -> None:
    session = visitor_session(server)
    for uid in (UID, UID_PAGE):
        result = crawl(server, "weibo_web", uid, session=session)
        ids = [str(item.id) for item in result.items if isinstance(item, Post)]
        assert sorted(ids) == sorted(truth_ids(server, "weibo_web", uid)), uid
        assert len(ids) == len(set(ids))
    first_page = crawl(server, "weibo_web", UID, session=session, max_requests=1)
    posts = [item for item in first_page.items if isinstance(item, Post)]
    assert len(posts) == PAGE_SIZE + 1 and posts[0].pinned and not any(p.pinned for p in posts[1:])
    assert all(p.source == "weibo_web" and p.permalink.startswith(f"https://weibo.com/{UID}/") for p in posts)
    assert any(p.retweeted_id for p in posts)
    truth = {item["id"]: item for item in server.truth("weibo_web", UID)["items"]}
    assert all(truth[str(p.id)]["pinned"] == p.pinned for p in posts)


def test_long_text_by_mblogid_gives_the_full_text(server: SandboxServer) -> None:
    session = visitor_session(server)
    source = WeiboWebSource()
    request = source.first_request(TASK, server.base_url("web"))
    page = source.parse(TASK, request, fetch(request, session), server.clock.now_ms())
    long_id = page.info["long_text_ids"].split(",")[0]
    post = next(p for p in page.items if isinstance(p, Post) and str(p.id) == long_id)
    extend = source.extend_request(server.base_url("web"), long_id)
    assert extend.params["id"] == post.permalink.rsplit("/", 1)[1]  # asked by mblogid
    source.with_long_text(post, source.parse_extend(extend, fetch(extend, session), server.clock.now_ms()))
    assert post.text.startswith(truth_text(server, long_id)[:20]) and len(post.text) >= len(truth_text(server, long_id))


def truth_text(server: SandboxServer, mid: str) -> str:
    return str(next(i["text"] for i in server.truth("weibo_web", UID)["items"] if i["id"] == mid))


def test_the_xsrf_token_must_be_echoed(server: SandboxServer) -> None:
    session = visitor_session(server)
    url = f"{server.base_url('web')}/ajax/statuses/mymblog"
    first = session.get(url, params={"uid": UID, "page": "1", "feature": "0"}, timeout=10)
    assert first.status_code == 200 and session.cookies.get("XSRF-TOKEN")
    refused = session.get(url, params={"uid": UID, "page": "2", "feature": "0"}, timeout=10)
    assert refused.status_code == 403
    echoed = session.get(
        url,
        params={"uid": UID, "page": "2", "feature": "0"},
        timeout=10,
        headers={"X-XSRF-TOKEN": str(session.cookies.get("XSRF-TOKEN"))},
    )
    assert echoed.status_code == 200 and echoed.json()["ok"] == 1


def test_an_expired_visitor_session_gets_432_and_a_new_one_works(server: SandboxServer) -> None:
    session = visitor_session(server)
    assert crawl(server, "weibo_web", UID, session=session, max_requests=1).items
    server.clock.advance(server.visitors.ttl_s + 1)
    with pytest.raises(FetchError) as info:
        crawl(server, "weibo_web", UID, session=session, max_requests=1)
    assert (info.value.outcome, info.value.http_status, info.value.error_class) == ("Banned", 432, "http-432")
    assert crawl(server, "weibo_web", UID, session=visitor_session(server), max_requests=1).items
    control = requests.post(f"{server.url}/__sandbox/visitors", json={"expire": True, "ttl_s": 60}, timeout=10)
    assert control.json()["ttl_s"] == 60 and server.visitors.minted >= 2
    assert get_source("weibo_web").name == "weibo_web"


def test_a_passport_that_answers_a_visitor_id_only_still_gives_a_session(server: SandboxServer) -> None:
    """The passport's older answer names a visitor id (``data.tid``) and sets no cookie; the session comes from the
    ``incarnate`` call with that id (gallery-dl's weibo extractor takes that path in 2025). Read as "no SUB", the
    mint failed on every try and the source had no session at all."""
    control = requests.post(f"{server.url}/__sandbox/visitors", json={"two_step": True}, timeout=10)
    assert control.json()["two_step"] is True
    session = visitor_session(server)
    assert str(session.cookies.get("SUB", "")).startswith("_2AkM") and session.cookies.get("SUBP")
    assert crawl(server, "weibo_web", UID, session=session, max_requests=1).items
    incarnations = server.requests(site="passport", path="/visitor/visitor")["requests"]
    assert [row["query"].split("&")[0] for row in incarnations] == ["a=incarnate"]
    assert "t=" in incarnations[0]["query"] and "t=&" not in incarnations[0]["query"]


def test_a_passport_misbehaviour_rule_makes_the_schedulers_mint_fail_until_it_is_cleared(
    server: SandboxServer,
) -> None:
    """The passport is a misbehaviour site of its own: a passport refusing our address (HTTP 429 on every call) fails
    the scheduler's mint, and the rule cleared, the next mint gets a session; the API sites are left alone."""
    from sandbox.sites.passport import GENVISITOR_PATH
    from scheduler_server.visitors import VisitorError, mint_visitor

    url = f"{server.url}/passport{GENVISITOR_PATH}"
    rule = {"site": "passport", "set": {"retry_after_rate": 1.0}}
    assert requests.post(f"{server.url}/__sandbox/misbehave", json=rule, timeout=10).status_code == 200
    with pytest.raises(VisitorError, match="429"):
        mint_visitor(url)
    assert server.visitors.minted == 0
    assert server.misbehaviour.decide("web", UID, 1.0).status == 0
    server.misbehaviour.clear("passport")
    assert mint_visitor(url)["SUB"].startswith("_2AkM") and server.visitors.minted == 1


def test_visitor_ttl_from_the_flag_and_from_the_setting() -> None:
    import argparse

    from icecrawler.settings import Settings
    from sandbox.cli import add_options, build_server

    parser = argparse.ArgumentParser()
    add_options(parser)
    settings = Settings()
    settings.set("sandbox.visitor_ttl_s", 120.0)
    from_setting = build_server(parser.parse_args(["--port", "0"]), settings)
    from_flag = build_server(parser.parse_args(["--port", "0", "--visitor-ttl-s", "30"]), settings)
    try:
        assert (from_setting.visitors.ttl_s, from_flag.visitors.ttl_s) == (120.0, 30.0)
    finally:
        from_setting.stop()
        from_flag.stop()
