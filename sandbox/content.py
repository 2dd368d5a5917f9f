"""What the sandbox publishes: pure item generation (posts, reviews) from (seed, target, sequence, time).

Every item is a function of its inputs only, so a run is reproducible and two sites that show the same Weibo
user (desktop and mobile) show the same posts with the same ids. Rendering into each site's format lives in
``sandbox.sites``; nothing here knows about HTTP.

Ids follow the real sites' shapes: Weibo mids are 16-digit decimals above 2**53 that grow with time; JD review
ids are int64 above 2**31; ECSHOP reviews have no id at all (the client derives one), so each ECSHOP review's
(user, time, text) is made unique instead (the text carries its sequence number).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime

from icecrawler.clock import BEIJING

__all__ = [
    "BEIJING",
    "SLOTS",
    "SimPost",
    "SimReview",
    "beijing",
    "item_rng",
    "jd_review_id",
    "make_post",
    "make_review",
    "mid_to_bid",
    "weibo_mid",
]

_MID_BASE = 9_100_000_000_000_000  # > 2**53 = 9_007_199_254_740_992, 16 digits
_RETWEET_MID_BASE = 9_500_000_000_000_000  # originals of retweets: a separate id space
_JD_BASE = 20_000_000_000  # > 2**31
#: Targets whose items' ids differ at one instant: an id is (time in 100 ms) * SLOTS + slot % SLOTS, so two targets
#: whose slots are SLOTS apart publish the same id at the same instant (a trace world starts every trace at once).
#: ``Scenario.validate`` refuses more users or more products than this.
SLOTS = 10_000

_WORDS = (
    "今天",
    "天气",
    "不错",
    "我们",
    "一起",
    "去",
    "公园",
    "散步",
    "新品",
    "发布会",
    "现场",
    "非常",
    "热闹",
    "感谢",
    "大家",
    "支持",
    "晚饭",
    "吃了",
    "火锅",
    "周末",
    "计划",
    "看书",
    "电影",
    "好看",
    "推荐",
    "朋友",
    "分享",
    "照片",
    "城市",
    "夜景",
    "工作",
    "加油",
    "学习",
    "编程",
    "分布式",
    "爬虫",
    "数据",
    "系统",
    "春天",
    "秋天",
    "咖啡",
    "音乐",
    "旅行",
    "北京",
    "上海",
    "杭州",
    "成都",
    "比赛",
    "精彩",
    "开心",
)
_REVIEW_WORDS = (
    "质量",
    "很好",
    "物流",
    "很快",
    "包装",
    "完好",
    "性价比",
    "高",
    "做工",
    "精细",
    "颜色",
    "漂亮",
    "客服",
    "态度",
    "耐心",
    "满意",
    "值得",
    "购买",
    "手感",
    "不错",
    "电池",
    "耐用",
    "屏幕",
    "清晰",
    "尺寸",
    "合适",
    "一般",
    "有点",
    "失望",
    "发货",
    "慢",
    "还会",
    "回购",
    "推荐",
    "朋友",
    "正品",
    "味道",
    "好闻",
)
_TOPICS = ("#周末愉快#", "#分布式系统#", "#今日份好心情#", "#新品发布#", "#城市夜景#")
_EMOJI = ("[doge]", "[哈哈]", "[心]", "[赞]")
_NICK_LETTERS = "abcdefghijklmnopqrstuvwxyz"
_BASE62 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def beijing(ms: int) -> datetime:
    """Epoch ms as an aware Beijing datetime."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).astimezone(BEIJING)


def item_rng(seed: int, *parts: object) -> random.Random:
    """A private RNG for one item (or one target), independent of generation order."""
    return random.Random("|".join(str(part) for part in (seed, *parts)))


def weibo_mid(created_ms: int, slot: int, *, retweeted: bool = False) -> int:
    """A 16-digit mid above 2**53 that grows with time (100 ms resolution) and differs per target slot."""
    base = _RETWEET_MID_BASE if retweeted else _MID_BASE
    return base + (created_ms // 100) * SLOTS + slot % SLOTS


def jd_review_id(created_ms: int, slot: int) -> int:
    return _JD_BASE + (created_ms // 100) * SLOTS + slot % SLOTS


def mid_to_bid(mid: int) -> str:
    """Weibo's base62 short id: the decimal mid cut into 7-digit groups from the right, each in base 62."""
    digits = str(mid)
    groups = []
    while digits:
        digits, chunk = digits[:-7], digits[-7:]
        value = int(chunk)
        text = ""
        while value:
            value, rest = divmod(value, 62)
            text = _BASE62[rest] + text
        groups.append(text.rjust(4, "0") if digits else text or "0")
    return "".join(reversed(groups))


def _sentence(rng: random.Random, words: tuple[str, ...], count: int) -> str:
    return "".join(rng.choices(words, k=count))


@dataclass(frozen=True)
class SimPost:
    """One Weibo post as the world knows it; ``text`` is the full plain text (no markup)."""

    mid: int
    uid: int
    user_name: str
    created_ms: int
    text: str
    seq: int
    topic: str = ""
    emoji: str = ""
    long_text: bool = False
    retweet: SimPost | None = None
    reposts: int = 0
    comments: int = 0
    likes: int = 0
    pinned: bool = False
    #: Picture ids (Weibo's 32-character ``pid``s); the sites turn them into image URLs.
    pictures: tuple[str, ...] = ()

    @property
    def bid(self) -> str:
        return mid_to_bid(self.mid)


@dataclass(frozen=True)
class SimReview:
    """One product review. ``review_id`` is 0 where the site has no ids (ECSHOP)."""

    product: str
    seq: int
    review_id: int
    user: str
    created_ms: int
    text: str
    score: int
    admin_reply: str = ""


def make_post(
    rng: random.Random,
    uid: int,
    user_name: str,
    slot: int,
    seq: int,
    created_ms: int,
    *,
    long_text: bool = False,
    retweet: bool = False,
) -> SimPost:
    """Post number ``seq`` of user ``uid``, drawn from the user's own content RNG (posts are always made in
    ``seq`` order, so the result depends only on the seed). The text ends with ``seq`` so it is unique."""
    length = rng.randint(60, 90) if long_text else rng.randint(6, 14)
    text = _sentence(rng, _WORDS, length) + f"（第{seq}条）"
    topic = rng.choice(_TOPICS) if rng.random() < 0.4 else ""
    emoji = rng.choice(_EMOJI) if rng.random() < 0.3 else ""
    pictures = tuple(f"{uid:x}ly1g{rng.getrandbits(96):024x}"[:32] for _ in range(rng.choice((0, 0, 0, 1, 3))))
    original = None
    if retweet:
        other_uid = rng.randint(1_000_000_000, 7_999_999_999)
        origin_ms = created_ms - rng.randint(60_000, 86_400_000)
        original = SimPost(
            mid=weibo_mid(origin_ms, slot, retweeted=True),
            uid=other_uid,
            user_name=f"路人{other_uid % 10000}",
            created_ms=origin_ms,
            text=_sentence(rng, _WORDS, rng.randint(6, 12)),
            seq=0,
            reposts=rng.randint(0, 5000),
            comments=rng.randint(0, 900),
            likes=rng.randint(0, 20000),
        )
    return SimPost(
        mid=weibo_mid(created_ms, slot),
        uid=uid,
        user_name=user_name,
        created_ms=created_ms,
        text=text,
        seq=seq,
        topic=topic,
        emoji=emoji,
        long_text=long_text,
        retweet=original,
        pictures=pictures,
        reposts=rng.choice((0, 0, rng.randint(1, 300), 1_500_000)),
        comments=rng.choice((0, rng.randint(1, 99))),
        likes=rng.choice((0, rng.randint(1, 5000))),
    )


def make_review(rng: random.Random, product: str, slot: int, seq: int, created_ms: int, *, with_id: bool) -> SimReview:
    """Review number ``seq`` of ``product`` from the product's content RNG (made in ``seq`` order); unique
    (user, time, text) even without an id."""
    nick = "".join(rng.choices(_NICK_LETTERS, k=rng.randint(4, 9)))
    text = "，".join(_sentence(rng, _REVIEW_WORDS, rng.randint(2, 4)) for _ in range(rng.randint(1, 3)))
    return SimReview(
        product=product,
        seq=seq,
        review_id=jd_review_id(created_ms, slot) if with_id else 0,
        user=nick if rng.random() < 0.9 else "",
        created_ms=created_ms,
        text=f"{text}（评价{seq}）",
        score=rng.choice((5, 5, 5, 4, 4, 3, 2, 1)),
        admin_reply="感谢您的支持！" if seq % 7 == 3 else "",
    )
