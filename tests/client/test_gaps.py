"""Page-cap gaps as pure logic: a scripted site that keeps publishing between visits, walked by the real
``crawl_task`` with the real cursor orders. A crawl that hits the page cap before its cursor keeps a resume point
in the cursor, the next visits close the gap, and every published item is fetched, none skipped."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import pytest

from crawler_client import gaps
from crawler_client.crawl import CrawlResult, crawl_task
from crawler_client.sources._cursor import PostOrder, ReviewOrder
from crawler_client.sources.base import FetchedPage, PageRequest, ParsedPage
from icecrawler.models import Post, Review, Task, TaskKind
from icecrawler.resume import decode_cursor, describe, is_gap

#: 2024-05-01T12:00:00+08:00 in epoch ms: the sites' clock.
T0_MS = 1_714_536_000_000


class LiveSite:
    """A newest-first list with ``page_size`` items a page; ``publish`` adds newer items; ``delete`` removes."""

    name: ClassVar[str] = "live"
    kinds: ClassVar[frozenset[TaskKind]] = frozenset(TaskKind)
    default_headers: ClassVar[dict[str, str]] = {}

    def __init__(self, page_size: int = 10) -> None:
        self.page_size = page_size
        self.items: list[Post | Review | str] = []  # newest first
        self.serial = 0
        self.fetched_pages: list[int] = []

    def make(self, serial: int) -> Post | Review | str:
        raise NotImplementedError

    def publish(self, count: int) -> None:
        for _ in range(count):
            self.serial += 1
            self.items.insert(0, self.make(self.serial))

    def first_request(self, task: Task, base_url: str) -> PageRequest:
        return PageRequest(url=f"{base_url}/list", params={"page": "1"}, page=1)

    def parse(self, task: Task, request: PageRequest, page: FetchedPage, now_ms: int) -> ParsedPage:
        number = int(request.params["page"])
        self.fetched_pages.append(number)
        start = (number - 1) * self.page_size
        items = self.items[start : start + self.page_size]
        more = start + self.page_size < len(self.items)
        nxt = PageRequest(url=request.url, params={"page": str(number + 1)}, page=request.page + 1) if more else None
        return ParsedPage(items=list(items), next_request=nxt)


class PostSite(PostOrder, LiveSite):
    def make(self, serial: int) -> Post | Review:
        return Post(
            id=1000 + serial,
            user_id=7,
            text=f"post {serial}",
            created_at=f"2024-05-01T{serial // 60 % 24:02d}:{serial % 60:02d}:00+08:00",
        )


class ReviewSite(ReviewOrder, LiveSite):
    def make(self, serial: int) -> Post | Review:
        clock = f"{serial // 3600 % 24:02d}:{serial // 60 % 60:02d}:{serial % 60:02d}"
        return Review(
            id=f"r{serial}", product_id="p1", content=f"review {serial}", created_at=f"2024-05-01T{clock}+08:00"
        )


class ListingSite(PostOrder, LiveSite):
    """A category page: product ids, no order."""

    def make(self, serial: int) -> Post | Review | str:
        return str(5000 + serial)


def key(item: Post | Review | str) -> str:
    return item if isinstance(item, str) else str(item.id)


class Fetch:
    def __init__(self) -> None:
        self.requests_made = 0

    def fetch(self, request: PageRequest) -> FetchedPage:
        self.requests_made += 1
        return FetchedPage(url=request.url, status=200, headers={}, body=b"")


Site = PostSite | ReviewSite | ListingSite


def visit(
    site: Site, cursor: str, *, max_pages: int = 3, now_ms: int = T0_MS + 10**9, kind: TaskKind = TaskKind.WeiboUser
) -> CrawlResult:
    task = Task(
        id=f"{kind.value}:weibo_mobile:7", kind=kind, source="weibo_mobile", target="7", lease_token="t", cursor=cursor
    )
    return crawl_task(task, site, Fetch(), base_url="http://site", max_pages=max_pages, now_ms=lambda: now_ms)


def ids(result: CrawlResult) -> list[str]:
    return [str(post.id) for post in result.posts] + [review.id for review in result.reviews]


def crawl_until_caught_up(
    site: Site, cursor: str, *, between: Callable[[int], None] = lambda _: None, max_pages: int = 3, limit: int = 50
) -> tuple[list[str], list[CrawlResult]]:
    """Visit until the cursor holds no gap; returns every stored id (repeats included) and the results."""
    stored: list[str] = []
    results: list[CrawlResult] = []
    for n in range(limit):
        result = visit(site, cursor, max_pages=max_pages)
        results.append(result)
        stored.extend(ids(result))
        cursor = result.report.cursor
        if not is_gap(cursor):
            return stored, results
        between(n)
    raise AssertionError(f"gap still open after {limit} visits: {describe(cursor)}")


@pytest.mark.parametrize("site_type", [PostSite, ReviewSite])
def test_a_burst_longer_than_the_page_cap_is_fetched_over_several_visits_none_skipped(site_type: type[Site]) -> None:
    site = site_type()
    site.publish(15)
    first = visit(site, "")
    assert not is_gap(first.report.cursor) and len(ids(first)) == 15
    site.publish(125)  # 12.5 pages between two visits, the cap is 3
    stored, results = crawl_until_caught_up(site, first.report.cursor, between=lambda _: site.publish(4))
    results.append(visit(site, results[-1].report.cursor))  # what was published above the gap meanwhile
    stored.extend(ids(results[-1]))
    published = {key(item) for item in site.items}
    assert set(ids(first)) | set(stored) == published  # nothing skipped
    assert len(results) > 3 and all(is_gap(r.report.cursor) for r in results[:-2])
    # The new-item counts add up to what was published after the first visit (the resumed page's overlap is
    # stored again, harmlessly, but not counted twice).
    assert sum(r.report.new_items for r in results) == len(published) - 15


def test_the_cursor_stays_put_while_a_gap_is_open_and_moves_to_the_newest_item_once_closed() -> None:
    site = PostSite()
    site.publish(5)
    cursor = visit(site, "").report.cursor
    assert cursor == "1005"
    site.publish(60)
    opened = visit(site, cursor).report.cursor
    base, gap = decode_cursor(opened)
    assert base == "1005" and gap is not None and gap.top == "1065" and gap.low == "1036"
    assert gap.request["page"] == 3 and gap.request["url"] == "/list"  # the last page fetched, relative URL
    info = describe(opened)
    assert info is not None and info["since_cursor"] == "1005" and info["visits"] == 1
    second = visit(site, opened)
    assert site.fetched_pages[-3:] == [3, 4, 5]
    assert decode_cursor(second.report.cursor)[1] is not None
    closed = visit(site, visit(site, second.report.cursor).report.cursor).report.cursor
    assert closed == "1065"


def test_items_published_while_the_gap_closes_are_fetched_after_it() -> None:
    site = ReviewSite()
    site.publish(3)
    cursor = visit(site, "").report.cursor
    site.publish(40)
    stored, results = crawl_until_caught_up(site, cursor, between=lambda _: site.publish(12))
    site.publish(2)
    more, _ = crawl_until_caught_up(site, results[-1].report.cursor)  # above the closed gap: maybe a new gap
    assert {key(item) for item in site.items} - {"r1", "r2", "r3"} == set(stored) | set(more)


def test_a_first_crawl_capped_fetches_the_whole_history_over_several_visits() -> None:
    site = PostSite()
    site.publish(100)
    result = visit(site, "")
    base, gap = decode_cursor(result.report.cursor)
    assert base == "" and gap is not None and gap.top == "1100" and len(ids(result)) == 30
    stored, results = crawl_until_caught_up(site, result.report.cursor)
    assert set(ids(result)) | set(stored) == {str(1000 + n) for n in range(1, 101)}
    assert results[-1].report.cursor == "1100"


def test_a_cap_of_one_page_still_makes_progress() -> None:
    site = PostSite()
    site.publish(3)
    cursor = visit(site, "").report.cursor
    site.publish(50)
    stored, results = crawl_until_caught_up(site, cursor, max_pages=1)
    assert set(stored) == {str(1000 + n) for n in range(4, 54)} and len(results) <= 6


def test_a_page_fetched_again_after_items_moved_down_is_not_counted_twice() -> None:
    site = PostSite()
    site.publish(2)
    cursor = visit(site, "").report.cursor
    site.publish(40)
    opened = visit(site, cursor)
    assert opened.report.new_items == 30
    site.publish(5)  # pushes everything down half a page: the resumed page starts with items fetched already
    second = visit(site, opened.report.cursor)
    assert second.report.new_items == 10  # the 10 items of 1012..1003 not fetched before, and only those
    assert {int(i) for i in ids(second)} >= set(range(1003, 1013))
    assert not is_gap(second.report.cursor) and second.report.cursor == "1042"


def test_a_future_dated_review_never_moves_the_cursor_past_the_fetch_time() -> None:
    site = ReviewSite()
    site.publish(5)
    site.items.insert(0, Review(id="future", product_id="p1", created_at="2031-01-01T00:00:00+08:00"))
    now = T0_MS + 3600_000
    result = visit(site, "", now_ms=now, kind=TaskKind.ProductReviews)
    assert result.report.cursor == "2024-05-01T00:00:05+08:00|r5"
    assert "future" in ids(result)  # still stored
    site.publish(3)
    later = visit(site, result.report.cursor, now_ms=now, kind=TaskKind.ProductReviews)
    assert {"r6", "r7", "r8"} <= set(ids(later))  # an older item than the future one is not "seen"


def test_an_unreadable_gap_cursor_restarts_from_the_top_rather_than_skipping() -> None:
    site = PostSite()
    site.publish(12)
    result = visit(site, "gap1:{not json")
    assert site.fetched_pages[0] == 1 and len(ids(result)) == 12 and not is_gap(result.report.cursor)


@pytest.mark.parametrize(
    "cursor",
    [
        'gap1:{"base":"1","top":"2","visits":Infinity}',
        'gap1:{"base":"1","top":"2","visits":-1e999}',
        'gap1:{"base":"1","top":"2","req":{"page":NaN}}',  # the walk cannot page by it
        'gap1:{"base":"1","top":"2","req":{"url":"/c","page":1e999}}',
        "gap1:" + "[" * 4000,
        'gap1:{"base":"1","top":"2","req":' + "[" * 3000 + "}",
    ],
)
def test_a_gap_cursor_json_cannot_hold_is_unreadable_not_a_crash(cursor: str) -> None:
    assert decode_cursor(cursor) == ("", None)
    assert describe(cursor) is None


@pytest.mark.parametrize("request_json", ['{"page":"x"}', '{"url":"/c","params":[1]}', '{"headers":"ab"}'])
def test_a_resume_request_that_cannot_be_rebuilt_restarts_from_the_top(request_json: str) -> None:
    site = PostSite()
    site.publish(12)
    result = visit(site, 'gap1:{"base":"","top":"","req":' + request_json + "}")
    assert site.fetched_pages[0] == 1 and len(ids(result)) == 12 and not is_gap(result.report.cursor)


def test_request_round_trip_keeps_every_field_and_a_relative_url() -> None:
    request = PageRequest(
        url="http://site/api/x",
        params={"since_id": "42"},
        method="POST",
        data={"a": "1"},
        headers={"X": "y"},
        page=4,
        state={"chunk": "2"},
        cookie_headers={"X-XSRF-TOKEN": "XSRF-TOKEN"},
    )
    data = gaps.request_to_dict(request, "http://site/")
    assert data["url"] == "/api/x"
    assert gaps.request_from_dict(data, "http://other") == PageRequest(
        url="http://other/api/x",
        params={"since_id": "42"},
        method="POST",
        data={"a": "1"},
        headers={"X": "y"},
        page=4,
        state={"chunk": "2"},
        cookie_headers={"X-XSRF-TOKEN": "XSRF-TOKEN"},
    )


def test_a_listing_longer_than_the_cap_is_walked_over_several_visits_then_from_the_top_again() -> None:
    site = ListingSite()
    site.publish(70)
    seen: set[str] = set()
    cursor = ""
    for _ in range(5):
        result = visit(site, cursor, kind=TaskKind.Listing)
        seen.update(result.report.discovered_ids)
        cursor = result.report.cursor
        if not is_gap(cursor):
            break
    assert cursor == "" and site.fetched_pages == [1, 2, 3, 3, 4, 5, 5, 6, 7]
    assert seen == {key(item) for item in site.items}  # every product id, though 7 pages > the cap of 3
    visit(site, cursor, kind=TaskKind.Listing)
    assert site.fetched_pages[-3:] == [1, 2, 3]  # the next round starts from the top
