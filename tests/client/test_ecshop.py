"""ecshop: goods page + comment.php envelopes (utf-8 escaped and raw GBK), listings, login helpers."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from urllib.parse import urljoin

import pytest

from crawler_client.sources._detect import EMPTY_PAGE_RETRIES
from crawler_client.sources.ecshop import EcshopSource, is_logged_in, login_request, shows_login_wall
from icecrawler.errors import FetchError, ParseError
from icecrawler.models import Review, TaskKind
from sandbox.samples import ecshop_comment_json, ecshop_goods_page
from sandbox.web import php_json
from tests.client._util import BASE, fetched, fixture, make_task, parse

SOURCE = EcshopSource()
REVIEWS = make_task("ecshop", "7", TaskKind.ProductReviews)


def reviews(items: Sequence[object]) -> list[Review]:
    assert all(isinstance(item, Review) for item in items)
    return [item for item in items if isinstance(item, Review)]


def test_goods_page_reviews_fields_and_pager() -> None:
    request = SOURCE.first_request(REVIEWS, BASE)
    assert request.url == f"{BASE}/goods.php" and request.params == {"id": "7"}
    page = parse("ecshop", REVIEWS, request, fixture("ecshop_goods7.html"))
    first, anonymous, empty_name = reviews(page.items)
    assert (first.user, first.score, first.created_at) == ("张三", 5, "2024-03-05T21:04:11+08:00")
    assert first.content == "质量很好<真的>，\n物流也快"  # entities decoded, <br> kept as a newline
    assert "谢谢支持" not in first.content  # the admin reply is not part of the review
    assert (anonymous.user, anonymous.score) == ("匿名用户", 3)
    assert (empty_name.user, empty_name.score) == ("匿名用户", 1)
    assert first.product_id == "7" and first.source == "ecshop" and first.fetched_at == "2021-07-06T12:00:00+08:00"
    assert len({r.id for r in (first, anonymous, empty_name)}) == 3
    assert (page.total_pages, page.info["record_count"], page.info["page"]) == (3, "7", "1")
    nxt = page.next_request
    assert nxt is not None and nxt.params == {}
    assert nxt.url == f"{BASE}/comment.php?act=gotopage&page=2&id=7&type=0&1625544000000"


def test_review_ids_are_stable_across_fetches() -> None:
    request = SOURCE.first_request(REVIEWS, BASE)
    one = parse("ecshop", REVIEWS, request, fixture("ecshop_goods7.html"))
    two = parse("ecshop", REVIEWS, request, fixture("ecshop_goods7.html"), now_ms=1700000000000)
    assert [r.id for r in reviews(one.items)] == [r.id for r in reviews(two.items)]


def test_comment_json_pages_middle_and_gbk_last() -> None:
    middle = SOURCE.comment_page_request(BASE, "7", 2, 1)
    page = parse("ecshop", REVIEWS, middle, fixture("ecshop_comment7_p2.json"))
    assert [r.content for r in reviews(page.items)] == ["第二页", "第二页b"]
    assert page.next_request is not None and "page=3&id=7" in page.next_request.url
    last = parse("ecshop", REVIEWS, page.next_request, fixture("ecshop_comment7_p3_gbk.json"))
    (only,) = reviews(last.items)
    assert (only.user, only.score, only.content) == ("李四", 4, "最后一页的评论")
    assert last.total_pages == 3 and last.next_request is None


def test_generated_pages_of_ten() -> None:
    request = SOURCE.comment_page_request(BASE, "42", 2, 1)
    task = make_task("ecshop", "42", TaskKind.ProductReviews)
    envelope = json.loads(ecshop_comment_json(42, 2, comments=10))
    envelope["pages"] = '<div id="pager"><a href="javascript:;">1</a></div>'  # the key some forks add
    page = parse("ecshop", task, request, php_json(envelope).encode())
    assert len(page.items) == 10 and page.next_request is not None
    goods = parse("ecshop", task, SOURCE.first_request(task, BASE), ecshop_goods_page(42))
    assert len(goods.items) == 5


def test_empty_comment_list() -> None:
    page = parse("ecshop", REVIEWS, SOURCE.first_request(REVIEWS, BASE), fixture("ecshop_goods_nocomments.html"))
    assert page.items == [] and page.next_request is None and page.info["record_count"] == "0"


def test_an_empty_comment_page_before_the_last_is_a_throttled_answer_not_the_end() -> None:
    task = make_task("ecshop", "42", TaskKind.ProductReviews)
    with pytest.raises(FetchError) as info:
        parse("ecshop", task, SOURCE.comment_page_request(BASE, "42", 2, 1), ecshop_comment_json(42, 2, comments=0))
    assert (info.value.outcome, info.value.error_class) == ("Busy", "ecshop-empty-page")
    last = parse("ecshop", task, SOURCE.comment_page_request(BASE, "42", 5, 1), ecshop_comment_json(42, 5, comments=0))
    assert last.items == [] and last.next_request is None


def test_an_empty_comment_page_before_the_last_is_the_end_after_as_many_failed_visits_as_the_retries() -> None:
    """A pager that counts comments the shop no longer shows would make every visit Busy for ever (cursor kept, the
    list walked again each time): after ``EMPTY_PAGE_RETRIES`` failed visits in a row the empty page is the end."""
    request, body = SOURCE.comment_page_request(BASE, "42", 2, 1), ecshop_comment_json(42, 2, comments=0)
    for attempts in range(EMPTY_PAGE_RETRIES):
        with pytest.raises(FetchError) as info:
            parse("ecshop", make_task("ecshop", "42", TaskKind.ProductReviews, attempts=attempts), request, body)
        assert info.value.error_class == "ecshop-empty-page"
    retried = make_task("ecshop", "42", TaskKind.ProductReviews, attempts=EMPTY_PAGE_RETRIES)
    page = parse("ecshop", retried, request, body)
    assert page.items == [] and page.next_request is None


def test_missing_goods_and_error_envelopes() -> None:
    request = SOURCE.first_request(REVIEWS, BASE)
    with pytest.raises(FetchError) as info:
        parse("ecshop", REVIEWS, request, fixture("ecshop_index.html"), final_url="http://127.0.0.1:8800/x/")
    assert info.value.outcome == "NotFound"
    with pytest.raises(ParseError):
        parse("ecshop", REVIEWS, request, fixture("ecshop_index.html"))
    with pytest.raises(ParseError) as perr:
        parse("ecshop", REVIEWS, SOURCE.comment_page_request(BASE, "7", 2, 1), fixture("ecshop_error_envelope.json"))
    assert perr.value.error_class == "ecshop-error"
    with pytest.raises(FetchError) as info:
        parse("ecshop", REVIEWS, request, b"", status=404)
    assert info.value.outcome == "NotFound"


def test_login_helpers() -> None:
    request = login_request(BASE + "/", "alice", "s3cret")
    assert request.method == "POST" and request.url == f"{BASE}/user.php"
    assert request.data is not None and request.data["act"] == "act_login"
    assert (request.data["username"], request.data["password"]) == ("alice", "s3cret")
    wall, home = fetched(fixture("ecshop_login.html")), fetched(fixture("ecshop_logged_in.html"))
    assert shows_login_wall(wall) and not is_logged_in(wall)
    assert is_logged_in(home) and not shows_login_wall(home)
    assert shows_login_wall(fetched(b"<html></html>", final_url="http://shop/user.php"))
    with pytest.raises(FetchError) as info:
        parse("ecshop", REVIEWS, SOURCE.first_request(REVIEWS, BASE), fixture("ecshop_login.html"))
    assert info.value.outcome == "LoginRequired"


LISTING = make_task("ecshop", "3", TaskKind.Listing)


def test_listing_first_page_with_next() -> None:
    request = SOURCE.first_request(LISTING, BASE)
    assert request.url == f"{BASE}/category.php" and request.params == {"id": "3", "page": "1"}
    page = parse("ecshop", LISTING, request, fixture("ecshop_category3_p1.html"))
    assert page.items == [str(i) for i in range(20, 30)]  # header/history links are not the list
    assert page.total_pages == 2
    assert page.next_request is not None and page.next_request.params == {"id": "3", "page": "2"}
    assert SOURCE.cursor_of(page.items[0]) == "" and not SOURCE.is_older_or_equal(page.items[0], "x|1")


def test_listing_last_page() -> None:
    request = SOURCE.first_request(LISTING, BASE)
    request.params["page"] = "2"
    page = parse("ecshop", LISTING, request, fixture("ecshop_category3_p2.html"))
    assert page.items == ["30", "31", "32", "33"] and page.next_request is None and page.total_pages == 2


def test_listing_empty_category() -> None:
    task = make_task("ecshop", "5", TaskKind.Listing)
    page = parse("ecshop", task, SOURCE.first_request(task, BASE), fixture("ecshop_category5_empty.html"))
    assert page.items == [] and page.next_request is None


def test_listing_category_that_does_not_exist() -> None:
    task = make_task("ecshop", "77", TaskKind.Listing)
    request = SOURCE.first_request(task, BASE)
    with pytest.raises(FetchError) as info:
        parse("ecshop", task, request, fixture("ecshop_index.html"), final_url=f"{BASE}/")
    assert info.value.outcome == "NotFound" and info.value.error_class == "no-such-category"
    with pytest.raises(FetchError) as info:
        parse("ecshop", task, request, fixture("ecshop_index.html"))  # redirect followed silently
    assert info.value.outcome == "NotFound"


def test_unfollowed_redirects() -> None:
    request = SOURCE.first_request(REVIEWS, BASE)
    with pytest.raises(FetchError) as info:
        parse("ecshop", REVIEWS, request, b"", status=302, headers={"Location": "user.php"})
    assert info.value.outcome == "LoginRequired"
    with pytest.raises(FetchError) as info:
        parse("ecshop", LISTING, SOURCE.first_request(LISTING, BASE), b"", status=302, headers={"Location": "./"})
    assert info.value.outcome == "NotFound"


def test_a_review_keeps_its_id_when_its_zero_width_spaces_leave_the_text() -> None:
    """ECSHOP reviews have no id on the page: it is a hash of what they show. Text lost its zero-width spaces (as
    Weibo's did); hashed without them, a review stored before would get a new id and a second row."""
    request = SOURCE.first_request(REVIEWS, BASE)
    plain = reviews(parse("ecshop", REVIEWS, request, fixture("ecshop_goods7.html")).items)[0]
    padded_page = fixture("ecshop_goods7.html").replace("物流也快".encode(), "物流也快\u200b\u200b".encode())
    padded = reviews(parse("ecshop", REVIEWS, request, padded_page).items)[0]
    assert padded.content == plain.content == "质量很好<真的>，\n物流也快"
    old_rule = hashlib.sha1(
        "\x1f".join(("7", "张三", "2024-03-05 21:04:11", "质量很好<真的>，\n物流也快\u200b\u200b")).encode()
    )
    assert padded.id == old_rule.hexdigest()[:20] != plain.id


def test_php_notices_printed_around_a_comment_envelope_are_not_part_of_it() -> None:
    """A shop on a PHP newer than ECSHOP was written for, with ``display_errors`` on, prints its notices (``Deprecated``
    for the template engine's ``preg_replace /e``, ``Strict Standards``, ``Warning``) into the answer, before the JSON
    and sometimes after it (a shutdown warning). Read as a goods page, the envelope was a ParseError on every page
    after the first."""
    task = make_task("ecshop", "42", TaskKind.ProductReviews)
    request = SOURCE.comment_page_request(BASE, "42", 2, 1)
    envelope = ecshop_comment_json(42, 2, comments=3, page_count=4)
    before = (
        b"<br />\n<b>Deprecated</b>:  preg_replace(): The /e modifier is deprecated in "
        b"<b>/srv/shop/includes/cls_template.php</b> on line <b>288</b><br />\n"
        b"\n<b>Strict Standards</b>: Only variables should be passed by reference in "
        b"<b>/srv/shop/includes/lib_main.php</b> on line <b>1312</b><br />\n"
    )
    after = b"\nWarning: Unknown: write failed: No space left on device (28) in Unknown on line 0\n"
    closure = b"<br />\n<b>Warning</b>:  {closure}(): Node no longer exists in <b>/srv/shop/x.php</b> on line <b>2</b>"
    for body in (before + envelope, envelope + after, before + envelope + after, envelope + closure):
        page = parse("ecshop", task, request, body)
        assert len(page.items) == 3 and page.total_pages == 4
        assert page.next_request is not None and "page=3&id=42" in page.next_request.url
    # A notice with nothing after it is still no comment page.
    with pytest.raises(ParseError):
        parse("ecshop", task, request, before)


#: What a shop's database layer prints (HTTP 200) when MySQL refuses it, in ECSHOP's two wordings: a failed query (here
#: "Too many connections") and a failed connect. Made-up values.
_DB_ERRORS = (
    b"<b>MySQL server error report:Array\n(\n    [0] => Array\n        (\n            [message] => MySQL Query Error\n"
    b"        )\n\n    [1] => Array\n        (\n            [sql] => SELECT * FROM `demo`.`ecs_category` WHERE 1\n"
    b"        )\n\n    [2] => Array\n        (\n            [error] => Too many connections\n        )\n\n"
    b"    [3] => Array\n        (\n            [errno] => 1040\n        )\n\n)\n",
    b"<b>MySQL info</b>: Can't Connect MySQL Server(db.internal:3306)!\n\n<br /><br />",
)


def assert_every_page_kind_fails(body: bytes, outcome: str, error_class: str) -> None:
    """``body`` served for a listing, a goods page and a comment page fails each crawl with this outcome and class."""
    listing = make_task("ecshop", "5", TaskKind.Listing)
    requests = [
        (listing, SOURCE.first_request(listing, BASE)),
        (REVIEWS, SOURCE.first_request(REVIEWS, BASE)),
        (REVIEWS, SOURCE.comment_page_request(BASE, "7", 2, 1)),
    ]
    for task, request in requests:
        with pytest.raises(FetchError) as info:
            parse("ecshop", task, request, body)
        assert (info.value.outcome, info.value.error_class) == (outcome, error_class), request.url


@pytest.mark.parametrize("body", _DB_ERRORS, ids=["query", "connect"])
def test_a_database_error_page_is_a_busy_shop_not_a_missing_category(body: bytes) -> None:
    """A shop whose MySQL is overloaded answers every page with its database error report. On a listing that page
    was taken for the shop index served in place of a missing category (NotFound, parked for the longest period);
    on a goods page or a comment page it was a ParseError. It is the shop failing for a while: Busy."""
    assert_every_page_kind_fails(body, "Busy", "shop-db-error")
    # A closed shop is Busy on a listing too, not a missing category.
    listing = make_task("ecshop", "5", TaskKind.Listing)
    closed = '<div style="margin: 150px"><p>本网站暂时关闭</p><p>系统维护中</p></div>'.encode()
    with pytest.raises(FetchError) as info:
        parse("ecshop", listing, SOURCE.first_request(listing, BASE), closed)
    assert (info.value.outcome, info.value.error_class) == ("Busy", "shop-closed")


def test_a_page_that_is_not_the_shop_is_no_proof_the_category_is_gone() -> None:
    """A missing category is answered with the shop index (redirected there, visibly or not), which lists the shop's
    goods. A page with no goods at all and no link to the category — a web firewall's interception notice in front of
    the shop, an error page we have no marker for — says nothing about the category: it is not parked as NotFound for
    the longest period. The firewall's notice is the shop refusing this client (Banned ``waf-block``, the host held
    off); a page we have no marker for fails the crawl as a page we cannot read (retried with the task's backoff)."""
    task = make_task("ecshop", "5", TaskKind.Listing)
    interception = (
        "<html><head><title>网站防火墙</title></head><body><h3>您的请求带有不合法参数，已被网站管理员设置拦截！</h3>"
        "<p>可能原因：您提交的内容包含危险的攻击请求</p><p>规则编号：demo-1024</p></body></html>"
    ).encode()
    with pytest.raises(FetchError) as blocked:
        parse("ecshop", task, SOURCE.first_request(task, BASE), interception)
    assert (blocked.value.outcome, blocked.value.error_class) == ("Banned", "waf-block")
    unknown = b"<html><head><title>Error</title></head><body><h3>Something went wrong.</h3></body></html>"
    with pytest.raises(ParseError) as info:
        parse("ecshop", task, SOURCE.first_request(task, BASE), unknown)
    assert info.value.error_class == "unexpected-format"


def test_only_a_redirect_to_the_shop_index_says_the_goods_or_category_is_gone() -> None:
    """ECSHOP sends an unknown goods or category id to its index (``Location: ./``). A redirect anywhere else — a
    firewall's verification page, another host — is no proof the target is gone, and must not park it as NotFound."""
    for target in ("./", "/", "index.php", "http://shop.example.org/mall/"):
        for task in (REVIEWS, LISTING):
            with pytest.raises(FetchError) as info:
                parse("ecshop", task, SOURCE.first_request(task, BASE), b"", status=302, headers={"Location": target})
            assert info.value.outcome == "NotFound", (target, task.kind)
    for target in ("https://verify.example.net/check?from=shop", "/waf/challenge.html?token=3f2a"):
        for task in (REVIEWS, LISTING):
            with pytest.raises((FetchError, ParseError)) as failed:
                parse("ecshop", task, SOURCE.first_request(task, BASE), b"", status=302, headers={"Location": target})
            assert getattr(failed.value, "outcome", "") != "NotFound", (target, task.kind)


#: ECSHOP's own closed-shop notice: ``init.php`` dies with its ``shop_closed`` line and the owner's ``close_comment``
#: (our own wording for the latter), in the zh_cn, zh_tw and en_us packs.
_CLOSED_NOTICES = (
    '<div style="margin: 150px; text-align: center; font-size: 14px"><p>本店盘点中，请您稍后再来...</p>'
    "<p>店铺装修，明日见</p></div>",
    '<div style="margin: 150px; text-align: center; font-size: 14px"><p>本店盤點中，請您稍後再來...</p><p></p></div>',
    '<div style="margin: 150px; text-align: center; font-size: 14px"><p>Our shop on stock counting，please revisit'
    " shortly...</p><p></p></div>",
)


@pytest.mark.parametrize("notice", _CLOSED_NOTICES, ids=["zh_cn", "zh_tw", "en_us"])
@pytest.mark.parametrize("charset", ["utf-8", "gbk"])
def test_the_notice_ecshop_itself_prints_for_a_closed_shop_is_busy(notice: str, charset: str) -> None:
    """A shop whose owner set ``shop_closed`` answers every page with ECSHOP's notice (本店盘点中，请您稍后再来...), in
    the shop's charset. Only a wording no ECSHOP prints (网站暂时关闭) was known, so the real notice was a ParseError
    on a goods or comment page and, on a listing, not the shop at all: it is the shop closed for a while, Busy."""
    assert_every_page_kind_fails(notice.encode(charset), "Busy", "shop-closed")


def _comment_box(time_shown: str, page: int, pages: int) -> str:
    """``comments_list.lbi`` as the default theme renders it: one review, the default pager (ECSHOP's comment pager
    is always the simple one: ``assign_comment`` leaves ``styleid`` unset), the comment form with its star images."""
    nxt = f"javascript:gotoPage({page + 1},7,0)" if page < pages else "javascript:;"
    return (
        '<meta http-equiv="Content-Type" content="text/html; charset=utf-8">\n<div class="box"><div class="box_1">'
        '<h3><span class="text">用户评论</span>(共<font class="f1">6</font>条评论)</h3><ul class="comments">'
        f'<li class="word"><font class="f2">甲</font> <font class="f3">( {time_shown} )</font><br />\n'
        '<img src="../images/stars4.gif" alt="4" />\n<p>好用<br />\n再买</p></li></ul><div id="pagebar" class="f_r">'
        f'<form name="selectPageForm" action="/goods.php" method="get"><div id="pager">总计 6 个记录，共 {pages} 页。'
        f' <span> <a href="javascript:gotoPage(1,7,0)">第一页</a> <a href="{nxt}">下一页</a> </span></div></form>'
        '</div><div class="commentsList"><form action="javascript:;" name="commentForm" id="commentForm">'
        '<img src="../images/stars1.gif" /><img src="../images/stars5.gif" /></form></div></div></div>'
    )


@pytest.mark.parametrize(
    ("body", "page"),
    [
        # A GBK edition's goods page (its meta names gbk).
        (
            (
                '<html><head><meta http-equiv="Content-Type" content="text/html; charset=gbk" /></head><body>'
                f'<div id="ECS_COMMENT">{_comment_box("2024-03-05 21:04", 1, 2)}</div></body></html>'
            ).encode("gbk"),
            1,
        ),
        # A fork's comment.php adds its own keys (page, totalPages) and a BOM before the envelope.
        (
            b"\xef\xbb\xbf"
            + json.dumps(
                {
                    "error": 0,
                    "message": "",
                    "content": _comment_box("2024-03-05 21:04", 2, 2),
                    "page": 2,
                    "totalPages": 2,
                }
            ).encode(),
            2,
        ),
    ],
    ids=["gbk-goods-page", "fork-envelope-with-bom"],
)
def test_comment_list_shapes_of_shops_today(body: bytes, page: int) -> None:
    """A shop whose ``time_format`` drops the seconds, in either answer: the review, its time and the pager read."""
    request = SOURCE.first_request(REVIEWS, BASE) if page == 1 else SOURCE.comment_page_request(BASE, "7", page, 1)
    parsed = parse("ecshop", REVIEWS, request, body)
    (review,) = reviews(parsed.items)
    assert (review.user, review.content, review.score) == ("甲", "好用\n再买", 4)
    assert review.created_at == "2024-03-05T21:04:00+08:00"
    assert parsed.total_pages == 2 and (parsed.next_request is None) == (page == 2)


def cls_json(obj: dict[str, object], charset: str = "gbk") -> bytes:
    """A flat object as ECSHOP's ``cls_json::encode`` writes it for a GBK or Big5 shop (no ``json_encode``): each
    string's bytes as they are, byte by byte escaping backslashes, quotes and control characters; numbers bare."""
    escapes = {0x5C: b"\\\\", 0x22: b'\\"', 0x0A: b"\\n", 0x0D: b"\\r", 0x09: b"\\t"}

    def value(item: object) -> bytes:
        if isinstance(item, int):
            return str(item).encode()
        raw = str(item).encode(charset)
        return b'"' + b"".join(escapes.get(byte, bytes([byte])) for byte in raw) + b'"'

    return b"{" + b",".join(value(key) + b":" + value(item) for key, item in obj.items()) + b"}"


def test_a_gbk_shops_comment_page_whose_text_has_a_0x5c_byte_reads_right() -> None:
    """A GBK shop's ``comment.php`` answer is written byte by byte: a character whose second GBK byte is 0x5C (誠, 運,
    淺… 118 of them, traditional forms buyers do type) is followed by the backslash the encoder doubled. Decoded as
    text first, that pair became an invalid escape, or swallowed the closing quote: the whole page, and the walk past
    it, was a ParseError on every try. The envelope is read on its bytes now and each string decoded after."""
    texts = ["誠意滿滿，很好運", '淺藍色"款"\\結尾是誠', "錦"]
    items = "".join(
        f'<li class="word"><font class="f2">買家{i}</font> <font class="f3">( 2024-03-0{i + 1} 10:00:00 )</font><br />'
        f'<img src="../images/stars5.gif" /><p>{text.replace("<", "&lt;")}</p></li>'
        for i, text in enumerate(texts)
    )
    content = f'<ul class="comments">{items}</ul><div id="pager">总计 6 个记录，共 2 页。</div>'
    body = cls_json({"error": 0, "message": "", "content": content})
    with pytest.raises(UnicodeDecodeError):
        body.decode("utf-8")
    page = parse("ecshop", REVIEWS, SOURCE.comment_page_request(BASE, "7", 2, 1), body)
    assert [r.content for r in reviews(page.items)] == texts
    assert [r.user for r in reviews(page.items)] == ["買家0", "買家1", "買家2"]
    assert page.total_pages == 2 and page.next_request is None


def _big5_list(texts: Sequence[str], page: int, pages: int) -> str:
    """``comments_list.lbi`` as a Big5 shop renders it: its meta names big5, the zh_tw pack's words."""
    items = "".join(
        f'<li class="word"><font class="f2">會員{i}</font> <font class="f3">( 2024-05-0{i + 1} 08:30:00 )</font><br />'
        f'<img src="../images/stars3.gif" /><p>{text}</p></li>'
        for i, text in enumerate(texts)
    )
    nxt = f"javascript:gotoPage({page + 1},7,0)" if page < pages else "javascript:;"
    return (
        '<meta http-equiv="Content-Type" content="text/html; charset=big5">'
        f'<ul class="comments">{items}</ul><div id="pager">總計 4 個記錄，共 {pages} 頁。 <span>'
        f'<a href="javascript:gotoPage(1,7,0)">第一頁</a> <a href="{nxt}">下一頁</a></span></div>'
    )


def test_a_big5_shops_pages_are_read_as_big5() -> None:
    """ECSHOP installs as a Big5 edition too (``EC_CHARSET`` big5, the zh_tw pack): its pages are Big5 bytes that
    say so (``charset=big5`` in the header and the page). Read as GB18030, as every non-UTF-8 page was, each review
    was stored with other characters than the buyer wrote; and its ``comment.php`` answer, written byte by byte, has
    a doubled backslash after every character whose second Big5 byte is 0x5C (許, 功, 蓋…, common ones)."""
    first_texts, second_texts = ["許多功能都很好用", "餐具蓋子很緊"], ["價格實惠，會再買", "包裝完整"]
    header = {"Content-Type": "text/html; charset=big5"}
    goods = f'<html><body><div id="ECS_COMMENT">{_big5_list(first_texts, 1, 2)}</div></body></html>'.encode("big5")
    first = parse("ecshop", REVIEWS, SOURCE.first_request(REVIEWS, BASE), goods, headers=header)
    assert [r.content for r in reviews(first.items)] == first_texts
    assert [r.user for r in reviews(first.items)] == ["會員0", "會員1"] and first.next_request is not None
    body = cls_json({"error": 0, "message": "", "content": _big5_list(second_texts, 2, 2)}, "big5")
    for headers in (header, {}):  # the page's own meta says big5 when a proxy dropped the header's charset
        second = parse("ecshop", REVIEWS, first.next_request, body, headers=headers)
        assert [r.content for r in reviews(second.items)] == second_texts and second.next_request is None


def test_a_closed_big5_shop_is_busy() -> None:
    notice = '<div style="margin: 150px; text-align: center; font-size: 14px"><p>本店盤點中，請您稍後再來...</p></div>'
    with pytest.raises(FetchError) as info:
        parse("ecshop", REVIEWS, SOURCE.first_request(REVIEWS, BASE), notice.encode("big5"))
    assert (info.value.outcome, info.value.error_class) == ("Busy", "shop-closed")


@pytest.mark.parametrize(
    "headers", [{"Content-Type": "text/html; charset=gbk"}, {}], ids=["header-says-gbk", "meta-says-gbk"]
)
def test_a_gbk_page_that_mentions_big5_after_its_own_declaration_stays_gbk(headers: dict[str, str]) -> None:
    """Any ``charset=big5`` in a page's first 4 KiB made the whole page Big5, even after the header or the page's own
    ``<meta>`` had said GBK: a buyer's review quoting one (or a theme's link to a Big5 mirror) turned every review of
    a GBK shop into other characters. The header's declaration decides, else the page's first."""
    texts = ["网页显示乱码，charset=big5 也试过", "质量很好"]
    items = "".join(
        f'<li class="word"><font class="f2">买家{i}</font> <font class="f3">( 2024-03-0{i + 1} 10:00:00 )</font><br />'
        f'<img src="../images/stars5.gif" /><p>{text}</p></li>'
        for i, text in enumerate(texts)
    )
    goods = (
        '<html><head><meta http-equiv="Content-Type" content="text/html; charset=gbk" /></head><body>'
        f'<div id="ECS_COMMENT"><ul class="comments">{items}</ul><div id="pager">总计 2 个记录，共 1 页。</div></div>'
        "</body></html>"
    ).encode("gbk")
    page = parse("ecshop", REVIEWS, SOURCE.first_request(REVIEWS, BASE), goods, headers=headers)
    assert [r.content for r in reviews(page.items)] == texts
    assert [r.user for r in reviews(page.items)] == ["买家0", "买家1"]


@pytest.mark.parametrize("target", ["./install/index.php", "http://127.0.0.1:8800/x/install/index.php", "install/"])
@pytest.mark.parametrize("status", [302, 200, 404])
def test_a_shop_that_sends_every_page_to_its_installer_is_busy_not_a_gone_target(target: str, status: int) -> None:
    """ECSHOP's ``init.php`` (and its forks') sends every request to ``./install/index.php`` while its install lock
    file is missing (a shop moved or restored without it). That path ends in ``index.php`` without a query, so the
    redirect was read as ECSHOP's answer for an unknown goods or category and the target parked as NotFound; followed,
    it lands on the installer (HTTP 200) or, where the owner removed it, on a 404: NotFound again. It is the shop out of
    order for a while, whatever the target: Busy ``shop-installer``, on every page kind."""
    for task, request in (
        (REVIEWS, SOURCE.first_request(REVIEWS, BASE)),
        (REVIEWS, SOURCE.comment_page_request(BASE, "7", 2, 1)),
        (LISTING, SOURCE.first_request(LISTING, BASE)),
    ):
        if status == 302:
            page_kw: dict[str, object] = {"status": 302, "headers": {"Location": target}}
        else:
            page_kw = {"status": status, "final_url": urljoin(request.url, target)}
        installer = b"<html><head><title>ECSHOP installer</title></head><body>step 1</body></html>"
        with pytest.raises(FetchError) as info:
            parse("ecshop", task, request, installer if status == 200 else b"", **page_kw)  # type: ignore[arg-type]
        assert (info.value.outcome, info.value.error_class) == ("Busy", "shop-installer"), (task.kind, request.url)


_BOM = b"\xef\xbb\xbf"
_NOTICE = b"<br />\n<b>Notice</b>:  Undefined index: id in <b>/srv/shop/comment.php</b> on line <b>40</b><br />\n"


@pytest.mark.parametrize(
    "prefix",
    [_BOM * 2, b"\r\n" + _BOM, _BOM + _NOTICE + _BOM, _NOTICE + _BOM + b"\n" + _BOM],
    ids=["two", "after-a-newline", "around-a-notice", "after-a-notice"],
)
def test_byte_order_marks_printed_before_a_comment_envelope_are_not_part_of_it(prefix: bytes) -> None:
    """Every PHP file a shop saved as UTF-8 "with BOM" prints its three BOM bytes when included, so an answer may start
    with several, between notices too (ECSHOP's own ``transport.js`` strips them from every answer before reading its
    JSON). Only one leading BOM was dropped: the envelope was read as a goods page, a ParseError on every page after
    the first. UTF-8 and GBK shops alike."""
    task = make_task("ecshop", "42", TaskKind.ProductReviews)
    request = SOURCE.comment_page_request(BASE, "42", 2, 1)
    utf8 = ecshop_comment_json(42, 2, comments=3, page_count=4)
    items = '<li class="word"><font class="f2">乙</font> <font class="f3">( 2024-03-05 21:04:11 )</font><p>誠</p></li>'
    gbk = cls_json({"error": 0, "message": "", "content": f'<ul class="comments">{items}</ul>总计 9 个记录，共 4 页'})
    for body, count in ((utf8, 3), (gbk, 1)):
        page = parse("ecshop", task, request, prefix + body)
        assert len(page.items) == count and page.total_pages == 4
        assert page.next_request is not None and "page=3&id=42" in page.next_request.url


#: A goods page whose comment box holds no list: what ``{insert name='comments'}`` leaves in a page cached whole
#: (ECSHOP's insert placeholder, our own hash), or an empty box a theme's script fills from ``comment.php``.
_EMPTY_BOXES = (
    '<div id="ECS_COMMENT"> 0123456789abcdef0123456789abcdefcomments|a:3:{s:4:"name";s:8:"comments";s:4:"type";i:0;'
    's:2:"id";i:7;}0123456789abcdef0123456789abcdef</div>',
    '<div id="ECS_COMMENT"></div><script type="text/javascript">loadComments(7, 0, 1);</script>',
)


@pytest.mark.parametrize("box", _EMPTY_BOXES, ids=["insert-placeholder", "script-filled"])
def test_a_goods_page_whose_comment_box_is_filled_later_reads_page_1_from_comment_php(box: str) -> None:
    """Some themes (and pages cached whole) leave ``#ECS_COMMENT`` without the rendered list and fill it from
    ``comment.php?act=gotopage&page=1`` by script. The goods page was a ParseError on every visit, and the product's
    reviews were never read; it is now followed to that page 1, which ECSHOP's core ``comment.php`` answers on every
    install. A ``comment.php`` answer without a list is still an error (no loop)."""
    request = SOURCE.first_request(REVIEWS, BASE)
    html = f'<html><body><a href="goods.php?id=7">goods</a><div class="goods">{box}</div></body></html>'
    page = parse("ecshop", REVIEWS, request, html.encode())
    assert page.items == [] and page.next_request is not None
    assert page.next_request.url == f"{BASE}/comment.php?act=gotopage&page=1&id=7&type=0&1625544000000"
    first = parse("ecshop", REVIEWS, page.next_request, ecshop_comment_json(7, 1, comments=5, page_count=2))
    assert len(first.items) == 5 and first.next_request is not None and "page=2&id=7" in first.next_request.url
    with pytest.raises(ParseError):
        parse("ecshop", REVIEWS, page.next_request, php_json({"error": 0, "message": "", "content": box}).encode())
    # A firewall's or database's notice inside a goods page is still what it says, not a box to fill.
    with pytest.raises(FetchError) as info:
        parse("ecshop", REVIEWS, request, html.replace("</body>", _DB_ERRORS[1].decode() + "</body>").encode())
    assert info.value.error_class == "shop-db-error"


def test_a_review_whose_text_starts_with_the_word_admin_keeps_its_text() -> None:
    """Only a paragraph labelled 管理员： in ``font.f1`` is the shop's reply; a buyer who opens with the word
    (addressing the shop) wrote a review, and its text was dropped as if it were the reply."""
    items = (
        '<li class="word"><font class="f2">乙</font> <font class="f3">( 2025-06-01 08:30:00 )</font><br />'
        '<img src="../images/stars2.gif" alt="2" /><p>管理员请看看，发货太慢</p>'
        '<p><font class="f1">管理员：</font>已催仓库</p></li>'
        '<li class="word"><font class="f2">丙</font> <font class="f3">( 2025-05-30 19:00:00 )</font><br />'
        '<img src="../images/stars5.gif" alt="5" /><p>管理员，包装很好</p></li>'
    )
    body = (
        '<html><head><meta charset="utf-8"></head><body><div id="ECS_COMMENT"><ul class="comments">'
        f'{items}</ul><div id="pager">总计 2 个记录，共 1 页。</div></div></body></html>'
    ).encode()
    parsed = parse("ecshop", REVIEWS, SOURCE.first_request(REVIEWS, BASE), body)
    replied, plain = reviews(parsed.items)
    assert (replied.user, replied.content, replied.score) == ("乙", "管理员请看看，发货太慢", 2)
    assert (plain.user, plain.content, plain.score) == ("丙", "管理员，包装很好", 5)
    assert replied.id != plain.id and "已催仓库" not in replied.content


@pytest.mark.parametrize("location", ["http://[::1/x", "//[zz]/x", "http://[::1/install/index.php"])
@pytest.mark.parametrize("status", [300, 304, 305])
@pytest.mark.parametrize("kind", ["reviews", "listing"])
def test_an_unfollowed_redirect_to_an_address_python_refuses_is_read_as_the_page_not_a_source_bug(
    location: str, status: int, kind: str
) -> None:
    """A 3xx the client does not follow keeps its ``Location``; one whose host ``urllib.parse`` refuses (an unclosed
    ``[``, a bracketed non-address) says nothing about a login wall, a gone target or the installer: the page is read
    as any other, and its empty body is the site's odd answer, not a ValueError the runtime files as a source bug."""
    task = REVIEWS if kind == "reviews" else LISTING
    with pytest.raises((FetchError, ParseError)) as failed:
        parse("ecshop", task, SOURCE.first_request(task, BASE), b"", status=status, headers={"Location": location})
    assert getattr(failed.value, "outcome", "") not in ("NotFound", "LoginRequired", "Busy"), failed.value
    page = fetched(b"", SOURCE.first_request(task, BASE), status=status, headers={"Location": location})
    assert shows_login_wall(page) is False


@pytest.mark.parametrize(
    "pager_part",
    ['<span class="page_now">²</span>', '<select name="page"><option value="1">1</option><option value="²">²</option>'],
    ids=["page_now", "option"],
)
def test_a_listing_pager_with_a_superscript_digit_is_read_by_its_links_not_a_source_bug(pager_part: str) -> None:
    """``str.isdigit`` says yes to ``²``, which ``int`` refuses: a pager showing one (a theme's footnote mark, a
    mistyped template) is read by its other page numbers, not a ValueError the runtime files as a source bug."""
    body = fixture("ecshop_category3_p1.html").replace(b'<span class="page_now">1</span>', pager_part.encode())
    page = parse("ecshop", LISTING, SOURCE.first_request(LISTING, BASE), body)
    assert page.items == [str(i) for i in range(20, 30)] and page.total_pages == 2
