"""The sandbox's state: every target's items, published lazily as simulated time passes, and the ground
truth of what was published when.

``World`` never reads a clock: callers pass ``now_ms``. Each target (Weibo user, product, category) owns an
arrival iterator from ``sandbox.schedules``; a heap of "next arrival" times lets ``advance(now_ms)`` publish
only what is due, so a request costs O(log targets) however many targets there are.
"""

from __future__ import annotations

import bisect
import heapq
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from icecrawler.sourcespec import registry
from sandbox.content import SimPost, SimReview, beijing, item_rng, make_post, make_review
from sandbox.scenario import Category, Product, Scenario, WeiboUser
from sandbox.schedules import arrivals, target_times

__all__ = ["WEIBO_SOURCES", "ProductState", "TruthItem", "TruthProduct", "UserState", "World"]

#: Truth ``source`` names (the source registry's names) per Weibo site.
WEIBO_SOURCES = {"pc": "weibo_pc", "m": "weibo_mobile", "web": "weibo_web"}


@dataclass(frozen=True)
class TruthItem:
    """One published item as a crawler should eventually store it."""

    source: str
    target: str
    id: str  # "" for ECSHOP (no ids on the site)
    published_ms: int
    created_at: str  # Beijing time, "YYYY-MM-DD HH:MM:SS"
    user: str
    text: str
    backlog: bool
    pinned: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "item", **self.__dict__}


@dataclass(frozen=True)
class TruthProduct:
    """When a product first appeared on its category pages."""

    source: str
    category: int
    product: str
    appeared_ms: int
    backlog: bool

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "product", **self.__dict__}


class _Feed[T]:
    """One target's items, oldest first: the backlog at once, then arrivals as they fall due."""

    def __init__(self, backlog: list[int], future: Iterator[int], make: Callable[[int, int], T]) -> None:
        self._future = future
        self._make = make
        self.items: list[T] = [make(seq, ms) for seq, ms in enumerate(backlog, start=1)]
        self.times: list[int] = list(backlog)
        self.next_ms: int | None = next(future, None)

    def advance(self, now_ms: int) -> list[T]:
        new: list[T] = []
        while self.next_ms is not None and self.next_ms <= now_ms:
            item = self._make(len(self.items) + 1, self.next_ms)
            self.items.append(item)
            self.times.append(self.next_ms)
            new.append(item)
            self.next_ms = next(self._future, None)
        return new

    def visible(self, now_ms: int) -> list[T]:
        """Items published by ``now_ms``, newest first."""
        count = bisect.bisect_right(self.times, now_ms)
        return self.items[:count][::-1]


@dataclass
class UserState:
    spec: WeiboUser
    slot: int
    feed: _Feed[SimPost]
    pinned_seq: int = 0


@dataclass
class ProductState:
    spec: Product
    slot: int
    appear_ms: int
    feed: _Feed[SimReview]


@dataclass
class _CategoryState:
    spec: Category
    future: Iterator[int]
    next_ms: int | None
    products: list[tuple[str, int]] = field(default_factory=list)  # (product id, appeared ms), oldest first
    arrived: int = 0


def _product_key(text: str) -> tuple[str, str]:
    source, _, product_id = text.partition(":")
    return source, product_id


class World:
    """All targets of a scenario. Thread-safe: every public method takes the lock."""

    def __init__(self, scenario: Scenario, origin_ms: int) -> None:
        self.scenario = scenario
        self.origin_ms = origin_ms
        self.seed = scenario.seed
        self._lock = threading.RLock()
        self._heap: list[tuple[int, int, str]] = []
        self._tiebreak = 0
        self.users: dict[int, UserState] = {}
        self.products: dict[tuple[str, str], ProductState] = {}
        self.categories: dict[int, _CategoryState] = {}
        self._posts: dict[int, SimPost] = {}
        self._bids: dict[str, int] = {}
        self.truth_items: list[TruthItem] = []
        self.truth_products: list[TruthProduct] = []
        for category in scenario.categories:
            rng = item_rng(self.seed, "category", category.id)
            future = arrivals(category.arrivals, rng, origin_ms)
            state = _CategoryState(category, future, next(future, None))
            self.categories[category.id] = state
            self._push(state.next_ms, f"c:{category.id}")
        for slot, user in enumerate(scenario.users):
            self._add_user(user, slot)
        for slot, product in enumerate(scenario.products):
            self._add_product(product, 1000 + slot, origin_ms + int(product.appear_after_s * 1000))
        self.advance(origin_ms)

    # --- building -------------------------------------------------------------------------------------

    def _push(self, when: int | None, key: str) -> None:
        if when is not None:
            self._tiebreak += 1
            heapq.heappush(self._heap, (when, self._tiebreak, key))

    def _add_user(self, spec: WeiboUser, slot: int) -> None:
        rng = item_rng(self.seed, "user", spec.uid)
        backlog, future = target_times(spec.schedule, spec.backlog, spec.backlog_gap_s, rng, self.origin_ms)
        pinned_seq = max(1, len(backlog) // 2) if spec.pinned and backlog else 0
        content_rng = item_rng(self.seed, "posts", spec.uid)

        def make(seq: int, ms: int) -> SimPost:
            long_text = spec.long_text_every > 0 and seq % spec.long_text_every == 0
            retweet = spec.retweet_every > 0 and seq % spec.retweet_every == 1 and seq > 1
            post = make_post(
                content_rng, spec.uid, spec.display_name, slot, seq, ms, long_text=long_text, retweet=retweet
            )
            if seq == pinned_seq:
                post = SimPost(**{**post.__dict__, "pinned": True})
            return post

        state = UserState(spec, slot, _Feed(backlog, future, make), pinned_seq)
        self.users[spec.uid] = state
        for post in state.feed.items:
            self._publish_post(state, post, backlog=True)
        self._push(state.feed.next_ms, f"u:{spec.uid}")

    def _add_product(self, spec: Product, slot: int, appear_ms: int) -> None:
        rng = item_rng(self.seed, "product", spec.source, spec.id)
        backlog, future = target_times(spec.schedule, spec.backlog, spec.backlog_gap_s, rng, appear_ms)

        content_rng = item_rng(self.seed, "reviews", spec.source, spec.id)
        with_ids = registry.spec(spec.source).shows_item_ids

        def make(seq: int, ms: int) -> SimReview:
            return make_review(content_rng, spec.id, slot, seq, ms, with_id=with_ids)

        state = ProductState(spec, slot, appear_ms, _Feed(backlog, future, make))
        self.products[(spec.source, spec.id)] = state
        if appear_ms <= self.origin_ms:
            self._publish_product(state, backlog=True)
            for review in state.feed.items:
                self._publish_review(state, review, backlog=True)
        else:
            self._push(appear_ms, f"a:{spec.source}:{spec.id}")
        self._push(state.feed.next_ms, f"p:{spec.source}:{spec.id}")

    # --- publishing -----------------------------------------------------------------------------------

    def _publish_post(self, state: UserState, post: SimPost, backlog: bool) -> None:
        self._posts[post.mid] = post
        self._bids[post.bid] = post.mid
        if post.retweet is not None:
            self._posts[post.retweet.mid] = post.retweet
            self._bids[post.retweet.bid] = post.retweet.mid
        created_at = beijing(post.created_ms).strftime("%Y-%m-%d %H:%M:%S")
        for site in state.spec.sites:
            self.truth_items.append(
                TruthItem(
                    WEIBO_SOURCES[site],
                    str(post.uid),
                    str(post.mid),
                    post.created_ms,
                    created_at,
                    post.user_name,
                    post.text,
                    backlog,
                    post.pinned and site != "pc",
                )
            )

    def _publish_review(self, state: ProductState, review: SimReview, backlog: bool) -> None:
        self.truth_items.append(
            TruthItem(
                state.spec.source,
                state.spec.id,
                str(review.review_id) if review.review_id else "",
                max(review.created_ms, state.appear_ms),
                beijing(review.created_ms).strftime("%Y-%m-%d %H:%M:%S"),
                review.user,
                review.text,
                backlog,
            )
        )

    def _publish_product(self, state: ProductState, backlog: bool) -> None:
        if state.spec.source == "ecshop":
            self.truth_products.append(
                TruthProduct("ecshop", state.spec.category, state.spec.id, state.appear_ms, backlog)
            )
            if state.spec.category in self.categories:
                self.categories[state.spec.category].products.append((state.spec.id, state.appear_ms))

    def advance(self, now_ms: int) -> None:
        """Publish everything due by ``now_ms``."""
        with self._lock:
            while self._heap and self._heap[0][0] <= now_ms:
                _, _, key = heapq.heappop(self._heap)
                kind, _, rest = key.partition(":")
                if kind == "u":
                    user = self.users[int(rest)]
                    for post in user.feed.advance(now_ms):
                        self._publish_post(user, post, backlog=False)
                    self._push(user.feed.next_ms, key)
                elif kind == "p":
                    product = self.products[_product_key(rest)]
                    if product.appear_ms <= now_ms:
                        for review in product.feed.advance(now_ms):
                            self._publish_review(product, review, backlog=False)
                        self._push(product.feed.next_ms, key)
                    else:
                        self._push(product.appear_ms, key)
                elif kind == "a":
                    product = self.products[_product_key(rest)]
                    self._publish_product(product, backlog=False)
                    for review in product.feed.visible(now_ms)[::-1]:
                        self._publish_review(product, review, backlog=True)
                else:
                    self._arrive(self.categories[int(rest)], now_ms)

    def _arrive(self, state: _CategoryState, now_ms: int) -> None:
        spec = state.spec
        while state.next_ms is not None and state.next_ms <= now_ms:
            index = state.arrived
            if index >= spec.arrival_limit:
                state.next_ms = None
                break
            product = Product(
                "ecshop",
                str(spec.arrival_first_id + index),
                category=spec.id,
                backlog=spec.arrival_backlog,
                schedule=spec.arrival_reviews,
            )
            slot = 5000 + len(self.products)
            state.arrived += 1
            appear = state.next_ms
            state.next_ms = next(state.future, None)
            self._add_product(product, slot, appear)
        self._push(state.next_ms, f"c:{spec.id}")

    # --- queries (all take now_ms and publish what is due first) ---------------------------------------

    def timeline(self, uid: int, now_ms: int) -> list[SimPost] | None:
        """A user's posts newest first (pinned included, in its date position); None for an unknown uid."""
        with self._lock:
            self.advance(now_ms)
            state = self.users.get(uid)
            return None if state is None else state.feed.visible(now_ms)

    def user(self, uid: int) -> WeiboUser | None:
        state = self.users.get(uid)
        return None if state is None else state.spec

    def post(self, mid: int, now_ms: int) -> SimPost | None:
        with self._lock:
            self.advance(now_ms)
            post = self._posts.get(mid)
            return post if post is not None and post.created_ms <= now_ms else None

    def post_by_bid(self, bid: str, now_ms: int) -> SimPost | None:
        """A post by its base62 id (weibo.com's ``mblogid``), once published."""
        with self._lock:
            mid = self._bids.get(bid)
        return self.post(mid, now_ms) if mid is not None else None

    def product(self, source: str, product_id: str, now_ms: int) -> ProductState | None:
        """The product if it exists and has appeared by ``now_ms``."""
        with self._lock:
            self.advance(now_ms)
            state = self.products.get((source, product_id))
            return state if state is not None and state.appear_ms <= now_ms else None

    def reviews(self, source: str, product_id: str, now_ms: int) -> list[SimReview] | None:
        """A product's reviews newest first; None if it does not exist (yet)."""
        with self._lock:
            state = self.product(source, product_id, now_ms)
            return None if state is None else state.feed.visible(now_ms)

    def category(self, category_id: int, now_ms: int) -> tuple[Category, list[str]] | None:
        """A category and its product ids, newest first (ECSHOP's goods_id DESC); None if unknown."""
        with self._lock:
            self.advance(now_ms)
            state = self.categories.get(category_id)
            if state is None:
                return None
            shown = [state, *(child for child in self.categories.values() if child.spec.parent == category_id)]
            listed = sorted((int(pid) for each in shown for pid, at in each.products if at <= now_ms), reverse=True)
            return state.spec, [str(pid) for pid in listed]

    def published_since(
        self, now_ms: int, items_done: int, products_done: int
    ) -> tuple[list[TruthItem], list[TruthProduct]]:
        """Truth records appended after the first ``items_done``/``products_done`` (for the JSONL file)."""
        with self._lock:
            self.advance(now_ms)
            return self.truth_items[items_done:], self.truth_products[products_done:]

    def truth(self, now_ms: int) -> tuple[list[TruthItem], list[TruthProduct]]:
        """Everything published by ``now_ms``, in publication order."""
        with self._lock:
            self.advance(now_ms)
            items = sorted(
                (t for t in self.truth_items if t.published_ms <= now_ms),
                key=lambda t: (t.published_ms, t.source, t.target, t.id),
            )
            return items, list(self.truth_products)
