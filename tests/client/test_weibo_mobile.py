"""weibo_mobile: getIndex pages with both cursor forms, pinned/retweet/long-text posts, walls and extend."""

from __future__ import annotations

import dataclasses
import json

import pytest

from crawler_client.sources._detect import EMPTY_PAGE_RETRIES
from crawler_client.sources._weibo import END_AFTER_CURSOR_RETRIES
from crawler_client.sources.base import PageRequest
from crawler_client.sources.weibo_mobile import ContainerMemo, WeiboMobileSource
from icecrawler.errors import FetchError, ParseError
from icecrawler.models import Post, Task
from sandbox.samples import mobile_timeline
from tests.client._util import BASE, NOW_MS, busy_then_end, fetched, fixture, make_task, parse

SOURCE = WeiboMobileSource(ContainerMemo())
TASK = make_task("weibo_mobile", "5612345678")


def timeline() -> PageRequest:
    """Page 1 of the default timeline tab (what the parser tests answer)."""
    return SOURCE.timeline_request(BASE, "5612345678")


def test_timeline_request_has_no_cursor_and_the_web_app_headers() -> None:
    request = timeline()
    assert request.url == f"{BASE}/api/container/getIndex"
    assert request.params == {"type": "uid", "value": "5612345678", "containerid": "1076035612345678"}
    assert request.headers == {"Referer": f"{BASE}/u/5612345678"}
    assert request.cookie_headers == {"X-XSRF-TOKEN": "XSRF-TOKEN"}
    assert WeiboMobileSource.default_headers["MWeibo-Pwa"] == "1"
    assert WeiboMobileSource.default_headers["X-Requested-With"] == "XMLHttpRequest"


def test_since_id_page_fields_and_every_date_form() -> None:
    page = parse("weibo_mobile", TASK, timeline(), fixture("weibo_mobile_since_id.json"))
    posts = [item for item in page.items if isinstance(item, Post)]
    assert len(posts) == len(page.items) == 9  # card without mblog and mblog without id skipped
    assert page.info["skipped"] == "1"
    pinned, fresh, repost, long_post, today, yesterday, month_day, full_date, grouped = posts
    assert pinned.pinned and not fresh.pinned and pinned.id < fresh.id
    assert pinned.created_at == "2021-06-08T09:35:04+08:00"
    assert (pinned.reposts, pinned.comments, pinned.likes) == (1_000_000, 15_000, 7)
    assert pinned.pictures == ["https://wx1.sinaimg.cn/large/p1.jpg", "https://wx1.sinaimg.cn/orj360/p2.jpg"]
    assert pinned.text == "置顶微博\n第二行" and pinned.user_name == "测试用户" and pinned.user_id == 5612345678
    assert pinned.permalink == "https://weibo.com/5612345678/L000100"
    assert fresh.text == "@朋友 你好 [doge]" and fresh.created_at == "2021-07-06T12:00:00+08:00"
    assert repost.retweeted_id == 4600000000000001 and repost.created_at == "2021-07-06T11:55:00+08:00"
    assert long_post.created_at == "2021-07-06T09:00:00+08:00" and page.info["long_text_ids"] == str(long_post.id)
    assert today.created_at == "2021-07-06T08:15:00+08:00"
    assert yesterday.created_at == "2021-07-05T12:25:00+08:00"
    assert month_day.created_at == "2021-06-27T00:00:00+08:00"
    assert full_date.created_at == "2020-12-31T00:00:00+08:00"
    assert grouped.id == 4700000000002000
    assert all(post.source == "weibo_mobile" and post.fetched_at == "2021-07-06T12:00:00+08:00" for post in posts)
    nxt = page.next_request
    assert nxt is not None and nxt.params["since_id"] == "4699999999990000" and "page" not in nxt.params
    assert nxt.page == 2 and page.info["total"] == "1221"
    # the cursor after this page ignores the (older) pinned post
    assert SOURCE.newest_cursor(page.items) == "4700000000009000"
    assert not SOURCE.is_older_or_equal(pinned, "4700000000005000")
    assert SOURCE.is_older_or_equal(month_day, "4700000000005000")


def test_page_cursor_and_last_page() -> None:
    page = parse("weibo_mobile", TASK, timeline(), mobile_timeline(5612345678, next_value=2))
    assert len(page.items) == 10 and page.next_request is not None
    assert page.next_request.params["page"] == "2" and "since_id" not in page.next_request.params
    second = parse("weibo_mobile", TASK, page.next_request, mobile_timeline(5612345678, cursor="", pinned=False))
    assert len(second.items) == 10 and second.next_request is None
    last = parse("weibo_mobile", TASK, timeline(), fixture("weibo_mobile_last.json"))
    assert len(last.items) == 1 and last.next_request is None


def test_repeated_since_id_does_not_loop() -> None:
    request = timeline()
    request.params["since_id"] = "4699999999990000"
    assert parse("weibo_mobile", TASK, request, fixture("weibo_mobile_since_id.json")).next_request is None


def test_ok0_is_not_found_on_the_first_page_and_the_end_later() -> None:
    with pytest.raises(FetchError) as info:
        parse("weibo_mobile", TASK, timeline(), fixture("weibo_mobile_ok0.json"))
    assert info.value.outcome == "NotFound" and info.value.error_class == "no-content"
    later = timeline()
    later.params["page"] = "5"
    page = parse("weibo_mobile", TASK, later, fixture("weibo_mobile_ok0.json"))
    assert page.items == [] and page.next_request is None and page.info == {"end": "ok:0"}


@pytest.mark.parametrize(
    ("name", "error_class"), [("weibo_mobile_login.json", "login-wall"), ("weibo_mobile_verify.json", "verify-wall")]
)
def test_login_walls(name: str, error_class: str) -> None:
    with pytest.raises(FetchError) as info:
        parse("weibo_mobile", TASK, timeline(), fixture(name))
    assert info.value.outcome == "LoginRequired" and info.value.error_class == error_class


def test_html_ban_pages_and_teapot() -> None:
    request = timeline()
    with pytest.raises(FetchError) as info:
        parse("weibo_mobile", TASK, request, "<html>访问过于频繁</html>".encode("gbk"))
    assert info.value.outcome == "RateLimited"
    with pytest.raises(FetchError) as info:
        parse("weibo_mobile", TASK, request, b"", status=418)
    assert info.value.outcome == "Banned" and info.value.http_status == 418


@pytest.mark.parametrize("page", ["1", "3"])
def test_an_ok0_saying_requests_are_too_frequent_is_a_rate_limit_not_the_end(page: str) -> None:
    """On a later page ``ok:0`` ends the walk; one that says "too many requests" must not, or the posts the walk
    had not reached yet would fall behind the new cursor."""
    request = dataclasses.replace(timeline(), params={**timeline().params, "page": page})
    escaped = rb'{"ok":0,"msg":"\u8bf7\u6c42\u8fc7\u4e8e\u9891\u7e41"}'  # 请求过于频繁, as JSON escapes it
    for body in ('{"ok":0,"msg":"请求过于频繁，歇歇吧"}'.encode(), escaped):
        with pytest.raises(FetchError) as info:
            parse("weibo_mobile", TASK, request, body)
        assert (info.value.outcome, info.value.error_class) == ("RateLimited", "too-frequent")


def test_an_ok0_on_a_later_page_ends_the_walk_only_if_it_says_there_is_nothing_more() -> None:
    request = dataclasses.replace(timeline(), params={**timeline().params, "page": "3"})
    assert parse("weibo_mobile", TASK, request, fixture("weibo_mobile_ok0.json")).info == {"end": "ok:0"}
    assert parse("weibo_mobile", TASK, request, b'{"ok":0}').info == {"end": "ok:0"}
    assert parse("weibo_mobile", TASK, request, '{"ok":0,"msg":"暂无数据"}'.encode()).info == {"end": "ok:0"}
    with pytest.raises(FetchError) as info:
        parse("weibo_mobile", TASK, request, '{"ok":0,"msg":"用户不存在"}'.encode())
    assert (info.value.outcome, info.value.error_class) == ("Busy", "unexpected-ok0")


def test_an_empty_page_that_names_a_new_since_id_is_followed_not_taken_for_the_end() -> None:
    request = timeline()
    body = b'{"ok":1,"data":{"cardlistInfo":{"since_id":"4912345678900000"},"cards":[]}}'
    page = parse("weibo_mobile", TASK, request, body)
    assert page.items == [] and page.next_request is not None
    assert page.next_request.params["since_id"] == "4912345678900000"
    assert parse("weibo_mobile", TASK, request, b'{"ok":1,"data":{"cardlistInfo":{},"cards":[]}}').next_request is None


def test_long_text_extend() -> None:
    request = SOURCE.extend_request(BASE, 4700000000007000)
    assert request.url == f"{BASE}/statuses/extend" and request.params == {"id": "4700000000007000"}
    html = SOURCE.parse_extend(request, fetched(fixture("weibo_mobile_extend.json"), request), NOW_MS)
    post = SOURCE.with_long_text(Post(id=4700000000007000, user_id=1, text="长文开头 ...全文"), html)
    assert post.text == "长文开头，然后是完整的正文。\n@朋友" and post.html == html
    with pytest.raises(FetchError) as info:
        SOURCE.parse_extend(request, fetched(fixture("weibo_mobile_login.json"), request), NOW_MS)
    assert info.value.outcome == "LoginRequired"


def profile_body(tabs: list[dict[str, object]]) -> bytes:
    from sandbox.web import php_json

    return php_json(
        {
            "ok": 1,
            "data": {
                "userInfo": {
                    "id": 5612345678,
                    "screen_name": "测试用户",
                    "statuses_count": 1553,
                    "followers_count": "145.5万",
                },
                "tabsInfo": {"selectedTab": 1, "tabs": tabs},
            },
        }
    ).encode()


def test_first_crawl_reads_the_containerid_from_the_profile_and_remembers_it() -> None:
    source = WeiboMobileSource(ContainerMemo())
    first = source.first_request(TASK, BASE)
    assert first.params == {"type": "uid", "value": "5612345678"} and first.state == {"profile": "1"}
    tabs = [
        {"id": 1, "tab_type": "profile", "containerid": "2302835612345678"},
        {"id": 2, "tabKey": "weibo", "tab_type": "weibo", "title": "微博", "containerid": "1076039999"},
    ]
    page = source.parse(TASK, first, fetched(profile_body(tabs), first), NOW_MS)
    assert page.items == []
    assert page.info == {
        "screen_name": "测试用户",
        "statuses_count": "1553",
        "followers_count": "1455000",
        "timeline_containerid": "1076039999",
    }
    nxt = page.next_request
    assert nxt is not None and nxt.params["containerid"] == "1076039999"
    assert nxt.state["fallbacks"] == "2304135612345678_-_WEIBO_SECOND_PROFILE_WEIBO,1076035612345678"
    timeline_page = source.parse(TASK, nxt, fetched(mobile_timeline(5612345678), nxt), NOW_MS)
    assert len(timeline_page.items) == 10
    assert timeline_page.next_request is not None and timeline_page.next_request.params["containerid"] == "1076039999"
    # the next crawl of the task (any source instance sharing the memo) starts at the timeline
    again = WeiboMobileSource(source.memo).first_request(TASK, BASE)
    assert again.params["containerid"] == "1076039999" and again.state == {"remembered": "1"}
    # a task naming its containerid needs no profile at all
    named = make_task("weibo_mobile", "5612345678", containerid="107603abc")
    assert WeiboMobileSource(ContainerMemo()).first_request(named, BASE).params["containerid"] == "107603abc"


def test_profile_without_a_weibo_tab_falls_back_to_the_107603_prefix() -> None:
    source = WeiboMobileSource(ContainerMemo())
    first = source.first_request(TASK, BASE)
    page = source.parse(
        TASK, first, fetched(profile_body([{"tab_type": "album", "containerid": "1078"}]), first), NOW_MS
    )
    assert page.next_request is not None and page.next_request.params["containerid"] == "1076035612345678"


def test_an_empty_weibo_tab_falls_back_to_the_next_candidate_then_not_found() -> None:
    source = WeiboMobileSource(ContainerMemo())
    request = source.timeline_request(
        BASE, "5612345678", "1076035612345678", ("2304135612345678_-_WEIBO_SECOND_PROFILE_WEIBO",)
    )
    page = source.parse(TASK, request, fetched(fixture("weibo_mobile_ok0.json"), request), NOW_MS)
    assert page.items == [] and page.info == {"empty_tab": "1076035612345678"}
    nxt = page.next_request
    assert nxt is not None and nxt.params["containerid"] == "2304135612345678_-_WEIBO_SECOND_PROFILE_WEIBO"
    with pytest.raises(FetchError) as info:
        source.parse(TASK, nxt, fetched(fixture("weibo_mobile_ok0.json"), nxt), NOW_MS)
    assert info.value.outcome == "NotFound"
    # a profile served where a timeline was asked for moves on (or ends), never back to the profile
    served = source.parse(TASK, request, fetched(profile_body([]), request), NOW_MS)
    assert served.next_request is not None and served.next_request.params["containerid"].startswith("230413")
    assert source.parse(TASK, nxt, fetched(profile_body([]), nxt), NOW_MS).next_request is None


def _walk_empty_tabs(source: WeiboMobileSource, task: Task, profile: bytes) -> PageRequest:
    """From the profile answer through the candidate tabs answering 这里还没有内容: the last tab's request, not sent."""
    request = source.first_request(task, BASE)
    page = source.parse(task, request, fetched(profile, request), NOW_MS)
    assert page.next_request is not None
    request = page.next_request
    for _ in range(5):  # three candidate tabs at most
        if not request.state.get("fallbacks"):
            break
        page = source.parse(task, request, fetched(fixture("weibo_mobile_ok0.json"), request), NOW_MS)
        assert page.next_request is not None
        request = page.next_request
    return request


def test_every_tab_empty_while_the_profile_counts_posts_is_busy_then_not_found() -> None:
    """m.weibo.cn answers 这里还没有内容 as a risk-control answer too (a 2026 client moved to weibo.com's API because
    the container endpoint "increasingly" gives it for accounts with posts). Every tab of an account whose profile,
    fetched a moment before, counts 1553 posts said so, and the crawl was NotFound: the target parked for its longest
    period, its new posts unread. It is Busy ``weibo_mobile-empty-timeline`` (retried with the task's backoff), for
    ``EMPTY_PAGE_RETRIES`` failed visits in a row; then NotFound as before (an account showing none of its posts, such
    as one visible for half a year only). A profile counting no posts is NotFound at once."""
    tabs: list[dict[str, object]] = [{"tab_type": "weibo", "title": "微博", "containerid": "1076035612345678"}]
    last = _walk_empty_tabs(WeiboMobileSource(ContainerMemo()), TASK, profile_body(tabs))
    assert last.state["posts"] == "1553" and last.params["containerid"] != "1076035612345678"  # a fallback tab
    with pytest.raises(FetchError) as info:
        WeiboMobileSource(ContainerMemo()).parse(TASK, last, fetched(fixture("weibo_mobile_ok0.json"), last), NOW_MS)
    assert (info.value.outcome, info.value.error_class) == ("Busy", "weibo_mobile-empty-timeline")
    gone = json.dumps({"ok": 0, "error_code": 20003, "msg": "用户不存在"}).encode()
    with pytest.raises(FetchError) as info:  # a user gone is gone, whatever the profile counted a moment before
        WeiboMobileSource(ContainerMemo()).parse(TASK, last, fetched(gone, last), NOW_MS)
    assert info.value.outcome == "NotFound"
    coded = json.dumps({"ok": 0, "error_code": 20003, "msg": "这里还没有内容"}).encode()
    with pytest.raises(FetchError) as info:  # the code says gone, whatever the words
        WeiboMobileSource(ContainerMemo()).parse(TASK, last, fetched(coded, last), NOW_MS)
    assert info.value.outcome == "NotFound"
    tired = make_task("weibo_mobile", "5612345678", attempts=EMPTY_PAGE_RETRIES)
    with pytest.raises(FetchError) as info:
        WeiboMobileSource(ContainerMemo()).parse(tired, last, fetched(fixture("weibo_mobile_ok0.json"), last), NOW_MS)
    assert (info.value.outcome, info.value.error_class) == ("NotFound", "no-content")
    none = json.loads(profile_body(tabs))
    none["data"]["userInfo"]["statuses_count"] = 0
    last = _walk_empty_tabs(WeiboMobileSource(ContainerMemo()), TASK, json.dumps(none).encode())
    assert "posts" not in last.state
    with pytest.raises(FetchError) as info:
        WeiboMobileSource(ContainerMemo()).parse(TASK, last, fetched(fixture("weibo_mobile_ok0.json"), last), NOW_MS)
    assert info.value.outcome == "NotFound"


def test_a_remembered_tab_gone_empty_goes_back_to_the_profile() -> None:
    memo = ContainerMemo()
    memo.put(TASK.id, "1076035612345678")
    source = WeiboMobileSource(memo)
    request = source.first_request(TASK, BASE)
    page = source.parse(TASK, request, fetched(fixture("weibo_mobile_ok0.json"), request), NOW_MS)
    assert page.next_request is not None and page.next_request.state == {"profile": "1"}
    assert memo.get(TASK.id) == ""


def test_html_login_page_jsonp_and_bom_answers() -> None:
    with pytest.raises(FetchError) as info:
        parse("weibo_mobile", TASK, timeline(), b"<!DOCTYPE html><html><head><title>m.weibo.cn</title></head></html>")
    assert info.value.outcome == "LoginRequired" and info.value.error_class == "html-instead-of-json"
    wrapped = b"jsonp_1(" + mobile_timeline(5612345678) + b");"
    assert len(parse("weibo_mobile", TASK, timeline(), wrapped).items) == 10
    assert len(parse("weibo_mobile", TASK, timeline(), b"\xef\xbb\xbf" + mobile_timeline(5612345678)).items) == 10


def test_pre_2017_top_level_cards_and_inline_long_text() -> None:
    from sandbox.web import php_json

    mblog = {
        "id": 4100000000000001,
        "created_at": "06-27",
        "text": "开头...全文",
        "isLongText": True,
        "longText": {"longTextContent": "开头和完整正文"},
        "user": {"id": 5612345678},
    }
    body = php_json({"cardlistInfo": {"page": 2}, "cards": [{"card_type": 9, "mblog": mblog}], "ok": 1}).encode()
    page = parse("weibo_mobile", TASK, timeline(), body)
    (post,) = page.items
    assert isinstance(post, Post) and post.id == 4100000000000001 and post.text == "开头和完整正文"
    assert "long_text_ids" not in page.info and page.next_request is not None


def test_detail_page_render_data_and_extend_answer() -> None:
    import json

    status = {
        "id": "4700000000007000",
        "created_at": "Tue Jun 08 09:35:04 +0800 2021",
        "text": "详情页全文",
        "user": {"id": 5612345678, "screen_name": "测试用户"},
        "bid": "Lxyz",
        "reposts_count": 2,
    }
    body = (
        "<!DOCTYPE html><html><body><script>\nvar $render_data = ["
        + json.dumps({"status": status, "call": "1"}, ensure_ascii=False, indent=4)
        + "][0] || {};\nvar config = {};</script></body></html>"
    ).encode()
    page = parse("weibo_mobile", TASK, timeline(), body)
    (post,) = page.items
    assert isinstance(post, Post) and post.id == 4700000000007000 and post.text == "详情页全文"
    assert post.permalink == "https://weibo.com/5612345678/Lxyz" and page.next_request is None
    extend = parse("weibo_mobile", TASK, timeline(), fixture("weibo_mobile_extend.json"))
    assert extend.items == [] and extend.info["long_text"].startswith("长文开头")


def test_posts_of_other_accounts_in_the_timeline_are_left_out() -> None:
    """The same owner rule as weibo.com's (``_weibo.others_posts``): another author's post is not this timeline's,
    and a page that is all one other account's is that account's timeline."""
    doc = json.loads(mobile_timeline(5612345678))
    cards = doc["data"]["cards"]
    cards[1]["mblog"]["user"] = {"id": 6423651199, "screen_name": "别人"}
    page = parse("weibo_mobile", TASK, SOURCE.first_request(TASK, BASE), json.dumps(doc).encode())
    ids = [item.id for item in page.items if isinstance(item, Post)]
    assert len(ids) == len(cards) - 1 and int(cards[1]["mblog"]["id"]) not in ids
    assert page.info["other_accounts"] == "1" and page.next_request is not None
    for card in cards:
        card["mblog"]["user"] = {"id": 6423651199}
    with pytest.raises(ParseError, match="the timeline is account 6423651199's"):
        parse("weibo_mobile", TASK, SOURCE.first_request(TASK, BASE), json.dumps(doc).encode())


def test_answers_of_other_endpoints_say_what_they_are() -> None:
    """A single post (m.weibo.cn ``statuses/show``) or a weibo.com list given to this source is refused with a
    message that says what it is, not "unexpected envelope ok='1'"."""
    show = b'{"ok":1,"data":{"id":"4700000000000001","mid":"4700000000000001","text":"x","user":{"id":5612345678}}}'
    with pytest.raises(ParseError, match="getIndex: no cards \\(one post, as statuses/show answers"):
        parse("weibo_mobile", TASK, SOURCE.first_request(TASK, BASE), show)
    with pytest.raises(ParseError, match="parse it with the weibo_web source"):
        parse("weibo_mobile", TASK, SOURCE.first_request(TASK, BASE), b'{"ok":1,"data":{"list":[]}}')
    with pytest.raises(ParseError, match="unexpected envelope ok='7'"):
        parse("weibo_mobile", TASK, SOURCE.first_request(TASK, BASE), b'{"ok":7,"data":{}}')


def test_a_post_pinned_by_its_card_alone_and_pictures_sent_as_an_object() -> None:
    """Forms public clients of 2024–2026 handle: the pinned post marked only on its card (``profile_type_id``
    ``proweibotop``), and ``pics`` as ``{"0": ..., "1": ...}``. An old pinned post taken for a dated one would
    end every incremental walk at the top of the page."""
    pinned_mblog = {
        "id": "4500000000000001",
        "created_at": "Mon Jan 04 10:00:00 +0800 2021",
        "text": "置顶的旧微博",
        "user": {"id": 5612345678, "screen_name": "甲"},
        "pics": {
            "1": {"url": "https://wx1.sinaimg.cn/orj360/b.jpg", "large": {"url": "https://wx1.sinaimg.cn/large/b.jpg"}},
            "0": {"url": "https://wx1.sinaimg.cn/orj360/a.jpg", "large": {"url": "https://wx1.sinaimg.cn/large/a.jpg"}},
        },
    }
    fresh_mblog = {
        "id": "4900000000000001",
        "created_at": "Tue Jul 06 11:00:00 +0800 2021",
        "text": "新的",
        "user": {"id": 5612345678, "screen_name": "甲"},
    }
    doc = {
        "ok": 1,
        "data": {
            "cardlistInfo": {"since_id": ""},
            "cards": [
                {"card_type": 9, "profile_type_id": "proweibotop_", "mblog": pinned_mblog},
                {"card_type": 9, "profile_type_id": "proweibo_", "mblog": fresh_mblog},
            ],
        },
    }
    page = parse("weibo_mobile", TASK, timeline(), json.dumps(doc, ensure_ascii=False).encode())
    pinned, fresh = page.items
    assert isinstance(pinned, Post) and isinstance(fresh, Post)
    assert pinned.pinned and not fresh.pinned
    assert pinned.pictures == ["https://wx1.sinaimg.cn/large/a.jpg", "https://wx1.sinaimg.cn/large/b.jpg"]
    assert not SOURCE.is_older_or_equal(pinned, "4800000000000000")  # the walk goes on past the pinned post
    assert SOURCE.newest_cursor(page.items) == "4900000000000001"


def test_a_pinned_post_inside_a_card_group_is_pinned_by_its_card() -> None:
    """Page 1 of a timeline may open with a ``card_type`` 11 whose ``card_group`` holds one card: the pinned post
    (its ``profile_type_id`` ``proweibotop…``, the mblog unmarked) or, without one, the newest post. Nested, the
    card's mark counts as on a top-level card: an old pinned post taken for a dated one ends the walk at once."""
    pinned_mblog = {
        "id": "4500000000000002",
        "created_at": "Mon Jan 04 10:00:00 +0800 2021",
        "text": "组里置顶的旧微博",
        "user": {"id": 5612345678, "screen_name": "甲"},
    }
    fresh_mblog = {
        "id": "4900000000000002",
        "created_at": "Tue Jul 06 11:00:00 +0800 2021",
        "text": "组外新的",
        "user": {"id": 5612345678, "screen_name": "甲"},
    }
    grouped_fresh = {**fresh_mblog, "id": "4900000000000003", "text": "组里最新的"}
    doc = {
        "ok": 1,
        "data": {
            "cardlistInfo": {"since_id": ""},
            "cards": [
                {
                    "card_type": 11,
                    "card_group": [{"card_type": 9, "profile_type_id": "proweibotop_", "mblog": pinned_mblog}],
                },
                {
                    "card_type": 11,
                    "card_group": [{"card_type": 9, "profile_type_id": "proweibo_", "mblog": grouped_fresh}],
                },
                {"card_type": 9, "profile_type_id": "proweibo_", "mblog": fresh_mblog},
            ],
        },
    }
    page = parse("weibo_mobile", TASK, timeline(), json.dumps(doc, ensure_ascii=False).encode())
    pinned, grouped, fresh = page.items
    assert isinstance(pinned, Post) and isinstance(grouped, Post) and isinstance(fresh, Post)
    assert pinned.pinned and not grouped.pinned and not fresh.pinned
    assert not SOURCE.is_older_or_equal(pinned, "4800000000000000")  # the walk goes on past the pinned post
    assert SOURCE.newest_cursor(page.items) == "4900000000000003"


@pytest.mark.parametrize(
    ("message", "outcome", "error_class"),
    [
        ("访问频次过高", "RateLimited", "too-frequent"),
        ("请登录后查看", "LoginRequired", "login"),
        ("该用户不存在", "NotFound", "no-content"),
        ("服务暂不可用", "Busy", "unexpected-ok0"),
    ],
)
def test_an_ok0_on_the_first_page_is_not_found_only_when_it_says_there_is_nothing(
    message: str, outcome: str, error_class: str
) -> None:
    body = json.dumps({"ok": 0, "msg": message, "data": {"cards": []}}).encode()
    with pytest.raises(FetchError) as info:
        parse("weibo_mobile", TASK, timeline(), body)
    assert (info.value.outcome, info.value.error_class) == (outcome, error_class)


def test_an_empty_bid_is_read_from_the_cards_scheme() -> None:
    """m.weibo.cn sends some cards with ``mblog.bid`` empty while the card's ``scheme`` still names the post's base62
    id (``?mblogid=…``); public clients of 2024–2026 read it there. The permalink was the m.weibo.cn form, not the
    weibo.com one that weibo_web and the other cards store for the same row. A scheme without it changes nothing."""
    page = parse("weibo_mobile", TASK, timeline(), fixture("weibo_mobile_empty_bid.json"))
    posts = [item for item in page.items if isinstance(item, Post)]
    assert [post.permalink for post in posts] == [
        "https://weibo.com/5612345678/Qa1Bc2De3",
        "https://m.weibo.cn/status/4900000000000002",
    ]
    assert [post.id for post in posts] == [4900000000000003, 4900000000000002]


def _notice_page(name: str, **cardlist: object) -> bytes:
    """An ``ok:1`` timeline page whose one card is a notice (``card_type`` 58) naming ``name``, no post in it."""
    info = {"containerid": "1076035612345678", "total": 0, **cardlist}
    return json.dumps({"ok": 1, "data": {"cardlistInfo": info, "cards": [{"card_type": 58, "name": name}]}}).encode()


def test_a_notice_card_saying_there_are_no_posts_is_an_empty_tab_not_a_page_to_walk_on() -> None:
    """m.weibo.cn may answer a timeline tab with ``ok:1`` and one notice card (``card_type`` 58) named 暂无微博
    instead of ``ok:0`` 这里还没有内容 (public m.weibo.cn scrapers skip the account on it: "no posts, or set private"),
    and closes a list with a notice named 没有更多内容了. Taken for a page of cards, the first answer memoised the tab,
    walked on to page 2 and reported the crawl Ok with nothing: no other tab tried, and the risk-control retry of an
    account whose profile counts posts never made. It is an empty tab, as ``ok:0`` is; on a later page, the end."""
    source = WeiboMobileSource(ContainerMemo())
    request = source.timeline_request(
        BASE, "5612345678", "1076035612345678", ("2304135612345678_-_WEIBO_SECOND_PROFILE_WEIBO",)
    )
    page = source.parse(TASK, request, fetched(_notice_page("暂无微博", page=2), request), NOW_MS)
    assert page.items == [] and page.info == {"empty_tab": "1076035612345678"}
    nxt = page.next_request
    assert nxt is not None and nxt.params["containerid"] == "2304135612345678_-_WEIBO_SECOND_PROFILE_WEIBO"
    assert source.memo.get(TASK.id) == ""  # the empty tab is not remembered
    beside = json.loads(_notice_page("暂无微博"))  # other cards beside the notice, none a post: still an empty tab
    beside["data"]["cards"].insert(0, {"card_type": 11, "card_group": [{"card_type": 4, "desc": "简介"}]})
    assert source.parse(TASK, request, fetched(json.dumps(beside).encode(), request), NOW_MS).info == page.info
    with pytest.raises(FetchError) as info:
        source.parse(TASK, nxt, fetched(_notice_page("暂无微博", page=2), nxt), NOW_MS)
    assert (info.value.outcome, info.value.error_class) == ("NotFound", "no-content")
    later = dataclasses.replace(timeline(), params={**timeline().params, "page": "3"})
    end = parse("weibo_mobile", TASK, later, _notice_page("没有更多内容了", page=4))
    assert end.items == [] and end.next_request is None and end.info == {"end": "没有更多内容了"}


def test_a_notice_card_in_other_words_or_beside_posts_changes_nothing() -> None:
    """Only a notice that says there is nothing (more) counts: a page of posts with a notice card among them is read
    as before, and a lone notice in other words is walked on as any page of cards is (a loop is still cut by the
    repeated cursor)."""
    later = dataclasses.replace(timeline(), params={**timeline().params, "page": "3"})
    other = parse("weibo_mobile", TASK, later, _notice_page("以下是更早的微博", page=4))
    assert other.next_request is not None and other.next_request.params["page"] == "4"
    doc = json.loads(mobile_timeline(5612345678))
    doc["data"]["cards"].append({"card_type": 58, "name": "没有更多内容了"})
    page = parse("weibo_mobile", TASK, timeline(), json.dumps(doc).encode())
    assert page.items and page.items == parse("weibo_mobile", TASK, timeline(), mobile_timeline(5612345678)).items


@pytest.mark.parametrize("name", ["暂无微博", "没有更多内容了"])
@pytest.mark.parametrize("sent", ["", "4912345678900000"], ids=["page-1", "later"])
def test_a_notice_beside_a_new_since_id_is_followed_not_taken_for_the_end(name: str, sent: str) -> None:
    """A page holding only a notice card but naming a new ``since_id`` says there is more: ``_next`` follows such a
    page. Read as the notice first, a later page ended the walk there (Ok: its open gaps closed and its cursor moved
    over every post behind the new since_id, for good), and a first page went on to the next tab. The since_id we
    sent, repeated, is no cursor: the notice is read (the repeated-cursor guard still stops a loop)."""
    request = timeline()
    if sent:
        request.params["since_id"] = sent
    page = parse("weibo_mobile", TASK, request, _notice_page(name, since_id="4912345678800000"))
    assert page.items == [] and "end" not in page.info and "empty_tab" not in page.info
    assert page.next_request is not None and page.next_request.params["since_id"] == "4912345678800000"
    assert page.next_request.params["containerid"] == "1076035612345678"
    if sent:
        repeated = parse("weibo_mobile", TASK, request, _notice_page("没有更多内容了", since_id=sent))
        assert repeated.next_request is None and repeated.info == {"end": "没有更多内容了"}


def test_a_later_notice_of_no_posts_is_busy_not_the_end() -> None:
    """On a later page only 没有更多内容了 ends the list. 暂无微博 there ("this account has no posts", and m.weibo.cn's
    risk-control wording on a first page) contradicts the pages read before it: it ended the walk, so the crawl was
    Ok and its cursor passed over the posts not reached. It is Busy (cursor kept) for ``END_AFTER_CURSOR_RETRIES``
    failed visits in a row, then the end (an account that stops showing its older posts must not fail for ever)."""
    for cursor in ({"page": "3"}, {"since_id": "4912345678900000"}):
        later = dataclasses.replace(timeline(), params={**timeline().params, **cursor})
        with pytest.raises(FetchError) as info:
            parse("weibo_mobile", TASK, later, _notice_page("暂无微博", page=4))
        assert (info.value.outcome, info.value.error_class) == ("Busy", "weibo_mobile-empty-page")
        almost = make_task("weibo_mobile", "5612345678", attempts=END_AFTER_CURSOR_RETRIES - 1)
        with pytest.raises(FetchError):
            parse("weibo_mobile", almost, later, _notice_page("暂无微博", page=4))
        tired = make_task("weibo_mobile", "5612345678", attempts=END_AFTER_CURSOR_RETRIES)
        end = parse("weibo_mobile", tired, later, _notice_page("暂无微博", page=4))
        assert end.items == [] and end.next_request is None and end.info == {"end": "暂无微博"}


def test_a_first_page_notice_while_the_profile_counts_posts_is_the_risk_control_retry() -> None:
    """Every candidate tab answering an ``ok:1`` 暂无微博 notice (no ``ok:0``) while the profile counts posts is the
    same risk-control answer as 这里还没有内容: Busy ``weibo_mobile-empty-timeline``, then NotFound after
    ``EMPTY_PAGE_RETRIES`` such visits."""
    tabs: list[dict[str, object]] = [{"tab_type": "weibo", "title": "微博", "containerid": "1076035612345678"}]
    profile = json.loads(profile_body(tabs))
    profile["data"]["userInfo"]["statuses_count"] = 120
    source = WeiboMobileSource(ContainerMemo())
    first = source.first_request(TASK, BASE)
    request = source.parse(TASK, first, fetched(json.dumps(profile).encode(), first), NOW_MS).next_request
    for _ in range(5):  # three candidate tabs at most
        assert request is not None and request.state["posts"] == "120"
        if not request.state.get("fallbacks"):
            break
        request = source.parse(TASK, request, fetched(_notice_page("暂无微博"), request), NOW_MS).next_request
    assert request is not None and not request.state.get("fallbacks")
    with pytest.raises(FetchError) as info:
        source.parse(TASK, request, fetched(_notice_page("暂无微博"), request), NOW_MS)
    assert (info.value.outcome, info.value.error_class) == ("Busy", "weibo_mobile-empty-timeline")
    tired = make_task("weibo_mobile", "5612345678", attempts=EMPTY_PAGE_RETRIES)
    with pytest.raises(FetchError) as info:
        source.parse(tired, request, fetched(_notice_page("暂无微博"), request), NOW_MS)
    assert (info.value.outcome, info.value.error_class) == ("NotFound", "no-content")
    assert source.memo.get(TASK.id) == ""


@pytest.mark.parametrize("cursor", [{"page": "3"}, {"since_id": "4912345678900000"}])
def test_an_illegal_request_answer_in_the_middle_of_a_walk_is_the_session_refused(cursor: dict[str, str]) -> None:
    """errno 100006 on a later page is the session refused as on the first, not an ``ok:0`` end of the list (which
    would end the crawl Ok with the rest of the posts behind its new cursor)."""
    request = dataclasses.replace(timeline(), params={**timeline().params, **cursor})
    for body, status in (
        (b'{"ok":0,"errno":"100006","msg":"\\u8bf7\\u6c42\\u975e\\u6cd5"}', 200),
        (b'{"ok":0,"errno":"100006","msg":""}', 403),
    ):
        with pytest.raises(FetchError) as info:
            parse("weibo_mobile", TASK, request, body, status=status)
        assert (info.value.outcome, info.value.error_class, info.value.http_status) == (
            "LoginRequired",
            "illegal-request",
            status,
        )


@pytest.mark.parametrize(
    "body",
    [
        '{"ok":0,"msg":"这里还没有内容","data":{"cards":[]}}'.encode(),
        b'{"ok":0}',
        b'{"ok":1,"data":{"cardlistInfo":{"containerid":"1076035612345678","total":80},"cards":[]}}',
    ],
    ids=["ok0-nothing-here", "ok0-silent", "ok1-no-cards"],
)
@pytest.mark.parametrize("cursor", [{"page": "3"}, {"since_id": "4912345678900000"}], ids=["page", "since_id"])
def test_a_later_page_ending_the_list_before_the_known_post_is_busy_then_the_end(
    body: bytes, cursor: dict[str, str]
) -> None:
    """A later page is only asked for while the walk has not met the post the task already has (the walk stops after
    the page holding it). An end of the list there, ``ok:0`` 这里还没有内容 (also m.weibo.cn's risk-control answer for
    accounts that have posts) or a page of no cards naming no cursor, contradicts the visits before: taken for the end,
    the crawl was Ok and its cursor passed over every post it had not reached. A crawl of m.weibo.cn ending so in the
    middle of an account's pages under Weibo's limits, and going on later from that page, is reported by a user of
    dataabc/weibo-crawler (issue #426, 2024). Busy (cursor kept) for ``END_AFTER_CURSOR_RETRIES`` failed visits in a
    row, then the end (the known posts deleted, or no longer shown); without a cursor (a first crawl) it is the end."""
    later = dataclasses.replace(timeline(), params={**timeline().params, **cursor})
    known = dataclasses.replace(TASK, cursor="4700000000000000")
    assert busy_then_end("weibo_mobile", known, later, body).items == []
    first_crawl = parse("weibo_mobile", TASK, later, body)
    assert first_crawl.items == [] and first_crawl.next_request is None
