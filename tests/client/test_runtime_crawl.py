"""The crawl loop as pure logic: a scripted source (with the real per-source cursor order) and a scripted
fetch. Covers the incremental stop (cursor, pinned posts excepted, page cap), long texts, re-login, and the
Report built for every outcome class."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import ClassVar

import pytest

from crawler_client.crawl import CrawlResult, crawl_task, fingerprint_result, item_time_ms
from crawler_client.sources._cursor import PostOrder, ReviewOrder
from crawler_client.sources.base import FetchedPage, Item, PageRequest, ParsedPage, Source
from icecrawler.errors import FetchError, ParseError
from icecrawler.models import MAX_DISCOVERED_IDS, Outcome, Post, Review, Task, TaskKind
from icecrawler.resume import is_gap

Step = list[Item] | Exception | ParsedPage
#: The fetch time of every scripted crawl (2030): after every item's time, so any item may become the cursor.
NOW_MS = 1_900_000_000_000


class ScriptedFetch:
    def __init__(self) -> None:
        self.requests_made = 0
        self.urls: list[str] = []

    def fetch(self, request: PageRequest) -> FetchedPage:
        self.requests_made += 1
        self.urls.append(f"{request.url}#{request.page}")
        return FetchedPage(url=request.url, status=200, headers={}, body=b"", final_url=request.url)


class ScriptedSource:
    """Page n (1-based) answers ``pages[n-1]``: items (next page follows if one exists), an exception, or a
    ready ParsedPage."""

    name: ClassVar[str] = "scripted"
    kinds: ClassVar[frozenset[TaskKind]] = frozenset(TaskKind)
    default_headers: ClassVar[dict[str, str]] = {}

    def __init__(self, pages: list[Step]) -> None:
        self.pages = pages
        self.parsed: list[int] = []

    def first_request(self, task: Task, base_url: str) -> PageRequest:
        return PageRequest(url=f"{base_url}/list", page=1)

    def parse(self, task: Task, request: PageRequest, page: FetchedPage, now_ms: int) -> ParsedPage:
        self.parsed.append(request.page)
        step = self.pages[request.page - 1]
        if isinstance(step, Exception):
            raise step
        if isinstance(step, ParsedPage):
            return step
        more = request.page < len(self.pages)
        return ParsedPage(
            items=list(step), next_request=PageRequest(url=request.url, page=request.page + 1) if more else None
        )


class PostSource(PostOrder, ScriptedSource):
    pass


class ReviewSource(ReviewOrder, ScriptedSource):
    pass


class LongTextPostSource(PostSource):
    def extend_request(self, base_url: str, post_id: int | str) -> PageRequest:
        return PageRequest(url=f"{base_url}/extend/{post_id}", page=99)

    def parse_extend(self, request: PageRequest, page: FetchedPage, now_ms: int) -> str:
        return "<p>the whole long text</p>"

    def with_long_text(self, post: Post, html: str) -> Post:
        post.html, post.text = html, "the whole long text"
        return post


def post(pid: int, *, pinned: bool = False, minute: int = 0) -> Post:
    return Post(id=pid, user_id=7, text=f"post {pid}", created_at=f"2024-05-01T12:{minute:02d}:00+08:00", pinned=pinned)


def review(rid: str, when: str) -> Review:
    return Review(id=rid, product_id="p1", content=f"review {rid}", created_at=when)


def task(kind: TaskKind = TaskKind.WeiboUser, cursor: str = "") -> Task:
    return Task(
        id=f"{kind.value}:weibo_mobile:7",
        kind=kind,
        source="weibo_mobile",
        target="7",
        lease_token="tok",
        cursor=cursor,
    )


def fingerprint_recorder() -> tuple[Callable[[Iterable[str]], int], list[list[str]]]:
    calls: list[list[str]] = []

    def fingerprint(texts: Iterable[str]) -> int:
        calls.append(list(texts))
        return 0xDEADBEEF

    return fingerprint, calls


def run(
    source: Source,
    the_task: Task,
    *,
    max_pages: int = 10,
    relogin: Callable[[], None] | None = None,
    cancelled: Callable[[], bool] = lambda: False,
) -> tuple[CrawlResult, ScriptedFetch, list[list[str]]]:
    fetch = ScriptedFetch()
    fingerprint, calls = fingerprint_recorder()
    result = crawl_task(
        the_task,
        source,
        fetch,
        base_url="http://site",
        max_pages=max_pages,
        now_ms=lambda: NOW_MS,
        cancelled=cancelled,
        relogin=relogin,
    )
    fingerprint_result(result, fingerprint)
    return result, fetch, calls


# --- incremental stop -----------------------------------------------------------------------------------------


def test_first_crawl_walks_every_page_and_everything_is_new() -> None:
    source = PostSource([[post(30, minute=30), post(29)], [post(28), post(27)], [post(26)]])
    result, _, calls = run(source, task())
    report = result.report
    assert source.parsed == [1, 2, 3]
    assert [p.id for p in result.posts] == [30, 29, 28, 27, 26]
    assert (report.outcome, report.new_items, report.window_items, report.cursor) == (Outcome.Ok, 5, 5, "30")
    assert report.fingerprint == 0xDEADBEEF and report.fetches == 3 and report.http_status == 200
    assert report.newest_item_ms == item_time_ms(post(30, minute=30))
    # the five new items' times, newest first, for the revisit policy's forecasts
    assert report.new_item_times_ms == tuple(sorted((item_time_ms(p) for p in result.posts), reverse=True))
    assert len(report.new_item_times_ms) == 5 and report.new_item_times_ms[0] == report.newest_item_ms
    assert calls == [["post 30", "post 29", "post 28", "post 27", "post 26"]]  # item texts, not page chrome


def test_stops_after_the_page_holding_the_cursor() -> None:
    source = PostSource([[post(30), post(29)], [post(28), post(27)], [post(26)]])
    result, _, calls = run(source, task(cursor="28"))
    assert source.parsed == [1, 2]  # page 3 never fetched
    assert [p.id for p in result.posts] == [30, 29]
    assert (result.report.new_items, result.report.window_items, result.report.cursor) == (2, 4, "30")
    assert calls == [["post 30", "post 29", "post 28", "post 27"]]


def test_nothing_new_keeps_the_cursor_and_still_fingerprints_the_window() -> None:
    source = PostSource([[post(30), post(29)], [post(28)]])
    result, _, _ = run(source, task(cursor="30"))
    assert source.parsed == [1]
    assert result.posts == []
    assert (result.report.new_items, result.report.window_items, result.report.cursor) == (0, 2, "30")
    assert result.report.fingerprint == 0xDEADBEEF


def test_pinned_old_post_neither_stops_the_crawl_nor_counts_as_new_nor_becomes_the_cursor() -> None:
    source = PostSource([[post(5, pinned=True), post(30), post(29)], [post(28), post(27)]])
    result, _, _ = run(source, task(cursor="27"))
    assert source.parsed == [1, 2]
    assert [p.id for p in result.posts] == [30, 29, 28]
    assert result.report.cursor == "30"
    assert result.report.window_items == 5


def test_new_pinned_post_is_stored() -> None:
    source = PostSource([[post(40, pinned=True), post(30)], [post(29)]])
    result, _, _ = run(source, task(cursor="30"))
    assert [p.id for p in result.posts] == [40]
    assert result.report.cursor == "40"  # the newest post, pinned or not: known at the next visit


def test_a_new_pinned_post_is_new_once_not_at_every_visit() -> None:
    """An account that pins the post it has just published: the pinned post is new at the first visit after it, and
    known at the next ones (it was reported new at every visit while the account posted nothing else)."""
    pages: list[Step] = [[post(40, pinned=True), post(30)], [post(29)]]
    first, _, _ = run(PostSource(pages), task(cursor="30"))
    assert [p.id for p in first.posts] == [40] and first.report.new_items == 1
    second, _, _ = run(PostSource(pages), task(cursor=first.report.cursor))
    assert second.posts == [] and second.report.new_items == 0
    assert second.report.cursor == first.report.cursor


def test_page_cap_ends_a_long_first_crawl() -> None:
    source = PostSource([[post(100 - n)] for n in range(8)])
    result, fetch, _ = run(source, task(), max_pages=3)
    assert source.parsed == [1, 2, 3]
    assert fetch.requests_made == 3
    assert result.report.outcome is Outcome.Ok and result.report.new_items == 3


def test_items_repeated_across_shifting_pages_are_counted_once() -> None:
    source = PostSource([[post(30), post(29)], [post(29), post(28)]])
    result, _, _ = run(source, task())
    assert [p.id for p in result.posts] == [30, 29, 28]
    assert result.report.window_items == 3


def test_review_cursor_stop_uses_time_then_id() -> None:
    source = ReviewSource(
        [
            [review("c", "2024-05-03T10:00:00+08:00"), review("b", "2024-05-02T10:00:00+08:00")],
            [review("a", "2024-05-01T10:00:00+08:00")],
        ]
    )
    result, _, _ = run(source, task(TaskKind.ProductReviews, cursor="2024-05-02T10:00:00+08:00|b"))
    assert source.parsed == [1]
    assert [r.id for r in result.reviews] == ["c"]
    assert result.report.cursor == "2024-05-03T10:00:00+08:00|c"


def test_a_window_dated_before_1970_makes_a_report_the_scheduler_takes() -> None:
    """The newest item's time went into the report as it was, negative for a window dated before 1970 (a site's
    placeholder date), and the scheduler refuses a negative ``newestItemMs``: the Ok report was dropped as malformed
    at every visit, so the task's lease expired each time and its cursor never moved. An unknown time is 0."""
    from scheduler_server.checks import check_report

    source = ReviewSource([[review("b", "1969-12-31T10:00:00+08:00"), review("a", "1900-01-01T00:00:00+08:00")]])
    jd_task = Task(id="reviews:jd:p1", kind=TaskKind.ProductReviews, source="jd", target="p1", lease_token="tok")
    result, _, _ = run(source, jd_task)
    assert (result.report.outcome, result.report.new_items, result.report.newest_item_ms) == (Outcome.Ok, 2, 0)
    assert result.report.new_item_times_ms == ()
    check_report(result.report, 0)


def test_listing_puts_its_ids_in_the_report_and_keeps_no_cursor() -> None:
    source = PostSource([["101", "102"], ["103"]])
    result, _, _ = run(source, task(TaskKind.Listing))
    assert result.report.discovered_ids == ("101", "102", "103")
    assert result.posts == [] and result.reviews == [] and result.record_count == 0
    assert (result.report.new_items, result.report.window_items, result.report.cursor) == (3, 3, "")


def test_a_listing_id_the_scheduler_would_refuse_is_dropped_alone(caplog: pytest.LogCaptureFixture) -> None:
    listing = Task(id="listing:ecshop:3", kind=TaskKind.Listing, source="ecshop", target="3", lease_token="tok")
    source = PostSource([["101", "a b", "x" * 65, "102"]])
    result, _, _ = run(source, listing)
    assert result.report.discovered_ids == ("101", "102")
    assert "2 discovered id(s) dropped" in caplog.text and "'a b'" in caplog.text


def test_a_listing_walk_stops_at_the_ids_one_report_carries_and_resumes_next_visit() -> None:
    pages: list[list[Item]] = [[f"{page}{n:03d}" for n in range(600)] for page in range(1, 5)]
    source = PostSource([*pages])
    result, _, _ = run(source, task(TaskKind.Listing), max_pages=10)
    assert source.parsed == [1, 2]  # 1200 ids after page 2: the report is full
    assert result.report.discovered_ids == tuple(pages[0] + pages[1][:400])
    assert len(result.report.discovered_ids) == MAX_DISCOVERED_IDS
    assert is_gap(result.report.cursor)  # the next visit resumes at page 2, so its other 200 ids come again


def test_long_texts_are_fetched_for_new_truncated_posts_only() -> None:
    page1 = ParsedPage(
        items=[post(30), post(29)],
        next_request=PageRequest(url="http://site/list", page=2),
        info={"long_text_ids": "30,29"},
    )
    source = LongTextPostSource([page1, [post(28)]])
    result, fetch, calls = run(source, task(cursor="29"))
    assert fetch.urls == ["http://site/list#1", "http://site/extend/30#99"]
    assert result.posts[0].text == "the whole long text"
    assert result.report.fetches == 2
    assert calls[0][0] == "the whole long text"


def test_an_old_pinned_long_post_gets_no_long_text_call() -> None:
    """m.weibo.cn's pinned post is often a long one (``isLongText`` on the old 置顶 post of a real getIndex page): it
    is on top at every visit and never new, so its full text must not be asked for again each time (a wasted call,
    and one whose refusal would fail the crawl of a timeline with nothing new)."""
    page1 = ParsedPage(
        items=[post(5, pinned=True), post(30), post(29)],
        next_request=PageRequest(url="http://site/list", page=2),
        info={"long_text_ids": "5,30"},
    )
    result, fetch, _ = run(LongTextPostSource([page1, [post(28)]]), task(cursor="29"))
    assert fetch.urls == ["http://site/list#1", "http://site/extend/30#99"]  # none for pinned post 5
    assert [(p.id, p.text) for p in result.posts] == [(30, "the whole long text")]


class RefusedLongTextSource(LongTextPostSource):
    """The long-text answer of post 30 is ``refusal``; the others are whole."""

    def __init__(self, pages: list[Step], refusal: FetchError) -> None:
        super().__init__(pages)
        self.refusal = refusal

    def parse_extend(self, request: PageRequest, page: FetchedPage, now_ms: int) -> str:
        if request.url.endswith("/30"):
            raise self.refusal
        return super().parse_extend(request, page, now_ms)


def test_a_post_whose_long_text_is_gone_keeps_its_truncated_text_and_the_crawl_succeeds() -> None:
    """A post deleted between the timeline page and its long-text call (NotFound) must not fail the crawl: it
    would fail on every visit, and the timeline's new posts with it."""
    page1 = ParsedPage(items=[post(30), post(29)], info={"long_text_ids": "30,29"})
    gone = FetchError("ok:0 '该微博不存在'", outcome=Outcome.NotFound, error_class="long-text-gone")
    result, fetch, _ = run(RefusedLongTextSource([page1], gone), task())
    assert result.report.outcome is Outcome.Ok and result.report.new_items == 2
    assert [p.text for p in result.posts] == ["post 30", "the whole long text"]
    assert fetch.urls[1:] == ["http://site/extend/30#99", "http://site/extend/29#99"]


@pytest.mark.parametrize(
    "refusal",
    [
        FetchError("limit", outcome=Outcome.RateLimited, error_class="too-frequent"),
        FetchError("wall", outcome=Outcome.LoginRequired, error_class="login-wall"),
        FetchError("ban", outcome=Outcome.Banned, error_class="http-418"),
        ParseError("an answer we cannot read", error_class="unexpected-format"),
        FetchError("HTTP 404", outcome=Outcome.NotFound, error_class="http-404"),  # a moved endpoint, not a post
    ],
)
def test_a_refused_long_text_call_still_fails_the_crawl(refusal: FetchError) -> None:
    """Only NotFound is the post's own matter; a limit, a wall, a ban or an unreadable answer is the session's or
    the site's, and fails the crawl with the cursor kept."""
    page1 = ParsedPage(items=[post(30), post(29)], info={"long_text_ids": "30,29"})
    result, _, _ = run(RefusedLongTextSource([page1], refusal), task(cursor="28"))
    assert result.report.outcome is refusal.outcome and result.report.cursor == "28"


# --- outcomes -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("outcome", [o for o in Outcome if o is not Outcome.Ok])
def test_every_failure_outcome_becomes_a_classified_report_with_the_old_cursor(outcome: Outcome) -> None:
    error = FetchError(
        "site said no", outcome=outcome, http_status=418, error_class=f"cls-{outcome.value}", retry_after_s=30.0
    )
    result, _, _ = run(PostSource([error]), task(cursor="12"))
    report = result.report
    assert report.outcome is outcome
    assert (report.http_status, report.error_class, report.retry_after_s) == (418, f"cls-{outcome.value}", 30.0)
    assert (report.cursor, report.new_items, report.window_items, report.fingerprint) == ("12", 0, 0, 0)
    assert report.fetches == 1 and report.task_id == "user:weibo_mobile:7" and report.lease_token == "tok"
    assert not result.aborted


def test_parse_error_class_is_kept() -> None:
    result, _, _ = run(PostSource([ParseError("garbage", error_class="bad-json", http_status=200)]), task())
    assert (result.report.outcome, result.report.error_class) == (Outcome.ParseError, "bad-json")


def test_ban_in_the_middle_keeps_earlier_items_for_storage_but_not_the_cursor() -> None:
    ban = FetchError("teapot", outcome=Outcome.Banned, http_status=418, error_class="http-418")
    result, _, _ = run(PostSource([[post(30), post(29)], ban]), task(cursor="10"))
    assert result.report.outcome is Outcome.Banned and result.report.cursor == "10"
    assert [p.id for p in result.posts] == [30, 29]  # stored idempotently; the next crawl sees them again
    assert result.report.fetches == 2


def test_fetch_failure_is_reported_with_its_class() -> None:
    class TimingOut(ScriptedFetch):
        def fetch(self, request: PageRequest) -> FetchedPage:
            self.requests_made += 3
            raise FetchError("slow", outcome=Outcome.Timeout, error_class="ReadTimeout")

    result = crawl_task(
        task(), PostSource([[post(1)]]), TimingOut(), base_url="http://site", max_pages=5, now_ms=lambda: 0
    )
    assert (result.report.outcome, result.report.error_class, result.report.fetches) == (
        Outcome.Timeout,
        "ReadTimeout",
        3,
    )


def test_a_bug_in_a_source_is_a_parse_error_report_not_a_crash() -> None:
    result, _, _ = run(PostSource([KeyError("cards")]), task())
    assert result.report.outcome is Outcome.ParseError
    assert result.report.error_class == "source-bug:KeyError"


def test_an_outcome_that_is_not_the_enum_is_refused_where_the_error_is_made() -> None:
    with pytest.raises(TypeError, match="Gremlins"):
        FetchError("odd", outcome="Gremlins")  # type: ignore[arg-type]


def test_cancelled_crawl_is_aborted_so_its_lease_is_given_back() -> None:
    result, fetch, _ = run(PostSource([[post(1)]]), task(), cancelled=lambda: True)
    assert result.aborted and fetch.requests_made == 0


# --- login ----------------------------------------------------------------------------------------------------


def login_wall() -> FetchError:
    return FetchError("login form", outcome=Outcome.LoginRequired, error_class="login-form")


def test_login_wall_logs_in_once_and_retries_the_page() -> None:
    logins: list[int] = []
    source = PostSource([login_wall(), [post(2)]])
    source.pages = [login_wall(), [post(2)]]
    state = {"walled": True}

    def parse(task: Task, request: PageRequest, page: FetchedPage, now_ms: int) -> ParsedPage:
        if state["walled"]:
            raise login_wall()
        return ParsedPage(items=[post(2)])

    source.parse = parse  # type: ignore[method-assign]

    def relogin() -> None:
        logins.append(1)
        state["walled"] = False

    result, fetch, _ = run(source, task(), relogin=relogin)
    assert logins == [1]
    assert result.report.outcome is Outcome.Ok and [p.id for p in result.posts] == [2]
    assert fetch.requests_made == 2


def test_second_login_wall_reports_login_required() -> None:
    logins: list[int] = []
    result, _, _ = run(PostSource([login_wall(), login_wall()]), task(), relogin=lambda: logins.append(1))
    assert logins == [1]
    assert (result.report.outcome, result.report.error_class) == (Outcome.LoginRequired, "login-form")


def test_failed_login_reports_its_own_class() -> None:
    def relogin() -> None:
        raise FetchError("bad password", outcome=Outcome.LoginRequired, error_class="login-failed")

    result, _, _ = run(PostSource([login_wall()]), task(), relogin=relogin)
    assert (result.report.outcome, result.report.error_class) == (Outcome.LoginRequired, "login-failed")


def test_fingerprint_is_deferred_and_computed_once_from_the_window_texts() -> None:
    source = PostSource([[post(2), post(1)]])
    fingerprint, calls = fingerprint_recorder()
    result = crawl_task(task(), source, ScriptedFetch(), base_url="http://site", max_pages=5, now_ms=lambda: 0)
    assert result.report.fingerprint == 0 and result.window_texts == ["post 2", "post 1"]
    fingerprint_result(result, fingerprint)
    fingerprint_result(result, fingerprint)
    assert result.report.fingerprint == 0xDEADBEEF and calls == [["post 2", "post 1"]]


def test_item_time_parsing() -> None:
    assert item_time_ms(review("x", "2024-05-01 12:00:00")) == item_time_ms(review("y", "2024-05-01T12:00:00+08:00"))
    assert item_time_ms(review("x", "not a date")) == 0
    assert item_time_ms("123") == 0
