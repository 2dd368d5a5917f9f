"""The Storage servant: Slice in, core call, Slice out (servants only adapt: CONTRIBUTING.md, code layout).
All logic lives in ``StorageService``."""

from __future__ import annotations

import json
import operator
from typing import Any

from icecrawler import rpc
from icecrawler.security import Gate, guarded
from storage_server import schema
from storage_server.service import StorageService

__all__ = ["StorageServant"]

_C = rpc.crawler()

#: The Slice ``Post`` as the service reads it: each post's fields in one call, straight into its row; only a post
#: that needs ``validate_post``'s reasons is converted to a core ``Post`` (same accepted set, same reasons).
SLICE_POSTS = schema.PostFormat(
    _C.Post,
    operator.attrgetter(
        "id",
        "userId",
        "userName",
        "text",
        "html",
        "createdAt",
        "reposts",
        "comments",
        "likes",
        "pinned",
        "retweetedId",
        "pictures",
        "permalink",
        "fetchedAt",
        "source",
    ),
    rpc.post_from_slice,
)


class StorageServant(_C.Storage):  # type: ignore[misc,name-defined]
    """Adapts ``Crawler::Storage`` onto one injected ``StorageService``; ``gate`` checks each caller's
    certificate role (``icecrawler.security``; default: every caller trusted, as over loopback)."""

    def __init__(self, service: StorageService, gate: Gate | None = None) -> None:
        self._service = service
        self.gate = gate or Gate(tls=False)

    @rpc.map_errors
    @guarded("write")
    def writeWB(self, posts: list[Any], current: Any) -> Any:
        result = self._service.write_posts(posts, SLICE_POSTS)
        return _C.WriteAck(stored=result.stored, spooled=result.spooled)

    @rpc.map_errors
    @guarded("write")
    def writeReviews(self, reviews: list[Any], current: Any) -> Any:
        schema.check_batch_size(reviews, self._service.batch_limit)  # before the batch is copied
        result = self._service.write_reviews([rpc.review_from_slice(review) for review in reviews])
        return _C.WriteAck(stored=result.stored, spooled=result.spooled)

    @rpc.map_errors
    @guarded("status")
    def stats(self, current: Any) -> Any:
        data = self._service.stats()
        return _C.StorageStats(
            backend=data.backend,
            posts=data.posts,
            reviews=data.reviews,
            spoolDepth=data.spool_depth,
            writesAccepted=data.records_accepted,
            recordsRejected=data.records_rejected,
            detailJson=json.dumps(data.detail, ensure_ascii=False),
        )
