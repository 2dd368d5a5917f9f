"""weibo_web: weibo.com's /ajax/statuses/mymblog pages (since_id and page paging), pinned/repost/long-text posts,
pic_infos, the longtext endpoint, session walls, and the storage identity shared with the other Weibo sources."""

from __future__ import annotations

import dataclasses
import json

import pytest

from crawler_client.sources.weibo_mobile import WeiboMobileSource
from crawler_client.sources.weibo_web import WeiboWebSource
from icecrawler.errors import FetchError, ParseError
from icecrawler.models import Post
from sandbox.samples import web_timeline
from storage_server.schema import WEIBO, post_row
from tests.client._util import BASE, NOW_MS, busy_then_end, fetched, fixture, make_task, parse

SOURCE = WeiboWebSource()
TASK = make_task("weibo_web", "5612345678")


def posts_of(body: bytes) -> list[Post]:
    page = parse("weibo_web", TASK, SOURCE.first_request(TASK, BASE), body)
    return [item for item in page.items if isinstance(item, Post)]


def test_first_request_is_the_web_clients_call() -> None:
    request = SOURCE.first_request(TASK, BASE)
    assert request.url == f"{BASE}/ajax/statuses/mymblog"
    assert request.params == {"uid": "5612345678", "page": "1", "feature": "0"} and request.page == 1
    assert request.headers == {"Referer": f"{BASE}/u/5612345678"}
    assert request.cookie_headers == {"X-XSRF-TOKEN": "XSRF-TOKEN"}
    assert WeiboWebSource.default_headers["X-Requested-With"] == "XMLHttpRequest"
    assert WeiboWebSource.default_headers["User-Agent"].startswith("Mozilla/5.0")


def test_page_fields_pinned_pictures_repost_and_since_id() -> None:
    page = parse("weibo_web", TASK, SOURCE.first_request(TASK, BASE), fixture("weibo_web_page1.json"))
    posts = [item for item in page.items if isinstance(item, Post)]
    assert len(posts) == 5 and page.info["skipped"] == "1"  # the entry without an id
    pinned, fresh, repost, long_post, html_only = posts
    assert pinned.pinned and not fresh.pinned and pinned.id < fresh.id
    assert pinned.created_at == "2021-06-08T09:35:04+08:00" and pinned.text == "置顶微博\n第二行"
    assert (pinned.reposts, pinned.comments, pinned.likes) == (1_000_000, 15_000, 7)
    assert pinned.permalink == "https://weibo.com/5612345678/KjPin0001"
    assert fresh.text == "@朋友 你好 [doge]" and "<img" in fresh.html  # zero-width spaces dropped
    assert fresh.likes == 12_000 and fresh.user_name == "测试用户" and fresh.user_id == 5612345678
    assert fresh.pictures == [
        "https://wx3.sinaimg.cn/large/0060abcdly1h0000001.jpg",
        "https://wx3.sinaimg.cn/wap180/0060abcdly1h0000002.jpg",
        "https://wx1.sinaimg.cn/large/0060abcdly1h0000003.jpg",
    ]
    assert repost.retweeted_id == 4699000000000001 and repost.pictures == []  # the original's are not its own
    assert long_post.id == 4700000000007000 and page.info["long_text_ids"] == "4700000000007000"
    assert html_only.text == "只有 HTML 正文\n没有 text_raw" and html_only.created_at == "2021-07-05T12:25:00+08:00"
    assert all(p.source == "weibo_web" and p.fetched_at == "2021-07-06T12:00:00+08:00" for p in posts)
    assert page.info["since_id"] == "4700000000005000kp2" and page.info["total"] == "1221"
    nxt = page.next_request
    assert nxt is not None and nxt.page == 2
    assert nxt.params == {"uid": "5612345678", "page": "2", "feature": "0", "since_id": "4700000000005000kp2"}
    assert nxt.headers["Referer"] == f"{BASE}/u/5612345678" and nxt.cookie_headers == {"X-XSRF-TOKEN": "XSRF-TOKEN"}
    # the incremental stop: the pinned post is never "older", and being older it is not the cursor
    assert SOURCE.newest_cursor(page.items) == "4700000000009000"
    assert not SOURCE.is_older_or_equal(pinned, "4700000000008000")
    assert SOURCE.is_older_or_equal(repost, "4700000000008000")


def test_paging_by_page_when_there_is_no_since_id_and_the_ends() -> None:
    page = parse("weibo_web", TASK, SOURCE.first_request(TASK, BASE), fixture("weibo_web_paged.json"))
    assert len(page.items) == 2 and page.next_request is not None
    assert page.next_request.params == {"uid": "5612345678", "page": "2", "feature": "0"}
    # since_id "" with posts is not the end: real first pages say "" with a thousand posts to come (total 1633)
    last = parse("weibo_web", TASK, page.next_request, fixture("weibo_web_last.json"))
    assert len(last.items) == 1 and last.next_request is not None
    assert last.next_request.params == {"uid": "5612345678", "page": "3", "feature": "0"}
    end = parse("weibo_web", TASK, page.next_request, fixture("weibo_web_end.json"))  # {"ok":1}
    assert end.items == [] and end.next_request is None and end.info == {"end": "no data"}
    empty = parse("weibo_web", TASK, page.next_request, b'{"ok":1,"data":{}}')
    assert empty.items == [] and empty.next_request is None
    repeated = SOURCE.page_request(BASE, "5612345678", 2, "4700000000005000kp2")
    assert parse("weibo_web", TASK, repeated, fixture("weibo_web_page1.json")).next_request is None


def test_a_first_page_with_an_empty_since_id_is_followed_by_page_number() -> None:
    """Saved first pages of weibo.com (2022-2023) say ``since_id: ""`` while the account has many more posts, and
    the page after is asked for by number; taken for the end, a crawl read one page of each timeline."""
    doc = json.loads(fixture("weibo_web_page1.json"))
    doc["data"]["since_id"] = ""
    page = parse("weibo_web", TASK, SOURCE.first_request(TASK, BASE), json.dumps(doc).encode())
    assert page.items and page.next_request is not None
    assert page.next_request.params == {"uid": "5612345678", "page": "2", "feature": "0"}
    doc["data"]["list"] = []
    assert parse("weibo_web", TASK, page.next_request, json.dumps(doc).encode()).next_request is None


def test_posts_of_other_accounts_in_the_timeline_are_left_out() -> None:
    """A post another account wrote (a quick repost, 快转, shows the original under its author) is not this one's,
    and an old one near the top would have ended the incremental walk early; a page that is all one other
    account's is that account's timeline, a clear error."""
    doc = json.loads(fixture("weibo_web_page1.json"))
    posts = doc["data"]["list"]
    posts[1]["user"] = {"id": 6423651199, "idstr": "6423651199", "screen_name": "别人"}
    page = parse("weibo_web", TASK, SOURCE.first_request(TASK, BASE), json.dumps(doc).encode())
    ids = [item.id for item in page.items if isinstance(item, Post)]
    assert posts[1]["id"] not in ids and len(ids) == len(posts) - 2  # one other account's, one without an id
    assert page.info["other_accounts"] == "1" and page.info["skipped"] == "1"
    for post in posts:
        post["user"] = {"id": 6423651199}
    with pytest.raises(ParseError, match="the timeline is account 6423651199's") as info:
        parse("weibo_web", TASK, SOURCE.first_request(TASK, BASE), json.dumps(doc).encode())
    assert info.value.error_class == "feed-of-another-account"


def test_long_text_through_the_longtext_endpoint() -> None:
    source = WeiboWebSource()
    page = source.parse(TASK, source.first_request(TASK, BASE), fetched(fixture("weibo_web_page1.json")), NOW_MS)
    long_post = next(p for p in page.items if isinstance(p, Post) and p.id == 4700000000007000)
    request = source.extend_request(BASE, long_post.id)
    assert request.url == f"{BASE}/ajax/statuses/longtext" and request.params == {"id": "Kn7Along1"}
    html = source.parse_extend(request, fetched(fixture("weibo_web_longtext.json"), request), NOW_MS)
    source.with_long_text(long_post, html)
    assert long_post.text == "长文开头，这里只显示一部分，后面是完整的正文。\n第二段 <和符号> & 结尾"
    assert "&lt;和符号&gt;" in long_post.html
    # an empty answer keeps the truncated text instead of failing the crawl
    empty = source.parse_extend(request, fetched(b'{"ok":1,"http_code":200,"data":{}}', request), NOW_MS)
    assert empty == "" and source.with_long_text(long_post, empty).text.endswith("结尾")
    # an unknown post falls back to its mid
    assert WeiboWebSource().extend_request(BASE, 42).params == {"id": "42"}


@pytest.mark.parametrize(
    ("body", "status", "outcome", "error_class"),
    [
        (fixture("weibo_web_login.json"), 200, "LoginRequired", "login-wall"),
        (fixture("weibo_web_login_page.html"), 200, "LoginRequired", "html-instead-of-json"),
        (b"", 432, "Banned", "http-432"),
        (b"", 418, "Banned", "http-418"),
        ("<html><body>访问过于频繁</body></html>".encode("gbk"), 200, "RateLimited", "too-frequent"),
        (fixture("weibo_pc_busy_gbk.html"), 200, "Busy", "busy"),
        (fixture("weibo_web_no_user.json"), 200, "NotFound", "no-content"),
        # ok:0 messages in the words public clients of 2024–2026 classify; an unknown one is retried, not NotFound.
        ('{"ok":0,"msg":"访问频次过高"}'.encode(), 200, "RateLimited", "too-frequent"),
        ('{"ok":0,"msg":"请登录后查看"}'.encode(), 200, "LoginRequired", "login"),
        ('{"ok":0,"msg":"用户未登录"}'.encode(), 200, "LoginRequired", "login"),
        ('{"ok":0,"msg":"这里还没有内容"}'.encode(), 200, "NotFound", "no-content"),
        ('{"ok":0,"msg":"该用户不存在"}'.encode(), 200, "NotFound", "no-content"),
        (b'{"ok":0}', 200, "NotFound", "no-content"),
        ('{"ok":0,"msg":"服务暂不可用"}'.encode(), 200, "Busy", "unexpected-ok0"),
    ],
)
def test_session_and_ban_answers(body: bytes, status: int, outcome: str, error_class: str) -> None:
    with pytest.raises(FetchError) as info:
        parse("weibo_web", TASK, SOURCE.first_request(TASK, BASE), body, status=status)
    assert (info.value.outcome, info.value.error_class) == (outcome, error_class)


def test_visitor_redirect_is_login_required() -> None:
    with pytest.raises(FetchError) as info:
        parse(
            "weibo_web",
            TASK,
            SOURCE.first_request(TASK, BASE),
            b"<html>Sina Visitor System</html>",
            final_url="https://passport.weibo.com/visitor/visitor?entry=miniblog&a=enter",
        )
    assert (info.value.outcome, info.value.error_class) == ("LoginRequired", "visitor")


def test_ok0_after_the_first_page_ends_only_if_it_says_so_and_garbage_is_a_parse_error() -> None:
    """Taken for the end, an ``ok:0`` that says something else (the user gone mid-walk) would let the crawl succeed
    with a cursor past the posts it had not reached; it fails the crawl instead (Busy: retried, cursor kept)."""
    later = SOURCE.page_request(BASE, "5612345678", 3)
    for end in (b'{"ok":0}', b'{"ok":0,"msg":""}', '{"ok":0,"msg":"这里还没有内容"}'.encode()):
        assert parse("weibo_web", TASK, later, end).info == {"end": "ok:0"}
    with pytest.raises(FetchError) as info:
        parse("weibo_web", TASK, later, fixture("weibo_web_no_user.json"))  # 用户不存在
    assert (info.value.outcome, info.value.error_class) == ("Busy", "unexpected-ok0")
    with pytest.raises(ParseError, match="use weibo_mobile"):
        parse("weibo_web", TASK, SOURCE.first_request(TASK, BASE), b'{"ok":1,"data":{"cards":[]}}')
    with pytest.raises(ParseError, match="use weibo_pc"):  # the legacy feed's envelope
        parse("weibo_web", TASK, SOURCE.first_request(TASK, BASE), b'{"code":"100000","msg":"","data":"<div></div>"}')
    with pytest.raises(ParseError) as bad:
        parse("weibo_web", TASK, SOURCE.first_request(TASK, BASE), b'{"ok":1,"data":{"list":[', status=200)
    assert (bad.value.error_class, bad.value.http_status) == ("bad-json", 200)  # the status, as every refusal has


def test_an_empty_page_that_names_a_new_since_id_is_followed_not_taken_for_the_end() -> None:
    later = SOURCE.page_request(BASE, "5612345678", 2, "4912345678901234kp2")
    body = b'{"ok":1,"data":{"since_id":"4912345678900000kp3","list":[],"total":120}}'
    page = parse("weibo_web", TASK, later, body)
    assert page.items == [] and page.next_request is not None
    assert page.next_request.params["since_id"] == "4912345678900000kp3"
    for end in (b'{"ok":1,"data":{"since_id":"","list":[]}}', b'{"ok":1,"data":{"list":[]}}'):
        assert parse("weibo_web", TASK, later, end).next_request is None
    repeated = b'{"ok":1,"data":{"since_id":"4912345678901234kp2","list":[]}}'
    assert parse("weibo_web", TASK, later, repeated).next_request is None


def test_bom_jsonp_and_generated_pages() -> None:
    assert len(posts_of(b"\xef\xbb\xbf" + fixture("weibo_web_page1.json"))) == 5
    assert len(posts_of(b"cb(" + fixture("weibo_web_page1.json") + b");")) == 5
    page = parse("weibo_web", TASK, SOURCE.first_request(TASK, BASE), web_timeline(5612345678, posts=20))
    assert len(page.items) == 20 and page.next_request is not None


def test_a_post_is_the_same_storage_row_from_every_weibo_source() -> None:
    """weibo.com and m.weibo.cn show the same post with the same mid and time: one row key."""
    web = posts_of(fixture("weibo_web_page1.json"))[0]
    mobile_task = make_task("weibo_mobile", "5612345678")
    mobile_source = WeiboMobileSource()
    request = mobile_source.timeline_request(BASE, "5612345678")
    mobile_page = mobile_source.parse(mobile_task, request, fetched(fixture("weibo_mobile_since_id.json")), NOW_MS)
    mobile = next(p for p in mobile_page.items if isinstance(p, Post) and p.pinned)
    assert (web.id, web.user_id, web.created_at) == (mobile.id, mobile.user_id, mobile.created_at)
    assert post_row(web).key == post_row(mobile).key and WEIBO == "weibo"


def test_an_ok0_message_naming_a_ban_is_classified_by_it() -> None:
    body = b'{"ok":0,"msg":"\\u8bbf\\u95ee\\u8fc7\\u4e8e\\u9891\\u7e41"}'  # 访问过于频繁, escaped
    with pytest.raises(FetchError) as info:
        parse("weibo_web", TASK, SOURCE.first_request(TASK, BASE), body)
    assert (info.value.outcome, info.value.error_class) == ("RateLimited", "too-frequent")


def test_pictures_of_a_mixed_media_post() -> None:
    from crawler_client.sources.weibo_web import pictures

    mblog = {
        "pic_ids": [],
        "mix_media_info": {
            "items": [
                {"type": "pic", "id": "p1", "data": {"largest": {"url": "https://wx2.sinaimg.cn/large/p1.jpg"}}},
                {"type": "video", "id": "v1", "data": {"media_info": {}}},
            ]
        },
    }
    assert pictures(mblog) == ["https://wx2.sinaimg.cn/large/p1.jpg"]


#: One post as ``/ajax/statuses/show`` answers it.
SHOWN_POST: dict[str, object] = {
    "id": 4700000000009000,
    "idstr": "4700000000009000",
    "mblogid": "Kn7Aaaaaa",
    "created_at": "Tue Jul 06 11:59:00 +0800 2021",
    "text": "单条",
    "text_raw": "单条",
    "user": {"id": 5612345678, "screen_name": "测试用户", "statuses_count": 12},
}


def test_a_statuses_show_answer_is_its_post() -> None:
    import json

    (post,) = posts_of(json.dumps({"ok": 1, **SHOWN_POST}).encode())
    assert (post.id, post.text, post.permalink) == (4700000000009000, "单条", "https://weibo.com/5612345678/Kn7Aaaaaa")


def test_a_statuses_show_answer_with_the_post_under_data_is_its_post_not_a_profile() -> None:
    """Clients of ``/ajax/statuses/show`` in 2025–2026 also read the post under ``data`` (``{"ok":1,"data":{…}}``; one
    checks ``ok`` then takes ``data``, another takes ``data`` when it is an object). Such an answer was read as
    ``/ajax/profile/info`` (its ``data`` holds a ``user``): the post was lost and its author's counts printed. One post
    is no timeline page either way: no next page is asked for."""
    import json

    for body in ({"ok": 1, "data": SHOWN_POST}, {"ok": 1, **SHOWN_POST}):
        page = parse("weibo_web", TASK, SOURCE.first_request(TASK, BASE), json.dumps(body).encode())
        (post,) = page.items
        assert isinstance(post, Post) and (post.id, post.text) == (4700000000009000, "单条")
        assert page.next_request is None
    profile = {"ok": 1, "data": {"user": {"id": 5612345678, "screen_name": "测试用户", "statuses_count": 12}}}
    page = parse("weibo_web", TASK, SOURCE.first_request(TASK, BASE), json.dumps(profile).encode())
    assert page.items == [] and page.info["statuses_count"] == "12"  # /ajax/profile/info is still a profile


def test_a_full_text_carried_inline_as_long_text_content_is_used_without_a_longtext_call() -> None:
    """``/ajax/statuses/show?id=…&isGetLongText=true`` (the call 2024–2026 clients make for one post) answers a long
    post with its full text inline, ``"longText": {"content": "…"}`` (plain text with newlines), beside the
    truncated ``text_raw``. The post takes that text, as m.weibo.cn's ``longText.longTextContent`` is taken, and is
    not listed for a ``longtext`` call."""
    mblog = {
        "ok": 1,
        "id": 4700000000009001,
        "idstr": "4700000000009001",
        "mblogid": "Kn7Abbbbb",
        "created_at": "Tue Jul 06 11:59:00 +0800 2021",
        "isLongText": True,
        "text": '长文开头 ...<span class="expand">展开</span>',
        "text_raw": "长文开头 ...展开",
        "longText": {"content": "长文开头，完整的正文。\n第二段 <和符号> 结尾", "url_struct": []},
        "user": {"id": 5612345678, "screen_name": "测试用户"},
    }
    page = parse("weibo_web", TASK, SOURCE.first_request(TASK, BASE), json.dumps(mblog).encode())
    (post,) = page.items
    assert isinstance(post, Post)
    assert post.text == "长文开头，完整的正文。\n第二段 <和符号> 结尾"
    assert "&lt;和符号&gt;" in post.html
    assert "long_text_ids" not in page.info
    # An empty inline text leaves the post to the longtext call, as before.
    mblog["longText"] = {"content": ""}
    page = parse("weibo_web", TASK, SOURCE.first_request(TASK, BASE), json.dumps(mblog).encode())
    assert page.info["long_text_ids"] == "4700000000009001"
    (post,) = page.items
    assert isinstance(post, Post)
    assert post.text == "长文开头 ...展开"


def test_a_page_of_quick_reposts_marked_ori_mid_is_not_another_accounts_timeline() -> None:
    """A quick repost (快转) in mymblog shows the original under its author and names the original in ``ori_mid``
    (public 2025–2026 clients skip, or undo, quick reposts by that key). A page of them all of one author (a fan
    club's timeline) was taken for that author's timeline served by mistake, a ParseError on every visit. They are
    still not this account's posts (left out, counted), but they say nothing against the timeline: the walk goes on."""
    doc = json.loads(fixture("weibo_web_page1.json"))
    posts = [post for post in doc["data"]["list"] if "id" in post]
    for post in posts:
        post["user"] = {"id": 6423651199, "screen_name": "原作者"}
        post["ori_mid"] = str(post["id"])
    doc["data"]["list"] = posts
    page = parse("weibo_web", TASK, SOURCE.first_request(TASK, BASE), json.dumps(doc).encode())
    assert page.items == [] and page.info["other_accounts"] == str(len(posts))
    assert page.next_request is not None
    # Without the mark, the same page is still that account's timeline.
    for post in posts:
        del post["ori_mid"]
    with pytest.raises(ParseError) as info:
        parse("weibo_web", TASK, SOURCE.first_request(TASK, BASE), json.dumps(doc).encode())
    assert info.value.error_class == "feed-of-another-account"


@pytest.mark.parametrize(
    "body",
    [
        '{"ok":0,"msg":"这里还没有内容"}'.encode(),
        b'{"ok":1}',
        b'{"ok":1,"data":{"since_id":"","list":[],"total":120}}',
    ],
    ids=["ok0", "no-data", "empty-list"],
)
def test_a_later_page_ending_the_list_before_the_known_post_is_busy_then_the_end(body: bytes) -> None:
    """As on m.weibo.cn: a later page is asked for only while the walk has not met the post the task already has, so
    an end of the list there contradicts the visits before. mymblog answers empty lists that are not the end (a 2026
    post-deletion tool reading it retries an empty ``list`` up to five times in a row before taking it for the end).
    Taken for the end, the crawl was Ok and its cursor passed over every post it had not reached. Busy (cursor kept)
    for ``END_AFTER_CURSOR_RETRIES`` failed visits in a row, then the end; in a first crawl it is the end."""
    later = SOURCE.page_request(BASE, "5612345678", 3, "4912345678901234kp2")
    known = dataclasses.replace(TASK, cursor="4700000000000000")
    busy_then_end("weibo_web", known, later, body)
    first_crawl = parse("weibo_web", TASK, later, body)
    assert first_crawl.items == [] and first_crawl.next_request is None
