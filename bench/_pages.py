"""The pages ``bench client`` times parse + fingerprint on: one realistic page per source and shape, rendered by
the sandbox's own renderers (``sandbox.samples``), with the task and request each source parses it for."""

from __future__ import annotations

from dataclasses import dataclass

from crawler_client.sources.base import FetchedPage, PageRequest
from icecrawler.models import Task, TaskKind
from sandbox.samples import (
    SAMPLE_NOW_MS,
    ecshop_comment_json,
    ecshop_goods_page,
    jd_comments,
    mbloglist_page,
    mobile_timeline,
    web_timeline,
)

__all__ = ["BenchCase", "bench_cases"]


@dataclass
class BenchCase:
    """One page to time: ``source.parse(task, request, page, now_ms)`` with ``get_source(source)``."""

    name: str
    source: str
    task: Task
    request: PageRequest
    page: FetchedPage
    now_ms: int = SAMPLE_NOW_MS


def _case(name: str, source: str, kind: TaskKind, target: str, request: PageRequest, body: bytes) -> BenchCase:
    """A BenchCase for a task of ``kind`` on ``source``."""
    task = Task(id=f"{kind.value}:{source}:{target}", kind=kind, source=source, target=target)
    return BenchCase(name, source, task, request, FetchedPage(url=request.url, status=200, headers={}, body=body))


def bench_cases(seed: int = 0) -> list[BenchCase]:
    """The 3 chunks of a 45-post weibo_pc page, a 10-post m.weibo.cn page, a 20-post weibo.com JSON page, an
    ECSHOP goods page and a 10-review ``comment.php`` page, and a 10-review JD page."""
    base = "http://bench.invalid"
    uid, mobile_uid = 1163218074, 1907518591
    cases = [
        _case(
            f"weibo_pc/chunk{chunk}",
            "weibo_pc",
            TaskKind.WeiboUser,
            str(uid),
            PageRequest(url=f"{base}/p/aj/v6/mblog/mbloglist", params={"page": "1"}, state={"chunk": str(chunk)}),
            body,
        )
        for chunk, body in enumerate(mbloglist_page(uid, 1, seed=seed))
    ]
    cases += [
        _case(
            "weibo_mobile/page",
            "weibo_mobile",
            TaskKind.WeiboUser,
            str(mobile_uid),
            PageRequest(url=f"{base}/api/container/getIndex", params={"containerid": f"107603{mobile_uid}"}),
            mobile_timeline(mobile_uid, seed=seed),
        ),
        _case(
            "weibo_web/page",
            "weibo_web",
            TaskKind.WeiboUser,
            str(mobile_uid),
            PageRequest(url=f"{base}/ajax/statuses/mymblog", params={"uid": str(mobile_uid), "page": "1"}),
            web_timeline(mobile_uid, seed=seed),
        ),
        _case(
            "ecshop/goods",
            "ecshop",
            TaskKind.ProductReviews,
            "42",
            PageRequest(url=f"{base}/goods.php", params={"id": "42"}),
            ecshop_goods_page(42, seed=seed),
        ),
        _case(
            "ecshop/comment10",
            "ecshop",
            TaskKind.ProductReviews,
            "42",
            PageRequest(url=f"{base}/comment.php?act=gotopage&page=2&id=42&type=0&1", page=2),
            ecshop_comment_json(42, 2, comments=10, seed=seed),
        ),
        _case(
            "jd/page",
            "jd",
            TaskKind.ProductReviews,
            "100012043978",
            PageRequest(url=f"{base}/comment/productPageComments.action", params={"page": "0"}),
            jd_comments(seed=seed),
        ),
    ]
    return cases
