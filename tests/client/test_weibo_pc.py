"""weibo_pc: mbloglist envelopes (hand-written chunk + generated 45-post pages) and the GBK ban pages."""

from __future__ import annotations

import pytest

from crawler_client.crawl import crawl_task
from crawler_client.sources._detect import EMPTY_PAGE_RETRIES
from crawler_client.sources.base import FetchedPage, PageRequest
from crawler_client.sources.weibo_pc import WeiboPcSource
from icecrawler.errors import FetchError, ParseError
from icecrawler.models import Post
from sandbox.pages import interstitial, passport_page
from sandbox.samples import SAMPLE_NOW_MS, mbloglist_chunk, mbloglist_page
from tests.client._util import BASE, NOW_MS, fetched, fixture, make_task, parse

SOURCE = WeiboPcSource()
TASK = make_task("weibo_pc", "2803301701", domain="100206")


def first() -> PageRequest:
    return SOURCE.first_request(TASK, BASE)


def test_first_request_is_the_v6_ajax_call_with_the_page_triple() -> None:
    request = SOURCE.first_request(TASK, BASE + "/")
    assert request.url == f"{BASE}/p/aj/v6/mblog/mbloglist"
    assert request.params == {
        "ajwvr": "6",
        "domain": "100206",
        "pagebar": "0",
        "is_ori": "1",
        "id": "1002062803301701",
        "page": "1",
        "pre_page": "0",
        "__rnd": "0",
    }
    assert request.state == {"chunk": "0"} and request.page == 1


def test_mixed_chunk_fields() -> None:
    request = SOURCE.first_request(TASK, BASE)
    page = parse("weibo_pc", TASK, request, fixture("weibo_pc_chunk0_mixed.json"))
    repost, pinned, relative = page.items
    assert isinstance(repost, Post) and isinstance(pinned, Post) and isinstance(relative, Post)
    # repost: omid, own author (not the original's), own counts with words for zero, @date preferred
    assert repost.id == 4371880227028213 and repost.user_id == 2803301701 and repost.user_name == "人民日报"
    assert repost.retweeted_id == 4371870000000001
    assert repost.created_at == "2019-05-12T13:15:00+08:00"
    assert (repost.reposts, repost.comments, repost.likes) == (1234, 0, 0)
    assert repost.text == "转发理由[doge]\n第二行 #话题#"
    assert "a_topic" in repost.html and "原微博内容" not in repost.text
    assert repost.pictures == []  # the original's pictures are not this post's
    assert repost.permalink == "https://weibo.com/2803301701/HxKpTtO0F"
    assert repost.source == "weibo_pc" and repost.fetched_at == "2021-07-06T12:00:00+08:00"
    # truncated + pinned post: title used when @date is missing, 展开全文 link removed, pictures, 万 counts
    assert pinned.pinned and pinned.retweeted_id == 0
    assert pinned.created_at == "2019-04-01T08:05:00+08:00"
    assert pinned.text == "长微博开头……" and "展开全文" not in pinned.html
    assert pinned.pictures == ["https://wx3.sinaimg.cn/thumb150/a1.jpg", "https://wx3.sinaimg.cn/thumb150/a2.jpg"]
    assert (pinned.reposts, pinned.comments, pinned.likes) == (0, 120_000, 1_000_000)
    # only display text: resolved against now
    assert relative.created_at == "2021-07-06T11:42:00+08:00" and relative.user_name == "人民日报"
    assert page.info["long_text_ids"] == "4371860000000002"
    # chunk 0 → chunk 1 of the same page, cache-buster = fetch time
    nxt = page.next_request
    assert nxt is not None and nxt.state == {"chunk": "1"}
    assert (nxt.params["page"], nxt.params["pre_page"], nxt.params["pagebar"]) == ("1", "1", "0")
    assert nxt.params["__rnd"] == str(1625544000000) and nxt.params["domain"] == "100206"
    assert page.total_pages is None


def test_a_45_post_page_walks_three_chunks_then_the_next_page() -> None:
    task = make_task("weibo_pc", "1163218074")
    request = SOURCE.first_request(task, BASE)
    seen: list[int] = []
    for body in mbloglist_page(1163218074, 1, count_page=18):
        page = parse("weibo_pc", task, request, body, now_ms=SAMPLE_NOW_MS)
        seen += [item.id for item in page.items if isinstance(item, Post)]
        assert page.next_request is not None
        request = page.next_request
    assert len(seen) == 45 and len(set(seen)) == 45 and seen == sorted(seen, reverse=True)
    assert page.total_pages == 18
    assert (request.params["page"], request.params["pre_page"], request.params["pagebar"]) == ("2", "1", "0")
    assert request.state == {"chunk": "0", "pages": "18"} and request.page == 2  # what the pager counted


def test_last_page_pager_ends_the_crawl() -> None:
    task = make_task("weibo_pc", "1163218074")
    request = SOURCE.chunk_request(task, f"{BASE}/p/aj/v6/mblog/mbloglist", 3, 2, 0)
    page = parse("weibo_pc", task, request, mbloglist_chunk(1163218074, 3, 2, count_page=3))
    assert len(page.items) == 15 and page.total_pages == 3 and page.next_request is None


def test_count_page_from_page_links_when_action_data_is_missing() -> None:
    task = make_task("weibo_pc", "1163218074")
    body = mbloglist_chunk(1163218074, 1, 2, count_page=7).replace(b"countPage", b"cntPage")
    request = SOURCE.chunk_request(task, f"{BASE}/p/aj/v6/mblog/mbloglist", 1, 2, 0)
    assert parse("weibo_pc", task, request, body).total_pages == 7


#: The v6 feed's empty placeholder ("nothing here yet, try again later"), our own markup around its words.
EMPTY_FEED = (
    b'{"code":"100000","msg":"","data":"<div class=\\"WB_empty\\"><div class=\\"empty_con\\"><p class=\\"text\\">'
    b"\\u54a6\\uff1f\\u6682\\u65f6\\u6ca1\\u6709\\u5185\\u5bb9\\u54e6\\uff0c\\u7a0d\\u540e\\u518d"
    b'\\u6765\\u8bd5\\u8bd5\\u5427~<\\/p><\\/div><\\/div>"}'
)


@pytest.mark.parametrize("chunk", [0, 1, 2])
def test_an_empty_chunk_of_a_page_the_pager_promised_is_a_throttled_answer_not_the_end(chunk: int) -> None:
    """Past page 1 the crawl asks for page N only because page N-1's pager counted more pages. A chunk of page N
    (not the last page) without a feed item, such as the feed's "咦？暂时没有内容哦，稍后再来试试吧~" placeholder that
    public scrapers meet when weibo.com restricts an account mid-crawl, was the end of the feed: the crawl succeeded
    and its cursor passed over every post it had not reached. It is Busy (retried, cursor kept); the last page and
    page 1 may still end empty."""
    task = make_task("weibo_pc", "1163218074")
    request = SOURCE.first_request(task, BASE)
    for body in mbloglist_page(1163218074, 1, count_page=3):
        page = parse("weibo_pc", task, request, body, now_ms=SAMPLE_NOW_MS)
        assert page.next_request is not None
        request = page.next_request
    for done in range(chunk):  # the chunks of page 2 before the empty one
        page = parse("weibo_pc", task, request, mbloglist_chunk(1163218074, 2, done, count_page=3))
        assert page.next_request is not None
        request = page.next_request
    assert (request.page, request.state["chunk"]) == (2, str(chunk))
    with pytest.raises(FetchError) as info:
        parse("weibo_pc", task, request, EMPTY_FEED)
    assert (info.value.outcome, info.value.error_class) == ("Busy", "weibo_pc-empty-page")
    last = SOURCE.chunk_request(task, f"{BASE}/p/aj/v6/mblog/mbloglist", 3, chunk, 0)
    assert parse("weibo_pc", task, last, EMPTY_FEED).next_request is None  # an empty chunk on its own ends


def test_empty_data_is_the_end_of_the_feed() -> None:
    page = parse("weibo_pc", TASK, SOURCE.first_request(TASK, BASE), fixture("weibo_pc_end.json"))
    assert page.items == [] and page.next_request is None


def test_profile_page_fm_view_is_parsed_like_chunk_0() -> None:
    import json

    html = json.loads(mbloglist_chunk(1163218074, 1, 0, posts=2))["data"]
    view = json.dumps({"ns": "pl.content.homeFeed.index", "domid": "Pl_Official_MyProfileFeed__23", "html": html})
    body = (
        f'<html><script>FM.view({{"ns":"pl.nav","html":"<div class=\\"fl_menu\\"></div>"}})</script>'
        f"<script>FM.view({view})</script></html>"
    ).encode()
    task = make_task("weibo_pc", "1163218074")
    page = parse("weibo_pc", task, SOURCE.first_request(task, BASE), body)
    assert len(page.items) == 2


@pytest.mark.parametrize(
    ("body", "outcome", "error_class"),
    [
        (fixture("weibo_pc_busy_gbk.html"), "Busy", "busy"),
        (fixture("weibo_pc_frozen_gbk.html"), "AccountFrozen", "account-frozen"),
        (fixture("weibo_pc_passport_gbk.html"), "LoginRequired", "passport"),
        # the same pages as the sandbox renders and serves them
        (interstitial("busy", SAMPLE_NOW_MS // 1000), "Busy", "busy"),
        (interstitial("frozen", SAMPLE_NOW_MS // 1000), "AccountFrozen", "account-frozen"),
        (passport_page(), "LoginRequired", "passport"),
    ],
    ids=["busy", "frozen", "passport", "sandbox-busy", "sandbox-frozen", "sandbox-passport"],
)
def test_gbk_interstitials_are_classified_from_bytes(body: bytes, outcome: str, error_class: str) -> None:
    with pytest.raises(FetchError) as info:
        parse("weibo_pc", TASK, SOURCE.first_request(TASK, BASE), body)
    assert (info.value.outcome, info.value.error_class) == (outcome, error_class)
    assert not isinstance(info.value, ParseError)


def test_other_html_and_error_codes_are_login_or_ban_signals() -> None:
    request = SOURCE.first_request(TASK, BASE)
    with pytest.raises(FetchError) as info:
        parse("weibo_pc", TASK, request, b"<html><body>please log in</body></html>")
    assert info.value.outcome == "LoginRequired" and info.value.error_class == "html-instead-of-json"
    with pytest.raises(FetchError) as info:
        parse("weibo_pc", TASK, request, b'{"code":"100001","msg":"","data":""}')
    assert info.value.outcome == "Banned" and info.value.error_class == "weibo-code-100001"
    for body, outcome, error_class in [
        ('{"code":"100002","msg":"请先登录","data":""}', "LoginRequired", "login"),
        ('{"code":"100005","msg":"请求过于频繁","data":""}', "RateLimited", "too-frequent"),
        # The site's page-not-found (a user gone, a wrong page id), not a ban.
        (
            '{"code":"100006","msg":"","data":"https:\\/\\/weibo.com\\/sorry?pagenotfound&"}',
            "NotFound",
            "page-not-found",
        ),
    ]:
        with pytest.raises(FetchError) as info:
            parse("weibo_pc", TASK, request, body.encode())
        assert (info.value.outcome, info.value.error_class) == (outcome, error_class)
    with pytest.raises(FetchError) as info:
        parse("weibo_pc", TASK, request, b"{}", final_url="https://passport.weibo.com/visitor/visitor?a=enter")
    assert info.value.outcome == "LoginRequired" and info.value.error_class == "visitor"
    with pytest.raises(ParseError):
        parse("weibo_pc", TASK, request, b"\x00\x01garbage")


@pytest.mark.parametrize(
    ("code", "sent_to", "outcome", "error_class"),
    [
        ("100002", "https://weibo.com/login.php?url=https%3A%2F%2Fweibo.com", "LoginRequired", "login-redirect"),
        ("100003", "http://weibo.com/sorry?userblock&code=20003", "AccountFrozen", "account-blocked"),
        ("100003", "https://weibo.com/sorry?userblock&is_viewer&code=20003", "AccountFrozen", "account-blocked"),
        ("100006", "https://weibo.com/unfreeze", "AccountFrozen", "account-unfreeze"),
        ("100004", "https://weibo.com/sorry?usernotexists&code=100001", "NotFound", "user-not-exists"),
        ("100005", "https://weibo.com/sorry?sysbusy", "Busy", "sysbusy"),
        ("100006", "https://weibo.com/sorry?pagenotfound", "NotFound", "page-not-found"),
    ],
    ids=["login", "userblock", "userblock-viewer", "unfreeze", "usernotexists", "sysbusy", "pagenotfound"],
)
def test_an_error_code_is_read_by_the_page_its_data_sends_the_browser_to(
    code: str, sent_to: str, outcome: str, error_class: str
) -> None:
    """weibo.com's v6 AJAX answers a call it sends elsewhere with ``{"code":…,"msg":"","data":"<that page>"}`` (its
    own script then goes to ``data``): a login, the ``sorry`` pages (a blocked account, a user gone, the system busy,
    no such page) or the unfreeze page. Every code but the page-not-found one was a ban (the host blocked) whatever
    page it named; each is what its page means."""
    body = f'{{"code":"{code}","msg":"","data":"{sent_to.replace("/", chr(92) + "/")}"}}'.encode()
    with pytest.raises(FetchError) as info:
        parse("weibo_pc", TASK, first(), body)
    assert (info.value.outcome, info.value.error_class) == (outcome, error_class)


def test_system_busy_is_busy_not_a_ban_or_a_lost_login() -> None:
    """系统繁忙 ("the system is busy") in an error code's ``msg`` was a ban (the host blocked, the account frozen),
    and a GBK page saying only that, in place of the JSON, a login page (the account frozen): it is the site's busy
    moment, as 网络繁忙 is. Busy: the task is retried, nothing is held."""
    request = SOURCE.first_request(TASK, BASE)
    page = "<html><head><meta charset='utf-8'><title>微博</title></head><body><p>系统繁忙，请稍后再试</p></body></html>"
    for body in (fixture("weibo_pc_code_error.json"), page.encode("gbk")):
        with pytest.raises(FetchError) as info:
            parse("weibo_pc", TASK, request, body)
        assert (info.value.outcome, info.value.error_class) == ("Busy", "busy")


def test_a_logged_in_page_without_a_feed_is_not_a_lost_session() -> None:
    """A page the site rendered for a logged-in session (here a profile's info tab) proves the session works:
    calling it LoginRequired would have sent a working account to log in again."""
    page = (
        "<!doctype html><html><head><script>var $CONFIG = {}; $CONFIG['islogin']='1'; "
        "$CONFIG['location']='page_100505_info';</script></head><body><div class=\"WB_frame\"></div></body></html>"
    )
    with pytest.raises(ParseError, match="page_100505_info") as info:
        parse("weibo_pc", TASK, SOURCE.first_request(TASK, BASE), page.encode())
    assert info.value.error_class == "page-without-feed"
    with pytest.raises(FetchError) as login:  # the same page for a visitor is a lost session
        parse("weibo_pc", TASK, SOURCE.first_request(TASK, BASE), page.replace("'1'", "'0'").encode())
    assert login.value.outcome == "LoginRequired"


def test_long_text_getlongtext() -> None:
    from sandbox.web import php_json

    request = SOURCE.extend_request(BASE, 4371860000000002)
    assert request.url == f"{BASE}/p/aj/mblog/getlongtext"
    assert request.params == {"ajwvr": "6", "mid": "4371860000000002"}
    body = php_json({"code": "100000", "msg": "", "data": {"html": "长微博开头……和完整正文<br>第二段"}}).encode()
    html = SOURCE.parse_extend(request, fetched(body, request), NOW_MS)
    post = SOURCE.with_long_text(Post(id=4371860000000002, user_id=1, text="长微博开头……"), html)
    assert post.text == "长微博开头……和完整正文\n第二段" and post.html == html
    with pytest.raises(FetchError) as info:
        SOURCE.parse_extend(
            request, fetched(php_json({"code": "100001", "msg": "", "data": {}}).encode(), request), NOW_MS
        )
    assert (info.value.outcome, info.value.error_class) == ("NotFound", "long-text-gone")  # the crawl keeps the text
    with pytest.raises(FetchError) as info:  # a message we do not know is not taken for a deleted post
        SOURCE.parse_extend(request, fetched(php_json({"code": "100001", "msg": "参数错误"}).encode(), request), NOW_MS)
    assert (info.value.outcome, info.value.error_class) == ("Busy", "unexpected-long-text-answer")
    with pytest.raises(FetchError) as info:
        SOURCE.parse_extend(request, fetched(fixture("weibo_pc_busy_gbk.html"), request), NOW_MS)
    assert info.value.outcome == "Busy"


@pytest.mark.parametrize("data", ["", None, {}, {"html": None}, {"html": ""}], ids=repr)
def test_a_getlongtext_answer_holding_nothing_keeps_the_truncated_text(data: object) -> None:
    """getlongtext may answer code 100000 with no text (public clients of its v6 page read ``data.html`` only after
    checking both are there, and keep the short text otherwise). It was "no data.html", a ParseError that failed the
    crawl on every visit for that one post; weibo_web and weibo_mobile already keep the truncated text for an empty
    long-text answer."""
    from sandbox.web import php_json

    request = SOURCE.extend_request(BASE, 4371860000000002)
    body = php_json({"code": "100000", "msg": "", "data": data}).encode()
    html = SOURCE.parse_extend(request, fetched(body, request), NOW_MS)
    post = SOURCE.with_long_text(Post(id=4371860000000002, user_id=1, text="长微博开头……", html="长微博开头……"), html)
    assert html == "" and (post.text, post.html) == ("长微博开头……", "长微博开头……")
    with pytest.raises(ParseError):  # something that is not a long text at all is still unreadable
        SOURCE.parse_extend(
            request, fetched(php_json({"code": "100000", "data": {"html": 5}}).encode(), request), NOW_MS
        )


def test_feedtype_top_marks_the_pinned_post_which_never_ends_a_walk() -> None:
    task = make_task("weibo_pc", "1163218074")
    body = mbloglist_chunk(posts=3).replace(
        b'action-type=\\"feed_list_item\\"', b'feedtype=\\"top\\" action-type=\\"feed_list_item\\"', 1
    )
    page = parse("weibo_pc", task, SOURCE.first_request(task, BASE), body)
    posts = [item for item in page.items if isinstance(item, Post)]
    assert [post.pinned for post in posts] == [True, False, False]
    assert not SOURCE.is_older_or_equal(posts[0], str(posts[0].id))  # on top at every visit: never "older"
    assert SOURCE.is_older_or_equal(posts[1], str(posts[1].id))


def test_video_covers_are_not_pictures() -> None:
    from sandbox.web import php_json

    item = (
        '<div class="WB_cardwrap WB_feed_type" tbinfo="ouid=2803301701" mid="4000000000000001" '
        'action-type="feed_list_item">'
        '<div class="WB_text" node-type="feed_list_content">视频</div><ul node-type="feed_list_media_prev">'
        '<li class="WB_video" video_src="//f.video.weibocdn.com/x.mp4"><div><img src="//wx1.sinaimg.cn/cover.jpg">'
        '</div></li><li><img src="//wx1.sinaimg.cn/pic.jpg"></li></ul></div>'
    )
    page = parse(
        "weibo_pc", TASK, SOURCE.first_request(TASK, BASE), php_json({"code": "100000", "data": item}).encode()
    )
    (post,) = page.items
    assert isinstance(post, Post) and post.pictures == ["https://wx1.sinaimg.cn/pic.jpg"]
    assert post.user_id == 2803301701 and post.created_at == "" and post.permalink == ""


def _feed_item(mid: int, ouid: int, content: str, title: str = "") -> str:
    """One ``feed_list_item`` as weibo.com renders it: an optional card title above the post, then its text."""
    return (
        f'<div class="WB_cardwrap WB_feed_type" tbinfo="ouid={ouid}" mid="{mid}" action-type="feed_list_item">'
        f'{title}<div class="WB_text" node-type="feed_list_content">{content}</div></div>'
    )


def _chunk(*items: str) -> bytes:
    from sandbox.web import php_json

    return php_json({"code": "100000", "data": "".join(items)}).encode()


LIKED_TITLE = (
    '<div class="WB_cardtitle_b S_line2"><h4 class="obj_name S_txt2"><span class="main_title">'
    '<i class="W_ficon ficon_praised S_ficon">ñ</i></span><span class="subtitle">'
    '<a href="https://weibo.com/2803301701/like">她5小时前赞过的微博</a></span></h4></div>'
)


def test_a_post_the_account_liked_is_not_its_post_and_does_not_end_the_chunk_walk() -> None:
    """weibo.com shows posts the account liked among its own, marked by another ``ouid``: stored as its posts they
    were misattributed, and an old one near the top could end the incremental walk before newer posts."""
    body = _chunk(
        _feed_item(4100000000000003, 2803301701, "自己的新微博"),
        _feed_item(3900000000000001, 1286891293, "别人的旧微博", title=LIKED_TITLE),
        _feed_item(4100000000000002, 2803301701, "自己的微博"),
    )
    page = parse("weibo_pc", TASK, first(), body)
    assert [item.id for item in page.items if isinstance(item, Post)] == [4100000000000003, 4100000000000002]
    assert page.info["other_accounts"] == "1"
    only_liked = parse("weibo_pc", TASK, first(), _chunk(_feed_item(3900000000000001, 1, "x", title=LIKED_TITLE)))
    assert only_liked.items == [] and only_liked.next_request is not None  # not the end of the feed
    assert only_liked.next_request.state == {"chunk": "1"}


def test_the_pinned_badge_marks_the_post_but_is_not_its_text() -> None:
    """The 置顶 badge sits inside the text block; kept, the same post's text changed when it was unpinned."""
    badge = (
        '<a ignore="ignore" href="javascript:void(0);"><span class="W_icon_feedpin">'
        '<i class="W_icon icon_feedpin_lite" title="微博会员特权"></i>置顶</span></a>'
    )
    item = _feed_item(4100000000000001, 2803301701, f"{badge} 正文\u200b\u200b")
    page = parse("weibo_pc", TASK, first(), _chunk(item))
    (post,) = page.items
    assert isinstance(post, Post) and post.pinned
    assert post.text == "正文" and "置顶" not in post.html  # zero-width padding dropped too


def test_a_saved_chunk_names_its_page_and_owner_for_icecrawler_parse() -> None:
    """``icecrawler parse`` without ``--page`` reads the page from the pager (it took page 1 and printed a next
    request for page 2 after a page-2 chunk), and the owner from most items, not the first (a liked post)."""
    body = mbloglist_chunk(page=2, chunk=2, posts=2)
    request = SOURCE.saved_request(TASK, BASE, body, 0, None)
    assert request.page == 2 and request.state == {"chunk": "2"} and request.params["pre_page"] == "2"
    assert SOURCE.saved_request(TASK, BASE, body, 3, None).page == 3  # a page given wins
    liked_first = _chunk(
        _feed_item(3900000000000001, 1286891293, "x", title=LIKED_TITLE),
        _feed_item(4100000000000003, 2803301701, "a"),
        _feed_item(4100000000000002, 2803301701, "b"),
    )
    assert SOURCE.saved_target(SOURCE.spec.default_kind, liked_first) == "2803301701"


class _ChunkFetch:
    """Serves chunk N of page 1 from ``chunks`` (what the crawl loop's fetcher hands the parser)."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks
        self.requests_made = 0

    def fetch(self, request: PageRequest) -> FetchedPage:
        self.requests_made += 1
        body = self.chunks[int(request.state["chunk"])] if request.page == 1 else _chunk()
        return fetched(body, request)


def test_an_old_liked_post_does_not_stop_the_incremental_walk_before_newer_posts() -> None:
    """Through the crawl loop: the liked post is older than the cursor; counted as the account's, it made chunk 0
    the page holding the cursor, and the new post in chunk 1 was never reached."""
    chunks = [
        _chunk(
            _feed_item(4100000000000030, 2803301701, "新1"),
            _feed_item(3900000000000001, 1286891293, "别人的旧微博", title=LIKED_TITLE),
            _feed_item(4100000000000029, 2803301701, "新2"),
        ),
        _chunk(_feed_item(4100000000000028, 2803301701, "新3"), _feed_item(4100000000000020, 2803301701, "旧")),
        _chunk(),
    ]
    task = make_task("weibo_pc", "2803301701", domain="100206")
    task.cursor = "4100000000000020"
    result = crawl_task(task, SOURCE, _ChunkFetch(chunks), base_url=BASE, max_pages=10, now_ms=lambda: NOW_MS)
    assert result.report.outcome == "Ok"
    assert [post.id for post in result.posts] == [4100000000000030, 4100000000000029, 4100000000000028]


@pytest.mark.parametrize("href", ["//[weibo.com/2803301701/abc", "https://[::1/2803301701/abc"])
def test_a_post_whose_link_does_not_parse_is_kept_without_a_permalink(href: str) -> None:
    """Through the crawl loop: a date link whose host Python's URL parser refuses (an unclosed ``[``) raised a bare
    ValueError out of the parser, so the whole page failed as a source bug
    (``ParseError`` ``source-bug:ValueError``, logged with a traceback) on every visit. The post keeps every field
    it has, with no permalink, as one without a date link does."""
    dated = (
        '<div class="WB_cardwrap WB_feed_type" tbinfo="ouid=2803301701" mid="4100000000000031" '
        'action-type="feed_list_item"><div class="WB_text" node-type="feed_list_content">坏链接</div>'
        f'<a node-type="feed_list_item_date" href="{href}" title="2019-05-12 13:15">5月12日 13:15</a></div>'
    )
    chunks = [_chunk(dated, _feed_item(4100000000000030, 2803301701, "好")), _chunk(), _chunk()]
    task = make_task("weibo_pc", "2803301701", domain="100206")
    result = crawl_task(task, SOURCE, _ChunkFetch(chunks), base_url=BASE, max_pages=10, now_ms=lambda: NOW_MS)
    assert (result.report.outcome, result.report.error_class) == ("Ok", "")
    assert [(post.id, post.text, post.permalink) for post in result.posts] == [
        (4100000000000031, "坏链接", ""),
        (4100000000000030, "好", ""),
    ]
    assert result.posts[0].created_at == "2019-05-12T13:15:00+08:00"


def test_the_owner_of_a_feed_whose_target_is_not_a_uid_is_the_author_most_items_name() -> None:
    """A task may name the account by its domain-style name; the owner is then read from the feed itself."""
    named = make_task("weibo_pc", "rmrb")
    body = _chunk(
        _feed_item(4100000000000003, 2803301701, "a"),
        _feed_item(3900000000000001, 1286891293, "x", title=LIKED_TITLE),
        _feed_item(4100000000000002, 2803301701, "b"),
    )
    page = parse("weibo_pc", named, SOURCE.first_request(named, BASE), body)
    assert [item.id for item in page.items if isinstance(item, Post)] == [4100000000000003, 4100000000000002]
    assert page.info["other_accounts"] == "1"


def test_a_chunk_that_is_all_one_other_accounts_feed_is_a_clear_error() -> None:
    """Skipped item by item, a moved or merged uid would crawl "nothing new" on every visit without a word."""
    body = _chunk(*(_feed_item(4100000000000000 + k, 1286891293, f"p{k}") for k in range(3)))
    with pytest.raises(ParseError, match="the timeline is account 1286891293's, not 2803301701's") as info:
        parse("weibo_pc", TASK, first(), body)
    assert info.value.error_class == "feed-of-another-account"
    two_liked = _chunk(*(_feed_item(3900000000000000 + k, 1286891293, "x", title=LIKED_TITLE) for k in range(2)))
    assert parse("weibo_pc", TASK, first(), two_liked).items == []  # a chunk of two liked posts is just that


def test_a_reposts_original_author_does_not_count_as_an_owner() -> None:
    """``tbinfo="ouid=OWNER&rouid=ORIGINAL"``: the sniffer reads ``ouid``, never ``rouid``."""
    repost = (
        '<div class="WB_cardwrap WB_feed_type" tbinfo="ouid=2803301701&amp;rouid=5555555555" mid="4100000000000005" '
        'action-type="feed_list_item" isforward="1" omid="4000000000000001">'
        '<div class="WB_text" node-type="feed_list_content">转发</div></div>'
    )
    body = _chunk(repost, repost.replace("4100000000000005", "4100000000000004"))
    assert SOURCE.saved_target(SOURCE.spec.default_kind, body) == "2803301701"
    page = parse("weibo_pc", TASK, first(), body)
    assert len(page.items) == 2 and "other_accounts" not in page.info


class _ShortFeedFetch:
    """An account whose feed ends after page 1 while the pager counts more pages (weibo.com counts every post, but
    shows others only the last half year when the account asks it to, and never its hidden posts)."""

    def __init__(self, uid: int, count_page: int) -> None:
        self.first_page = mbloglist_page(uid, 1, count_page=count_page)
        self.requests_made = 0

    def fetch(self, request: PageRequest) -> FetchedPage:
        self.requests_made += 1
        if "extend" in request.state:  # a truncated post's full text
            return fetched(b'{"code":"100000","msg":"","data":{"html":"full text"}}', request)
        body = self.first_page[int(request.state["chunk"])] if request.page == 1 else EMPTY_FEED
        return fetched(body, request)


def test_a_feed_shorter_than_its_pager_is_not_busy_forever() -> None:
    """An empty chunk before the pager's last page is Busy (a throttled answer), but an account that shows only its
    last half year, or hides posts the pager still counts, answers page 2 with the same empty placeholder on every
    visit: each crawl failed Busy, kept the empty cursor and walked the whole feed again, for ever. After
    ``EMPTY_PAGE_RETRIES`` failed visits in a row the empty chunk is the end of what the site shows: the crawl
    succeeds with the posts it read and its cursor moves on."""
    task = make_task("weibo_pc", "1163218074")
    outcomes: list[str] = []
    for attempts in range(EMPTY_PAGE_RETRIES + 3):  # bounded: the fixed source needs EMPTY_PAGE_RETRIES + 1 visits
        task.attempts = attempts
        fetch = _ShortFeedFetch(1163218074, count_page=3)
        result = crawl_task(task, SOURCE, fetch, base_url=BASE, max_pages=10, now_ms=lambda: SAMPLE_NOW_MS)
        outcomes.append(result.report.outcome)
        assert len(result.posts) == 45  # every visit keeps what it read
        if result.report.outcome == "Ok":
            break
        assert (result.report.error_class, result.report.cursor) == ("weibo_pc-empty-page", "")
    assert outcomes == ["Busy"] * EMPTY_PAGE_RETRIES + ["Ok"]
    assert result.report.cursor == str(max(post.id for post in result.posts))
