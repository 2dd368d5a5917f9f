"""jd: JSONP and plain (GBK) pages, int64/string ids, entities, maxPage paging, blocked answers."""

from __future__ import annotations

import json

import pytest

from crawler_client.sources._detect import EMPTY_PAGE_RETRIES
from crawler_client.sources.jd import JdSource
from icecrawler.errors import ConfigError, FetchError, ParseError
from icecrawler.models import Review
from sandbox.samples import jd_comments
from tests.client._util import BASE, NOW_MS, fetched, fixture, make_task, parse

SOURCE = JdSource()
TASK = make_task("jd", "100012043978")


def test_first_request_is_the_product_page_query() -> None:
    request = SOURCE.first_request(TASK, BASE)
    assert request.url == f"{BASE}/comment/productPageComments.action"
    assert request.params == {
        "callback": "fetchJSON_comment98",
        "productId": "100012043978",
        "score": "0",
        "sortType": "6",
        "page": "0",
        "pageSize": "10",
        "isShadowSku": "0",
        "rid": "0",
        "fold": "1",
    }
    assert request.page == 1


def test_jsonp_page_fields() -> None:
    page = parse("jd", TASK, SOURCE.first_request(TASK, BASE), fixture("jd_page0.jsonp"))
    assert all(isinstance(item, Review) for item in page.items)
    first, string_id, guid_only = [item for item in page.items if isinstance(item, Review)]
    assert first.id == "21739216866" and string_id.id == "21739216800" and guid_only.id == "nokey-id"
    assert first.content == "温度 25°C & 很好\n第二行"
    assert (first.score, string_id.score, first.user) == (5, 4, "j***y")
    assert first.created_at == "2024-12-02T10:11:12+08:00" and first.product_id == "100012043978"
    assert first.source == "jd"
    assert page.total_pages == 3 and page.info == {"comment_count": "1000000", "max_page": "3"}
    nxt = page.next_request
    assert nxt is not None and nxt.params["page"] == "1" and nxt.page == 2 and nxt.params["productId"] == "100012043978"


def test_plain_gbk_last_page_stops_at_max_page() -> None:
    request = SOURCE.page_request(TASK, f"{BASE}/comment/productPageComments.action", 2)
    page = parse("jd", TASK, request, fixture("jd_page2_plain_gbk.json"))
    assert len(page.items) == 1 and page.next_request is None


def test_generated_ten_review_pages() -> None:
    page = parse("jd", TASK, SOURCE.first_request(TASK, BASE), jd_comments(jsonp=False))
    assert len(page.items) == 10 and page.total_pages == 100


def test_empty_comments_list_ends_without_blocking() -> None:
    body = jd_comments(comments=0)
    page = parse("jd", TASK, SOURCE.first_request(TASK, BASE), body)
    assert page.items == [] and page.next_request is None


def test_an_empty_page_before_the_last_is_a_throttled_answer_not_the_end() -> None:
    """JD's list has ``maxPage`` pages (this answer's, else the one the walk learnt on the page before): an empty
    page with more after it cannot be the end, and taken for it the new cursor would pass over the reviews not yet
    reached. The last page, or the first of a product without reviews, may be empty."""
    url = f"{BASE}/comment/productPageComments.action"
    first = parse("jd", TASK, SOURCE.first_request(TASK, BASE), jd_comments(max_page=5))
    assert first.next_request is not None and first.next_request.state["max_page"] == "5"
    for request, body in [
        (first.next_request, jd_comments(comments=0, page=1, max_page=0)),  # the soft answer, no maxPage
        (SOURCE.page_request(TASK, url, 2), jd_comments(comments=0, page=2, max_page=5)),
    ]:
        with pytest.raises(FetchError) as info:
            parse("jd", TASK, request, body)
        assert (info.value.outcome, info.value.error_class) == ("Busy", "jd-empty-page")
    last = parse("jd", TASK, SOURCE.page_request(TASK, url, 4), jd_comments(comments=0, page=4, max_page=5))
    assert last.items == [] and last.next_request is None


def test_an_empty_page_before_the_last_is_the_end_after_as_many_failed_visits_as_the_retries() -> None:
    """JD's ``maxPage`` may count reviews it does not serve (folded ones, those past the pages it shows), and every
    visit then meets the same empty page: Busy for ever would keep the cursor and walk the list again each time.
    After ``EMPTY_PAGE_RETRIES`` failed visits in a row the empty page is the end."""
    url = f"{BASE}/comment/productPageComments.action"
    request, body = SOURCE.page_request(TASK, url, 2), jd_comments(comments=0, page=2, max_page=5)
    for attempts in range(EMPTY_PAGE_RETRIES):
        with pytest.raises(FetchError) as info:
            parse("jd", make_task("jd", TASK.target, attempts=attempts), request, body)
        assert info.value.error_class == "jd-empty-page"
    page = parse("jd", make_task("jd", TASK.target, attempts=EMPTY_PAGE_RETRIES), request, body)
    assert page.items == [] and page.next_request is None


def _old_form(body: bytes, comment_count: int | None) -> bytes:
    """The same answer as the older ``productpage`` form gives it: no ``maxPage``, ``totalPage`` or ``hasMore``; its
    summary's ``commentCount`` is a real total (or, with None, there is no summary at all)."""
    doc = json.loads(body)
    del doc["maxPage"]
    if comment_count is None:
        del doc["productCommentSummary"]
    else:
        doc["productCommentSummary"] = {"commentCount": comment_count, "goodRateShow": 92}
    return json.dumps(doc, ensure_ascii=False).encode()


def test_an_answer_without_a_page_count_is_paged_by_its_comment_total() -> None:
    """Stopping after the first page of such an answer reported the product crawled while its older reviews were
    never reached. Its comment total gives the pages (53 → 6), so an empty page before the last is still a throttled
    answer and the last full page asks for no page past the end."""
    url = f"{BASE}/comment/productPageComments.action"
    first = parse("jd", TASK, SOURCE.first_request(TASK, BASE), _old_form(jd_comments(jsonp=False), 53))
    assert len(first.items) == 10 and first.total_pages == 6
    assert first.next_request is not None and first.next_request.params["page"] == "1"
    with pytest.raises(FetchError) as info:
        parse(
            "jd", TASK, SOURCE.page_request(TASK, url, 2), _old_form(jd_comments(comments=0, page=2, jsonp=False), 53)
        )
    assert (info.value.outcome, info.value.error_class) == ("Busy", "jd-empty-page")
    last = parse(
        "jd", TASK, SOURCE.page_request(TASK, url, 5), _old_form(jd_comments(comments=10, page=5, jsonp=False), 53)
    )
    assert len(last.items) == 10 and last.next_request is None


def test_an_answer_without_a_page_count_or_total_is_followed_while_its_pages_are_full() -> None:
    """With nothing to say how many pages there are, a full page may have more after it; a short or empty one ends."""
    full = parse("jd", TASK, SOURCE.first_request(TASK, BASE), _old_form(jd_comments(jsonp=False), None))
    assert len(full.items) == 10 and full.total_pages is None
    assert full.next_request is not None and full.next_request.params["page"] == "1"
    url = f"{BASE}/comment/productPageComments.action"
    for count in (3, 0):
        body = _old_form(jd_comments(comments=count, page=1, jsonp=False), None)
        last = parse("jd", TASK, SOURCE.page_request(TASK, url, 1), body)
        assert len(last.items) == count and last.next_request is None
    # An answer that gives a page count is paged by it, full page or not.
    assert parse("jd", TASK, SOURCE.page_request(TASK, url, 4), jd_comments(page=4, max_page=5)).next_request is None


def test_a_full_page_that_says_max_page_0_mid_walk_is_paged_by_the_count_the_walk_learnt() -> None:
    """The walk carries the page count the first page gave; a later answer saying ``maxPage: 0`` no longer ends it."""
    first = parse("jd", TASK, SOURCE.first_request(TASK, BASE), jd_comments(max_page=5))
    assert first.next_request is not None
    second = parse("jd", TASK, first.next_request, jd_comments(comments=10, page=1, max_page=0))
    assert second.next_request is not None and second.next_request.params["page"] == "2"


@pytest.mark.parametrize("name", ["jd_empty_object.jsonp", "jd_no_comments.json", "jd_empty_body.txt"])
def test_blocked_answers_need_login(name: str) -> None:
    with pytest.raises(FetchError) as info:
        parse("jd", TASK, SOURCE.first_request(TASK, BASE), fixture(name))
    assert info.value.outcome == "LoginRequired" and info.value.error_class == "jd-blocked"


def test_statuses_and_garbage() -> None:
    request = SOURCE.first_request(TASK, BASE)
    with pytest.raises(FetchError) as info:
        parse("jd", TASK, request, b"", status=403)
    assert info.value.outcome == "Banned"
    with pytest.raises(ParseError):
        parse("jd", TASK, request, b"fetchJSON_comment98(<html>);")


def test_api_endpoint_sends_the_same_query_as_a_json_body_and_pages_the_same() -> None:
    import json

    source = JdSource(endpoint="api")
    request = source.first_request(TASK, "https://api.m.jd.com")
    assert request.url == "https://api.m.jd.com/" and request.page == 1
    assert {k: v for k, v in request.params.items() if k != "body"} == {
        "appid": "item-v3",
        "functionId": "pc_club_productPageComments",
        "client": "pc",
        "clientVersion": "1.0.0",
    }
    assert json.loads(request.params["body"]) == {
        "productId": "100012043978",
        "score": 0,
        "sortType": 6,
        "page": 0,
        "pageSize": 10,
        "isShadowSku": 0,
        "rid": 0,
        "fold": 1,
    }
    assert request.headers == {  # the item page's script calling the gateway (tests/client/test_site_headers.py)
        "Referer": "https://item.jd.com/100012043978.html",
        "Accept": "application/json, text/plain, */*",
        "Origin": "https://item.jd.com",
        "x-referer-page": "https://item.jd.com/100012043978.html",
        "x-rp-client": "h5_1.0.0",
    }
    page = source.parse(TASK, request, fetched(jd_comments(jsonp=False, max_page=3), request), NOW_MS)
    assert len(page.items) == 10 and page.next_request is not None
    assert json.loads(page.next_request.params["body"])["page"] == 1 and page.next_request.page == 2


def test_unknown_endpoint_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"sources\.jd\.endpoint"):
        JdSource(endpoint="sign")


def test_comment_info_list_shape() -> None:
    page = parse("jd", TASK, SOURCE.first_request(TASK, BASE), fixture("jd_lego_comments.json"))
    first, second = [item for item in page.items if isinstance(item, Review)]
    assert (first.id, first.user, first.score) == ("1800000000000000001", "京***友", 5)
    assert first.content == "物流很快，包装完好&做工不错" and first.created_at == "2025-06-01T10:11:12+08:00"
    assert (second.id, second.score, second.content) == ("1800000000000000000", 3, "一般般")
    assert page.next_request is not None and page.next_request.params["page"] == "1"  # hasMore, no maxPage


@pytest.mark.parametrize(
    ("body", "status", "headers", "error_class"),
    [
        (b"", 403, {}, "jd-risk-403"),
        (jd_comments(), 200, {"x-rp-content": '{"code":"605","msg":"risk"}'}, "jd-risk-605"),
        # Since 2024 the header is base64url JSON, with an empty body: not the "blocked" login wall.
        (b"", 200, {"x-rp-content": "eyJjb2RlIjogIjYwNSIsICJkaXNwb3NhbCI6IHsiZXZDb250ZW50IjogIngifX0"}, "jd-risk-605"),
        (b"", 200, {"x-rp-content": "eyJjb2RlIjogIjYwMSJ9"}, "jd-risk-header"),
        (b"", 200, {"x-rp-content": "not-base64!"}, "jd-risk-header"),
        # A stray character past the last whole base64 group (seen in 2026): the code is still read.
        (
            b"",
            200,
            {"x-rp-content": "eyJjb2RlIjogIjYwNSIsICJkaXNwb3NhbCI6IHsiZXZDb250ZW50IjogInt9In19A"},
            "jd-risk-605",
        ),
        (fixture("jd_risk_605.json"), 200, {}, "jd-risk-605"),
        (fixture("jd_system_busy_gbk.html"), 200, {}, "jd-system-busy"),
        (b'{"code":"3","msg":"\\u7cfb\\u7edf\\u7e41\\u5fd9"}', 200, {}, "jd-system-busy"),
    ],
)
def test_risk_control_answers_are_banned_never_a_parse_error(
    body: bytes, status: int, headers: dict[str, str], error_class: str
) -> None:
    with pytest.raises(FetchError) as info:
        parse("jd", TASK, SOURCE.first_request(TASK, BASE), body, status=status, headers=headers)
    assert info.value.outcome == "Banned" and info.value.error_class == error_class
    assert not isinstance(info.value, ParseError)


def test_nested_and_wrapped_comment_rows_login_page_and_risk_redirect() -> None:
    import json

    row = {
        "commentInfo": {
            "commentId": "77",
            "userNickName": "a***b",
            "commentData": "好",
            "commentDate": "2025-06-01 10:00:00",
            "commentScore": "4",
        }
    }
    lego = {
        "code": "0",
        "result": {
            "floors": [{"mId": "header", "data": {}}, {"mId": "commentlist", "data": {"commentInfoList": [row]}}]
        },
    }
    page = parse("jd", TASK, SOURCE.first_request(TASK, BASE), json.dumps(lego).encode())
    (review,) = page.items
    assert isinstance(review, Review) and (review.id, review.score, review.content) == ("77", 4, "好")
    login = "<html><head><title>京东-欢迎登录</title></head><body>https://passport.jd.com/new/login.aspx</body></html>"
    with pytest.raises(FetchError) as info:
        parse("jd", TASK, SOURCE.first_request(TASK, BASE), login.encode())
    assert (info.value.outcome, info.value.error_class) == ("LoginRequired", "jd-login-page")
    with pytest.raises(FetchError) as info:
        parse(
            "jd",
            TASK,
            SOURCE.first_request(TASK, BASE),
            b"<html></html>",
            final_url="https://cfe.m.jd.com/privatedomain/risk_handler/03101900/?returnurl=x",
        )
    assert (info.value.outcome, info.value.error_class) == ("Banned", "jd-risk-redirect")
    script = '<html><script>location.href="https://cfe.m.jd.com/privatedomain/risk_handler/03101900/"</script></html>'
    with pytest.raises(FetchError) as info:
        parse("jd", TASK, SOURCE.first_request(TASK, BASE), script.encode())
    assert (info.value.outcome, info.value.error_class) == ("Banned", "jd-risk-redirect")


def test_a_risk_header_without_code_605_on_an_answer_with_comments_is_not_a_ban() -> None:
    """Only code 605, or the header on an answer that holds no comments, is risk control: a page of comments is
    used whatever else the header says (a ban would block the host for every product)."""
    page = parse(
        "jd",
        TASK,
        SOURCE.first_request(TASK, BASE),
        jd_comments(comments=3),
        headers={"x-rp-content": "eyJjb2RlIjogIjAifQ"},
    )
    assert len(page.items) == 3


def _list_page(rows: int, start: int = 1, page_info: dict[str, object] | None = None, nested: bool = False) -> bytes:
    """A ``getCommentListPage`` answer: comment rows in the ``commentlist-list`` floor's ``data`` (inside a
    ``subFloors`` list when ``nested``), a label floor beside it, and optionally ``result.pageInfo.data``."""
    data = [
        {
            "commentInfo": {
                "commentId": str(19_000_000_000 + start + i),
                "guid": f"g{start + i}",
                "userNickName": f"j***{i}",
                "commentData": f"评价 {start + i}",
                "commentDate": "2025-06-02 10:00:00",
                "commentScore": "5",
            }
        }
        for i in range(rows)
    ]
    floor: dict[str, object] = {"mId": "commentlist-list", "data": data}
    label = {"mId": "commentlist-commonlabel", "data": {"generalTagList": [{"identification": "ALL", "count": "2万+"}]}}
    floors = [label, {"mId": "commentlist-wrap", "subFloors": [floor]}] if nested else [label, floor]
    result: dict[str, object] = {"floors": floors}
    if page_info is not None:
        result["pageInfo"] = {"data": page_info}
    return json.dumps({"code": "0", "result": result}).encode()


@pytest.mark.parametrize("nested", [False, True])
def test_get_comment_list_page_floors_parse_and_page(nested: bool) -> None:
    """The 2025 item page's ``getCommentListPage`` answer (a browser's saved answer): its rows were taken for a
    "blocked" login wall because they sit under ``data`` of a floor, not under a ``comments`` key."""
    first = SOURCE.first_request(TASK, BASE)
    page = parse("jd", TASK, first, _list_page(10, nested=nested))
    reviews = [item for item in page.items if isinstance(item, Review)]
    assert [review.id for review in reviews] == [str(19_000_000_001 + i) for i in range(10)]
    assert (reviews[0].content, reviews[0].score) == ("评价 1", 5)
    assert page.next_request is not None  # a full page and nothing that says it is the last
    last = parse("jd", TASK, first, _list_page(10, page_info={"hasNextPage": False, "maxPage": 0}))
    assert len(last.items) == 10 and last.next_request is None
    more = parse("jd", TASK, first, _list_page(4, page_info={"hasNextPage": True}))
    assert more.next_request is not None
    empty = parse("jd", TASK, first, _list_page(0))
    assert empty.items == [] and empty.next_request is None


def test_a_gateway_refusing_the_request_is_a_parse_error_not_a_login_wall() -> None:
    """``{"code":"1","echo":"required string parameter ..."}`` says our request is wrong: no login mends it."""
    body = b'{"code":"1","echo":"required string parameter \'functionId\' is not present"}'
    with pytest.raises(ParseError) as info:
        parse("jd", TASK, SOURCE.first_request(TASK, BASE), body)
    assert info.value.error_class == "jd-bad-request" and "functionId" in str(info.value)


@pytest.mark.parametrize(
    "body",
    [b'{"code":"3","echo":"not login"}', b'{"code":3,"msg":"not login"}'],
    ids=["with-echo", "number"],
)
def test_the_gateways_not_logged_in_code_is_a_login_wall_even_with_an_echo(body: bytes) -> None:
    """Code 3 is JD's gateway saying the call has no valid login (public JD scripts read it so on api.m.jd.com). With an
    ``echo`` beside it, it was read as our own malformed call (ParseError ``jd-bad-request``), which no login mends:
    the account was never rested or renewed. It is LoginRequired ``jd-not-login``."""
    with pytest.raises(FetchError) as info:
        parse("jd", TASK, SOURCE.first_request(TASK, BASE), body)
    assert (info.value.outcome, info.value.error_class) == ("LoginRequired", "jd-not-login")


@pytest.mark.parametrize(
    "login_url",
    [
        "https://plogin.m.jd.com/login/login?appid=300&returnurl=https%3A%2F%2Fitem.m.jd.com%2F",
        "https://passport.m.jd.com/user/login.action?returnurl=https%3A%2F%2Fitem.m.jd.com%2F",
    ],
)
def test_a_redirect_to_jds_mobile_login_page_is_a_login_wall_whatever_the_page_holds(login_url: str) -> None:
    """``plogin.m.jd.com`` (and ``passport.m.jd.com``, which sends on to it) is JD's login page on its mobile and API
    hosts: a crawl sent there (followed, so only the final URL says so, the page itself a script shell) is
    LoginRequired, not an unreadable answer."""
    shell = b"<!DOCTYPE html><html><head><title>JD</title></head><body><div id='app'></div></body></html>"
    with pytest.raises(FetchError) as info:
        parse(
            "jd",
            TASK,
            SOURCE.first_request(TASK, BASE),
            shell,
            final_url=login_url,
        )
    assert (info.value.outcome, info.value.error_class) == ("LoginRequired", "login-redirect")
    assert not isinstance(info.value, ParseError)


def test_a_row_whose_text_is_only_its_tag_comment_keeps_that_text() -> None:
    """2025–2026 item-page rows may leave ``commentData`` empty (or out) and carry what the buyer wrote as
    ``tagCommentContent``: such a review was stored with no text at all. Free text, when there is some, wins."""
    page = parse("jd", TASK, SOURCE.first_request(TASK, BASE), fixture("jd_tag_comment_rows.json"))
    reviews = [item for item in page.items if isinstance(item, Review)]
    assert [(review.content, review.score) for review in reviews] == [
        ("外观好看，声音清楚", 5),
        ("续航一般", 3),
        ("自己写的话", 4),
    ]
    assert reviews[0].created_at == "2025-07-01T09:30:00+08:00"
    assert page.next_request is None


def _row(**fields: object) -> dict[str, object]:
    """One club comment row of our own making; ``fields`` replace its defaults."""
    row: dict[str, object] = {"id": 21739216801, "content": "不错", "creationTime": "2024-12-02 10:11:12", "score": 5}
    row.update(fields)
    return row


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        # The club JSONP in GBK bytes (its old charset), the callback after blank lines.
        (
            b"\r\n\r\nfetchJSON_comment98("
            + json.dumps({"comments": [_row(nickname="匿***名")], "maxPage": 1}, ensure_ascii=False).encode("gbk")
            + b");\n",
            ("不错", "2024-12-02T10:11:12+08:00", 5, "匿***名"),
        ),
        # A time without seconds, another with slashes; a score as a string.
        (
            json.dumps({"comments": [_row(creationTime="2024-12-02 10:11", score="4")], "maxPage": 1}).encode(),
            ("不错", "2024-12-02T10:11:00+08:00", 4, ""),
        ),
        (
            json.dumps({"comments": [_row(creationTime="2024/12/2 10:11:12")], "maxPage": 1}).encode(),
            ("不错", "2024-12-02T10:11:12+08:00", 5, ""),
        ),
        # The line JD shows for a buyer who wrote nothing is the review's text, kept as it is.
        (
            json.dumps({"comments": [_row(content="此用户未填写评价内容")], "maxPage": 1}, ensure_ascii=False).encode(),
            ("此用户未填写评价内容", "2024-12-02T10:11:12+08:00", 5, ""),
        ),
        # A follow-up (afterUserComment) and the shop's replies belong to the review; they are not reviews.
        (
            json.dumps(
                {
                    "comments": [
                        _row(afterUserComment={"id": 9, "content": "追加"}, replies=[{"id": 8, "content": "谢"}])
                    ],
                    "maxPage": 1,
                },
                ensure_ascii=False,
            ).encode(),
            ("不错", "2024-12-02T10:11:12+08:00", 5, ""),
        ),
    ],
    ids=["gbk-jsonp", "no-seconds", "slashes", "empty-text-line", "follow-up"],
)
def test_comment_shapes_of_2024_2026_answers(body: bytes, expected: tuple[str, str, int, str]) -> None:
    """Shapes the club and API answers take in 2024–2026 tools' saved answers, each read as one review."""
    (review,) = parse("jd", TASK, SOURCE.first_request(TASK, BASE), body).items
    assert isinstance(review, Review) and review.id == "21739216801"
    assert (review.content, review.created_at, review.score, review.user) == expected


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        ({"code": 605, "msg": "risk"}, ("Banned", "jd-risk-605")),
        ({"code": 601, "echo": "Queuing", "wait": 5}, ("RateLimited", "jd-queuing")),
        ({"code": 402, "message": "稍后再来"}, ("RateLimited", "jd-crowded")),
    ],
    ids=["605-int", "601-int", "402-int"],
)
def test_gateway_codes_sent_as_numbers_are_read_as_their_strings(
    doc: dict[str, object], expected: tuple[str, str]
) -> None:
    with pytest.raises(FetchError) as info:
        parse("jd", TASK, SOURCE.first_request(TASK, BASE), json.dumps(doc).encode())
    assert (info.value.outcome, info.value.error_class) == expected


def test_cards_between_the_rows_of_get_comment_list_with_card_are_not_reviews() -> None:
    """The app's ``getCommentListWithCard`` answer (saved by 2020s mitmproxy scripts) interleaves card entries without
    ``commentInfo`` between the comment rows, beside ``tagStatisticsinfoList``: the rows are read, the cards skipped."""
    info = {"commentId": "7", "userNickName": "a***b", "commentData": "好", "commentDate": "2025-03-01 10:00:00"}
    doc = {
        "commentInfoList": [
            {"commentInfo": {**info, "commentScore": "5"}},
            {"cardType": 3, "cardInfo": {"title": "卡"}},
        ],
        "maxPage": 3,
        "tagStatisticsinfoList": [{"name": "质量好", "count": "10"}],
    }
    page = parse("jd", TASK, SOURCE.first_request(TASK, BASE), json.dumps(doc, ensure_ascii=False).encode())
    assert [(r.id, r.content, r.score) for r in page.items if isinstance(r, Review)] == [("7", "好", 5)]
    assert len(page.items) == 1 and page.total_pages == 3 and page.next_request is not None


@pytest.mark.parametrize(
    "body",
    [
        json.dumps({"code": "0", "message": "请求过于频繁，请稍后再试"}, ensure_ascii=False).encode(),
        ("fetchJSON_comment98(" + json.dumps({"msg": "访问过于频繁"}, ensure_ascii=False) + ");").encode("gbk"),
        "<html><body><p>操作过于频繁，请稍后再试</p></body></html>".encode(),
        json.dumps({"code": "0", "echo": "搜索过于频繁"}, ensure_ascii=False).encode(),
    ],
    ids=["json-message", "gbk-jsonp-msg", "html", "other-wording"],
)
def test_an_answer_saying_too_frequent_is_a_rate_limit_not_a_login_wall(body: bytes) -> None:
    """An answer without comments that says the client asks too often (过于频繁: a rate limit's wording, JD's and
    Weibo's) was taken for JD's login wall ("blocked", LoginRequired), resting the logged-in account for a limit on the
    host, or, as a page, for an unreadable answer. RateLimited: the host is held off, no account rests."""
    with pytest.raises(FetchError) as info:
        parse("jd", TASK, SOURCE.first_request(TASK, BASE), body)
    assert (info.value.outcome, info.value.error_class) == ("RateLimited", "jd-too-frequent")


def test_an_answer_with_comments_that_mentions_too_frequent_is_read() -> None:
    """The wording counts only where the answer holds no comments: a review may well say 过于频繁."""
    doc = {"comments": [_row(content="客服回复请求过于频繁")], "maxPage": 1}
    (review,) = parse("jd", TASK, SOURCE.first_request(TASK, BASE), json.dumps(doc, ensure_ascii=False).encode()).items
    assert isinstance(review, Review) and review.content == "客服回复请求过于频繁"


#: 2024-12-02 10:11:12 +08:00 as epoch seconds, the moment every row of the date-shape test below names.
_EPOCH_S = 1733105472


@pytest.mark.parametrize(
    "row",
    [
        _row(creationTime=_EPOCH_S * 1000),  # epoch ms as a JSON number
        _row(creationTime=str(_EPOCH_S * 1000)),  # ... as a digit string
        _row(creationTime=float(_EPOCH_S * 1000)),  # ... as a float, as some JSON encoders write a long
        _row(creationTime=_EPOCH_S),  # epoch seconds
        _row(creationTime=f" {_EPOCH_S} "),
        _row(creationTime=None, commentDate="2024-12-02 10:11:12"),  # a null creationTime beside the row's other key
        _row(creationTime="", commentDate=_EPOCH_S * 1000),
        {"commentId": "21739216801", "commentData": "不错", "commentScore": "5", "commentDate": _EPOCH_S * 1000},
        _row(creationTime="2024-12-02T02:11:12Z"),
    ],
    ids=[
        "ms-int",
        "ms-str",
        "ms-float",
        "s-int",
        "s-str-padded",
        "null-then-commentDate",
        "empty-then-ms",
        "lego-ms",
        "iso",
    ],
)
def test_every_date_shape_of_a_jd_row_gives_its_time(row: dict[str, object]) -> None:
    """A row's time as epoch ms or seconds (a number or a digit string), or a null ``creationTime`` beside a
    ``commentDate``, gave an empty ``created_at``: the review lost its time, and since an undated review never becomes
    the cursor, a product whose rows all came so kept its old cursor and was walked in full on every visit. Every shape
    now names the same moment."""
    (review,) = parse(
        "jd", TASK, SOURCE.first_request(TASK, BASE), json.dumps({"comments": [row], "maxPage": 1}).encode()
    ).items
    assert isinstance(review, Review) and review.id == "21739216801"
    assert review.created_at == "2024-12-02T10:11:12+08:00"


@pytest.mark.parametrize(
    "value",
    [0, -1, True, 12345, "1733105472000x", "99999999999999999999", {"t": 1}, [1733105472000], "NaN", float("inf")],
    ids=["zero", "negative", "bool", "too-small", "trailing-junk", "overflow", "object", "list", "nan-text", "inf"],
)
def test_a_jd_row_whose_time_is_garbage_is_kept_without_a_time(value: object) -> None:
    """A time we cannot read is no reason to drop the review: it is kept, undated."""
    body = json.dumps({"comments": [_row(creationTime=value)], "maxPage": 1}).encode()
    (review,) = parse("jd", TASK, SOURCE.first_request(TASK, BASE), body).items
    assert isinstance(review, Review) and review.content == "不错" and review.created_at == ""


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        ({"resultCode": 500, "resultMsg": "系统繁忙", "success": False}, ("Banned", "jd-system-busy")),
        ({"resultCode": "500", "resultMsg": "请求过于频繁", "success": False}, ("RateLimited", "jd-too-frequent")),
        ({"resultCode": -100, "resultMsg": "用户未登录", "success": False}, ("LoginRequired", "jd-not-login")),
        ({"resultCode": "-100", "success": False}, ("LoginRequired", "jd-not-login")),
    ],
    ids=["busy", "too-frequent", "not-logged-in", "not-logged-in-code-only"],
)
def test_a_gateway_answer_worded_in_result_code_and_result_msg_is_read(
    doc: dict[str, object], expected: tuple[str, str]
) -> None:
    """api.m.jd.com's services also answer ``{"resultCode": …, "resultMsg": …, "success": false}`` (a 2026 JD client's
    tests record ``resultCode`` -100 用户未登录 and 500 系统繁忙 from a real device). The message went unread there:
    系统繁忙 and a rate limit were the "blocked" login wall. The words count as in ``msg``; -100 is the gateway's
    not-logged-in, as code 3 is."""
    with pytest.raises(FetchError) as info:
        parse("jd", TASK, SOURCE.first_request(TASK, BASE), json.dumps(doc, ensure_ascii=False).encode())
    assert (info.value.outcome, info.value.error_class) == expected


@pytest.mark.parametrize(
    "doc",
    [
        {"code": "0", "disposal": {"evContent": '{"title":"请完成验证"}'}},
        {"code": "1", "echo": "refused", "disposal": {"evContent": "{}"}},
        {"success": False, "disposal": {"evApi": "x"}},
    ],
    ids=["code-0", "with-echo", "result-shape"],
)
def test_a_body_carrying_a_risk_disposal_is_a_ban(doc: dict[str, object]) -> None:
    """Risk control puts its verdict, a ``disposal`` (what to verify, and how), in the body as well as in the
    ``x-rp-content`` header (a 2026 JD client takes either, or code 605, for a captcha to pass). Without code 605 such a
    body was the "blocked" login wall (an account rested for a check a person must pass from this IP) or, with an
    ``echo``, our own malformed call."""
    with pytest.raises(FetchError) as info:
        parse("jd", TASK, SOURCE.first_request(TASK, BASE), json.dumps(doc, ensure_ascii=False).encode())
    assert (info.value.outcome, info.value.error_class) == ("Banned", "jd-risk-disposal")


@pytest.mark.parametrize(
    "doc",
    [
        {"code": "1", "echo": "pin is null"},
        {"code": "2", "echo": "用户未登录"},
        {"success": False, "message": "用户未登录"},
        {"success": False, "url": "https://passport.jd.com/new/login.aspx?ReturnUrl=https%3A%2F%2Fcart.jd.com%2F"},
    ],
    ids=["pin-is-null", "echo-words", "message-words", "passport-url"],
)
def test_an_answer_saying_there_is_no_login_is_a_login_wall_not_a_bad_request(doc: dict[str, object]) -> None:
    """JD's services say a call has no valid login in words as well as by the gateway's codes (3, -100): 未登录,
    "pin is null" (the cart's answer), or a ``url`` to the passport (a 2026 JD client reads all three so). With an
    ``echo`` and a code such an answer was taken for our own malformed call (ParseError ``jd-bad-request``), which no
    login mends."""
    with pytest.raises(FetchError) as info:
        parse("jd", TASK, SOURCE.first_request(TASK, BASE), json.dumps(doc, ensure_ascii=False).encode())
    assert (info.value.outcome, info.value.error_class) == ("LoginRequired", "jd-not-login")


@pytest.mark.parametrize("stray", ["AB", "ABC"], ids=["two", "three"])
def test_a_risk_header_with_stray_characters_past_its_json_still_names_code_605(stray: str) -> None:
    """The x-rp-content header's base64 may carry a few characters past its JSON (a 2026 JD client drops up to three
    before decoding). One was handled; two or three decoded to bytes after the JSON that made it unreadable, so a
    numeric code 605 was missed and an answer with comments under the risk verdict was used as it was."""
    header = "eyJjb2RlIjo2MDUsImRpc3Bvc2FsIjp7ImV2Q29udGVudCI6Int9In19" + stray  # {"code":605,"disposal":{...}}
    with pytest.raises(FetchError) as info:
        parse("jd", TASK, SOURCE.first_request(TASK, BASE), jd_comments(), headers={"x-rp-content": header})
    assert (info.value.outcome, info.value.error_class) == ("Banned", "jd-risk-605")


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        (
            {
                "code": "1",
                "echo": "bad",
                "url": "https://cfe.m.jd.com/privatedomain/risk_handler/?returnurl=https%3A%2F%2Fpassport.jd.com",
            },
            ("Banned", "jd-risk-redirect"),
        ),
        (
            {"code": "1", "echo": "bad", "url": "https://item.jd.com/1.html?returnurl=https%3A%2F%2Fpassport.jd.com"},
            ("ParseError", "jd-bad-request"),
        ),
        ({"success": False, "url": "https://plogin.m.jd.com/login/login?appid=300"}, ("LoginRequired", "jd-not-login")),
        ({"code": "1", "echo": "bad", "url": "https://passport.jd.com.example/x"}, ("ParseError", "jd-bad-request")),
    ],
    ids=["risk-page-returning-to-passport", "passport-in-query-only", "mobile-login", "lookalike-host"],
)
def test_a_url_in_the_body_is_read_by_its_host_and_a_refusal_page_first(
    doc: dict[str, object], expected: tuple[str, str]
) -> None:
    """A body's ``url`` is a login wall only when its host is a JD login page's: risk control's page names the passport
    in its own return address, and was read as "not logged in" (LoginRequired: a login does not pass risk control, and
    the host was never held off); it is the refusal page it names, Banned ``jd-risk-redirect``. A passport named only
    in a query, or a host that merely begins like it, says nothing of a login."""
    with pytest.raises(FetchError) as info:  # ParseError is a FetchError whose outcome is ParseError
        parse("jd", TASK, SOURCE.first_request(TASK, BASE), json.dumps(doc).encode())
    assert (info.value.outcome, info.value.error_class) == expected


@pytest.mark.parametrize("disposal", ["false", "", 0, [], {}], ids=["text", "empty-text", "zero", "list", "empty"])
def test_a_disposal_that_is_no_verdict_is_not_a_ban(disposal: object) -> None:
    """Only an object is risk control's verdict (what to verify, and how): ``"disposal":"false"`` was truthy and made
    our own malformed call a ban (the host held off, the account rested); it stays ``jd-bad-request``."""
    body = json.dumps({"code": "1", "echo": "bad", "disposal": disposal}).encode()
    with pytest.raises(ParseError) as info:
        parse("jd", TASK, SOURCE.first_request(TASK, BASE), body)
    assert info.value.error_class == "jd-bad-request"


def test_only_the_refused_item_query_makes_a_page_naming_jds_home_page_a_ban() -> None:
    """A page is read by the addresses in it: JD's home page is the refusal's landing only with the refused item's
    query (``from=pc_item…`` and ``reason=403``, or ``from=pc_item_sd``), however its script writes it (``&amp;``
    in an attribute, the parameters in any order); its plain address, another path or another ``from`` is no ban."""
    request = SOURCE.first_request(TASK, BASE)
    plain = (
        "<html><body><a href='//www.jd.com/'>京东</a><a href='https://www.jd.com/?from=pc_item_list'>x</a>"
        "<a href='https://www.jd.com/help?from=pc_item&reason=403'>y</a><a href='https://jd.com.cn/?from=pc_item_sd'>"
        "z</a></body></html>"
    )
    with pytest.raises(ParseError):
        parse("jd", TASK, request, plain.encode())
    sent = '<html><body><a href="https://www.jd.com/?reason=403&amp;from=pc_item">京东</a></body></html>'
    with pytest.raises(FetchError) as info:
        parse("jd", TASK, request, sent.encode())
    assert (info.value.outcome, info.value.error_class) == ("Banned", "jd-frequent-redirect")
