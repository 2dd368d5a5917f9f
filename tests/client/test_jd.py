"""jd: JSONP and plain (GBK) pages, int64/string ids, entities, maxPage paging, blocked answers."""

from __future__ import annotations

import pytest

from crawler_client.sources.jd import JdSource
from crawler_client.sources.samples import jd_comments
from icecrawler.errors import FetchError, ParseError
from icecrawler.models import Review
from tests.client._util import BASE, fixture, make_task, parse

SOURCE = JdSource()
TASK = make_task("jd", "100012043978")


def test_first_request_is_the_product_page_query() -> None:
    request = SOURCE.first_request(TASK, BASE)
    assert request.url == f"{BASE}/comment/productPageComments.action"
    assert request.params == {"callback": "fetchJSON_comment98", "productId": "100012043978", "score": "0",
                              "sortType": "6", "page": "0", "pageSize": "10", "isShadowSku": "0", "rid": "0",
                              "fold": "1"}
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
