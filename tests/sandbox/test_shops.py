"""ECSHOP and JD: the documented formats, the login flow, category pages (paged, empty, unknown, growing)
and a round trip through the real parsers."""

from __future__ import annotations

import json

import pytest
import requests

from crawler_client.sources import PageRequest, get_source
from crawler_client.sources.ecshop import is_logged_in, login_request
from icecrawler.errors import FetchError
from icecrawler.models import Review, Task, TaskKind
from sandbox import SandboxServer
from sandbox.sites.jd import count_str
from tests.sandbox.conftest import crawl, fetch, visitor_session

JD_PRODUCT = "100012043978"
JD_PATH = "/comment/productPageComments.action"


def _jd(server: SandboxServer, **params: str) -> requests.Response:
    query = {
        "productId": JD_PRODUCT,
        "score": "0",
        "sortType": "6",
        "page": "0",
        "pageSize": "10",
        "isShadowSku": "0",
        "rid": "0",
        "fold": "1",
        **params,
    }
    return requests.get(server.base_url("jd") + JD_PATH, params=query, timeout=10)


def test_jd_jsonp_and_plain_json(server: SandboxServer) -> None:
    wrapped = _jd(server, callback="fetchJSON_comment98").text
    assert wrapped.startswith("fetchJSON_comment98({") and wrapped.endswith("});")
    doc = _jd(server).json()
    assert json.loads(wrapped[len("fetchJSON_comment98(") : -2]) == doc
    assert list(doc)[:3] == ["jwotestProduct", "score", "comments"] and doc["maxPage"] == 3
    comments = doc["comments"]
    assert len(comments) == 10 and all(c["id"] > 2**31 and c["referenceId"] == JD_PRODUCT for c in comments)
    times = [c["creationTime"] for c in comments]
    assert times == sorted(times, reverse=True)  # sortType=6: newest first
    summary = doc["productCommentSummary"]
    assert summary["commentCount"] == 0 and summary["commentCountStr"] == "100万+"
    recommended = [c["id"] for c in _jd(server, sortType="5").json()["comments"]]
    assert sorted(recommended) != recommended and set(recommended) != {c["id"] for c in comments}
    assert all(c["score"] >= 4 for c in _jd(server, score="3").json()["comments"])
    assert _jd(server, page="3").json()["comments"] == []
    assert _jd(server, productId="1").json()["comments"] == []


def test_jd_round_trip_matches_the_truth(server: SandboxServer) -> None:
    result = crawl(server, "jd", JD_PRODUCT, TaskKind.ProductReviews)
    ids = sorted(item.id for item in result.items if isinstance(item, Review))
    assert ids == sorted(t["id"] for t in server.truth("jd", JD_PRODUCT)["items"])


def test_count_str_rounds_like_jd() -> None:
    assert [count_str(n) for n in (7, 35, 1200, 23000, 1_200_000)] == ["7", "30+", "1000+", "2万+", "100万+"]


def test_ecshop_goods_page_and_gotopage_json(server: SandboxServer) -> None:
    page = requests.get(server.base_url("ecshop") + "/goods.php", params={"id": "12"}, timeout=10).text
    assert '<div id="ECS_COMMENT">' in page and "总计 12 个记录，共 3 页" in page
    assert page.count('<li class="word">') == 5 and "javascript:gotoPage(2,12,0)" in page
    raw = requests.get(
        server.base_url("ecshop") + "/comment.php?act=gotopage&page=3&id=12&type=0&1796000000000", timeout=10
    ).content
    assert b"\\/" in raw and b"\\u" in raw
    doc = json.loads(raw)
    assert doc["error"] == 0 and doc["message"] and doc["content"].count('<li class="word">') == 2
    no_act = requests.get(server.base_url("ecshop") + "/comment.php", allow_redirects=False, timeout=10)
    assert no_act.status_code == 302 and no_act.headers["Location"] == "./"


def test_ecshop_round_trip_matches_the_truth(server: SandboxServer) -> None:
    result = crawl(server, "ecshop", "12", TaskKind.ProductReviews)
    reviews = [item for item in result.items if isinstance(item, Review)]
    truth = server.truth("ecshop", "12")["items"]
    assert len(reviews) == len(truth) == 12
    assert sorted(r.content for r in reviews) == sorted(t["text"] for t in truth)
    assert len({r.id for r in reviews}) == 12  # (user, time, text) unique, so derived ids are too
    empty = crawl(server, "ecshop", "13", TaskKind.ProductReviews)
    assert empty.items == [] and "暂时还没有任何用户评论".encode() in empty.last.body


def test_category_pages_with_and_without_next_page(server: SandboxServer) -> None:
    url = server.base_url("ecshop") + "/category.php"
    only = requests.get(url, params={"id": "1", "page": "1"}, timeout=10).text
    assert 'class="next"' not in only and "goods.php?id=13" in only and "goods.php?id=12" in only
    server.clock.advance(3600)  # product 14 and arrivals 100, 101 appear
    first = requests.get(url, params={"id": "1", "page": "1"}, timeout=10).text
    assert 'class="next"' in first and "page=3" in first
    assert "goods.php?id=101" in first and "goods.php?id=100" in first  # newest first
    last = requests.get(url, params={"id": "1", "page": "3"}, timeout=10).text
    assert 'class="next"' not in last and "goods.php?id=12" in last
    listing = crawl(server, "ecshop", "1", TaskKind.Listing)
    assert sorted(listing.items) == sorted(["12", "13", "14", "100", "101"])  # type: ignore[type-var]
    products = {p["product"]: p for p in server.truth("ecshop")["products"]}
    assert products["14"]["appeared_ms"] == server.clock.origin_ms + 3_600_000 and not products["14"]["backlog"]
    assert products["100"]["appeared_ms"] == server.clock.origin_ms + 1_800_000
    assert "102" not in products
    server.clock.advance(7 * 3600)  # the new product gathers reviews on its own schedule
    arrived = crawl(server, "ecshop", "100", TaskKind.ProductReviews)
    assert arrived.items and len(arrived.items) == len(server.truth("ecshop", "100")["items"])


def test_empty_and_unknown_category(server: SandboxServer) -> None:
    url = server.base_url("ecshop") + "/category.php"
    empty = requests.get(url, params={"id": "2"}, timeout=10).text
    assert "总计 <b>0</b>" in empty and "goods.php?id=" not in empty
    assert crawl(server, "ecshop", "2", TaskKind.Listing).items == []
    unknown = requests.get(url, params={"id": "99"}, allow_redirects=False, timeout=10)
    assert unknown.status_code == 302 and unknown.headers["Location"] == "./"
    with pytest.raises(FetchError) as error:
        crawl(server, "ecshop", "99", TaskKind.Listing)
    assert error.value.outcome == "NotFound"
    not_yet = requests.get(
        server.base_url("ecshop") + "/goods.php", params={"id": "14"}, allow_redirects=False, timeout=10
    )
    assert not_yet.status_code == 302  # appears only after an hour


def test_ecshop_login_wall_and_login_flow(server: SandboxServer) -> None:
    server.misbehaviour.update("ecshop", "", {"login_wall": True})
    session = requests.Session()
    walled = session.get(server.base_url("ecshop") + "/goods.php", params={"id": "12"}, timeout=10)
    assert walled.url.endswith("/ecshop/user.php") and 'name="formLogin"' in walled.text
    with pytest.raises(FetchError) as error:
        crawl(server, "ecshop", "12", TaskKind.ProductReviews, session=session)
    assert error.value.outcome == "LoginRequired"

    bad = fetch(login_request(server.base_url("ecshop"), "sandbox", "wrong"), session)
    assert not is_logged_in(bad) and "用户名或密码错误" in bad.body.decode()
    good = fetch(login_request(server.base_url("ecshop"), "sandbox", "sandbox"), session)
    assert is_logged_in(good) and session.cookies.get("ECS_ID")
    result = crawl(server, "ecshop", "12", TaskKind.ProductReviews, session=session)
    assert len(result.items) == 12
    session.get(server.base_url("ecshop") + "/user.php", params={"act": "logout"}, timeout=10)
    assert session.get(server.base_url("ecshop") + "/goods.php", params={"id": "12"}, timeout=10).url.endswith(
        "user.php"
    )


def test_sources_parse_every_site_without_errors(server: SandboxServer) -> None:
    """Each source's first page of items through get_source().parse: a smoke check across every site (m.weibo.cn
    answers the profile first, weibo.com's API wants a visitor session)."""
    visitor = visitor_session(server)
    for name, target, kind, requests_needed in (
        ("weibo_pc", "1000000002", TaskKind.WeiboUser, 1),
        ("weibo_mobile", "1000000002", TaskKind.WeiboUser, 2),
        ("weibo_web", "1000000002", TaskKind.WeiboUser, 1),
        ("ecshop", "12", TaskKind.ProductReviews, 1),
        ("jd", JD_PRODUCT, TaskKind.ProductReviews, 1),
    ):
        result = crawl(
            server, name, target, kind, session=visitor if name == "weibo_web" else None, max_requests=requests_needed
        )
        assert result.items, name
        assert get_source(name).name == name


def test_jd_api_endpoint_form_reads_the_same_reviews(server: SandboxServer) -> None:
    """``sources.jd.endpoint = "api"``: the same query as a JSON body at ``/``, the same answer."""
    from crawler_client.sources.jd import JdSource

    club = crawl(server, "jd", JD_PRODUCT, TaskKind.ProductReviews)
    source = JdSource(endpoint="api")
    task = Task(id=f"reviews:jd:{JD_PRODUCT}", kind=TaskKind.ProductReviews, source="jd", target=JD_PRODUCT)
    request: PageRequest | None = source.first_request(task, server.base_url("jd"))
    items: list[object] = []
    while request is not None:
        parsed = source.parse(task, request, fetch(request), server.clock.now_ms())
        items.extend(parsed.items)
        request = parsed.next_request
    ids = [item.id for item in items if isinstance(item, Review)]
    assert ids and ids == [item.id for item in club.items if isinstance(item, Review)]
