"""JD's comment API under ``/jd``: ``/comment/productPageComments.action`` as JSONP (``callback=``) or plain JSON
(and api.m.jd.com's form, ``/?appid=item-v3&functionId=pc_club_productPageComments&body={...}``, same answer),
in the shape of docs/SITE_RESPONSES.md §4 and docs/SOURCES.md: int64 ids, Beijing ``creationTime``, ``maxPage``, and a
summary whose numeric counts are 0 while ``*CountStr`` carries the rounded display text ("100万+"), as in 2024 data.

``sortType=6`` is newest first; any other value gives a stable "recommended" shuffle. ``score`` filters
(0 all, 1 poor, 2 middle, 3 good; other values have no matches here). Under a login wall the answer is an
empty 200 body, as JD does without a logged-in cookie.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, ClassVar

from sandbox.content import SimReview, beijing
from sandbox.sites import SiteContext
from sandbox.web import SimRequest, SimResponse, page_count
from sandbox.world import World

__all__ = ["MAX_PAGE", "JdSite", "comments_json", "count_str", "jsonp", "make_site", "summary_json"]

MAX_PAGE = 100
#: ``functionId`` of api.m.jd.com's comment call (served at ``/`` with ``appid=item-v3``).
API_FUNCTION = "pc_club_productPageComments"
#: A JSONP callback name the site accepts, and an answer wrapped in one (as ``jsonp`` writes it).
_CALLBACK = r"[A-Za-z_$][\w$]{0,63}"
_CALLBACK_RE = re.compile(rf"^{_CALLBACK}$")
_JSONP_RE = re.compile(rf"({_CALLBACK})\((.*)\);", re.DOTALL)
_SCORES = {1: (1,), 2: (2, 3), 3: (4, 5)}


def _api_body(request: SimRequest) -> dict[str, Any]:
    """The JSON ``body`` parameter of an api.m.jd.com call ({} when absent or not a JSON object)."""
    try:
        body = json.loads(request.query.get("body", "") or "{}")
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def count_str(count: int) -> str:
    """JD's rounded display count: 7 -> "7", 35 -> "30+", 1200 -> "1000+", 23000 -> "2万+", 1.2M -> "100万+"."""
    if count < 10:
        return str(count)
    if count >= 1_000_000:
        return f"{count // 1_000_000 * 100}万+"
    if count >= 10_000:
        return f"{count // 10_000}万+"
    magnitude = 10 ** (len(str(count)) - 1)
    return f"{count // magnitude * magnitude}+"


@functools.lru_cache(maxsize=1 << 16)
def _comment_json(review: SimReview, product_id: str) -> str:
    """One review as JD's JSON shows it, as compact JSON text. Cached: reviews never change once published, and
    building and encoding it (two date formats, an md5, 45 fields) was most of the sandbox's CPU in
    ``bench scale``."""
    return json.dumps(_comment(review, product_id), ensure_ascii=False, separators=(",", ":"))


def _comment(review: SimReview, product_id: str) -> dict[str, Any]:
    nick = review.user or "jd_user"
    guid = hashlib.md5(str(review.review_id).encode()).hexdigest()
    return {
        "id": review.review_id,
        "topped": 0,
        "guid": guid,
        "content": review.text,
        "creationTime": beijing(review.created_ms).strftime("%Y-%m-%d %H:%M:%S"),
        "isDelete": False,
        "isTop": False,
        "userImageUrl": "storage.360buyimg.com/i.imageUpload/default.jpg",
        "topped2": 0,
        "replyCount": 0,
        "score": review.score,
        "imageStatus": 1,
        "usefulVoteCount": 0,
        "userClient": 4,
        "discussionId": review.review_id + 7,
        "imageCount": 0,
        "anonymousFlag": 1,
        "plusAvailable": 0,
        "mobileVersion": "",
        "mergeOrderStatus": 2,
        "productColor": "标准版",
        "productSize": "",
        "textIntegral": 20,
        "imageIntegral": 0,
        "status": 1,
        "referenceId": product_id,
        "referenceTime": beijing(review.created_ms - 5 * 86_400_000).strftime("%Y-%m-%d %H:%M:%S"),
        "nickname": f"{nick[0]}***{nick[-1]}",
        "replyCount2": 0,
        "userImage": "storage.360buyimg.com/default.jpg",
        "orderId": 0,
        "integral": 20,
        "productSales": "[]",
        "referenceImage": "jfs/t1/sandbox.jpg",
        "referenceName": f"沙盒商品{product_id}",
        "firstCategory": 9987,
        "secondCategory": 653,
        "thirdCategory": 655,
        "aesPin": None,
        "days": 5,
        "afterDays": 0,
        "location": "北京",
        "extMap": {"buyCount": 1},
        "replies": [],
    }


class JdSite:
    prefix: ClassVar[str] = "jd"

    def __init__(self, world: World) -> None:
        self.world = world

    def target_of(self, request: SimRequest) -> str:
        return request.query.get("productId", "") or str(_api_body(request).get("productId", ""))

    def logged_in(self, request: SimRequest) -> bool:
        return bool(request.cookies.get("thor"))

    def login_wall(self, request: SimRequest) -> SimResponse | None:
        return SimResponse(200, b"", "text/html;charset=utf-8")

    def ban_answer(self, kind: str, now_s: int) -> SimResponse:
        """JD's own refusals for the ``ban_rate`` misbehaviour: "busy" is the 系统繁忙 answer in place of the comments,
        "frozen" risk control's code 605 in the ``x-rp-content`` header of an empty answer, both with HTTP 200."""
        if kind == "busy":
            return SimResponse(200, busy_json(), "application/json;charset=utf-8")
        # The header as JD sends it since 2024: base64url of the JSON, no padding; the body empty.
        risk = base64.urlsafe_b64encode(b'{"code":"605","disposal":{}}').decode().rstrip("=")
        return SimResponse(200, b"", "application/json;charset=utf-8", {"x-rp-content": risk})

    def new_layout(self, response: SimResponse) -> SimResponse:
        """The ``new_layout`` misbehaviour: every comment row's ids under new names (``id`` as ``commentIdV2``,
        ``guid`` as ``commentGuid``), as a redesign that renames fields would show them; the rows, the pager and the
        summary stay. A parser that knows only the old names finds no usable id and skips every row."""
        if response.status != 200 or not response.body:
            return response
        text = response.body.decode()
        match = _JSONP_RE.fullmatch(text)
        doc = json.loads(match[2] if match else text)
        if not isinstance(doc, dict) or not isinstance(doc.get("comments"), list):
            return response
        renames = {"id": "commentIdV2", "guid": "commentGuid"}
        doc["comments"] = [{renames.get(key, key): value for key, value in row.items()} for row in doc["comments"]]
        body = json.dumps(doc, ensure_ascii=False, separators=(",", ":"))
        return replace(response, body=jsonp(match[1], body) if match else body.encode())

    def handle(self, request: SimRequest) -> SimResponse:
        if request.path == "/" and request.query.get("functionId") == API_FUNCTION:
            # api.m.jd.com's form: the same query as a JSON ``body`` parameter, the same answer
            query = {key: str(value) for key, value in _api_body(request).items()}
            request = replace(request, query={**query, "callback": request.query.get("callback", "")})
        elif request.path != "/comment/productPageComments.action":
            return SimResponse.not_found()
        product_id = self.target_of(request)
        reviews = self.world.reviews("jd", product_id, request.now_ms) if product_id.isdigit() else None
        state = self.world.product("jd", product_id, request.now_ms) if reviews is not None else None
        reviews = reviews or []
        score = request.int_param("score", 0)
        chosen = (
            [r for r in reviews if r.score in _SCORES[score]] if score in _SCORES else (reviews if score == 0 else [])
        )
        if request.int_param("sortType", 6) != 6:
            chosen = sorted(chosen, key=lambda r: hashlib.md5(str(r.review_id).encode()).digest())
        size = min(max(request.int_param("pageSize", 10), 1), 30)
        page = max(request.int_param("page", 0), 0)
        max_page = min(MAX_PAGE, page_count(len(chosen), size))
        shown = chosen[page * size : (page + 1) * size] if page < max_page else []
        bonus = state.spec.count_bonus if state is not None else 0
        text = comments_json(
            shown,
            product_id,
            summary=summary_json(product_id, reviews, bonus),
            max_page=max_page,
            score=score,
            sort_type=request.int_param("sortType", 6),
        )
        callback = request.query.get("callback", "")
        if callback and _CALLBACK_RE.match(callback):
            return SimResponse(200, jsonp(callback, text), "text/html;charset=utf-8")
        return SimResponse(200, text.encode(), "application/json; charset=utf-8")


def summary_json(product_id: str, reviews: Sequence[SimReview], bonus: int) -> dict[str, Any]:
    """``productCommentSummary``: numeric counts 0, the rounded ``*CountStr`` texts over all ``reviews`` plus
    ``bonus`` good ones (a product bigger than the sandbox holds)."""

    def bucket(scores: tuple[int, ...]) -> str:
        return count_str(sum(1 for r in reviews if r.score in scores) + (bonus if 5 in scores else 0))

    total = len(reviews) + bonus
    good = sum(1 for r in reviews if r.score >= 4) + bonus
    rate = round(good / total, 3) if total else 0.0
    summary: dict[str, Any] = {
        "skuId": int(product_id) if product_id.isdigit() else 0,
        "productId": int(product_id) if product_id.isdigit() else 0,
        "averageScore": 5 if rate > 0.9 else 4,
        "defaultGoodCount": 0,
        "defaultGoodCountStr": "0",
        "commentCount": 0,
        "commentCountStr": count_str(total),
        "goodCount": 0,
        "goodCountStr": bucket((4, 5)),
        "goodRate": rate,
        "goodRateShow": int(rate * 100),
        "generalCount": 0,
        "generalCountStr": bucket((2, 3)),
        "poorCount": 0,
        "poorCountStr": bucket((1,)),
        "videoCount": 0,
        "videoCountStr": "0",
        "afterCount": 0,
        "afterCountStr": "0",
        "showCount": 0,
        "showCountStr": "0",
        "plusCount": 0,
        "plusCountStr": "0",
        "extParam": {"aigcFlag": 0, "nfGoodCount": 0},
    }
    for score in range(1, 6):
        summary[f"score{score}Count"] = 0
    return summary


def comments_json(
    shown: Sequence[SimReview],
    product_id: str,
    *,
    summary: dict[str, Any],
    max_page: int,
    score: int = 0,
    sort_type: int = 6,
) -> str:
    """A ``productPageComments`` answer showing ``shown`` as compact JSON text (the caller wraps JSONP)."""
    body: dict[str, Any] = {
        "jwotestProduct": None,
        "score": score,
        "comments": [],
        "soType": sort_type,
        "csv": "comment,sandbox",
        "imageListCount": 0,
        "hotCommentTagStatistics": [],
        "testId": "cmt",
        "vTagStatistics": None,
        "maxPage": max_page,
        "productCommentSummary": summary,
        "productAttr": None,
    }
    # The comments are spliced in as cached JSON text: encoding them was most of the site's CPU per page.
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).replace(
        '"comments":[]', '"comments":[' + ",".join(_comment_json(r, product_id) for r in shown) + "]", 1
    )


def busy_json() -> bytes:
    """The "system busy" answer risk control gives in place of a comment page (docs/SOURCES.md, JD's refusals)."""
    return json.dumps({"code": "0", "message": "系统繁忙，请稍后再试"}, ensure_ascii=False).encode()


def jsonp(callback: str, text: str) -> bytes:
    """The JSONP answer ``callback(text);`` (as the site serves it when ``callback=`` is given)."""
    return f"{callback}({text});".encode()


def make_site(context: SiteContext) -> JdSite:
    """The ``jd`` source's site (the sandbox finds it by the source's name)."""
    return JdSite(context.world)
