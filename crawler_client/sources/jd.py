"""JD product reviews: ``comment/productPageComments.action`` (JSONP ``fetchJSON_comment98(...)`` or plain JSON).

Requests ask for ``sortType=6`` (time order) from ``page=0`` (0-based; ``PageRequest.page`` stays 1-based)
and follow pages while the response has comments and ``page + 1 < maxPage``. Ids are int64 (kept as decimal
strings), counts may be strings ("100万+"), ``content`` carries HTML entities. Since ≈2023 a request without a
logged-in cookie gets an empty body, ``{}`` or an object without ``comments``: that is LoginRequired
("blocked"), not an empty product. Cursor semantics: ``ReviewOrder`` (creationTime, then id).
"""

from __future__ import annotations

import html
from typing import Any, ClassVar

from crawler_client.sources._counts import parse_count
from crawler_client.sources._cursor import ReviewOrder
from crawler_client.sources._dates import iso_of_ms, resolve_created_at
from crawler_client.sources._decode import decode_body, load_json, strip_jsonp
from crawler_client.sources._detect import check_final_url, check_http, fail
from crawler_client.sources.base import FetchedPage, Item, PageRequest, ParsedPage
from icecrawler.errors import ParseError
from icecrawler.models import Outcome, Review, Task, TaskKind

__all__ = ["JdSource"]

#: The callback name JD's own page uses.
CALLBACK = "fetchJSON_comment98"
#: Bodies shorter than this cannot hold a comment page: the "blocked" answer.
MIN_BODY = 8


def _as_str_id(value: object) -> str:
    """An int64 id (int or digit string) as a decimal string; JSON ints beyond 2^53 stay exact."""
    if isinstance(value, bool):
        return ""
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return value.strip()
    return ""


class JdSource(ReviewOrder):
    """Source for ``reviews:jd:{sku}`` tasks."""

    name: ClassVar[str] = "jd"
    kinds: ClassVar[frozenset[TaskKind]] = frozenset({TaskKind.ProductReviews})

    def first_request(self, task: Task, base_url: str) -> PageRequest:
        """Page 0, newest first (``sortType=6``)."""
        return self.page_request(task, base_url.rstrip("/") + "/comment/productPageComments.action", 0)

    @staticmethod
    def page_request(task: Task, url: str, page0: int) -> PageRequest:
        """Page ``page0`` (0-based) with the query JD's product page sends; ``score``/``sortType`` may be
        overridden through ``task.params``."""
        params = {"callback": CALLBACK, "productId": task.target, "score": task.params.get("score", "0"),
                  "sortType": task.params.get("sortType", "6"), "page": str(page0), "pageSize": "10",
                  "isShadowSku": "0", "rid": "0", "fold": "1"}
        return PageRequest(url=url, params=params, page=page0 + 1)

    def parse(self, task: Task, request: PageRequest, page: FetchedPage, now_ms: int) -> ParsedPage:
        """Blocked answers (empty, ``{}``, no ``comments``) are LoginRequired, never an empty product."""
        check_http(page, now_ms)
        check_final_url(page, request.url)
        text = strip_jsonp(decode_body(page.body))
        if len(text) < MIN_BODY and text.strip() in ("", "{}", "null", "[]", "()"):
            raise fail(Outcome.LoginRequired, f"blocked: {len(page.body)}-byte body", error_class="jd-blocked",
                       http_status=page.status)
        if not text.startswith("{"):
            raise ParseError("JD: not a JSON object", error_class="unexpected-format", http_status=page.status)
        doc = load_json(text, what="JD comments")
        if not isinstance(doc, dict) or not isinstance(doc.get("comments"), list):
            raise fail(Outcome.LoginRequired, "blocked: no comments key", error_class="jd-blocked",
                       http_status=page.status)
        fetched_at = iso_of_ms(now_ms)
        product = task.target
        items: list[Item] = [review for raw in doc["comments"]
                             if (review := self._review(raw, product, now_ms, fetched_at)) is not None]
        max_page = parse_count(doc.get("maxPage")) or None
        page0 = parse_count(request.params.get("page", "0"))
        result = ParsedPage(items=items, total_pages=max_page, info=_summary(doc))
        if items and max_page is not None and page0 + 1 < max_page:
            result.next_request = self.page_request(task, request.url, page0 + 1)
            result.next_request.params.update({k: v for k, v in request.params.items() if k != "page"})
        return result

    def _review(self, raw: Any, product: str, now_ms: int, fetched_at: str) -> Review | None:
        """One comment as a Review; None for rows without an id or guid."""
        if not isinstance(raw, dict):
            return None
        review_id = _as_str_id(raw.get("id")) or str(raw.get("guid") or "")
        if not review_id:
            return None
        content = raw.get("content")
        created = raw.get("creationTime")
        return Review(
            id=review_id,
            product_id=product,
            source=self.name,
            user=str(raw.get("nickname") or ""),
            content=html.unescape(content).strip() if isinstance(content, str) else "",
            score=min(parse_count(raw.get("score")), 5),
            created_at=resolve_created_at(created, now_ms) if isinstance(created, str) else "",
            fetched_at=fetched_at,
        )


def _summary(doc: dict[str, Any]) -> dict[str, str]:
    """Comment totals worth printing: ``commentCountStr`` ("100万+") wins over the zeroed ``commentCount``."""
    summary = doc.get("productCommentSummary")
    info: dict[str, str] = {}
    if isinstance(summary, dict):
        count = parse_count(summary.get("commentCountStr")) or parse_count(summary.get("commentCount"))
        if count:
            info["comment_count"] = str(count)
    if "maxPage" in doc:
        info["max_page"] = str(doc["maxPage"])[:20]
    return info
