"""Crawl one task with its Source, and turn whatever happened into a Report (after the fetch, outcomes are
data: CONTRIBUTING.md, code layout). Nothing here does I/O itself: the page fetch is injected, so the
incremental stop, the page walking and the outcome → report mapping are unit-tested with a scripted source and no
network.

The walk, newest first:

1. ``source.first_request(task, base_url)``; then follow ``ParsedPage.next_request`` while pages remain.
2. Stop after the page that holds an item the task already has: ``source.is_older_or_equal(item, cursor)``
   (pinned posts are never "older", so a pinned old post on page 1 does not end the crawl early), or at the
   page cap ``client.max_pages`` (``PageRequest.page`` counts pages; a hard cap on requests bounds sources
   that fetch several chunks per page). A walk stopped by the cap keeps a resume point in the task's cursor
   and the next visits continue from it until they reach the old cursor (``crawler_client.gaps``).
3. The *window* is every distinct item of the crawled pages (new or not): its texts, never the page chrome,
   are what SHHD fingerprints (``CrawlResult.window_texts``). *New* items are those not at/behind the cursor
   (all of them on a first crawl); only they are stored.
4. Success → ``Report(outcome=Ok, new_items, window_items, newest_item_ms, cursor=new or gap cursor)``, and a
   listing's new product ids in ``Report.discovered_ids`` (the scheduler adds them with the report; a walk stops
   at ``MAX_DISCOVERED_IDS`` of them like at the page cap); the fingerprint
   is filled in by ``fingerprint_result`` off the fetching thread (the sink does it), so a worker starts its next
   fetch while the CPU-bound jieba + simhash work runs.
   Any ``FetchError``/``ParseError`` → a Report with that outcome, its HTTP status, error class and
   Retry-After, and the *old* cursor: the next visit re-crawls from where the last good one ended. Items
   collected before a mid-crawl failure are still kept for storage (the store is idempotent by row key).
   An unexpected exception inside a source is a bug, but it must not kill the worker: it becomes ParseError
   with ``error_class = "source-bug:<ExceptionType>"`` and is logged with its traceback.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Protocol, runtime_checkable

from crawler_client import gaps
from crawler_client.sources.base import LONG_TEXT_GONE, FetchedPage, Item, PageRequest, ParsedPage, Source
from icecrawler.clock import BEIJING
from icecrawler.errors import FetchError, quote
from icecrawler.models import (
    MAX_DISCOVERED_IDS,
    MAX_ITEM_TIMES,
    Outcome,
    Post,
    Report,
    Review,
    Task,
    TaskKind,
    valid_target,
)

__all__ = [
    "CrawlResult",
    "LongTextSource",
    "PageFetch",
    "crawl_task",
    "error_report",
    "failure_report",
    "fingerprint_result",
    "item_key",
    "item_text",
    "item_time_ms",
    "success_report",
]

log = logging.getLogger(__name__)

#: Requests per crawled page at most (Weibo PC delivers one page in 3 chunks; long texts add a few).
REQUESTS_PER_PAGE_BOUND = 4


@runtime_checkable
class LongTextSource(Protocol):
    """Sources whose list pages truncate long posts: they name the ids in ``ParsedPage.info["long_text_ids"]``
    (comma separated) and say how to fetch and apply the full text."""

    def extend_request(self, base_url: str, post_id: int | str) -> PageRequest: ...

    def parse_extend(self, request: PageRequest, page: FetchedPage, now_ms: int) -> str: ...

    def with_long_text(self, post: Post, html: str) -> Post: ...


class PageFetch(Protocol):
    """Fetches one page (I/O). ``requests_made`` counts HTTP requests, retries and logins included."""

    requests_made: int

    def fetch(self, request: PageRequest) -> FetchedPage: ...


@dataclass
class CrawlResult:
    """What one crawl produced: the report to send, once the records are durably stored."""

    task: Task
    report: Report
    posts: list[Post] = field(default_factory=list)
    reviews: list[Review] = field(default_factory=list)
    #: The crawl was interrupted (shutdown, lease running out): give the lease back instead of reporting.
    aborted: bool = False
    #: Texts of the crawled item window, for ``fingerprint_result`` (empty once fingerprinted).
    window_texts: list[str] = field(default_factory=list)

    @property
    def record_count(self) -> int:
        """Records waiting for storage (a listing's discoveries travel in the report: ``report.discovered_ids``)."""
        return len(self.posts) + len(self.reviews)


# --- item helpers -------------------------------------------------------------------------------------------


def item_key(item: Item) -> str:
    """A stable identity for de-duplicating the window (pages can shift while we walk them)."""
    if isinstance(item, Post):
        return f"post:{item.id}"
    if isinstance(item, Review):
        return f"review:{item.id}"
    return f"id:{item}"


def item_text(item: Item) -> str:
    """The text SHHD fingerprints: the item's own words (post text, review content), or the product id."""
    if isinstance(item, Post):
        return item.text
    if isinstance(item, Review):
        return item.content
    return item


def item_time_ms(item: Item) -> int:
    """Publication time in epoch ms (0 when unknown or unparseable). ISO 8601, or "YYYY-MM-DD HH:MM:SS"
    in Beijing time when no zone is given."""
    text = item.created_at if isinstance(item, (Post, Review)) else ""
    if not text:
        return 0
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        return 0
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=BEIJING)
    return int(moment.timestamp() * 1000)


# --- reports --------------------------------------------------------------------------------------------------


def failure_report(
    task: Task,
    outcome: Outcome,
    error_class: str,
    *,
    fetches: int = 0,
    http_status: int = 0,
    retry_after_s: float = 0.0,
) -> Report:
    """The report for a crawl that ended as ``outcome``: its classification, and the task's old cursor."""
    return Report(
        task_id=task.id,
        lease_token=task.lease_token,
        outcome=outcome,
        http_status=http_status,
        error_class=(error_class or outcome.value)[:120],
        cursor=task.cursor,
        retry_after_s=max(0.0, retry_after_s),
        fetches=fetches,
    )


def error_report(task: Task, error: FetchError, fetches: int) -> Report:
    """The report for a crawl that a raised ``FetchError`` (a ban, a wall, a timeout, garbage) ended."""
    return failure_report(
        task,
        error.outcome,
        error.error_class,
        fetches=fetches,
        http_status=error.http_status,
        retry_after_s=error.retry_after_s,
    )


def success_report(
    task: Task, *, window: list[Item], new_items: int, cursor: str, http_status: int, fetches: int
) -> Report:
    """The report for a completed crawl (fingerprint 0 until ``fingerprint_result``)."""
    times = sorted((item_time_ms(item) for item in window), reverse=True)
    return Report(
        task_id=task.id,
        lease_token=task.lease_token,
        outcome=Outcome.Ok,
        http_status=http_status,
        new_items=new_items,
        window_items=len(window),
        # 0 = unknown, also for a window dated before 1970 (the scheduler refuses a negative time)
        newest_item_ms=max(times[0], 0) if times else 0,
        cursor=cursor,
        fetches=fetches,
        # the new items are the newest ones; items without a time (0) tell the policy nothing
        new_item_times_ms=tuple(t for t in times[: min(new_items, MAX_ITEM_TIMES)] if t > 0),
    )


# --- the walk -------------------------------------------------------------------------------------------------


@dataclass
class _Walk:
    """Items gathered so far, deduplicated, in page order."""

    window: list[Item] = field(default_factory=list)
    new: list[Item] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)
    reached_known: bool = False
    #: New items an earlier visit of an open gap already fetched (the resumed page's overlap): not counted.
    refetched: int = 0

    def add_page(self, source: Source, items: list[Item], cursor: str, plan: gaps.WalkPlan | None = None) -> None:
        for item in items:
            key = item_key(item)
            if key in self.seen:
                continue
            self.seen.add(key)
            self.window.append(item)
            pinned = isinstance(item, Post) and item.pinned
            # A pinned post never ends the walk (it is old and on top), but it is only new if its own order
            # says so: otherwise every visit would count the same pinned post as a change. A timeline of known pinned
            # posts alone is thus walked to its end at every visit; the Weibo sources take that end for the end when
            # it leaves the cursor as it was (``sources._weibo.end_keeps_cursor``), not for a throttled answer.
            if _known(source, item, cursor):
                self.reached_known = self.reached_known or not pinned
            else:
                self.new.append(item)
                self.refetched += plan is not None and plan.fetched_before(source, item)


def _known(source: Source, item: Item, cursor: str) -> bool:
    """Whether ``item`` is at or behind ``cursor`` by its own order, a pinned post too: "pinned" only means that it
    never ends the walk (``_Walk.add_page``), not that it is new at every visit."""
    ordered = replace(item, pinned=False) if isinstance(item, Post) and item.pinned else item
    return bool(cursor) and source.is_older_or_equal(ordered, cursor)


def _split_records(task: Task, items: list[Item]) -> tuple[list[Post], list[Review], list[str]]:
    posts = [item for item in items if isinstance(item, Post)]
    reviews = [item for item in items if isinstance(item, Review)]
    ids = [item for item in items if isinstance(item, str)]
    if task.kind is TaskKind.Listing:
        return [], [], ids
    if ids:
        log.warning("task %s: %d bare id(s) from a %s task ignored", task.id, len(ids), task.kind.name)
    return posts, reviews, []


def _discovered_ids(task: Task, ids: list[str]) -> tuple[str, ...]:
    """A listing's new product ids for its report, at most ``MAX_DISCOVERED_IDS`` (the walk stops at that many
    and resumes at the next visit from its last page, so only that page's overflow is cut, and fetched again).
    An id the scheduler would refuse (not a valid target) is dropped alone and logged: it would make the
    scheduler refuse the whole report, and the next visit would find it again."""
    bad = [product for product in ids if not valid_target(product)]
    if bad:
        log.error(
            "task %s: %d discovered id(s) dropped, the scheduler would refuse them (not 1-64 chars of "
            "[0-9A-Za-z_.-]): %s",
            task.id,
            len(bad),
            ", ".join(quote(product) for product in bad[:5]),
        )
        ids = [product for product in ids if valid_target(product)]
    if len(ids) > MAX_DISCOVERED_IDS:
        log.warning(
            "task %s: %d product ids found, the report carries the first %d; the rest are found again next visit",
            task.id,
            len(ids),
            MAX_DISCOVERED_IDS,
        )
    return tuple(ids[:MAX_DISCOVERED_IDS])


def _fill_long_texts(
    source: Source, parsed: ParsedPage, fetcher: PageFetch, base_url: str, cursor: str, now_ms: Callable[[], int]
) -> None:
    """Fetch the full text of truncated posts that are new (known posts were completed on an earlier visit; an old
    pinned post, on top at every visit and often a long one, is known too: ``_known``).

    A post whose full text the site says is gone (``LONG_TEXT_GONE``: deleted since the timeline page was read)
    keeps its truncated text: failing the crawl for it would fail every visit, and the timeline's new posts with it.
    Any other refusal (a ban, a limit, a login wall, an HTTP 404, an answer we cannot read) fails the crawl as a page
    would, cursor kept."""
    ids = {part for part in parsed.info.get("long_text_ids", "").split(",") if part}
    if not ids or not isinstance(source, LongTextSource):
        return
    for item in parsed.items:
        if isinstance(item, Post) and str(item.id) in ids and not _known(source, item, cursor):
            request = source.extend_request(base_url, item.id)
            try:
                full = source.parse_extend(request, fetcher.fetch(request), now_ms())
            except FetchError as exc:
                if exc.error_class != LONG_TEXT_GONE:
                    raise
                log.warning(
                    "post %s: no full text (%s: %s); its truncated text is stored", item.id, exc.error_class, exc
                )
                continue
            source.with_long_text(item, full)


def crawl_task(
    task: Task,
    source: Source,
    fetcher: PageFetch,
    *,
    base_url: str,
    max_pages: int,
    now_ms: Callable[[], int],
    cancelled: Callable[[], bool] = lambda: False,
    relogin: Callable[[], None] | None = None,
    on_parse: Callable[[float, int], object] | None = None,
) -> CrawlResult:
    """Crawl ``task`` incrementally and classify the result. Never raises for anything a site can do.

    ``relogin`` (form-login sources) is called at most once, on the first login wall; it raises FetchError
    when the login fails, else the walled page is fetched again. A second wall ends the crawl. ``on_parse`` is
    told how long each ``source.parse`` took and how many items it gave, 0 when it raised (the client's metrics).
    """
    walk = _Walk()
    fetches_before = fetcher.requests_made
    last_status = 0
    pages = 0
    capped = False
    listing = task.kind is TaskKind.Listing
    plan = gaps.plan_walk(task.cursor, lambda: source.first_request(task, base_url), base_url)

    def result(report: Report, *, aborted: bool = False) -> CrawlResult:
        posts, reviews, ids = _split_records(task, walk.new)
        report.discovered_ids = _discovered_ids(task, ids)
        return CrawlResult(task, report, posts, reviews, aborted)

    try:
        request: PageRequest | None = plan.first
        while request is not None:
            if cancelled():
                return result(
                    failure_report(task, Outcome.Timeout, "", fetches=fetcher.requests_made - fetches_before),
                    aborted=True,
                )
            page = fetcher.fetch(request)
            last_status = page.status
            parse_started = time.perf_counter()
            items_read = 0
            try:
                parsed = source.parse(task, request, page, now_ms())
                items_read = len(parsed.items)
            except FetchError as exc:
                if exc.outcome is not Outcome.LoginRequired or relogin is None:
                    raise
                login, relogin = relogin, None
                login()
                continue
            finally:
                if on_parse is not None:
                    on_parse(time.perf_counter() - parse_started, items_read)
            _fill_long_texts(source, parsed, fetcher, base_url, plan.stop_at, now_ms)
            walk.add_page(source, parsed.items, plan.stop_at, plan)
            pages += 1
            nxt = parsed.next_request
            if walk.reached_known or nxt is None:
                break
            if (
                nxt.page - plan.first.page >= max_pages
                or pages >= max_pages * REQUESTS_PER_PAGE_BOUND
                or (listing and len(walk.new) >= MAX_DISCOVERED_IDS)  # its report holds no more: resume next visit
            ):
                capped = True
                # Resume from the last page fetched (one page of overlap), unless that would never move on.
                request = request if max_pages > 1 else nxt
                break
            request = nxt
    except FetchError as exc:
        log.info("task %s: %s (%s): %s", task.id, exc.outcome, exc.error_class, exc)
        return result(error_report(task, exc, fetcher.requests_made - fetches_before))
    except Exception as exc:  # a bug in a source must not take the worker down
        log.exception("task %s: source %s raised %s", task.id, source.name, type(exc).__name__)
        return result(
            failure_report(
                task,
                Outcome.ParseError,
                f"source-bug:{type(exc).__name__}",
                fetches=fetcher.requests_made - fetches_before,
                http_status=last_status,
            )
        )
    cursor = _next_cursor(task, source, plan, walk, request if capped else None, base_url, now_ms())
    report = success_report(
        task,
        window=walk.window,
        new_items=len(walk.new) - walk.refetched,
        cursor=cursor,
        http_status=last_status,
        fetches=fetcher.requests_made - fetches_before,
    )
    crawled = result(report)
    crawled.window_texts = [item_text(item) for item in walk.window]
    return crawled


def _next_cursor(
    task: Task, source: Source, plan: gaps.WalkPlan, walk: _Walk, capped_at: PageRequest | None, base_url: str, now: int
) -> str:
    """The cursor a successful crawl reports: a gap cursor when the page cap came before the cursor or the end of
    the list (``crawler_client.gaps``); else the newest item seen (never one dated after ``now``). Listings have
    no order, hence no cursor: a listing longer than the cap is walked over several visits the same way."""
    if capped_at is not None:
        cursor = gaps.open_gap_cursor(source, plan, walk.window, capped_at, base_url, now, item_time_ms)
        listing = task.kind is TaskKind.Listing
        log.log(
            logging.INFO if listing else logging.WARNING,
            "task %s: page cap reached before the %s (%s); gap kept open, resuming at page %d next visit (visit "
            "%d of this gap)",
            task.id,
            "cursor" if plan.stop_at else "end of the list",
            "gap" if plan.gap else "new gap",
            capped_at.page,
            1 if plan.gap is None else plan.gap.visits + 1,
        )
        return cursor
    if plan.gap is not None:
        log.info("task %s: page-cap gap closed after %d visit(s)", task.id, plan.gap.visits + 1)
    return gaps.closed_cursor(source, plan, walk.window, now, item_time_ms)


def fingerprint_result(result: CrawlResult, fingerprint: Callable[[Iterable[str]], int]) -> None:
    """Fill in the report's fingerprint from the window texts (once; a no-op for failures and empty windows)."""
    if result.window_texts and result.report.outcome is Outcome.Ok:
        try:
            result.report.fingerprint = fingerprint(result.window_texts)
        except Exception:  # one odd text must not hold every result behind it in the sink: no fingerprint (0)
            log.exception("task %s: the window could not be fingerprinted; reported without one", result.task.id)
    result.window_texts = []
