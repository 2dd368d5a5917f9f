"""Weibo desktop and mobile: the documented formats, both mobile cursor forms, and a round trip through the
real parsers that finds exactly the published posts."""

from __future__ import annotations

import json

import requests

from crawler_client.sources import get_source
from crawler_client.sources.weibo_mobile import WeiboMobileSource
from icecrawler.models import Post
from sandbox import SandboxServer
from sandbox.sites.weibo_mobile import PAGE_SIZE
from tests.sandbox.conftest import crawl, fetch, truth_ids

UID = "1000000001"  # cursor = since_id, pinned post, long texts, retweets
UID_PAGE = "1000000002"  # cursor = page, no pinned post


def _get_index(server: SandboxServer, uid: str, **params: str) -> requests.Response:
    query = {"type": "uid", "value": uid, "containerid": f"107603{uid}", **params}
    return requests.get(f"{server.base_url('m')}/api/container/getIndex", params=query, timeout=10)


def test_mobile_first_page_has_the_pinned_post_first_and_out_of_order(server: SandboxServer) -> None:
    response = _get_index(server, UID)
    assert b"\\/" in response.content and b"\\u" in response.content  # PHP-style wire JSON
    doc = response.json()
    assert doc["ok"] == 1
    cards = doc["data"]["cards"]
    assert len(cards) == PAGE_SIZE + 1
    assert all(card["card_type"] == 9 and card["itemid"].endswith(card["mblog"]["mid"]) for card in cards)
    first, rest = cards[0]["mblog"], [card["mblog"] for card in cards[1:]]
    assert first["isTop"] == 1 and first["title"]["text"] == "置顶"
    assert int(first["mid"]) < int(rest[-1]["mid"])  # older than the whole page
    mids = [int(m["mid"]) for m in rest]
    assert mids == sorted(mids, reverse=True)
    assert all(len(m["mid"]) == 16 and int(m["mid"]) > 2**53 for m in rest)
    assert any(m["isLongText"] and m["text"].endswith("全文</a>") for m in rest)
    assert any("retweeted_status" in m for m in rest)
    assert first["created_at"].endswith("+0800 " + first["created_at"][-4:])


def test_mobile_since_id_cursor_walks_the_whole_timeline(server: SandboxServer) -> None:
    info = _get_index(server, UID).json()["data"]["cardlistInfo"]
    assert "page" not in info and isinstance(info["since_id"], int)
    second = _get_index(server, UID, since_id=str(info["since_id"])).json()["data"]
    assert second["cards"][0]["mblog"]["mid"] == str(info["since_id"])
    assert not any(card["mblog"].get("isTop") for card in second["cards"])

    result = crawl(server, "weibo_mobile", UID)
    posts = [item for item in result.items if isinstance(item, Post)]
    ids = [str(post.id) for post in posts]
    assert sorted(ids) == sorted(truth_ids(server, "weibo_mobile", UID))
    assert len(ids) == len(set(ids))
    assert any(post.pictures and "sinaimg.cn" in post.pictures[0] for post in posts)
    assert any(post.retweeted_id and post.retweeted_id != post.id for post in posts)


def test_mobile_page_cursor_and_both_request_forms(server: SandboxServer) -> None:
    info = _get_index(server, UID_PAGE).json()["data"]["cardlistInfo"]
    assert info["page"] == 2 and "since_id" not in info
    by_page = _get_index(server, UID_PAGE, page="2").json()["data"]["cards"]
    by_since = _get_index(server, UID_PAGE, since_id=by_page[0]["mblog"]["mid"]).json()["data"]["cards"]
    assert [c["mblog"]["mid"] for c in by_page] == [c["mblog"]["mid"] for c in by_since]
    # the since_id user also answers page=N
    assert len(_get_index(server, UID, page="2").json()["data"]["cards"]) == PAGE_SIZE

    result = crawl(server, "weibo_mobile", UID_PAGE)
    assert sorted(str(item.id) for item in result.items if isinstance(item, Post)) == sorted(
        truth_ids(server, "weibo_mobile", UID_PAGE)
    )


def test_mobile_end_unknown_user_and_profile(server: SandboxServer) -> None:
    past_end = _get_index(server, UID_PAGE, page="99").json()
    assert past_end == {"ok": 0, "msg": "这里还没有内容", "data": {"cards": []}}
    assert _get_index(server, "1234567890").json()["ok"] == 0
    profile = requests.get(
        f"{server.base_url('m')}/api/container/getIndex", params={"type": "uid", "value": UID}, timeout=10
    ).json()
    tabs = profile["data"]["tabsInfo"]["tabs"]
    assert any(tab["tab_type"] == "weibo" and tab["containerid"] == f"107603{UID}" for tab in tabs)
    assert profile["data"]["userInfo"]["id"] == int(UID)


def test_mobile_long_text_comes_from_statuses_extend(server: SandboxServer) -> None:
    source = get_source("weibo_mobile")
    assert isinstance(source, WeiboMobileSource)
    cards = _get_index(server, UID).json()["data"]["cards"]
    long_post = next(card["mblog"] for card in cards if card["mblog"]["isLongText"])
    request = source.extend_request(server.base_url("m"), long_post["id"])
    html = source.parse_extend(request, fetch(request), server.clock.now_ms())
    truth = {item["id"]: item for item in server.truth("weibo_mobile", UID)["items"]}
    assert truth[long_post["id"]]["text"] in html
    missing = requests.get(f"{server.base_url('m')}/statuses/extend", params={"id": "1"}, timeout=10).json()
    assert missing["ok"] == 0


def test_pc_chunks_pager_and_round_trip(server: SandboxServer) -> None:
    url = f"{server.base_url('pc')}/p/aj/v6/mblog/mbloglist"
    base = {"ajwvr": "6", "domain": "100505", "is_ori": "1", "id": f"100505{UID}", "__rnd": "1"}
    chunks = []
    for pre_page, pagebar in (("0", "0"), ("1", "0"), ("1", "1")):
        response = requests.get(url, params={**base, "page": "1", "pre_page": pre_page, "pagebar": pagebar}, timeout=10)
        doc = json.loads(response.content)
        assert doc["code"] == "100000" and b"\\/" in response.content
        chunks.append(doc["data"])
    # 15 posts a chunk, and on page 1 another user's old post this one liked (a titled card, not its post)
    assert [chunk.count('action-type="feed_list_item"') for chunk in chunks] == [16, 15, 15]
    assert chunks[0].count("赞过的微博") == 1
    assert 'node-type="lazyload"' in chunks[0] and "countPage" not in chunks[0]
    assert "currentPage=1&countPage=2" in chunks[2]  # 53 posts -> 2 visible pages
    assert 'date="' in chunks[0] and 'node-type="feed_list_item_date"' in chunks[0]
    assert 'action-type="fl_unfold"' in "".join(chunks) and 'isforward="1"' in "".join(chunks)
    mids = [part.split('"', 1)[0] for part in "".join(chunks).split(' mid="')[1:]]
    assert len(set(mids)) == 46

    result = crawl(server, "weibo_pc", UID)
    posts = [item for item in result.items if isinstance(item, Post)]
    assert sorted(str(post.id) for post in posts) == sorted(truth_ids(server, "weibo_pc", UID))
    assert any(post.pictures for post in posts) and any(post.retweeted_id for post in posts)
    assert all(post.user_id == int(UID) and post.created_at for post in posts)
    empty = requests.get(url, params={**base, "page": "9", "pre_page": "9", "pagebar": "0"}, timeout=10).json()
    assert empty == {"code": "100000", "msg": "", "data": ""}


def test_new_posts_appear_on_both_sites_as_time_passes(server: SandboxServer) -> None:
    before = set(truth_ids(server, "weibo_mobile", UID))
    server.clock.advance(3 * 600)
    after = truth_ids(server, "weibo_mobile", UID)
    new = set(after) - before
    assert len(new) == 3  # periodic, one every 10 minutes
    assert new <= set(truth_ids(server, "weibo_pc", UID))
    first_page = {card["mblog"]["mid"] for card in _get_index(server, UID).json()["data"]["cards"]}
    assert new <= first_page
