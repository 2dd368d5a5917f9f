"""Conversions between the Slice types (``slice/crawler.ice``) and the plain core types of ``icecrawler.models``,
both ways: servants convert what arrives, gateways what they send. Field by field, so a field added to the Slice
contract and to the model is added here too (``tests/foundation/test_models_and_rpc.py`` round-trips every one).
``icecrawler.rpc`` re-exports them.
"""

from __future__ import annotations

from typing import Any

from icecrawler.contract import crawler
from icecrawler.models import Account, Outcome, Post, Report, Review, Task, TaskKind

__all__ = [
    "post_from_slice",
    "post_to_slice",
    "report_from_slice",
    "report_to_slice",
    "review_from_slice",
    "review_to_slice",
    "task_from_slice",
    "task_to_slice",
]


def task_to_slice(task: Task) -> Any:
    C = crawler()
    return C.Task(
        id=task.id,
        kind=C.TaskKind[task.kind.name],
        source=task.source,
        target=task.target,
        params=dict(task.params),
        leaseToken=task.lease_token,
        leaseDeadlineMs=task.lease_deadline_ms,
        periodS=task.period_s,
        cursor=task.cursor,
        attempts=task.attempts,
        account=C.Account(id=task.account.id, cookieBlob=task.account.cookie_blob),
    )


def task_from_slice(task: Any) -> Task:
    return Task(
        id=task.id,
        kind=TaskKind[task.kind.name],
        source=task.source,
        target=task.target,
        params=dict(task.params),
        lease_token=task.leaseToken,
        lease_deadline_ms=task.leaseDeadlineMs,
        period_s=task.periodS,
        cursor=task.cursor,
        attempts=task.attempts,
        account=Account(id=task.account.id, cookie_blob=task.account.cookieBlob),
    )


def report_to_slice(report: Report) -> Any:
    C = crawler()
    return C.Report(
        taskId=report.task_id,
        leaseToken=report.lease_token,
        outcome=C.Outcome[report.outcome.name],
        httpStatus=report.http_status,
        errorClass=report.error_class,
        fingerprint=_signed64(report.fingerprint),
        newItems=report.new_items,
        windowItems=report.window_items,
        newestItemMs=report.newest_item_ms,
        cursor=report.cursor,
        retryAfterS=report.retry_after_s,
        fetches=report.fetches,
        newItemTimesMs=list(report.new_item_times_ms),
        discoveredIds=list(report.discovered_ids),
    )


def report_from_slice(report: Any) -> Report:
    return Report(
        task_id=report.taskId,
        lease_token=report.leaseToken,
        outcome=Outcome[report.outcome.name],
        http_status=report.httpStatus,
        error_class=report.errorClass,
        fingerprint=report.fingerprint & 0xFFFFFFFFFFFFFFFF,
        new_items=report.newItems,
        window_items=report.windowItems,
        newest_item_ms=report.newestItemMs,
        cursor=report.cursor,
        retry_after_s=report.retryAfterS,
        fetches=report.fetches,
        new_item_times_ms=tuple(report.newItemTimesMs),
        discovered_ids=tuple(report.discoveredIds),
    )


def _signed64(value: int) -> int:
    """Slice longs are signed; fingerprints are unsigned 64-bit. Reinterpret the bits."""
    value &= 0xFFFFFFFFFFFFFFFF
    return value - (1 << 64) if value >= 1 << 63 else value


def post_to_slice(post: Post) -> Any:
    return crawler().Post(
        id=post.id,
        userId=post.user_id,
        userName=post.user_name,
        text=post.text,
        html=post.html,
        createdAt=post.created_at,
        reposts=post.reposts,
        comments=post.comments,
        likes=post.likes,
        pinned=post.pinned,
        retweetedId=post.retweeted_id,
        pictures=list(post.pictures),
        permalink=post.permalink,
        fetchedAt=post.fetched_at,
        source=post.source,
    )


def post_from_slice(post: Any) -> Post:
    return Post(
        id=post.id,
        user_id=post.userId,
        user_name=post.userName,
        text=post.text,
        html=post.html,
        created_at=post.createdAt,
        reposts=post.reposts,
        comments=post.comments,
        likes=post.likes,
        pinned=post.pinned,
        retweeted_id=post.retweetedId,
        pictures=list(post.pictures),
        permalink=post.permalink,
        fetched_at=post.fetchedAt,
        source=post.source,
    )


def review_to_slice(review: Review) -> Any:
    return crawler().Review(
        id=review.id,
        productId=review.product_id,
        source=review.source,
        user=review.user,
        content=review.content,
        score=review.score,
        createdAt=review.created_at,
        fetchedAt=review.fetched_at,
    )


def review_from_slice(review: Any) -> Review:
    return Review(
        id=review.id,
        product_id=review.productId,
        source=review.source,
        user=review.user,
        content=review.content,
        score=review.score,
        created_at=review.createdAt,
        fetched_at=review.fetchedAt,
    )
